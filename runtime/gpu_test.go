package runtime

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/runtime/internal/nvml"

	"github.com/gpumesh/gpumesh/attest"
)

// fakeNVML is an in-memory NVML.
type fakeNVML struct {
	initRet   nvml.Return
	driver    string
	cuda      int
	devices   []deviceInfo
	samples   []deviceSample
	failDev   int // index whose queries fail, -1 for none
	inits     int
	shutdowns int
	// mig is each device's MIG as the driver answers (none: no MIG).
	mig map[int]*fakeMIG
}

// fakeMIG is one device's MIG answers: its modes, slot count and slots
// (a slot's ret, when set, is what reading it returns).
type fakeMIG struct {
	modeRet, slotsRet nvml.Return
	cur, pend, slots  int
	devs              []migDevice
	rets              map[int]nvml.Return
}

func (f *fakeNVML) DeviceMIGMode(i int) (int, int, nvml.Return) {
	m := f.mig[i]
	if m == nil {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	return m.cur, m.pend, m.modeRet
}
func (f *fakeNVML) DeviceMIGSlots(i int) (int, nvml.Return) {
	return f.mig[i].slots, f.mig[i].slotsRet
}
func (f *fakeNVML) DeviceMIG(i, k int) (migDevice, nvml.Return) {
	m := f.mig[i]
	if r, ok := m.rets[k]; ok {
		return migDevice{}, r
	}
	if k >= len(m.devs) {
		return migDevice{}, nvml.ERROR_NOT_FOUND
	}
	return m.devs[k], nvml.SUCCESS
}

func (f *fakeNVML) Init() nvml.Return { f.inits++; return f.initRet }
func (f *fakeNVML) Shutdown() nvml.Return {
	f.shutdowns++
	return nvml.SUCCESS
}
func (f *fakeNVML) SystemGetDriverVersion() (string, nvml.Return) { return f.driver, nvml.SUCCESS }
func (f *fakeNVML) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return f.cuda, nvml.SUCCESS
}
func (f *fakeNVML) DeviceGetCount() (int, nvml.Return) { return len(f.devices), nvml.SUCCESS }
func (f *fakeNVML) DeviceInfo(i int) (deviceInfo, nvml.Return) {
	if i == f.failDev {
		return deviceInfo{}, nvml.ERROR_GPU_IS_LOST
	}
	return f.devices[i], nvml.SUCCESS
}
func (f *fakeNVML) DeviceSample(i int) (deviceSample, nvml.Return) {
	if i == f.failDev {
		return deviceSample{}, nvml.ERROR_GPU_IS_LOST
	}
	return f.samples[i], nvml.SUCCESS
}

