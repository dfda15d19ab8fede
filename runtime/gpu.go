package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/runtime/internal/nvml"

	"github.com/gpumesh/gpumesh/attest"
)

// Inventory sources.
const (
	SourceNVML     = "nvml"
	SourceDeclared = "declared"
)

// Inventory is the set of GPUs a node offers.
type Inventory struct {
	GPUs []terms.GPU
	// Driver and CUDA are the NVIDIA driver and CUDA driver API versions
	// (empty for declared GPUs).
	Driver, CUDA string
	// Source is SourceNVML when the devices were read from the driver and
	// SourceDeclared otherwise.
	Source string
	// lib is the driver the devices were read from (nil: the real NVML).
	lib nvmlLib
}

// Driver is where GPUs are read from: NVML (the NVIDIA driver) or a
// SimulatedGPUs host standing in for one.
type Driver interface{ nvml() nvmlLib }

// NVML is the NVIDIA driver, through github.com/NVIDIA/go-nvml.
var NVML Driver = realNVML{}

func (r realNVML) nvml() nvmlLib { return r }

// Telemetry is one heartbeat sample. With NVML it describes the GPUs
// (utilization averaged over devices, memory and power summed, hottest
// temperature); without it, the job's processes (CPUSeconds and MemUsedMB).
type Telemetry struct {
	GPUUtil    float64 // percent, 0..100
	MemUsedMB  int
	TempC      int
	PowerW     int
	CPUSeconds float64
	// Source is SourceNVML, "proc" (process sampling) or "none".
	Source string
	// Devices are the sampled devices' own readings (NVML only).
	Devices []attest.DeviceSample
}

// deviceInfo and deviceSample are what the inventory and telemetry need from
// one NVML device.
type deviceInfo struct {
	Name     string
	UUID     string
	MemTotal uint64 // bytes
}

type deviceSample struct {
	Util    uint32 // percent
	MemUsed uint64 // bytes
	TempC   uint32
	PowerMW uint32
}

// migDevice is what the inventory needs from one MIG device: its UUID,
// its GPU-instance slices (the "3g" of "3g.40gb") and its memory.
type migDevice struct {
	UUID     string
	Slices   uint32
	MemTotal uint64 // bytes
}

// nvmlLib is the part of NVML the runtime uses, so that the mapping to an
// Inventory can be tested without a driver.
type nvmlLib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceInfo(i int) (deviceInfo, nvml.Return)
	DeviceSample(i int) (deviceSample, nvml.Return)
	// DeviceMIGMode is device i's current and pending MIG mode
	// (ERROR_NOT_SUPPORTED: it has no MIG).
	DeviceMIGMode(i int) (current, pending int, ret nvml.Return)
	// DeviceMIGSlots is how many MIG devices device i can hold.
	DeviceMIGSlots(i int) (int, nvml.Return)
	// DeviceMIG reads MIG device k of device i (ERROR_NOT_FOUND: that
	// slot holds none).
	DeviceMIG(i, k int) (migDevice, nvml.Return)
}

// realNVML is the thin adapter over github.com/NVIDIA/go-nvml.
type realNVML struct{}

func (realNVML) Init() nvml.Return     { return nvml.Init() }
func (realNVML) Shutdown() nvml.Return { return nvml.Shutdown() }
func (realNVML) SystemGetDriverVersion() (string, nvml.Return) {
	return nvml.SystemGetDriverVersion()
}
func (realNVML) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return nvml.SystemGetCudaDriverVersion()
}
func (realNVML) DeviceGetCount() (int, nvml.Return) { return nvml.DeviceGetCount() }

func (realNVML) DeviceInfo(i int) (deviceInfo, nvml.Return) {
	d, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return deviceInfo{}, ret
	}
	var info deviceInfo
	if info.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return deviceInfo{}, ret
	}
	if info.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return deviceInfo{}, ret
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return deviceInfo{}, ret
	}
	info.MemTotal = mem.Total
	return info, nvml.SUCCESS
}

