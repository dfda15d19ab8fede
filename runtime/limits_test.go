package runtime

import (
	"strconv"
	"strings"
	"testing"
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
}

// A job's memory_mb lowers the provider's cap, never lifts it (issue 22:
// a job asking for more got it): the limit is the smaller of the two, and
// a clamped job is told in its stderr.
func TestProcessMemoryRequestCannotLiftCap(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{MemoryMB: 64})
	needCgroup(t, e, "memory", (*cgroups).limitsMemory)
	res, _, errOut, _ := run(t, e, Spec{ID: "mem-lift", Command: []string{helperBin, "alloc", "150"}, MemoryMB: 1024})
	if res.Reason != ReasonOOM || !res.Killed {
		t.Fatalf("memory_mb 1024 on a 64 MiB cap allocated 150 MiB: %+v", res)
	}
	if !strings.Contains(errOut, "gpumesh: memory_mb 1024 is over this provider's cap of 64 MiB per job; the job is limited to 64 MiB") {
		t.Fatalf("no note of the clamp in stderr: %q", errOut)
	}
	// Below the cap, the job's own limit holds.
	e2 := newTestExecutor(t, ProcessOptions{MemoryMB: 512})
	res, _, errOut, _ = run(t, e2, Spec{ID: "mem-lower", Command: []string{helperBin, "alloc", "150"}, MemoryMB: 64})
	if res.Reason != ReasonOOM || strings.Contains(errOut, "over this provider's cap") {
		t.Fatalf("memory_mb 64 under a 512 MiB cap: %+v %q", res, errOut)
	}
}

func TestJobMemoryMB(t *testing.T) {
	for _, c := range [][3]int{{0, 64, 64}, {32, 64, 32}, {1024, 64, 64}, {64, 64, 64}, {1024, 0, 1024}, {1024, -1, 1024}, {0, -1, -1}} {
		if got := jobMemoryMB(c[0], c[1]); got != c[2] {
			t.Errorf("request %d, cap %d: %d, want %d", c[0], c[1], got, c[2])
		}
	}
}

// The cap's default is half the host's RAM; a clamped request is noted in
// the job's log, one that fits is not.
func TestClampMemoryMB(t *testing.T) {
	if got := memoryCapMB(0); got != hostMemoryMB()/2 {
		t.Errorf("default cap %d, want half of %d", got, hostMemoryMB())
	}
	if memoryCapMB(-1) != -1 || memoryCapMB(64) != 64 {
		t.Errorf("set caps: %d %d", memoryCapMB(-1), memoryCapMB(64))
	}
	var log strings.Builder
	if got := clampMemoryMB(1024, 64, &log); got != 64 || log.String() != "gpumesh: memory_mb 1024 is over this provider's cap of 64 MiB per job; the job is limited to 64 MiB\n" {
		t.Errorf("clamped: %d, log %q", got, log.String())
	}
	log.Reset()
	for _, c := range [][2]int{{32, 64}, {0, 64}, {1024, -1}} {
		clampMemoryMB(c[0], c[1], &log)
	}
	if log.Len() != 0 {
		t.Errorf("a request within the cap was noted: %q", log.String())
	}
	clampMemoryMB(1024, 64, nil) // no log: no note, no panic
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
