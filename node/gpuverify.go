package node

import (
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/runtime"
)

// serveChallenges answers challenges on this provider's devices: through
// CUDA on NVML-detected GPUs, on the CPU path for declared ones. A device a
// lease holds now is busy (no verdict, no work taken from the tenant).
func (m *market) serveChallenges() {
	d := m.d
	backend := d.opts.ChallengeBackend
	if backend == nil {
		backend = runtime.ChallengeBackend(d.inv)
	}
	m.verify.Serve(&gpuproof.Prover{Signer: d.signer, Backend: backend, Now: d.now,
		Devices: func(dev string) bool { return runtime.ChallengeDeviceIndex(d.inv, dev) >= 0 },
		Busy: func(dev string) bool {
			i := runtime.ChallengeDeviceIndex(d.inv, dev)
			now := d.now()
			return len(m.cal.FreeDevices(now, now.Add(gpuproof.MaxLifetime), []int{i})) == 0
		},
	})
}
