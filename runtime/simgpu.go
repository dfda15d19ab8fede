package runtime

import (
	"sync"

	"github.com/gpumesh/gpumesh/runtime/internal/nvml"
)

// SimulatedGPU is one device of a SimulatedGPUs host: what NVML would
// report for it.
type SimulatedGPU struct {
	Name       string
	UUID       string
	MemTotalMB int
	UtilPct    int
	MemUsedMB  int
	TempC      int
	PowerW     int
	// MIG are its MIG instances: with any, the device is in MIG mode.
	MIG []SimulatedMIG
}

// SimulatedMIG is one MIG instance of a SimulatedGPU.
type SimulatedMIG struct {
	UUID       string
	Slices     int // GPU-instance slices: the 3 of 3g.40gb
	MemTotalMB int
}

// SimulatedGPUs is a Driver standing in for NVML on a host without one
// (integration tests, demos): inventories and samples read through it see
// its devices as NVML devices, and Set changes their readings. It is safe
// for concurrent use.
type SimulatedGPUs struct {
	mu      sync.Mutex
	driver  string
	devices []SimulatedGPU
}

// NewSimulatedGPUs returns a simulated host with driver version driver.
func NewSimulatedGPUs(driver string, devices ...SimulatedGPU) *SimulatedGPUs {
	return &SimulatedGPUs{driver: driver, devices: append([]SimulatedGPU(nil), devices...)}
}

// Set changes device i's temperature and power readings (ignored for an
// unknown device).
func (s *SimulatedGPUs) Set(i, tempC, powerW int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= 0 && i < len(s.devices) {
		s.devices[i].TempC, s.devices[i].PowerW = tempC, powerW
	}
}

func (s *SimulatedGPUs) nvml() nvmlLib { return simLib{s} }

type simLib struct{ s *SimulatedGPUs }

func (simLib) Init() nvml.Return     { return nvml.SUCCESS }
func (simLib) Shutdown() nvml.Return { return nvml.SUCCESS }
func (l simLib) SystemGetDriverVersion() (string, nvml.Return) {
	return l.s.driver, nvml.SUCCESS
}
func (simLib) SystemGetCudaDriverVersion() (int, nvml.Return) { return 12040, nvml.SUCCESS }
func (l simLib) DeviceGetCount() (int, nvml.Return) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return len(l.s.devices), nvml.SUCCESS
}
func (l simLib) DeviceInfo(i int) (deviceInfo, nvml.Return) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if i < 0 || i >= len(l.s.devices) {
		return deviceInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	d := l.s.devices[i]
	return deviceInfo{Name: d.Name, UUID: d.UUID, MemTotal: uint64(d.MemTotalMB) << 20}, nvml.SUCCESS
}
func (l simLib) DeviceSample(i int) (deviceSample, nvml.Return) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if i < 0 || i >= len(l.s.devices) {
		return deviceSample{}, nvml.ERROR_INVALID_ARGUMENT
	}
	d := l.s.devices[i]
	return deviceSample{Util: uint32(d.UtilPct), MemUsed: uint64(d.MemUsedMB) << 20, TempC: uint32(d.TempC), PowerMW: uint32(d.PowerW * 1000)}, nvml.SUCCESS
}

func (l simLib) DeviceMIGMode(i int) (int, int, nvml.Return) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if i < 0 || i >= len(l.s.devices) {
		return 0, 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if len(l.s.devices[i].MIG) == 0 {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
}

func (l simLib) DeviceMIGSlots(i int) (int, nvml.Return) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if i < 0 || i >= len(l.s.devices) {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return len(l.s.devices[i].MIG), nvml.SUCCESS
}

func (l simLib) DeviceMIG(i, k int) (migDevice, nvml.Return) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if i < 0 || i >= len(l.s.devices) || k < 0 || k >= len(l.s.devices[i].MIG) {
		return migDevice{}, nvml.ERROR_INVALID_ARGUMENT
	}
	m := l.s.devices[i].MIG[k]
	return migDevice{UUID: m.UUID, Slices: uint32(m.Slices), MemTotal: uint64(m.MemTotalMB) << 20}, nvml.SUCCESS
}
