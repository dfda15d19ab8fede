package runtime

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// execOut runs req in h and returns its exit code and output.
func execOut(t *testing.T, h Handle, stdin string, cmd ...string) (int, string, string, error) {
	t.Helper()
	x, ok := h.(Execer)
	if !ok {
		t.Fatalf("handle %T is not an Execer", h)
	}
	var out, errb syncBuffer
	req := ExecRequest{Command: cmd, Stdout: &out, Stderr: &errb}
	if stdin != "" {
		req.Stdin = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := x.Exec(ctx, req)
	return code, out.String(), errb.String(), err
}

// freePort is a loopback port nothing on the host listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestExecRunsInsideTheJob: a command run in a process job (Exec) has the
// job's uid, namespaces, cgroup, no_new_privs, environment and work dir;
// its input, output and exit status pass through; it reaches the job's
// private loopback.
func TestExecRunsInsideTheJob(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	port := freePort(t)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "exec-in", GPUs: []int{3}, Env: map[string]string{"MODEL": "m1"},
		Command: []string{helperBin, "serve", strconv.Itoa(port)}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	out.waitFor(t, "listening", 10*time.Second)
	ph := h.(*processHandle)

	code, got, _, err := execOut(t, h, "", helperBin, "id")
	if err != nil || code != 0 {
		t.Fatalf("exec id: code %d err %v", code, err)
	}
	want := "uid " + strconv.Itoa(ph.uid) + " gid " + strconv.Itoa(ph.uid) + "\n"
	if got != want || ph.uid == 0 {
		t.Fatalf("exec id printed %q, want %q (the job's uid, not root)", got, want)
	}

	// The job's namespaces and cgroup, not the daemon's.
	code, got, _, err = execOut(t, h, "", "sh", "-c", "readlink /proc/self/ns/net /proc/self/ns/mnt /proc/self/ns/ipc; cat /proc/self/cgroup; grep NoNewPrivs /proc/self/status; pwd")
	if err != nil || code != 0 {
		t.Fatalf("exec sh: code %d err %v: %s", code, err, got)
	}
	var wantNS []string
	for _, ns := range []string{"net", "mnt", "ipc"} {
		l, err := os.Readlink("/proc/" + strconv.Itoa(ph.pgid) + "/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		self, _ := os.Readlink("/proc/self/ns/" + ns)
		if l == self {
			t.Fatalf("the job shares the test's %s namespace", ns)
		}
		wantNS = append(wantNS, l)
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(ph.pgid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want = strings.Join(wantNS, "\n") + "\n" + string(cg) + "NoNewPrivs:\t1\n" + h.WorkDir() + "\n"
	if got != want {
		t.Fatalf("exec in the job saw\n%s\nwant (the job's namespaces, cgroup, no_new_privs, work dir)\n%s", got, want)
	}

	// Its environment: the job's, CUDA_VISIBLE_DEVICES included.
	_, got, _, _ = execOut(t, h, "", helperBin, "env")
	for _, kv := range []string{"CUDA_VISIBLE_DEVICES=3", "MODEL=m1", "GPUMESH_JOB_ID=exec-in", "HOME=" + h.WorkDir()} {
		if !strings.Contains(got, kv+"\n") {
			t.Errorf("exec env lacks %s:\n%s", kv, got)
		}
	}

	// The job's private loopback, which the host does not reach.
	code, got, _, _ = execOut(t, h, "", helperBin, "dial", "127.0.0.1:"+strconv.Itoa(port))
	if code != 0 || got != "connected\n" {
		t.Fatalf("exec dial the job's port: code %d, %q", code, got)
	}

	// Input, stderr and exit status pass through.
	code, got, _, _ = execOut(t, h, "line one\nline two\n", helperBin, "copy")
	if code != 0 || got != "line one\nline two\neof\n" {
		t.Fatalf("exec copy: code %d, %q", code, got)
	}
	code, _, gotErr, _ := execOut(t, h, "", helperBin, "stderr", "to stderr")
	if code != 0 || gotErr != "to stderr\n" {
		t.Fatalf("exec stderr: code %d, %q", code, gotErr)
	}
	if code, _, _, err := execOut(t, h, "", helperBin, "exit", "7"); code != 7 || err != nil {
		t.Fatalf("exec exit 7: code %d err %v", code, err)
	}
	if code, _, _, err := execOut(t, h, "", "no-such-command-here"); code != ExecCommandNotFound || err == nil {
		t.Fatalf("exec of a missing command: code %d err %v, want %d and an error", code, err, ExecCommandNotFound)
	}
	if code, _, _, err := execOut(t, h, ""); code != -1 || err == nil {
		t.Fatalf("exec of no command: code %d err %v", code, err)
	}
	// Only the TTY asks for a terminal.
	if _, got, _, _ := execOut(t, h, "", helperBin, "isatty"); got != "notty\n" {
		t.Fatalf("exec isatty without a terminal: %q", got)
	}
}

// TestExecTTY: with TTY the command runs on a terminal of the asked size,
// with the input typed into it.
func TestExecTTY(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "exec-tty", Command: []string{helperBin, "sleep", "1h"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	var tty syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := h.(Execer).Exec(ctx, ExecRequest{Command: []string{"sh", "-c", "stty size; test -t 0 && echo on-a-tty; read x; echo got $x"},
		Stdin: strings.NewReader("typed\n"), Stdout: &tty, TTY: true, Size: WinSize{Rows: 33, Cols: 101}})
	if err != nil || code != 0 {
		t.Fatalf("exec on a terminal: code %d err %v: %q", code, err, tty.String())
	}
	got := strings.ReplaceAll(tty.String(), "\r\n", "\n")
	for _, want := range []string{"33 101\n", "on-a-tty\n", "got typed\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output %q lacks %q", got, want)
		}
	}
}

// TestExecEndsWithTheJob: a command still running when the job ends is
// killed, and no command starts in an ended job.
func TestExecEndsWithTheJob(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "exec-end", Command: []string{helperBin, "sleep", "1h"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Cleanup() }()
	marker := uniqueMarker(t)
	type res struct {
		code int
		err  error
	}
	done := make(chan res, 1)
	go func() {
		code, err := h.(Execer).Exec(context.Background(), ExecRequest{Command: []string{helperBin, "sleep", "1h", marker}})
		done <- res{code, err}
	}()
	waitProcs(t, marker, 1, 10*time.Second)
	if err := h.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		// SIGTERM with the job's processes, or SIGKILL after.
		if (r.code != 128+15 && r.code != 128+9) || r.err != nil {
			t.Fatalf("the exec'd command ended with %d (%v), want 143 or 137: killed with the job", r.code, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the exec'd command outlived its job")
	}
	if left := procsWith(t, marker); len(left) > 0 {
		t.Fatalf("processes of the exec'd command left: %v", left)
	}
	if code, _, _, err := execOut(t, h, "", helperBin, "id"); err == nil {
		t.Fatalf("exec in an ended job ran (code %d)", code)
	}
}

// TestExecCancel: ending the caller's context kills the command.
func TestExecCancel(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "exec-cancel", Command: []string{helperBin, "sleep", "1h"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	marker := uniqueMarker(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		code, _ := h.(Execer).Exec(ctx, ExecRequest{Command: []string{helperBin, "sleep", "1h", marker}})
		done <- code
	}()
	waitProcs(t, marker, 1, 10*time.Second)
	cancel()
	select {
	case code := <-done:
		if code != 137 {
			t.Fatalf("cancelled exec ended with %d, want 137", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a cancelled exec kept running")
	}
	if st := h.(*processHandle); len(groupMembers(t, st.pgid)) == 0 {
		t.Fatal("cancelling the exec killed the job")
	}
}

// TestForwardReachesOnlyTheJobsOwnNetwork: Forward connects to a port of
// the job's own loopback; a job on the host's network is refused (its
// 127.0.0.1 is the provider's).
func TestForwardReachesOnlyTheJobsOwnNetwork(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	port := freePort(t)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "fwd", Command: []string{helperBin, "serve", strconv.Itoa(port)}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	out.waitFor(t, "listening", 10*time.Second)
	c, err := h.(Forwarder).Forward(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.HasPrefix(line, "hello from ") {
		t.Fatalf("forwarded connection read %q, %v", line, err)
	}
	if _, err := h.(Forwarder).Forward(context.Background(), 70000); err == nil {
		t.Fatal("Forward to port 70000 succeeded")
	}

	hostNet := newTestExecutor(t, ProcessOptions{AllowNetwork: true})
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	h2, err := hostNet.Start(context.Background(), Spec{ID: "fwd-host", Command: []string{helperBin, "sleep", "1h"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h2.Stop(time.Second); h2.Wait(); _ = h2.Cleanup() }()
	if c, err := h2.(Forwarder).Forward(context.Background(), hl.Addr().(*net.TCPAddr).Port); !errors.Is(err, ErrSharedNetwork) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Forward in a job on the host's network: %v, want ErrSharedNetwork", err)
	}
}

// TestDockerExec: a command run in a container job (Exec) runs as the
// job's uid in /work with the container's environment; input, output and
// exit status pass through; a terminal when asked for.
func TestDockerExec(t *testing.T) {
	e := dockerExecutor(t)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "d-exec", Image: testImage, Env: map[string]string{"MODEL": "m2"},
		Command: []string{"/jobhelper", "sleep", "1h"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	dh := h.(*dockerHandle)
	code, got, _, err := execOut(t, h, "", "/jobhelper", "id")
	want := "uid " + strconv.Itoa(dh.uid) + " gid " + strconv.Itoa(dh.uid) + "\n"
	if err != nil || code != 0 || got != want {
		t.Fatalf("docker exec id: code %d err %v: %q, want %q", code, err, got, want)
	}
	_, got, _, _ = execOut(t, h, "", "/jobhelper", "env")
	for _, kv := range []string{"MODEL=m2", "HOME=/work", "GPUMESH_JOB_ID=d-exec"} {
		if !strings.Contains(got, kv+"\n") {
			t.Errorf("docker exec env lacks %s:\n%s", kv, got)
		}
	}
	code, got, _, _ = execOut(t, h, "a\nb\n", "/jobhelper", "copy")
	if code != 0 || got != "a\nb\neof\n" {
		t.Fatalf("docker exec copy: code %d, %q", code, got)
	}
	code, _, gotErr, _ := execOut(t, h, "", "/jobhelper", "stderr", "e")
	if code != 0 || gotErr != "e\n" {
		t.Fatalf("docker exec stderr: code %d, %q", code, gotErr)
	}
	if code, _, _, err := execOut(t, h, "", "/jobhelper", "exit", "9"); code != 9 || err != nil {
		t.Fatalf("docker exec exit 9: code %d err %v", code, err)
	}
	if code, _, _, _ := execOut(t, h, "", "/no-such-command"); code != ExecCommandNotFound && code != ExecCannotRun {
		t.Fatalf("docker exec of a missing command: code %d", code)
	}
	var tty syncBuffer
	code, err = h.(Execer).Exec(context.Background(), ExecRequest{Command: []string{"/jobhelper", "isatty"}, Stdout: &tty, TTY: true})
	if err != nil || code != 0 || strings.TrimSpace(tty.String()) != "tty" {
		t.Fatalf("docker exec with a terminal: code %d err %v: %q", code, err, tty.String())
	}
	_ = h.Stop(time.Second)
	h.Wait()
	if code, _, _, err := execOut(t, h, "", "/jobhelper", "id"); err == nil {
		t.Fatalf("docker exec in an ended job ran (code %d)", code)
	}
}

// TestDockerForward: Forward reaches a port of a container's own loopback
// (no network: loopback only).
func TestDockerForward(t *testing.T) {
	e := dockerExecutor(t)
	if os.Geteuid() != 0 {
		t.Skip("entering a container's network namespace needs root")
	}
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "d-fwd", Image: testImage, Command: []string{"/jobhelper", "serve", "8000"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	out.waitFor(t, "listening", 15*time.Second)
	c, err := h.(Forwarder).Forward(context.Background(), 8000)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.HasPrefix(line, "hello from ") {
		t.Fatalf("forwarded connection to the container read %q, %v", line, err)
	}
}
