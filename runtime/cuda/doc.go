// Package cuda runs the GPU challenge's kernels (attest/gpuproof) on an
// NVIDIA device through the CUDA driver API. It loads libcuda.so.1 at run
// time (dlopen), so the daemon builds and runs with no CUDA toolkit and no
// driver: Load then says why the device path is unavailable, and the
// challenge falls back to its CPU path (never taken for "verified").
//
// The kernels are PTX (kernels.ptx, made from kernels.cu by go generate),
// compiled by the driver for whatever device it has.
package cuda

//go:generate clang-16 -x cuda --cuda-device-only --cuda-gpu-arch=sm_70 -nocudainc -nocudalib -O3 -S -o kernels.ptx kernels.cu

import (
	_ "embed"
	"errors"
)

//go:embed kernels.ptx
var kernelsPTX string

// Device is one CUDA device as the driver names it.
type Device struct {
	Ordinal  int    `json:"ordinal"`
	UUID     string `json:"uuid"` // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML prints it
	Name     string `json:"name"`
	MemBytes uint64 `json:"mem_bytes"`
}

// ErrUnavailable wraps every reason the driver cannot be used (no library,
// no device, a build without cgo).
var ErrUnavailable = errors.New("cuda: driver unavailable")