func twoGPUs() *fakeNVML {
	return &fakeNVML{
		initRet: nvml.SUCCESS,
		driver:  "550.54.15",
		cuda:    12040,
		devices: []deviceInfo{
			// Boards report a little less than their nominal size.
			{Name: "NVIDIA GeForce RTX 4090", UUID: "GPU-aaaa", MemTotal: 24<<30 - 300<<20},
			{Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-bbbb", MemTotal: 80 << 30},
		},
		samples: []deviceSample{
			{Util: 30, MemUsed: 1 << 30, TempC: 60, PowerMW: 150500},
			{Util: 90, MemUsed: 3 << 30, TempC: 75, PowerMW: 300000},
		},
		failDev: -1,
	}
}

func TestDetectGPUsFromNVML(t *testing.T) {
	f := twoGPUs()
	declared := []terms.GPU{{Model: "something else", VRAMGB: 8}}
	inv, err := detectGPUs(f, "", declared, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []terms.GPU{
		{Model: "NVIDIA GeForce RTX 4090", VRAMGB: 24, UUID: "GPU-aaaa", Detected: true},
		{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, UUID: "GPU-bbbb", Detected: true},
	}
	if inv.Source != SourceNVML || inv.Driver != "550.54.15" || inv.CUDA != "12.4" || len(inv.GPUs) != 2 {
		t.Fatalf("inventory %+v", inv)
	}
	for i := range want {
		if inv.GPUs[i] != want[i] {
			t.Errorf("gpu %d = %+v, want %+v", i, inv.GPUs[i], want[i])
		}
	}
	if f.inits != 1 || f.shutdowns != 1 {
		t.Fatalf("init/shutdown %d/%d", f.inits, f.shutdowns)
	}

	// NVML present but a device failing is an error, not a silent fallback.
	f = twoGPUs()
	f.failDev = 1
	if _, err := detectGPUs(f, "", declared, nil); err == nil || !strings.Contains(err.Error(), "device 1") {
		t.Fatalf("failing device: %v", err)
	}
}

func TestDetectGPUsFallsBackToDeclared(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		f := &fakeNVML{initRet: ret, failDev: -1}
		declared := []terms.GPU{{Model: " RTX 3090 ", VRAMGB: 24, Detected: true}}
		inv, err := detectGPUs(f, "", declared, nil)
		if err != nil {
			t.Fatal(err)
		}
		if inv.Source != SourceDeclared || len(inv.GPUs) != 1 || inv.GPUs[0] != (terms.GPU{Model: "RTX 3090", VRAMGB: 24}) {
			t.Fatalf("%v: inventory %+v", ret, inv)
		}
		if f.shutdowns != 0 {
			t.Fatal("shutdown without a successful init")
		}
	}
}

func TestDetectGPUsValidatesDeclared(t *testing.T) {
	f := &fakeNVML{initRet: nvml.ERROR_LIBRARY_NOT_FOUND, failDev: -1}
	cases := map[string][]terms.GPU{
		"model is empty": {{Model: "ok", VRAMGB: 8}, {Model: "  ", VRAMGB: 8}},
		"vram_gb":        {{Model: "A10", VRAMGB: 0}},
	}
	for want, decl := range cases {
		t.Run(want, func(t *testing.T) {
			if _, err := detectGPUs(f, "", decl, nil); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("declared %+v: error %v, want %q", decl, err, want)
			}
		})
	}
	// Renter-only node: nothing detected, nothing declared.
	inv, err := detectGPUs(f, "", nil, nil)
	if err != nil || len(inv.GPUs) != 0 || inv.Source != SourceDeclared {
		t.Fatalf("empty inventory: %+v %v", inv, err)
	}
}

// TestGPUSourceIsExplicit: "declared" never touches the driver, even where
// one works (so tests that declare an inventory never pick up real GPUs);
// "nvml" refuses to fall back; an unknown source is an error.
func TestGPUSourceIsExplicit(t *testing.T) {
	declared := []terms.GPU{{Model: "RTX 3090", VRAMGB: 24}}
	f := twoGPUs()
	inv, err := detectGPUs(f, GPUSourceDeclared, declared, nil)
	if err != nil || inv.Source != SourceDeclared || len(inv.GPUs) != 1 || inv.GPUs[0].Model != "RTX 3090" {
		t.Fatalf("declared source: %+v %v", inv, err)
	}
	if f.inits != 0 {
		t.Fatalf("declared source initialised NVML %d times", f.inits)
	}
	if inv, err := detectGPUs(twoGPUs(), GPUSourceNVML, declared, nil); err != nil || inv.Source != SourceNVML || len(inv.GPUs) != 2 {
		t.Fatalf("nvml source with a driver: %+v %v", inv, err)
	}
	noDriver := &fakeNVML{initRet: nvml.ERROR_LIBRARY_NOT_FOUND, failDev: -1}
	if _, err := detectGPUs(noDriver, GPUSourceNVML, declared, nil); err == nil || !strings.Contains(err.Error(), "no NVIDIA driver found") {
		t.Fatalf("nvml source without a driver: %v", err)
	}
	if _, err := detectGPUs(twoGPUs(), "cuda", declared, nil); err == nil || !strings.Contains(err.Error(), "auto, nvml or declared") {
		t.Fatalf("unknown source: %v", err)
	}
}

