//go:build !cgo

package nvml

import "fmt"

// Supported reports whether this build can load NVML at all.
const Supported = false

// Return is an NVML status code (the values are NVML's).
type Return int32

const (
	SUCCESS                 Return = 0
	ERROR_INVALID_ARGUMENT  Return = 2
	ERROR_NOT_SUPPORTED     Return = 3
	ERROR_NOT_FOUND         Return = 6
	ERROR_DRIVER_NOT_LOADED Return = 9
	ERROR_LIBRARY_NOT_FOUND Return = 12
	ERROR_GPU_IS_LOST       Return = 15
)

func (r Return) String() string {
	switch r {
	case SUCCESS:
		return "SUCCESS"
	case ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND (this gpumesh was built without cgo and has no NVML support)"
	case ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	}
	return fmt.Sprintf("NVML return %d", int32(r))
}

func (r Return) Error() string { return r.String() }

// TemperatureSensors selects a temperature reading.
type TemperatureSensors int32

const TEMPERATURE_GPU TemperatureSensors = 0

// DEVICE_MIG_ENABLE is the MIG mode of a device in MIG mode.
const DEVICE_MIG_ENABLE = 1

// Memory and Utilization are a device's readings.
type (
	Memory      struct{ Total, Free, Used uint64 }
	Utilization struct{ Gpu, Memory uint32 }
)

// DeviceAttributes are a (MIG) device's sizes, as far as the runtime reads them.
type DeviceAttributes struct {
	GpuInstanceSliceCount uint32
	MemorySizeMB          uint64
}

// Device is an NVML device handle; this build never has one.
type Device interface {
	GetName() (string, Return)
	GetUUID() (string, Return)
	GetMemoryInfo() (Memory, Return)
	GetUtilizationRates() (Utilization, Return)
	GetTemperature(TemperatureSensors) (uint32, Return)
	GetPowerUsage() (uint32, Return)
	GetMigMode() (int, int, Return)
	GetMaxMigDeviceCount() (int, Return)
	GetMigDeviceHandleByIndex(int) (Device, Return)
	GetAttributes() (DeviceAttributes, Return)
}

func Init() Return                                { return ERROR_LIBRARY_NOT_FOUND }
func Shutdown() Return                            { return ERROR_LIBRARY_NOT_FOUND }
func SystemGetDriverVersion() (string, Return)    { return "", ERROR_LIBRARY_NOT_FOUND }
func SystemGetCudaDriverVersion() (int, Return)   { return 0, ERROR_LIBRARY_NOT_FOUND }
func DeviceGetCount() (int, Return)               { return 0, ERROR_LIBRARY_NOT_FOUND }
func DeviceGetHandleByIndex(int) (Device, Return) { return nil, ERROR_LIBRARY_NOT_FOUND }

// HasSymbol reports whether the loaded NVML library has function name:
// this build loads none.
func HasSymbol(string) bool { return false }
