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

// Memory and Utilization are a device's readings.
type (
	Memory      struct{ Total, Free, Used uint64 }
	Utilization struct{ Gpu, Memory uint32 }
)

// Device is an NVML device handle; this build never has one.
type Device interface {
	GetName() (string, Return)
	GetUUID() (string, Return)
	GetMemoryInfo() (Memory, Return)
	GetUtilizationRates() (Utilization, Return)
	GetTemperature(TemperatureSensors) (uint32, Return)
	GetPowerUsage() (uint32, Return)
}

func Init() Return                                { return ERROR_LIBRARY_NOT_FOUND }
func Shutdown() Return                            { return ERROR_LIBRARY_NOT_FOUND }
func SystemGetDriverVersion() (string, Return)    { return "", ERROR_LIBRARY_NOT_FOUND }
func SystemGetCudaDriverVersion() (int, Return)   { return 0, ERROR_LIBRARY_NOT_FOUND }
func DeviceGetCount() (int, Return)               { return 0, ERROR_LIBRARY_NOT_FOUND }
func DeviceGetHandleByIndex(int) (Device, Return) { return nil, ERROR_LIBRARY_NOT_FOUND }