// On this machine there is no NVIDIA driver: the real binding must fall
// back to the declared GPUs.
func TestDetectGPUsRealBindingWithoutDriver(t *testing.T) {
	if ret := (realNVML{}).Init(); ret == nvml.SUCCESS {
		(realNVML{}).Shutdown()
		t.Skip("an NVIDIA driver is present; the fallback path is covered by the fake")
	}
	declared := []terms.GPU{{Model: "RTX 4090", VRAMGB: 24}, {Model: "RTX 4090", VRAMGB: 24}}
	inv, err := DetectGPUs("", declared, nil)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Source != SourceDeclared || len(inv.GPUs) != 2 || inv.GPUs[0].Detected || inv.Driver != "" {
		t.Fatalf("inventory %+v", inv)
	}
	if tel := Sample(inv); tel.Source != "none" {
		t.Fatalf("sample without pids: %+v", tel)
	}
}

func TestSampleNVML(t *testing.T) {
	f := twoGPUs()
	inv, err := nvmlInventory(f)
	if err != nil {
		t.Fatal(err)
	}
	tel := sample(f, inv, nil)
	want := Telemetry{GPUUtil: 60, MemUsedMB: 4096, TempC: 75, PowerW: 450, Source: SourceNVML, Devices: []attest.DeviceSample{
		{Index: 0, UUID: "GPU-aaaa", Util: 30, MemUsedMB: 1024, TempC: 60, PowerW: 150},
		{Index: 1, UUID: "GPU-bbbb", Util: 90, MemUsedMB: 3072, TempC: 75, PowerW: 300},
	}}
	if !reflect.DeepEqual(tel, want) {
		t.Fatalf("telemetry %+v, want %+v", tel, want)
	}
	// A lease's sample reads only its devices.
	tel = sample(f, inv, []int{1})
	want = Telemetry{GPUUtil: 90, MemUsedMB: 3072, TempC: 75, PowerW: 300, Source: SourceNVML, Devices: []attest.DeviceSample{
		{Index: 1, UUID: "GPU-bbbb", Util: 90, MemUsedMB: 3072, TempC: 75, PowerW: 300},
	}}
	if !reflect.DeepEqual(tel, want) {
		t.Fatalf("device 1 telemetry %+v, want %+v", tel, want)
	}
	if tel := sample(f, inv, []int{2}); tel.Source != "none" {
		t.Fatalf("sample of a device the host lacks: %+v", tel)
	}
	// A broken NVML degrades to process sampling rather than failing.
	f.failDev = 0
	if tel := sample(f, inv, nil); tel.Source != "none" {
		t.Fatalf("broken nvml: %+v", tel)
	}
}

// A simulated host is read like NVML: its inventory is detected, its
// samples follow Set.
func TestSimulatedGPUs(t *testing.T) {
	sim := NewSimulatedGPUs("550.54.15",
		SimulatedGPU{Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-h100", MemTotalMB: 81559, TempC: 40, PowerW: 100})
	inv, err := DetectGPUsFrom(sim, GPUSourceNVML, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Source != SourceNVML || len(inv.GPUs) != 1 || inv.GPUs[0].Model != "NVIDIA H100 80GB HBM3" || inv.GPUs[0].VRAMGB != 80 ||
		inv.GPUs[0].UUID != "GPU-h100" || !inv.GPUs[0].Detected {
		t.Fatalf("inventory %+v", inv)
	}
	sim.Set(0, 91, 650)
	if tel := Sample(inv); tel.TempC != 91 || tel.PowerW != 650 || len(tel.Devices) != 1 || tel.Devices[0].UUID != "GPU-h100" {
		t.Fatalf("telemetry after Set: %+v", tel)
	}
}
