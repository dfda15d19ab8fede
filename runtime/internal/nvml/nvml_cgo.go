//go:build cgo

// Package nvml is the part of NVIDIA's go-nvml the runtime uses. With cgo
// it is go-nvml itself (aliases); without cgo (cross-compiled, renter-only
// builds) go-nvml does not compile, and this package stands in with the
// same names, reporting the library as not found, so the daemon runs as a
// renter or with declared GPUs.
package nvml

import real "github.com/NVIDIA/go-nvml/pkg/nvml"

// Supported reports whether this build can load NVML at all.
const Supported = true

type (
	Return             = real.Return
	Device             = real.Device
	TemperatureSensors = real.TemperatureSensors
	DeviceAttributes   = real.DeviceAttributes
)

const (
	SUCCESS                 = real.SUCCESS
	ERROR_INVALID_ARGUMENT  = real.ERROR_INVALID_ARGUMENT
	ERROR_NOT_SUPPORTED     = real.ERROR_NOT_SUPPORTED
	ERROR_NOT_FOUND         = real.ERROR_NOT_FOUND
	ERROR_DRIVER_NOT_LOADED = real.ERROR_DRIVER_NOT_LOADED
	ERROR_LIBRARY_NOT_FOUND = real.ERROR_LIBRARY_NOT_FOUND
	ERROR_GPU_IS_LOST       = real.ERROR_GPU_IS_LOST
	TEMPERATURE_GPU         = real.TEMPERATURE_GPU
	DEVICE_MIG_ENABLE       = real.DEVICE_MIG_ENABLE
)

var (
	Init                       = real.Init
	Shutdown                   = real.Shutdown
	SystemGetDriverVersion     = real.SystemGetDriverVersion
	SystemGetCudaDriverVersion = real.SystemGetCudaDriverVersion
	DeviceGetCount             = real.DeviceGetCount
	DeviceGetHandleByIndex     = real.DeviceGetHandleByIndex
)

// HasSymbol reports whether the loaded NVML library has function name:
// calling one an older driver lacks would crash, not fail.
func HasSymbol(name string) bool { return real.Extensions().LookupSymbol(name) == nil }
