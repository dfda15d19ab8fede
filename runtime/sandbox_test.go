package runtime

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needSandbox skips a test of the job namespaces where they cannot exist.
func needSandbox(t *testing.T, e *ProcessExecutor) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("job namespaces need root: this test runs as uid " + strconv.Itoa(os.Geteuid()))
	}
	if e.sb == nil {
		t.Fatalf("running as root but the executor has no job namespaces: %s", e.Limits())
	}
}

func TestProcessJobHasNoNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	addr := l.Addr().String()

	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	res, out, _, _ := run(t, e, Spec{ID: "net-host", Command: []string{helperBin, "dial", addr}})
	if res.ExitCode != 3 || !strings.Contains(out, "connection refused") {
		t.Fatalf("job reached the host's %s: %+v %q", addr, res, out)
	}
	// Loopback inside the job's own namespace works.
	res, out, _, _ = run(t, e, Spec{ID: "net-self", Command: []string{helperBin, "dial", "self"}})
	if res.ExitCode != 0 || out != "connected\n" {
		t.Fatalf("job's own loopback: %+v %q", res, out)
	}
	select {
	case <-accepted:
		t.Fatal("the test's listener accepted a connection from a job")
	default:
	}

	// Positive control: with the network allowed, the same dial connects.
	open := newTestExecutor(t, ProcessOptions{AllowNetwork: true})
	res, out, _, _ = run(t, open, Spec{ID: "net-allowed", Command: []string{helperBin, "dial", addr}})
	if res.ExitCode != 0 || out != "connected\n" {
		t.Fatalf("network allowed: %+v %q", res, out)
	}
	<-accepted
	if !strings.Contains(e.Limits(), "network: none") || !strings.Contains(open.Limits(), "network: host") {
		t.Fatalf("limits: %q / %q", e.Limits(), open.Limits())
	}
}

func TestProcessWithoutNamespaces(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{NoNamespaces: true})
	if e.sb != nil || !strings.Contains(e.Limits(), "namespaces: none (namespaces disabled)") {
		t.Fatalf("limits: %s", e.Limits())
	}
	res, out, _, _ := run(t, e, Spec{ID: "nons", Command: []string{helperBin, "echo", "ok"}})
	if res.ExitCode != 0 || out != "ok\n" {
		t.Fatalf("%+v %q", res, out)
	}
}

