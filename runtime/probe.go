package runtime

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Probes of the host for operators (gpumesh doctor, gpumesh provider init):
// each asks the same question the executors and the inventory ask when the
// daemon starts, so a check and the daemon never disagree.

// ProbeNVML reads the GPUs through the NVIDIA driver, as DetectGPUs does with
// gpu_source nvml. Without a usable driver the error says why.
func ProbeNVML() (Inventory, error) { return nvmlInventory(realNVML{}) }

// DockerStatus is what a container engine offers gpumesh.
type DockerStatus struct {
	// Runtimes are the engine's OCI runtimes (runc, nvidia, ...), sorted.
	Runtimes []string
	// GPU is how containers get GPUs: "nvidia" (the NVIDIA runtime), "cdi"
	// (CDI devices) or "" (they cannot).
	GPU string
	// CgroupVersion is the engine's cgroup version ("1", "2"; "" if unsaid).
	CgroupVersion string
}

// ProbeDocker asks the engine on socketPath ("" is DefaultDockerSocket)
// whether it answers and how it passes GPUs to containers, reading the same
// /info the Docker executor reads.
func ProbeDocker(ctx context.Context, socketPath string) (DockerStatus, error) {
	if socketPath == "" {
		socketPath = DefaultDockerSocket
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c := newDockerClient(socketPath)
	var info struct {
		engineInfo
		CgroupVersion string `json:"CgroupVersion"`
	}
	if err := c.do(ctx, http.MethodGet, "/info", nil, &info); err != nil {
		return DockerStatus{}, err
	}
	st := DockerStatus{GPU: string(info.passthrough()), CgroupVersion: info.CgroupVersion}
	for name := range info.Runtimes {
		st.Runtimes = append(st.Runtimes, name)
	}
	sort.Strings(st.Runtimes)
	return st, nil
}

// CheckProviderInventory refuses provider mode with nothing to sell: no GPU
// from the driver (or no NVML support in this build) and none declared.
func CheckProviderInventory(providerEnabled bool, inv Inventory) error {
	if !providerEnabled || len(inv.GPUs) > 0 {
		return nil
	}
	why := "NVML finds no GPU"
	if _, err := ProbeNVML(); err != nil {
		why = "NVML: " + err.Error()
	}
	return fmt.Errorf("provider.enabled but no GPU to sell (%s) and provider.gpus declares none; declare them (gpumesh provider init --gpu MODEL:VRAM_GB) or run as a renter", why)
}