func (realNVML) DeviceSample(i int) (deviceSample, nvml.Return) {
	d, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return deviceSample{}, ret
	}
	var s deviceSample
	// Individual readings are optional on some boards: keep what works.
	if u, r := d.GetUtilizationRates(); r == nvml.SUCCESS {
		s.Util = u.Gpu
	}
	if m, r := d.GetMemoryInfo(); r == nvml.SUCCESS {
		s.MemUsed = m.Used
	}
	if t, r := d.GetTemperature(nvml.TEMPERATURE_GPU); r == nvml.SUCCESS {
		s.TempC = t
	}
	if p, r := d.GetPowerUsage(); r == nvml.SUCCESS {
		s.PowerMW = p
	}
	return s, nvml.SUCCESS
}

func (realNVML) DeviceMIGMode(i int) (int, int, nvml.Return) {
	if !nvml.HasSymbol("nvmlDeviceGetMigMode") {
		// A driver older than MIG (R450).
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	d, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	return d.GetMigMode()
}

func (realNVML) DeviceMIGSlots(i int) (int, nvml.Return) {
	d, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return d.GetMaxMigDeviceCount()
}

func (realNVML) DeviceMIG(i, k int) (migDevice, nvml.Return) {
	d, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return migDevice{}, ret
	}
	m, ret := d.GetMigDeviceHandleByIndex(k)
	if ret != nvml.SUCCESS {
		return migDevice{}, ret
	}
	var md migDevice
	if md.UUID, ret = m.GetUUID(); ret != nvml.SUCCESS {
		return migDevice{}, ret
	}
	a, ret := m.GetAttributes()
	if ret != nvml.SUCCESS {
		return migDevice{}, ret
	}
	md.Slices, md.MemTotal = a.GpuInstanceSliceCount, a.MemorySizeMB<<20
	return md, nvml.SUCCESS
}

// errNoNVML means the NVML library or driver is not usable on this host.
var errNoNVML = errors.New("runtime: NVML not available")

// Inventory sources a provider can choose (provider.gpu_source).
const (
	// GPUSourceAuto reads the driver when there is one, else the declared list.
	GPUSourceAuto = "auto"
	// GPUSourceNVML requires the driver: no driver is an error.
	GPUSourceNVML = SourceNVML
	// GPUSourceDeclared never touches the driver (hermetic tests, or an
	// owner who sells fewer devices than the machine has).
	GPUSourceDeclared = SourceDeclared
)

// DetectGPUs returns the node's GPUs from the chosen source ("" is auto).
// Auto reads them through NVML when the driver is present (Detected=true,
// Source "nvml"), ignoring declared entries (a mismatch is logged), and
// otherwise validates and returns the declared list (Detected=false, Source
// "declared"). An empty inventory is valid: the node can still rent.
func DetectGPUs(source string, declared []terms.GPU, log *slog.Logger) (Inventory, error) {
	return DetectGPUsFrom(NVML, source, declared, log)
}

// DetectGPUsFrom is DetectGPUs reading driver d (nil: NVML); the inventory
// samples the same driver.
func DetectGPUsFrom(d Driver, source string, declared []terms.GPU, log *slog.Logger) (Inventory, error) {
	if d == nil {
		d = NVML
	}
	return detectGPUs(d.nvml(), source, declared, log)
}

func detectGPUs(lib nvmlLib, source string, declared []terms.GPU, log *slog.Logger) (Inventory, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch source {
	case GPUSourceDeclared:
		return declaredInventory(declared)
	case "", GPUSourceAuto, GPUSourceNVML:
	default:
		return Inventory{}, fmt.Errorf("runtime: gpu source must be auto, nvml or declared, got %q", source)
	}
	inv, err := nvmlInventory(lib)
	if err != nil && source == GPUSourceNVML {
		return Inventory{}, fmt.Errorf("gpu source nvml: no NVIDIA driver found (%v); install the driver or set provider.gpu_source to declared", err)
	}
	if err == nil {
		if len(declared) > 0 && len(declared) != len(inv.GPUs) {
			log.Warn("declared GPUs differ from the driver's; using the driver's",
				"declared", len(declared), "detected", len(inv.GPUs))
		}
		log.Info("GPUs detected through NVML", "count", len(inv.GPUs), "driver", inv.Driver, "cuda", inv.CUDA)
		return inv, nil
	}
	if !errors.Is(err, errNoNVML) {
		return Inventory{}, err
	}
	log.Debug("NVML unavailable, using declared GPUs", "err", err, "declared", len(declared))
	return declaredInventory(declared)
}

