package runtime

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestSliceIsolationAndMPSLimits: a slice of a device read from the
// driver is enforced by MPS, with the slice's share of its memory and
// threads; a declared device's slice is accounting only, and gets no
// limits; a job may not set the limits itself.
func TestSliceIsolationAndMPSLimits(t *testing.T) {
	nvml := terms.GPU{Model: "L4", VRAMGB: 24, Detected: true}
	declared := terms.GPU{Model: "L4", VRAMGB: 24}
	// No MPS daemon: CUDA would ignore the limits, so nothing enforces a
	// slice, driver or not.
	pipes := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", pipes)
	if got := SliceIsolation(nvml); got != terms.IsolationNone {
		t.Fatalf("isolation of a driver's device with no MPS daemon %q", got)
	}
	// A control daemon's pipe (a FIFO, as nvidia-cuda-mps-control makes).
	if err := syscall.Mkfifo(filepath.Join(pipes, "control"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := SliceIsolation(nvml); got != terms.IsolationMPS {
		t.Fatalf("isolation of a driver's device %q", got)
	}
	if got := SliceIsolation(declared); got != terms.IsolationNone {
		t.Fatalf("isolation of a declared device %q", got)
	}
	nvml.Isolation, declared.Isolation = SliceIsolation(nvml), SliceIsolation(declared)
	if m := SliceMPS(nvml, 0.25); m == nil || m.MemoryMB != 6144 || m.ThreadPercent != 25 {
		t.Fatalf("a quarter of 24 GB under MPS: %+v", m)
	}
	if m := SliceMPS(nvml, 0.125); m == nil || m.MemoryMB != 3072 || m.ThreadPercent != 12 {
		t.Fatalf("an eighth of 24 GB under MPS: %+v", m)
	}
	if m := SliceMPS(declared, 0.25); m != nil {
		t.Fatalf("a declared device's slice got MPS limits %+v", m)
	}
	if m := SliceMPS(nvml, 0); m != nil {
		t.Fatalf("a whole device got MPS limits %+v", m)
	}
	for _, k := range []string{EnvMPSMemLimit, EnvMPSThreads} {
		if err := terms.CheckEnvVar(k, "100"); err == nil {
			t.Errorf("a job may set %s", k)
		}
	}
}

// TestProcessSliceJobEnv: a process job on an MPS slice runs with the
// slice's limits in its environment; one on a whole device without them.
func TestProcessSliceJobEnv(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	g := terms.GPU{Model: "L4", VRAMGB: 24, Detected: true, Isolation: terms.IsolationMPS}
	res, out, _, _ := run(t, e, Spec{ID: "mps", Command: []string{helperBin, "env"}, GPUs: []int{0}, MPS: SliceMPS(g, 0.5)})
	if res.ExitCode != 0 {
		t.Fatalf("env: %+v", res)
	}
	for _, want := range []string{EnvMPSMemLimit + "=0=12288M\n", EnvMPSThreads + "=50\n", EnvCUDA + "=0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("slice job env lacks %q:\n%s", want, out)
		}
	}
	res, out, _, _ = run(t, e, Spec{ID: "whole", Command: []string{helperBin, "env"}, GPUs: []int{0}})
	if res.ExitCode != 0 || strings.Contains(out, "CUDA_MPS_") {
		t.Fatalf("whole-device job env: %+v\n%s", res, out)
	}
}

// TestProcessMIGSliceJobEnv: a process job on a MIG slice sees its
// instance, named by the lease (LeaseUUIDs), as its only device: not the
// parent, not the sibling instance, and no MPS limits.
func TestProcessMIGSliceJobEnv(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	g := migGPU(migA, migB)
	g.Isolation = SliceIsolation(g)
	uuids, err := LeaseUUIDs([]terms.GPU{g}, []int{0}, 0.5, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	res, out, _, _ := run(t, e, Spec{ID: "mig", Command: []string{helperBin, "env"}, GPUs: []int{0}, UUIDs: uuids, MPS: SliceMPS(g, 0.5)})
	if res.ExitCode != 0 {
		t.Fatalf("env: %+v", res)
	}
	if !strings.Contains(out, EnvCUDA+"="+migB+"\n") || strings.Contains(out, migA) || strings.Contains(out, "GPU-bbbb") || strings.Contains(out, "CUDA_MPS_") {
		t.Fatalf("MIG slice job env, want %s=%s alone:\n%s", EnvCUDA, migB, out)
	}
}
