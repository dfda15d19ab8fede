package runtime

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/runtime/internal/nvml"
)

const (
	migA = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
	migB = "MIG-0d5b7b8e-4f1a-5c2e-9b3d-1a2b3c4d5e6f"
	migC = "MIG-7e8f9a0b-1c2d-5e3f-8a9b-0c1d2e3f4a5b"
)

// migHost is twoGPUs with the A100 (device 1) in MIG mode holding
// 3g.40gb instances in slots 0 and 2 (slot 1 empty) of its 7.
func migHost() *fakeNVML {
	f := twoGPUs()
	f.mig = map[int]*fakeMIG{
		1: {cur: 1, pend: 1, slots: 7, devs: []migDevice{
			{UUID: migA, Slices: 3, MemTotal: 40192 << 20},
			{},
			{UUID: migB, Slices: 3, MemTotal: 40192 << 20},
		}, rets: map[int]nvml.Return{1: nvml.ERROR_NOT_FOUND}},
	}
	return f
}

// TestDetectMIG: a device in MIG mode reports its instances, in slot
// order, with nvidia-smi's profile names and their memory; a device
// without MIG (ERROR_NOT_SUPPORTED) reports none; one with MIG disabled
// says so, and its pending mode.
func TestDetectMIG(t *testing.T) {
	f := migHost()
	f.mig[0] = &fakeMIG{cur: 0, pend: 1}
	inv, err := detectGPUs(f, GPUSourceNVML, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &terms.MIG{Enabled: true, Pending: true, Instances: []terms.MIGInstance{
		{UUID: migA, Profile: "3g.40gb", MemoryMB: 40192},
		{UUID: migB, Profile: "3g.40gb", MemoryMB: 40192},
	}}
	if got := inv.GPUs[1].MIG; !reflect.DeepEqual(got, want) {
		t.Fatalf("A100 in MIG mode: %+v, want %+v", got, want)
	}
	if inv.GPUs[1].UUID != "GPU-bbbb" || inv.GPUs[1].VRAMGB != 80 {
		t.Fatalf("the parent device changed: %+v", inv.GPUs[1])
	}
	if got := inv.GPUs[0].MIG; got == nil || got.Enabled || !got.Pending || len(got.Instances) != 0 {
		t.Fatalf("MIG disabled, enabled at the next reset: %+v", got)
	}
	if got := SliceIsolation(inv.GPUs[1]); got != terms.IsolationMIG {
		t.Fatalf("isolation of a device in MIG mode %q", got)
	}
	// MIG off: as any device read from the driver, MPS when an MPS
	// daemon runs (none here).
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", t.TempDir())
	if got := SliceIsolation(inv.GPUs[0]); got != terms.IsolationNone {
		t.Fatalf("isolation of a device with MIG disabled and no MPS daemon %q", got)
	}
	inv, err = detectGPUs(twoGPUs(), GPUSourceNVML, nil, nil)
	if err != nil || inv.GPUs[0].MIG != nil || inv.GPUs[1].MIG != nil {
		t.Fatalf("no MIG on the host: %+v %v", inv.GPUs, err)
	}
	if p := migProfile(1, 9984<<20); p != "1g.10gb" {
		t.Fatalf("profile of 1g.10gb named %q", p)
	}
	if p := migProfile(7, 81152<<20); p != "7g.80gb" {
		t.Fatalf("profile of 7g.80gb named %q", p)
	}
}

// TestDetectMIGHostileDriver: a driver answer that cannot name the
// instances a job would be given is a one-line error naming the device,
// never a panic nor instances that do not exist.
func TestDetectMIGHostileDriver(t *testing.T) {
	cases := map[string]func(m *fakeMIG){
		"mig mode: ERROR_GPU_IS_LOST":    func(m *fakeMIG) { m.modeRet = nvml.ERROR_GPU_IS_LOST },
		"mig device count":               func(m *fakeMIG) { m.slotsRet = nvml.ERROR_GPU_IS_LOST },
		"99 mig device slots, want 0 to": func(m *fakeMIG) { m.slots = 99 },
		"-1 mig device slots":            func(m *fakeMIG) { m.slots = -1 },
		"mig device 2: ERROR_GPU_IS_LOST": func(m *fakeMIG) {
			m.rets[2] = nvml.ERROR_GPU_IS_LOST
		},
		`uuid "" is not a MIG device's`: func(m *fakeMIG) { m.devs[2].UUID = "" },
		`uuid "GPU-bbbb" is not`:        func(m *fakeMIG) { m.devs[2].UUID = "GPU-bbbb" },
		"is not a MIG device's (MIG-<uuid>, driver R470": func(m *fakeMIG) {
			m.devs[2].UUID = "MIG-GPU-bbbb/1/0"
		},
		"seen twice":        func(m *fakeMIG) { m.devs[2].UUID = migA },
		"reports no memory": func(m *fakeMIG) { m.devs[2].MemTotal = 0 },
	}
	for want, spoil := range cases {
		t.Run(want, func(t *testing.T) {
			f := migHost()
			spoil(f.mig[1])
			_, err := detectGPUs(f, "", nil, nil)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nvml device 1") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line naming device 1 and %q", err, want)
			}
		})
	}
	// Instances beyond the slots the driver reports are not read.
	f := migHost()
	f.mig[1].slots = 1
	inv, err := detectGPUs(f, "", nil, nil)
	if err != nil || len(inv.GPUs[1].MIG.Instances) != 1 || inv.GPUs[1].MIG.Instances[0].UUID != migA {
		t.Fatalf("one slot: %+v %v", inv.GPUs[1].MIG, err)
	}
}

