package terms

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
