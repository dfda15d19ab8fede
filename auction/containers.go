package auction

// ContainerSupport is what a provider's container engine can do with a
// job's image; it is part of the provider's signed capability record.
type ContainerSupport string

// Container support levels.
const (
	// ContainersNone: no container engine; image jobs are never run here
	// (never as a plain process on the host).
	ContainersNone ContainerSupport = ""
	// ContainersNoGPU: an engine that cannot hand containers their GPUs
	// (no NVIDIA container runtime, no CDI GPU devices).
	ContainersNoGPU ContainerSupport = "no-gpu"
	// ContainersGPU: an engine that gives each container exactly its
	// leased GPUs.
	ContainersGPU ContainerSupport = "gpu"
)

// containerFit is the image rule of eligibility: a job with an image needs
// a container engine, and one that uses GPUs needs GPU passthrough.
func containerFit(c *Capability, j *Job) error {
	if j.Run.Image == "" {
		return nil
	}
	switch {
	case c.Containers == ContainersNone:
		return inelig("image", "no container engine here: image jobs are not run")
	case j.GPUCount > 0 && c.Containers != ContainersGPU:
		return inelig("image", "the container engine cannot give containers their GPUs (no NVIDIA runtime or CDI devices)")
	}
	return nil
}
