package runtime

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProcessOutputAndExitCodes(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	res, out, errOut, _ := run(t, e, Spec{ID: "echo", Command: []string{helperBin, "echo", "hello", "world"}})
	if res.Err != nil || res.ExitCode != 0 || res.Reason != ReasonExited || res.Killed {
		t.Fatalf("echo: %+v", res)
	}
	if out != "hello world\n" || errOut != "" {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	if !res.Started.Before(res.Ended) && !res.Started.Equal(res.Ended) {
		t.Fatalf("started %v after ended %v", res.Started, res.Ended)
	}

	res, _, errOut, _ = run(t, e, Spec{ID: "stderr", Command: []string{helperBin, "stderr", "oops"}})
	if res.ExitCode != 0 || errOut != "oops\n" {
		t.Fatalf("stderr: %+v %q", res, errOut)
	}
	for _, code := range []int{1, 7, 255} {
		res, _, _, _ := run(t, e, Spec{ID: "exit-" + strconv.Itoa(code), Command: []string{"sh", "-c", "exit " + strconv.Itoa(code)}})
		if res.ExitCode != code || res.Reason != ReasonExited || res.Err != nil {
			t.Fatalf("exit %d: %+v", code, res)
		}
	}
	// A job killed by a signal it sent itself reports 128+signal.
	res, _, _, _ = run(t, e, Spec{ID: "selfkill", Command: []string{"sh", "-c", "kill -9 $$"}})
	if res.ExitCode != 137 || res.Reason != ReasonSignaled || res.Killed {
		t.Fatalf("self kill: %+v", res)
	}
	// A command that does not exist fails Start and leaves no work dir.
	if _, err := e.Start(context.Background(), Spec{ID: "nope", Command: []string{"no-such-command-gpumesh"}}, nil, nil); err == nil {
		t.Fatal("start of a missing command succeeded")
	}
	if _, err := os.Stat(filepath.Join(e.Root(), "nope")); !os.IsNotExist(err) {
		t.Fatalf("work dir left after failed start: %v", err)
	}
}

func TestProcessEnvironmentScrubbed(t *testing.T) {
	t.Setenv("GPUMESH_TEST_SECRET", "hunter2")
	e := newTestExecutor(t, ProcessOptions{})
	res, out, _, h := run(t, e, Spec{
		ID:      "env",
		JobID:   "job-env",
		Command: []string{helperBin, "env"},
		Env:     map[string]string{"FOO": "bar"},
		GPUs:    []int{1, 3},
		Outputs: "out/dir",
	})
	if res.ExitCode != 0 {
		t.Fatalf("env: %+v", res)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if strings.Contains(out, "hunter2") || env["GPUMESH_TEST_SECRET"] != "" {
		t.Fatalf("secret leaked into job env:\n%s", out)
	}
	want := map[string]string{
		"FOO":                    "bar",
		"CUDA_VISIBLE_DEVICES":   "1,3",
		"HOME":                   h.WorkDir(),
		"TMPDIR":                 filepath.Join(h.WorkDir(), "tmp"),
		"GPUMESH_JOB_ID":         "job-env",
		"GPUMESH_OUTPUTS":        filepath.Join(h.WorkDir(), "out/dir"),
		"GPUMESH_CHECKPOINT_DIR": filepath.Join(h.WorkDir(), "checkpoint"),
		"PATH":                   "/usr/local/bin:/usr/bin:/bin",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	allowed := map[string]bool{"LANG": true}
	for k := range env {
		if _, ok := want[k]; !ok && !allowed[k] {
			t.Errorf("unexpected variable %s in job env", k)
		}
	}
	if fi, err := os.Stat(filepath.Join(h.WorkDir(), "out/dir")); err != nil || !fi.IsDir() {
		t.Fatalf("outputs dir not created: %v", err)
	}
	if fi, err := os.Stat(h.WorkDir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("work dir mode: %v %v", fi.Mode(), err)
	}
}

// TestProcessCheckpointRestore: the job finds the restored checkpoint's
// files in GPUMESH_CHECKPOINT_DIR and can replace them (write, then rename).
func TestProcessCheckpointRestore(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	restore := t.TempDir()
	if err := os.MkdirAll(filepath.Join(restore, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restore, "sub", "count"), []byte("41\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `d="$GPUMESH_CHECKPOINT_DIR"; n=$(cat "$d/sub/count"); echo $((n+1)) > "$d/next.tmp" && mv "$d/next.tmp" "$d/sub/count" && cat "$d/sub/count"`
	res, out, errs, h := run(t, e, Spec{ID: "ckpt", Command: []string{"sh", "-c", script}, Restore: restore})
	if res.ExitCode != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("restored job: %+v out %q err %q", res, out, errs)
	}
	if b, err := os.ReadFile(filepath.Join(h.WorkDir(), CheckpointDir, "sub", "count")); err != nil || string(b) != "42\n" {
		t.Fatalf("checkpoint dir after the job: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(restore, "sub", "count")); string(b) != "41\n" {
		t.Fatalf("the restore source was changed: %q", b)
	}
	// A relative restore dir is refused.
	if _, err := e.Start(context.Background(), Spec{ID: "rel", Command: []string{"true"}, Restore: "x"}, nil, nil); err == nil {
		t.Fatal("relative restore dir accepted")
	}
}

func TestProcessDeadlineKillsWholeTree(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{Grace: 200 * time.Millisecond})
	cases := []struct {
		name  string
		cmd   func(mark string) []string
		procs int
	}{
		// The spec's example: a shell with a background child.
		{"background", func(m string) []string {
			return []string{"sh", "-c", helperBin + " sleep 1h " + m + " & " + helperBin + " sleep 1h " + m + "; true"}
		}, 2},
		// A double fork without setsid: the grandchild is reparented but
		// stays in the job's process group.
		{"daemonize", func(m string) []string { return []string{helperBin, "daemonize", m} }, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mark := uniqueMarker(t) + tc.name
			var out syncBuffer
			start := time.Now()
			h, err := e.Start(context.Background(), Spec{ID: "dl-" + tc.name, Command: tc.cmd(mark), Deadline: start.Add(3 * time.Second)}, &out, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Cleanup()
			pgid := h.(*processHandle).Pid()
			waitProcs(t, mark, tc.procs, 2500*time.Millisecond)
			res := waitTimeout(t, h, 20*time.Second)
			if res.Reason != ReasonDeadline {
				t.Fatalf("reason %q, want deadline: %+v", res.Reason, res)
			}
			if el := res.Ended.Sub(start); el < 2900*time.Millisecond {
				t.Fatalf("ended after %v, before the deadline", el)
			}
			if left := procsWith(t, mark); len(left) != 0 {
				t.Fatalf("processes survived the deadline: %v", left)
			}
			if left := groupMembers(t, pgid); len(left) != 0 {
				t.Fatalf("process group %d not empty: %v", pgid, left)
			}
		})
	}
}

// A setsid'd child leaves the process group; the job's uid (as root) or
// cgroup still catches it.
func TestProcessKillsSetsidEscapee(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	if e.uids == nil && e.cg == nil {
		t.Skip("neither a dedicated job uid (needs root) nor a cgroup is available to track setsid'd processes; limits: " + e.Limits())
	}
	mark := uniqueMarker(t)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "escape", Command: []string{helperBin, "escape", mark}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	out.waitFor(t, "ready", 5*time.Second)
	waitProcs(t, mark, 1, 5*time.Second)
	if err := h.Stop(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if res := h.Wait(); res.Reason != ReasonStopped {
		t.Fatalf("%+v", res)
	}
	if left := procsWith(t, mark); len(left) != 0 {
		t.Fatalf("setsid'd process survived: %v", left)
	}
}

func TestProcessJobExitKillsLeftovers(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	mark := uniqueMarker(t)
	// The main process exits at once, leaving a background child holding
	// stdout open; Wait must neither hang nor leave the child running.
	res, _, _, _ := run(t, e, Spec{ID: "leftover", Command: []string{"sh", "-c", helperBin + " sleep 1h " + mark + " & sleep 0.2; exit 3"}})
	if res.ExitCode != 3 || res.Reason != ReasonExited {
		t.Fatalf("%+v", res)
	}
	if left := procsWith(t, mark); len(left) != 0 {
		t.Fatalf("background child survived its job: %v", left)
	}
}

func TestProcessStopWithGraceCheckpoints(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "trap", Command: []string{helperBin, "trap", "ckpt"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	out.waitFor(t, "ready", 5*time.Second)
	if err := h.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	res := h.Wait()
	if res.Reason != ReasonStopped || res.ExitCode != 0 || res.Killed {
		t.Fatalf("%+v", res)
	}
	if el := res.Ended.Sub(res.Started); el > 5*time.Second {
		t.Fatalf("stop took %v: the grace period was not cut short by the exit", el)
	}
	b, err := os.ReadFile(filepath.Join(h.WorkDir(), "ckpt"))
	if err != nil || string(b) != "checkpoint" {
		t.Fatalf("checkpoint: %q %v", b, err)
	}
	if err := h.Stop(time.Second); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

func TestProcessStopKillsAfterGrace(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "ignore", Command: []string{helperBin, "ignore"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	out.waitFor(t, "ready", 5*time.Second)
	t0 := time.Now()
	if err := h.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < 300*time.Millisecond {
		t.Fatalf("stop returned after %v, before the grace expired", el)
	}
	res := h.Wait()
	if res.Reason != ReasonStopped || !res.Killed || res.ExitCode != 137 {
		t.Fatalf("%+v", res)
	}
}

func TestProcessIsolationAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("job uids are only switched when the daemon runs as root")
	}
	base := traversableTempDir(t)
	// The daemon's data dir and key, as the node keeps them.
	dataDir := filepath.Join(base, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dataDir, "key")
	if err := os.WriteFile(key, []byte("private"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A key readable by path even if the dir were traversable.
	openKey := filepath.Join(base, "key")
	if err := os.WriteFile(openKey, []byte("private"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := NewProcessExecutor(filepath.Join(base, "jobs"), ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resA, _, _, a := run(t, e, Spec{ID: "job-a", Command: []string{helperBin, "write", "secret.txt", "s3cret"}})
	if resA.ExitCode != 0 {
		t.Fatalf("job a: %+v", resA)
	}
	if _, err := os.Stat(filepath.Join(a.WorkDir(), "secret.txt")); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{key, openKey, filepath.Join(a.WorkDir(), "secret.txt")} {
		res, out, _, _ := run(t, e, Spec{ID: "job-b", Command: []string{helperBin, "cat", target}})
		if res.ExitCode != 3 || !strings.Contains(out, "permission denied") {
			t.Fatalf("job b read %s: %+v %q", target, res, out)
		}
		if err := cleanupByID(e, "job-b"); err != nil {
			t.Fatal(err)
		}
	}
	// Positive control: a job reads its own files, as a non-root uid.
	res, out, _, _ := run(t, e, Spec{ID: "job-c", Command: []string{"sh", "-c", "id -u; echo mine > f; cat f"}})
	if res.ExitCode != 0 {
		t.Fatalf("job c: %+v %q", res, out)
	}
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[0] == "0" || lines[1] != "mine" {
		t.Fatalf("job c output %q", out)
	}
}

// cleanupByID removes a finished job's work dir so its ID can be reused.
func cleanupByID(e *ProcessExecutor, id string) error {
	e.mu.Lock()
	delete(e.jobs, id)
	e.mu.Unlock()
	return removeWorkDir(filepath.Join(e.Root(), id))
}

func TestProcessMemoryLimit(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	if !e.MemoryLimited() {
		t.Skip("memory limits are not enforceable on this host: " + e.Limits())
	}
	var out syncBuffer
	// Within the limit: allocates and keeps running.
	h, err := e.Start(context.Background(), Spec{ID: "mem-ok", Command: []string{helperBin, "alloc", "16"}, MemoryMB: 96}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "allocated 16", 10*time.Second)
	_ = h.Stop(0)
	if res := h.Wait(); res.Reason != ReasonStopped {
		t.Fatalf("mem-ok: %+v", res)
	}
	_ = h.Cleanup()

	res, _, _, _ := run(t, e, Spec{ID: "mem-over", Command: []string{helperBin, "alloc", "400"}, MemoryMB: 64})
	if res.Reason != ReasonOOM || !res.Killed || res.ExitCode != 137 {
		t.Fatalf("over limit: %+v", res)
	}
}

func TestProcessLifecycleErrors(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "dup", Command: []string{helperBin, "ignore"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Start(context.Background(), Spec{ID: "dup", Command: []string{"true"}}, nil, nil); err == nil {
		t.Fatal("second job with the same id started")
	}
	if err := h.Cleanup(); !errors.Is(err, errStillRunning) {
		t.Fatalf("cleanup of a running job: %v", err)
	}
	_ = h.Stop(0)
	h.Wait()
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.WorkDir()); !os.IsNotExist(err) {
		t.Fatalf("work dir survived cleanup: %v", err)
	}
	// The id is free again.
	res, _, _, _ := run(t, e, Spec{ID: "dup", Command: []string{"true"}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Start(ctx, Spec{ID: "cancelled", Command: []string{"true"}}, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("start with a cancelled context: %v", err)
	}
}

func TestSpecValidation(t *testing.T) {
	now := time.Now()
	ok := Spec{ID: "job-1.a_b", Command: []string{"true"}}
	if err := ok.validate(now); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	bad := map[string]func(s *Spec){
		"empty id":       func(s *Spec) { s.ID = "" },
		"traversal id":   func(s *Spec) { s.ID = "../x" },
		"slash id":       func(s *Spec) { s.ID = "a/b" },
		"dot id":         func(s *Spec) { s.ID = "." },
		"empty command":  func(s *Spec) { s.Command = nil },
		"empty argv0":    func(s *Spec) { s.Command = []string{""} },
		"nul arg":        func(s *Spec) { s.Command = []string{"echo", "a\x00b"} },
		"reserved env":   func(s *Spec) { s.Env = map[string]string{"HOME": "/root"} },
		"cuda env":       func(s *Spec) { s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0"} },
		"bad env name":   func(s *Spec) { s.Env = map[string]string{"A=B": "x"} },
		"past deadline":  func(s *Spec) { s.Deadline = now.Add(-time.Second) },
		"negative gpu":   func(s *Spec) { s.GPUs = []int{-1} },
		"negative mem":   func(s *Spec) { s.MemoryMB = -1 },
		"escape outputs": func(s *Spec) { s.Outputs = "../up" },
		"abs outputs":    func(s *Spec) { s.Outputs = "/etc" },
		"dot outputs":    func(s *Spec) { s.Outputs = "." },
	}
	for name, mutate := range bad {
		t.Run(name, func(t *testing.T) {
			s := ok
			mutate(&s)
			if err := s.validate(now); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("%s: got %v, want ErrInvalidSpec", name, err)
			}
		})
	}
}

func TestNewProcessExecutorRejectsHiddenRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the traversal check applies to job uids, used only as root")
	}
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := NewProcessExecutor(filepath.Join(private, "jobs"), ProcessOptions{}); err == nil || !strings.Contains(err.Error(), "not traversable") {
		t.Fatalf("root under a 0700 dir: %v", err)
	}
}

func TestSampleGroup(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "sample", Command: []string{helperBin, "alloc", "32"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	out.waitFor(t, "allocated 32", 10*time.Second)
	pid := h.(*processHandle).Pid()
	_, rss, err := SampleGroup(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss < 32 {
		t.Fatalf("group rss %d MiB, want >= 32", rss)
	}
	tel := Sample(Inventory{Source: SourceDeclared}, pid)
	if tel.Source != "proc" || tel.MemUsedMB < 32 {
		t.Fatalf("telemetry %+v", tel)
	}
	_ = h.Stop(0)
	h.Wait()
	if _, _, err := SampleGroup(pid); err == nil {
		t.Fatal("sampling a finished job's group succeeded")
	}
	if _, _, err := SampleProcess(-1); err == nil {
		t.Fatal("SampleProcess(-1) succeeded")
	}
}

// TestProcessCPUCountsReapedChildren: a process's CPU and that of the
// children it waited for, as /proc says, so that a daemon's figure counts
// the job processes it ran.
func TestProcessCPUCountsReapedChildren(t *testing.T) {
	own0, reaped0, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	own1, reaped1, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in clock ticks (10 ms): the child's own figure, to a
	// tick either side.
	if got := reaped1 - reaped0; got < child-20*time.Millisecond || got > child+20*time.Millisecond || got <= 0 {
		t.Fatalf("reaped CPU grew %s, the child used %s", got, child)
	}
	if own1 < own0 {
		t.Fatalf("own CPU went back: %s then %s", own0, own1)
	}
	if _, _, err := ProcessCPU(0); err == nil {
		t.Fatal("ProcessCPU(0) succeeded")
	}
}

// CUDA_VISIBLE_DEVICES names the leased devices' UUIDs when known, their
// indices otherwise; UUIDs must match the devices one to one.
func TestCUDAVisibleDevicesPrefersUUIDs(t *testing.T) {
	cases := []struct {
		name  string
		gpus  []int
		uuids []string
		want  string
		bad   bool
	}{
		{"indices", []int{1, 3}, nil, "1,3", false},
		{"uuids", []int{1, 3}, []string{"GPU-aa11", "GPU-bb22"}, "GPU-aa11,GPU-bb22", false},
		{"uuid count mismatch", []int{1, 3}, []string{"GPU-aa11"}, "", true},
		{"uuid with a comma", []int{1}, []string{"GPU-a,0"}, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Spec{ID: "j", Command: []string{"true"}, GPUs: c.gpus, UUIDs: c.uuids}
			err := s.validate(time.Now())
			if c.bad {
				if err == nil {
					t.Fatalf("spec with gpus %v uuids %v accepted", c.gpus, c.uuids)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.cudaDevices(); got != c.want {
				t.Fatalf("CUDA_VISIBLE_DEVICES = %q, want %q", got, c.want)
			}
		})
	}
}

// Every process job runs with no_new_privs, root or not (issue 22).
func TestProcessJobNoNewPrivs(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	res, got, errOut, _ := run(t, e, Spec{ID: "nnp", Command: []string{helperBin, "cat", "/proc/self/status"}})
	if res.ExitCode != 0 || !strings.Contains(got, "NoNewPrivs:\t1") {
		t.Fatalf("%+v: %q %q", res, got, errOut)
	}
}
