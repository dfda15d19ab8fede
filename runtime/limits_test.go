package runtime

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needCgroup skips a test of a cgroup limit this host cannot enforce.
func needCgroup(t *testing.T, e *ProcessExecutor, what string, ok func(*cgroups) bool) {
	t.Helper()
	if e.cg == nil || !ok(e.cg) {
		t.Skip(what + " limits are not enforceable on this host: " + e.Limits())
	}
}

// A job that sets no memory limit gets the executor's default one.
func TestProcessDefaultMemoryLimit(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{MemoryMB: 64})
	needCgroup(t, e, "memory", (*cgroups).limitsMemory)
	if !strings.Contains(e.Limits(), "default 64 MiB per job") {
		t.Fatalf("limits: %s", e.Limits())
	}
	res, _, _, _ := run(t, e, Spec{ID: "defmem-over", Command: []string{helperBin, "alloc", "400"}})
	if res.Reason != ReasonOOM || !res.Killed || res.ExitCode != 137 {
		t.Fatalf("over the default limit: %+v", res)
	}
	// The spec's own limit replaces the default.
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "defmem-spec", Command: []string{helperBin, "alloc", "100"}, MemoryMB: 256}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	out.waitFor(t, "allocated 100", 20*time.Second)
	_ = h.Stop(0)
	if res := h.Wait(); res.Reason != ReasonStopped {
		t.Fatalf("within the spec's limit: %+v", res)
	}
}

// A fork bomb is bounded by the default pids limit: forks fail, the job
// ends, the host keeps its process table.
func TestProcessDefaultPidsLimit(t *testing.T) {
	const limit = 32
	e := newTestExecutor(t, ProcessOptions{Pids: limit})
	needCgroup(t, e, "pids", (*cgroups).limitsPids)
	mark := uniqueMarker(t)
	// Bounded at 300 in case the limit does not hold.
	script := `n=0; while [ $n -lt 300 ]; do ` + helperBin + ` sleep 1h ` + mark + ` & n=$((n+1)); echo $n; done`
	res, out, errOut, _ := run(t, e, Spec{ID: "forkbomb", Command: []string{"sh", "-c", script}})
	lines := strings.Fields(out)
	if len(lines) == 0 {
		t.Fatalf("no process started: %+v %q %q", res, out, errOut)
	}
	n, _ := strconv.Atoi(lines[len(lines)-1])
	if n >= limit || res.ExitCode == 0 || !strings.Contains(strings.ToLower(errOut), "fork") {
		t.Fatalf("fork bomb started %d processes (limit %d): %+v stderr %q", n, limit, res, errOut)
	}
	if left := procsWith(t, mark); len(left) != 0 {
		t.Fatalf("fork bomb processes survived the job: %v", left)
	}
}

// The default CPU limit holds a job that keeps two cores busy to a fraction
// of one.
func TestProcessDefaultCPULimit(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{CPUs: 0.2})
	needCgroup(t, e, "cpu", (*cgroups).limitsCPU)
	res, out, _, _ := run(t, e, Spec{ID: "spin", Command: []string{helperBin, "spin", "1s", "2"}})
	f := strings.Fields(out)
	if res.ExitCode != 0 || len(f) != 2 {
		t.Fatalf("%+v %q", res, out)
	}
	cpu, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	// 0.2 cores for ~1 s, plus one period of slack.
	if cpu > 0.45 {
		t.Fatalf("job used %.3f CPU seconds in 1 s at a 0.2-core limit", cpu)
	}
}

func TestProcessOptionsRejectTinyCPU(t *testing.T) {
	if _, err := NewProcessExecutor(t.TempDir(), ProcessOptions{CPUs: 0.001}); err == nil || !strings.Contains(err.Error(), "0.01 cores") {
		t.Fatalf("cpu limit 0.001: %v", err)
	}
}