// declaredInventory validates a declared list of GPUs.
func declaredInventory(declared []terms.GPU) (Inventory, error) {
	gpus := make([]terms.GPU, 0, len(declared))
	for i, g := range declared {
		g.Model = strings.TrimSpace(g.Model)
		if g.Model == "" {
			return Inventory{}, fmt.Errorf("runtime: declared gpu %d: model is empty", i)
		}
		if g.VRAMGB <= 0 {
			return Inventory{}, fmt.Errorf("runtime: declared gpu %d (%s): vram_gb must be > 0, got %d", i, g.Model, g.VRAMGB)
		}
		g.Detected = false
		gpus = append(gpus, g)
	}
	return Inventory{GPUs: gpus, Source: SourceDeclared}, nil
}

// nvmlInventory reads the devices. It returns an error wrapping errNoNVML when
// the library or driver is absent, and another error when NVML is present but
// misbehaves.
func nvmlInventory(lib nvmlLib) (Inventory, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return Inventory{}, fmt.Errorf("%w: init: %v", errNoNVML, ret)
	}
	defer lib.Shutdown()
	inv := Inventory{Source: SourceNVML, lib: lib}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Driver = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS && v > 0 {
		// NVML encodes CUDA versions as 1000*major + 10*minor.
		inv.CUDA = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Inventory{}, fmt.Errorf("runtime: nvml device count: %v", ret)
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceInfo(i)
		if ret != nvml.SUCCESS {
			return Inventory{}, fmt.Errorf("runtime: nvml device %d: %v", i, ret)
		}
		mig, err := readMIG(lib, i)
		if err != nil {
			return Inventory{}, err
		}
		inv.GPUs = append(inv.GPUs, terms.GPU{
			Model: d.Name,
			// Round to the nearest GiB: boards report slightly less than
			// their nominal size.
			VRAMGB:   int((d.MemTotal + (1<<30)/2) >> 30),
			UUID:     d.UUID,
			Detected: true,
			MIG:      mig,
		})
	}
	return inv, nil
}

// migUUIDRE is a MIG device's UUID as drivers since R470 name it (older
// ones wrote MIG-GPU-<uuid>/<gi>/<ci>, which CUDA no longer takes).
var migUUIDRE = regexp.MustCompile(`^MIG-[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$`)

// readMIG is device i's MIG state: nil when it has no MIG, else its mode
// and, in MIG mode, its MIG devices in slot order. A driver answer that
// cannot name an instance a job could be given (a failed read, a UUID
// that is not a MIG device's, one UUID twice, no memory) is an error: the
// device would otherwise be sold by instances that do not exist.
func readMIG(lib nvmlLib, i int) (*terms.MIG, error) {
	cur, pend, ret := lib.DeviceMIGMode(i)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED:
		return nil, nil
	default:
		return nil, fmt.Errorf("runtime: nvml device %d: mig mode: %v", i, ret)
	}
	m := &terms.MIG{Enabled: cur == nvml.DEVICE_MIG_ENABLE, Pending: pend == nvml.DEVICE_MIG_ENABLE}
	if !m.Enabled {
		return m, nil
	}
	slots, ret := lib.DeviceMIGSlots(i)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("runtime: nvml device %d: mig device count: %v", i, ret)
	}
	if slots < 0 || slots > terms.MaxMIGInstances {
		return nil, fmt.Errorf("runtime: nvml device %d: %d mig device slots, want 0 to %d", i, slots, terms.MaxMIGInstances)
	}
	for k := 0; k < slots; k++ {
		d, ret := lib.DeviceMIG(i, k)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("runtime: nvml device %d: mig device %d: %v", i, k, ret)
		}
		if !migUUIDRE.MatchString(d.UUID) {
			return nil, fmt.Errorf("runtime: nvml device %d: mig device %d: uuid %q is not a MIG device's (MIG-<uuid>, driver R470 or later)", i, k, d.UUID)
		}
		for _, in := range m.Instances {
			if in.UUID == d.UUID {
				return nil, fmt.Errorf("runtime: nvml device %d: mig device %d: uuid %s seen twice", i, k, d.UUID)
			}
		}
		if d.MemTotal < 1<<20 {
			return nil, fmt.Errorf("runtime: nvml device %d: mig device %d (%s) reports no memory", i, k, d.UUID)
		}
		m.Instances = append(m.Instances, terms.MIGInstance{UUID: d.UUID, Profile: migProfile(d.Slices, d.MemTotal), MemoryMB: int(d.MemTotal >> 20)})
	}
	return m, nil
}