func TestProcessTenantsDoNotShareTmp(t *testing.T) {
	// A pool of its own, two uids no other test's jobs take (the pool's
	// locks are the machine's, shared with every test process running
	// jobs at once): tenant a takes the first, each concurrent tenant the
	// second, and the next tenant a's again, the reuse this test is for.
	e := newTestExecutor(t, ProcessOptions{UIDBase: 262144, UIDCount: 2})
	needSandbox(t, e)
	name := uniqueMarker(t)
	files := []string{"/tmp/" + name, "/var/tmp/" + name, "/dev/shm/" + name}
	if fi, err := os.Stat("/run/lock"); err == nil && fi.IsDir() {
		files = append(files, "/run/lock/"+name) // world-writable too (issue 22)
	}
	var script strings.Builder
	for _, f := range files {
		// World-readable, as careless jobs leave them.
		script.WriteString("echo s3cret > " + f + " && chmod 644 " + f + " && cat " + f + " && ")
	}
	script.WriteString("echo ready && exec sleep 3600")
	var out syncBuffer
	a, err := e.Start(context.Background(), Spec{ID: "tenant-a", Command: []string{"sh", "-c", script.String()}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Cleanup()
	out.waitFor(t, "ready", 10*time.Second)
	// Positive control: the first tenant reads its own files.
	if got := strings.Count(out.String(), "s3cret"); got != len(files) {
		t.Fatalf("tenant a read back %d of its %d files: %q", got, len(files), out.String())
	}
	for _, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("tenant a's %s is visible on the host: %v", f, err)
		}
	}
	uidA := a.(*processHandle).uid
	read := func(id string) []string {
		var leaked []string
		for i, f := range files {
			res, got, _, h := run(t, e, Spec{ID: id + "-" + strconv.Itoa(i), Command: []string{helperBin, "cat", f}})
			if res.ExitCode != 3 || !strings.Contains(got, "no such file") {
				leaked = append(leaked, f+": "+got)
			}
			if err := h.Cleanup(); err != nil {
				t.Fatal(err)
			}
		}
		return leaked
	}
	// A concurrent tenant.
	if leaked := read("tenant-b"); len(leaked) > 0 {
		t.Fatalf("a concurrent tenant read tenant a's files: %v", leaked)
	}
	// The next tenant under the same uid, after tenant a is gone.
	if err := a.Stop(0); err != nil {
		t.Fatal(err)
	}
	a.Wait()
	if err := a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	var out2 syncBuffer
	c, err := e.Start(context.Background(), Spec{ID: "tenant-c", Command: []string{"sh", "-c", "cat " + strings.Join(files, " ") + "; echo done"}}, &out2, &out2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	if uidC := c.(*processHandle).uid; e.uids != nil && uidC != uidA {
		t.Fatalf("tenant c got uid %d, not tenant a's %d: the reuse case is not exercised", uidC, uidA)
	}
	c.Wait()
	if got := out2.String(); strings.Contains(got, "s3cret") || !strings.Contains(got, "done") {
		t.Fatalf("the next tenant with the same uid read tenant a's files: %q", got)
	}
}

// A work root under /tmp stays visible to the job inside its private /tmp.
func TestProcessWorkRootUnderPrivateTmp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("job namespaces need root: this test runs as uid " + strconv.Itoa(os.Geteuid()))
	}
	dir, err := os.MkdirTemp("/tmp", "gpumesh-root-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	e, err := NewProcessExecutor(filepath.Join(dir, "jobs"), ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	needSandbox(t, e)
	res, out, _, h := run(t, e, Spec{ID: "under-tmp", Command: []string{"sh", "-c", "echo result > \"$GPUMESH_OUTPUTS/r.txt\" && ls /tmp"}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q", res, out)
	}
	// The job's /tmp shows only the path to its own work dir.
	if strings.TrimSpace(out) != filepath.Base(dir) {
		t.Fatalf("job's /tmp lists %q, want only %q", out, filepath.Base(dir))
	}
	b, err := os.ReadFile(filepath.Join(h.WorkDir(), "outputs", "r.txt"))
	if err != nil || string(b) != "result\n" {
		t.Fatalf("output written inside the job: %q %v", b, err)
	}
}

// A job writing past its work dir quota or its private /tmp gets ENOSPC
// and fails; the bytes land in its tmpfs, not on the host's disk.
func TestProcessDiskQuota(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{WorkDirMB: 8, TmpMB: 8})
	needSandbox(t, e)
	if !strings.Contains(e.Limits(), "work dir: tmpfs of 8 MiB") {
		t.Fatalf("limits: %s", e.Limits())
	}
	for _, target := range []string{"big", "outputs/big", "/tmp/big", "/var/tmp/big", "/dev/shm/big"} {
		t.Run(strings.ReplaceAll(target, "/", "_"), func(t *testing.T) {
			res, out, errOut, h := run(t, e, Spec{ID: "quota", Command: []string{"sh", "-c", "dd if=/dev/zero of=" + target + " bs=1M count=16 && echo wrote"}})
			if res.ExitCode == 0 || strings.Contains(out, "wrote") || !strings.Contains(errOut, "No space left on device") {
				t.Fatalf("16 MiB into an 8 MiB quota: %+v %q %q", res, out, errOut)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(h.WorkDir(), &st); err != nil {
				t.Fatal(err)
			}
			if st.Type != unix.TMPFS_MAGIC || st.Blocks*uint64(st.Bsize) > 8<<20 {
				t.Fatalf("work dir is not an 8 MiB tmpfs: type %#x, %d bytes", st.Type, st.Blocks*uint64(st.Bsize))
			}
			if fi, err := os.Stat(filepath.Join(h.WorkDir(), target)); err == nil && fi.Size() > 8<<20 {
				t.Fatalf("%s grew to %d bytes", target, fi.Size())
			}
			if err := h.Cleanup(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(h.WorkDir()); !os.IsNotExist(err) {
				t.Fatalf("work dir (a mount) survived cleanup: %v", err)
			}
		})
	}
	// Positive control: within the quota the write succeeds.
	res, out, errOut, _ := run(t, e, Spec{ID: "quota-ok", Command: []string{"sh", "-c", "dd if=/dev/zero of=small bs=1M count=4 2>/dev/null && echo wrote"}})
	if res.ExitCode != 0 || out != "wrote\n" {
		t.Fatalf("4 MiB into an 8 MiB quota: %+v %q %q", res, out, errOut)
	}
}

// Another job's work dir mount does not live on in a job's namespace.
func TestProcessOtherWorkDirsUnmounted(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	var out syncBuffer
	a, err := e.Start(context.Background(), Spec{ID: "mnt-a", Command: []string{"sh", "-c", "echo ready; exec sleep 3600"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Cleanup()
	out.waitFor(t, "ready", 10*time.Second)
	res, got, _, h := run(t, e, Spec{ID: "mnt-b", Command: []string{"cat", "/proc/self/mountinfo"}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(got, " "+h.WorkDir()+" ") {
		t.Fatalf("job b's own work dir is not a mount in its namespace:\n%s", got)
	}
	if strings.Contains(got, " "+a.WorkDir()+" ") {
		t.Fatalf("job a's work dir is mounted in job b's namespace:\n%s", got)
	}
	_ = a.Stop(0)
}

// Setting up jobs never leaves the daemon's main thread (what /proc/self
// shows) in a job's namespaces or cgroups.
func TestProcessDaemonKeepsItsNamespaces(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	self := func() string {
		var b strings.Builder
		for _, ns := range []string{"net", "mnt", "ipc"} {
			l, err := os.Readlink("/proc/self/ns/" + ns)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(l + " ")
		}
		cg, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		return b.String() + string(cg)
	}
	before := self()
	for i := 0; i < 8; i++ {
		res, _, _, h := run(t, e, Spec{ID: "main-" + strconv.Itoa(i), Command: []string{"true"}})
		if res.ExitCode != 0 {
			t.Fatalf("%+v", res)
		}
		if err := h.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if after := self(); after != before {
			t.Fatalf("after job %d the main thread moved:\nbefore %s\nafter  %s", i, before, after)
		}
	}
}

// A job cannot read the daemon's command line nor another tenant's through
// /proc (issue 22): its /proc shows its own processes only.
func TestProcessJobCannotSeeOtherProcesses(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	if !procPerMount() {
		t.Skip("needs Linux 5.8 for a per-job /proc with hidepid")
	}
	mark := uniqueMarker(t)
	var out syncBuffer
	a, err := e.Start(context.Background(), Spec{ID: "proc-a", Command: []string{helperBin, "sleep", "1h", mark}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Cleanup()
	defer a.Stop(0)
	waitProcs(t, mark, 1, 10*time.Second)
	other := procsWith(t, mark)[0]
	script := "cat /proc/" + strconv.Itoa(os.Getpid()) + "/cmdline; cat /proc/" + strconv.Itoa(other) +
		"/cmdline; echo; cat /proc/self/cmdline | tr '\\0' ' '; echo; ls /proc | grep -c '^[0-9]'"
	res, got, errOut, _ := run(t, e, Spec{ID: "proc-b", Command: []string{"sh", "-c", script}})
	if strings.Contains(got, mark) || strings.Contains(got, ".test") {
		t.Fatalf("a job read the daemon's or another tenant's command line: %q", got)
	}
	// Positive control: it sees itself, and little else.
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if res.Err != nil || !strings.Contains(got, "cat /proc/self/cmdline") || len(lines) == 0 {
		t.Fatalf("%+v %q %q", res, got, errOut)
	}
	if n, _ := strconv.Atoi(lines[len(lines)-1]); n == 0 || n > 5 {
		t.Fatalf("job sees %d processes in /proc: %q", n, got)
	}
}

// A setuid-root binary runs as the job's uid: jobs run with no_new_privs
// (issue 22).
func TestProcessSetuidDoesNotElevate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a setuid-root binary and a job uid other than the test's")
	}
	e := newTestExecutor(t, ProcessOptions{})
	if e.uids == nil {
		t.Fatalf("root but no job uids: %s", e.Limits())
	}
	dir := traversableTempDir(t)
	suid := filepath.Join(dir, "suid-helper")
	b, err := os.ReadFile(helperBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(suid, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Flags&unix.ST_NOSUID != 0 {
		t.Skip(dir + " is mounted nosuid: setuid cannot be tested there")
	}
	res, got, errOut, _ := run(t, e, Spec{ID: "suid", Command: []string{suid, "cat", "/proc/self/status"}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q", res, errOut)
	}
	var uids []string
	for _, l := range strings.Split(got, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "Uid:" {
			uids = f[1:]
		}
	}
	if len(uids) != 4 || uids[0] == "0" || uids[1] != uids[0] || uids[2] != uids[0] {
		t.Fatalf("setuid-root binary ran with uids (real, effective, saved, fs) %v", uids)
	}
	if !strings.Contains(got, "NoNewPrivs:\t1") {
		t.Fatalf("no no_new_privs: %q", got)
	}
}

// TestNetNamespaceReusedOnlyWhenEmpty: a job's network namespace serves
// the next job once nothing of it is left, and a job that leaves a socket
// behind (a TIME_WAIT entry, which outlives its process) passes nothing
// on: the next job gets a fresh namespace with no trace of it.
func TestNetNamespaceReusedOnlyWhenEmpty(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	netns := func(id string, args ...string) (ns string, tw string) {
		t.Helper()
		res, out, _, _ := run(t, e, Spec{ID: id, Command: append([]string{helperBin, "netns"}, args...)})
		f := strings.Fields(out)
		if res.ExitCode != 0 || len(f) != 3 || f[1] != "tw" {
			t.Fatalf("%s: %+v %q", id, res, out)
		}
		return f[0], f[2]
	}
	first, _ := netns("net-first")
	second, tw := netns("net-second")
	if second != first || tw != "0" {
		t.Fatalf("the second job's network namespace is %s (tw %s), want the first's, %s, reused", second, tw, first)
	}
	dirty, tw := netns("net-dirty", "timewait")
	if dirty != first || tw != "1" {
		t.Fatalf("the TIME_WAIT job ran in %s with tw %s, want %s with tw 1", dirty, tw, first)
	}
	after, tw := netns("net-after")
	if after == dirty || tw != "0" {
		t.Fatalf("the job after one that left a TIME_WAIT entry runs in %s with tw %s: want a fresh namespace, with none", after, tw)
	}
}

// spares lists the spare mount points in a work root.
func spares(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), spareMountPrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestWorkDirMountPointReused: an ended job's work dir, once its tmpfs is
// unmounted, is kept as the mount point of the next job's: the next job
// finds nothing of the first's, and the spare is the daemon's, empty and
// 0700 while it waits.
func TestWorkDirMountPointReused(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	if e.points == nil {
		t.Fatalf("no spare mount points with a work dir quota: %s", e.Limits())
	}
	res, out, errOut, h := run(t, e, Spec{ID: "mp-a", Command: []string{"sh", "-c", "echo secret > secret && echo wrote"}})
	if res.ExitCode != 0 || out != "wrote\n" {
		t.Fatalf("first job: %+v %q %q", res, out, errOut)
	}
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.WorkDir()); !os.IsNotExist(err) {
		t.Fatalf("work dir survived cleanup: %v", err)
	}
	kept := spares(t, e.Root())
	if len(kept) != 1 {
		t.Fatalf("spare mount points after one job: %v", kept)
	}
	spare := filepath.Join(e.Root(), kept[0])
	fi, err := os.Stat(spare)
	if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 || !emptyDir(spare) {
		t.Fatalf("spare %s: %v %v (want an empty dir of root's, 0700)", spare, fi.Mode(), err)
	}
	res, out, errOut, h = run(t, e, Spec{ID: "mp-b", Command: []string{"sh", "-c", "ls -A; cat secret 2>/dev/null || echo none"}})
	if res.ExitCode != 0 || out != "checkpoint\noutputs\ntmp\nnone\n" {
		t.Fatalf("second job's work dir: %+v %q %q", res, out, errOut)
	}
	if left := spares(t, e.Root()); len(left) != 0 {
		t.Fatalf("the second job took no spare: %v", left)
	}
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := spares(t, e.Root()); len(left) != 1 {
		t.Fatalf("spares after the second job: %v", left)
	}
}

// TestExecutorCloseGivesBackItsSpares: Close removes the executor's spare
// mount points and frees its idle network namespaces; a job ending after
// it leaves no spare behind.
func TestExecutorCloseGivesBackItsSpares(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	idle := func() int {
		if e.sb.nets == nil {
			return 0
		}
		e.sb.nets.mu.Lock()
		defer e.sb.nets.mu.Unlock()
		return len(e.sb.nets.idle)
	}
	var out syncBuffer
	running, err := e.Start(context.Background(), Spec{ID: "close-b", Command: []string{"sh", "-c", "echo up; exec sleep 3600"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "up", 10*time.Second)
	_, _, _, h := run(t, e, Spec{ID: "close-a", Command: []string{"true"}})
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if n := len(spares(t, e.Root())); n != 1 || idle() != 1 {
		t.Fatalf("after a job: %d spares, %d idle network namespaces; want 1 and 1", n, idle())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if left := spares(t, e.Root()); len(left) != 0 || idle() != 0 {
		t.Fatalf("after Close: spares %v, %d idle network namespaces", left, idle())
	}
	// The job running at Close runs on, and leaves nothing behind.
	_ = running.Stop(0)
	running.Wait()
	if err := running.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := spares(t, e.Root()); len(left) != 0 || idle() != 0 {
		t.Fatalf("a job ending after Close left spares %v, %d idle network namespaces", left, idle())
	}
	if _, err := os.Stat(running.WorkDir()); !os.IsNotExist(err) {
		t.Fatalf("its work dir: %v", err)
	}
}

// TestSpareMountPointOnlyAsMade: a directory is kept as a spare mount
// point only when it is empty, the daemon's and 0700; spares an earlier
// daemon left are removed.
func TestSpareMountPointOnlyAsMade(t *testing.T) {
	root := t.TempDir()
	left := filepath.Join(root, spareMountPrefix+"7")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	p := newMountPoints(root)
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("an earlier daemon's spare survived: %v", err)
	}
	full := filepath.Join(root, "full")
	if err := os.Mkdir(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{full, open, filepath.Join(t.TempDir(), "elsewhere")} {
		if p.keep(d) {
			t.Errorf("%s kept as a spare", d)
		}
	}
	if _, err := os.Stat(filepath.Join(full, "f")); err != nil {
		t.Fatalf("a refused dir was changed: %v", err)
	}
	made := filepath.Join(root, "made")
	if err := os.Mkdir(made, 0o700); err != nil {
		t.Fatal(err)
	}
	if !p.keep(made) {
		t.Fatal("an empty 0700 dir of the daemon's was not kept")
	}
	// A spare never replaces an existing dir.
	if err := os.Mkdir(full+"2", 0o700); err != nil {
		t.Fatal(err)
	}
	if p.take(full + "2") {
		t.Fatal("a spare was renamed over an existing dir")
	}
	if !p.take(filepath.Join(root, "job")) {
		t.Fatal("the spare was lost when a take was refused")
	}
}

// TestSampleGroupReadsTheJobsNamespace: a job's telemetry reads the
// processes of its PID namespace from its init's descendants, a reparented
// grandchild included, and finds exactly the processes a scan of every
// process on the host finds in its group.
func TestSampleGroupReadsTheJobsNamespace(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	if !e.sb.pidns {
		t.Skip("this host gives jobs no PID namespace: " + e.sb.pidWhy)
	}
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "ns-sample", Command: []string{"sh", "-c", helperBin + " daemonize ns-sample-mark & wait"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(0); h.Wait(); _ = h.Cleanup() }()
	out.waitFor(t, "ready", 10*time.Second)
	pgid := h.(*processHandle).Pid()
	live := func(pids []int) map[int]bool {
		m := map[int]bool{}
		for _, p := range pids {
			if st, err := readProcStat(p); err == nil && st.pgrp == pgid && st.state != 'Z' {
				m[p] = true
			}
		}
		return m
	}
	walked, ok := nsProcesses(pgid)
	if !ok {
		t.Fatal("the job's init was not read as the first process of its namespace")
	}
	all, err := listPids()
	if err != nil {
		t.Fatal(err)
	}
	got, want := live(walked), live(all)
	if len(want) < 4 || len(got) != len(want) {
		t.Fatalf("processes of the job's group: walked %v, scanned %v (want the init, sh, the helper under it and the helper's reparented sleeper)", got, want)
	}
	for p := range want {
		if !got[p] {
			t.Fatalf("process %d of the group not walked: %v against %v", p, got, want)
		}
	}
	if _, ok := nsProcesses(os.Getpid()); ok {
		t.Fatal("the test process read as a namespace's init")
	}
	if _, _, err := SampleGroup(pgid); err != nil {
		t.Fatal(err)
	}
}
