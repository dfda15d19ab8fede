package runtime

import (
	"github.com/gpumesh/gpumesh/auction/terms"
	"time"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/runtime/cuda"
)

// ChallengeBackend is how this inventory answers GPU challenges
// (attest/gpuproof): on the device itself through CUDA when the GPUs were
// detected through NVML and the driver loads, else on the CPU path, which
// is never verified.
func ChallengeBackend(inv Inventory) gpuproof.Backend {
	if inv.Source == SourceNVML && cuda.Load() == nil {
		return cudaBackend{}
	}
	return gpuproof.CPU{}
}

// ChallengeDevice is the name a challenge gives device i of the inventory:
// its UUID, or its index when it has none (declared GPUs).
func ChallengeDevice(inv Inventory, i int) string { return terms.DeviceName(inv.GPUs, i) }

// ChallengeDeviceIndex is the inventory index of a challenge's device name
// (-1 when the inventory has no such device).
func ChallengeDeviceIndex(inv Inventory, device string) int {
	for i := range inv.GPUs {
		if ChallengeDevice(inv, i) == device {
			return i
		}
	}
	return -1
}

type cudaBackend struct{}

func (cudaBackend) Prepare(device string, n int) (gpuproof.Runner, error) {
	s, err := cuda.Open(device, n)
	if err != nil {
		return nil, err
	}
	return cudaRunner{s}, nil
}

type cudaRunner struct{ s *cuda.Session }

func (r cudaRunner) MatPow(key uint64, k int) ([]uint32, time.Duration, error) {
	return r.s.MatPow(key, k)
}
func (r cudaRunner) Backend() string    { return gpuproof.BackendCUDA }
func (r cudaRunner) DeviceName() string { return r.s.Device.Name }
func (r cudaRunner) Close()             { r.s.Close() }