// migProfile names a MIG device as nvidia-smi does ("3g.40gb"): its
// GPU-instance slices and its memory in GB, rounded up (a 3g.40gb
// instance has 39.25 GiB).
func migProfile(slices uint32, mem uint64) string {
	gb := (mem + 1<<30 - 1) >> 30
	if slices == 0 {
		return fmt.Sprintf("%dgb", gb)
	}
	return fmt.Sprintf("%dg.%dgb", slices, gb)
}

// Sample takes one telemetry reading. For an NVML inventory it reads the GPUs;
// otherwise it sums the CPU time and resident memory of the given process
// groups, read from /proc. Handles of the process backend implement
// interface{ Pid() int }, whose result is the job's process group id.
func Sample(inv Inventory, pgids ...int) Telemetry {
	return SampleDevices(inv, nil, pgids...)
}

// SampleDevices is Sample restricted to the given device indices (a
// lease's): with NVML only they are read (all when devices is nil), and the
// readings name each device and its UUID.
func SampleDevices(inv Inventory, devices []int, pgids ...int) Telemetry {
	lib := inv.lib
	if lib == nil {
		lib = realNVML{}
	}
	return sample(lib, inv, devices, pgids...)
}

func sample(lib nvmlLib, inv Inventory, devices []int, pgids ...int) Telemetry {
	if inv.Source == SourceNVML {
		if t, err := nvmlSample(lib, inv, devices); err == nil {
			return t
		}
	}
	if len(pgids) == 0 {
		return Telemetry{Source: "none"}
	}
	t := Telemetry{Source: "proc"}
	for _, g := range pgids {
		cpu, rss, err := SampleGroup(g)
		if err != nil {
			continue
		}
		t.CPUSeconds += cpu
		t.MemUsedMB += rss
	}
	return t
}

func nvmlSample(lib nvmlLib, inv Inventory, devices []int) (Telemetry, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return Telemetry{}, fmt.Errorf("%w: init: %v", errNoNVML, ret)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Telemetry{}, fmt.Errorf("runtime: nvml device count: %v", ret)
	}
	if devices == nil {
		devices = make([]int, n)
		for i := range devices {
			devices[i] = i
		}
	}
	t := Telemetry{Source: SourceNVML}
	var util float64
	for _, i := range devices {
		if i < 0 || i >= n {
			return Telemetry{}, fmt.Errorf("runtime: nvml device %d of %d", i, n)
		}
		s, ret := lib.DeviceSample(i)
		if ret != nvml.SUCCESS {
			return Telemetry{}, fmt.Errorf("runtime: nvml device %d: %v", i, ret)
		}
		d := attest.DeviceSample{Index: i, Util: float64(s.Util), MemUsedMB: int(s.MemUsed >> 20), TempC: int(s.TempC), PowerW: int(s.PowerMW / 1000)}
		if i < len(inv.GPUs) {
			d.UUID = inv.GPUs[i].UUID
		}
		t.Devices = append(t.Devices, d)
		util += d.Util
		t.MemUsedMB += d.MemUsedMB
		t.TempC = max(t.TempC, d.TempC)
		t.PowerW += d.PowerW
	}
	if len(devices) > 0 {
		t.GPUUtil = util / float64(len(devices))
	}
	return t, nil
}