func migGPU(uuids ...string) terms.GPU {
	g := terms.GPU{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, UUID: "GPU-bbbb", Detected: true, MIG: &terms.MIG{Enabled: true}}
	for _, u := range uuids {
		g.MIG.Instances = append(g.MIG.Instances, terms.MIGInstance{UUID: u, Profile: "3g.40gb", MemoryMB: 40192})
	}
	return g
}

// TestSliceRulesFollowMIG: a device in MIG mode is sliced by its
// instances whatever the owner's rules say of it (and the log says so);
// one of one instance is sold whole; one that cannot be sliced (three
// instances, none) is not sliced, with a warning; other devices keep the
// owner's rules.
func TestSliceRulesFollowMIG(t *testing.T) {
	plain := terms.GPU{Model: "L4", VRAMGB: 24, Detected: true}
	gpus := []terms.GPU{plain, migGPU(migA, migB), migGPU(migA, migB, migC), migGPU(migC), migGPU(), plain}
	gpus[5].MIG = &terms.MIG{}
	configured := []terms.SliceRule{{Devices: []int{0, 1, 2, 4}, Count: 8}, {Devices: []int{5}, Count: 4}}
	var logs bytes.Buffer
	got := SliceRules(gpus, configured, slog.New(slog.NewTextHandler(&logs, nil)))
	want := []terms.SliceRule{{Devices: []int{1}, Count: 2}, {Devices: []int{5}, Count: 4}, {Devices: []int{0}, Count: 8}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("slice rules %+v, want %+v", got, want)
	}
	for _, w := range []string{"gpu=1 instances=2 configured_slices=8", "one instance: sold whole", "gpu=2 instances=3", "gpu=4 instances=0"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, logs.String())
		}
	}
	if err := (terms.Policy{Slices: got}).Validate(); err != nil {
		t.Fatalf("rules for a MIG host fail the policy's own check: %v", err)
	}
	// Without MIG the owner's rules stand as written.
	if got := SliceRules([]terms.GPU{plain, plain}, configured, nil); !reflect.DeepEqual(got, configured) {
		t.Fatalf("no MIG: %+v, want the configured %+v", got, configured)
	}
}

// TestLeaseUUIDsNameTheInstance: a slice lease on a device in MIG mode is
// named by its one booked slice's instance, a whole lease on a device of
// one instance by that instance, never the device; anything else is an
// error; devices without MIG keep their own UUIDs (none when declared).
func TestLeaseUUIDsNameTheInstance(t *testing.T) {
	plain := terms.GPU{Model: "L4", VRAMGB: 24, UUID: "GPU-aaaa", Detected: true}
	gpus := []terms.GPU{plain, migGPU(migA, migB), migGPU(migC), {Model: "L4", VRAMGB: 24}}
	ok := func(devices []int, fraction float64, slices []int, want ...string) {
		t.Helper()
		got, err := LeaseUUIDs(gpus, devices, fraction, slices)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("devices %v fraction %v slices %v: %v %v, want %v", devices, fraction, slices, got, err, want)
		}
	}
	ok([]int{1}, 0.5, []int{1}, migB)
	ok([]int{1}, 0.5, []int{0}, migA)
	ok([]int{2}, 0, nil, migC)
	ok([]int{0, 2}, 0, nil, "GPU-aaaa", migC)
	ok([]int{0}, 0.25, []int{3}, "GPU-aaaa")
	if got, err := LeaseUUIDs(gpus, []int{3}, 0, nil); got != nil || err != nil {
		t.Errorf("declared device: %v %v", got, err)
	}
	bad := map[string]struct {
		devices  []int
		fraction float64
		slices   []int
	}{
		"must hold one slice":         {[]int{1}, 0.5, nil},
		"holds [0 1]":                 {[]int{1}, 0.5, []int{0, 1}},
		"slice 2 has no MIG instance": {[]int{1}, 0.5, []int{2}},
		"slice -1 has no MIG":         {[]int{1}, 0.5, []int{-1}},
		"with 2 instances":            {[]int{1}, 0, nil},
	}
	for want, c := range bad {
		if got, err := LeaseUUIDs(gpus, c.devices, c.fraction, c.slices); err == nil || !strings.Contains(err.Error(), want) || got != nil {
			t.Errorf("%+v: %v %v, want an error %q", c, got, err, want)
		}
	}
	if _, err := LeaseUUIDs([]terms.GPU{migGPU()}, []int{0}, 0, nil); err == nil {
		t.Error("a whole lease on a device in MIG mode without instances")
	}
}
