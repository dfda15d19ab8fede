//go:build linux

package runtime

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// swapping stands in a host that swaps (on) or has no swap (off) for the
// rest of the test.
func swapping(t *testing.T, on bool) {
	t.Helper()
	prev := hostSwaps
	hostSwaps = func() bool { return on }
	t.Cleanup(func() { hostSwaps = prev })
}

// TestNoSwapNeedsALimit: on a host that swaps, a no-swap job starts only
// where its memory can be kept from swap; without cgroups it is refused
// with a clear error, and on a host with no swap it runs (nothing to swap
// to). A job that does not ask keeps running without.
func TestNoSwapNeedsALimit(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{NoCgroups: true})
	swapping(t, true)
	_, err := e.Start(context.Background(), Spec{ID: "noswap-refused", Command: []string{helperBin, "echo", "x"}, NoSwap: true}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot be kept from swap") {
		t.Fatalf("no-swap job without cgroups on a swapping host: %v, want a refusal", err)
	}
	if res, out, _, _ := run(t, e, Spec{ID: "swap-ok", Command: []string{helperBin, "echo", "x"}}); res.ExitCode != 0 || out != "x\n" {
		t.Fatalf("job without no-swap: %+v %q", res, out)
	}
	swapping(t, false)
	if res, out, _, _ := run(t, e, Spec{ID: "noswap-noswap", Command: []string{helperBin, "echo", "x"}, NoSwap: true}); res.ExitCode != 0 || out != "x\n" {
		t.Fatalf("no-swap job on a host without swap: %+v %q", res, out)
	}
}

// TestNoSwapCgroupLimit: a no-swap job's cgroup must get its swap limit
// where the host swaps (a limit that cannot be written fails the job's
// cgroup, where for other jobs it is best effort); and on this host a
// no-swap job's cgroup holds memory and swap to the memory limit.
func TestNoSwapCgroupLimit(t *testing.T) {
	swapping(t, true)
	for _, v := range []int{1, 2} {
		swapFile := map[int]string{1: "memory.memsw.limit_in_bytes", 2: "memory.swap.max"}[v]
		// A hierarchy whose swap file cannot be written (a directory
		// stands in its place).
		fake := &cgroups{version: v, parent: t.TempDir(), memory: true}
		for _, id := range []string{"noswap", "other"} {
			if err := os.MkdirAll(filepath.Join(fake.parent, id, swapFile), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fake.create("noswap", jobLimits{memoryMB: 64, noSwap: true}); err == nil || !strings.Contains(err.Error(), "swap") {
			t.Fatalf("cgroup v%d: no-swap job's cgroup without its swap limit: %v, want an error", v, err)
		}
		if _, err := fake.create("other", jobLimits{memoryMB: 64}); err != nil {
			t.Fatalf("cgroup v%d: a job that does not ask failed on its swap limit: %v", v, err)
		}
		noMem := &cgroups{version: v, parent: t.TempDir()}
		if _, err := noMem.create("nomem", jobLimits{memoryMB: 64, noSwap: true}); err == nil {
			t.Fatalf("cgroup v%d: no-swap job's cgroup made without the memory controller", v)
		}
	}

	e := newTestExecutor(t, ProcessOptions{MemoryMB: 64})
	needCgroup(t, e, "memory", (*cgroups).limitsMemory)
	h, err := e.Start(context.Background(), Spec{ID: "noswap-real", Command: []string{helperBin, "sleep", "1h"}, NoSwap: true}, nil, nil)
	if err != nil {
		t.Fatalf("no-swap job on this host: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop(0); _ = h.Cleanup() })
	dirs, _ := filepath.Glob(filepath.Join(e.cg.parent, "noswap-real-*"))
	if len(dirs) != 1 {
		t.Fatalf("job cgroups %v", dirs)
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dirs[0], f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if e.cg.version == 2 {
		if got := read("memory.swap.max"); got != "0" {
			t.Fatalf("memory.swap.max %s, want 0", got)
		}
	} else if mem, memsw := read("memory.limit_in_bytes"), read("memory.memsw.limit_in_bytes"); mem != memsw {
		t.Fatalf("memory %s, memory+swap %s: the job may swap", mem, memsw)
	}
}

// TestDockerNoSwap: a no-swap container's memory and memory+swap limits
// are equal (no swap), also when the job sets no memory limit.
func TestDockerNoSwap(t *testing.T) {
	e := dockerExecutor(t)
	h, err := e.Start(context.Background(), Spec{ID: "d-noswap", Image: testImage, Command: []string{"/jobhelper", "sleep", "1h"}, NoSwap: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(0); _ = h.Cleanup() })
	out, err := exec.Command("docker", "inspect", "--format", "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}}", h.(*dockerHandle).id).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] == "0" || f[0] != f[1] {
		t.Fatalf("container memory and memory+swap limits %q: the job may swap", out)
	}
}
