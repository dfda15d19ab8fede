//go:build linux

package runtime

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// v1Freezer is a fresh cgroup v1 freezer cgroup holding cmd's process,
// frozen: a frozen process takes a SIGKILL only once it is thawed, so
// it stands in a process that the kernel is slow to let go. thaw thaws it.
func v1Freezer(t *testing.T, cmd *exec.Cmd) (thaw func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("freezing a process in a cgroup needs root")
	}
	root := filepath.Join(cgroupRoot, "freezer")
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		t.Skip("no cgroup v1 freezer hierarchy: ", err)
	}
	dir := filepath.Join(root, "gpumesh-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(cmd.Process.Pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skip("cannot create a freezer cgroup: ", err)
	}
	write := func(file, v string) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
			t.Fatalf("write %s: %v", file, err)
		}
	}
	thaw = func() { write("freezer.state", "THAWED") }
	t.Cleanup(func() {
		thaw()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.Remove(dir)
	})
	write("cgroup.procs", strconv.Itoa(cmd.Process.Pid))
	// The kernel answers FREEZING while a task has not stopped yet (a busy
	// host); each write of FROZEN tries again, in the write itself
	// (cgroup-v1/freezer-subsystem), so the loop waits on no clock.
	var state []byte
	for range 1000 {
		write("freezer.state", "FROZEN")
		if state, _ = os.ReadFile(filepath.Join(dir, "freezer.state")); strings.TrimSpace(string(state)) == "FROZEN" {
			return thaw
		}
	}
	t.Fatalf("freezer state %q after 1000 tries, want FROZEN", state)
	return thaw
}

// killAndWait returns once the killed process has exited, woken by its
// pidfd: not while SIGKILL cannot take it yet (frozen), at once when it
// can (thawed).
func TestKillAndWaitWaitsForExit(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	thaw := v1Freezer(t, cmd)
	pid := cmd.Process.Pid
	if killAndWait([]int{pid}, time.Now().Add(100*time.Millisecond)) {
		t.Fatal("killAndWait reported a frozen process gone")
	}
	if st, err := readProcStat(pid); err != nil || st.state == 'Z' {
		t.Fatalf("the frozen process died under SIGKILL (state %v, %v): the test cannot tell waiting from not", st, err)
	}
	done := make(chan bool, 1)
	go func() { done <- killAndWait([]int{pid}, time.Now().Add(time.Minute)) }()
	thaw()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("killAndWait gave up on a process that exited")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("killAndWait did not return once the thawed process died")
	}
	if st, err := readProcStat(pid); err == nil && st.state != 'Z' {
		t.Fatalf("killAndWait returned while the process is in state %c", st.state)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("process ended %v, want killed by SIGKILL", err)
	}
	// A pid that is gone (reaped) counts as exited.
	if !killAndWait([]int{pid}, time.Now().Add(time.Second)) {
		t.Fatal("killAndWait of a reaped pid")
	}
}

// unifiedMount is where a cgroup v2 hierarchy is mounted, or "".
func unifiedMount() string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

// waitUnpopulated returns when the cgroup's last process exits, woken by
// cgroup.events, and the cgroup can then be removed at once.
func TestWaitUnpopulated(t *testing.T) {
	mount := unifiedMount()
	if os.Geteuid() != 0 || mount == "" {
		t.Skip("needs root and a cgroup v2 hierarchy")
	}
	dir := filepath.Join(mount, "gpumesh-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skip("cannot create a cgroup v2 cgroup: ", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := waitUnpopulated(dir, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("an empty cgroup: %v", err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := waitUnpopulated(dir, time.Now().Add(100*time.Millisecond)); err == nil {
		t.Fatal("waitUnpopulated returned while the cgroup holds a process")
	}
	done := make(chan error, 1)
	go func() { done <- waitUnpopulated(dir, time.Now().Add(time.Minute)) }()
	_ = cmd.Process.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waitUnpopulated did not return once the cgroup's process died")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatalf("remove the emptied cgroup: %v", err)
	}
}

// A job cgroup that still holds a running process is removed by destroy
// (its process killed, its exit waited for), with nothing left behind, on
// whichever cgroup version the host has.
func TestCgroupDestroyKillsAndRemoves(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("job cgroups need root")
	}
	cg, why := detectCgroups("gpumesh-test-destroy-" + strconv.Itoa(os.Getpid()))
	if cg == nil {
		t.Skip("no cgroups: ", why)
	}
	t.Cleanup(func() {
		_ = os.Remove(cg.parent)
		for _, d := range cg.v1Extra {
			_ = os.Remove(d)
		}
	})
	j, err := cg.create("j"+strconv.Itoa(os.Getpid()), jobLimits{memoryMB: 64, pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dirs := []string{j.dir}
	for _, d := range j.v1Extra {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.destroy(); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s left: %v", d, err)
		}
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the cgroup's process ended %v, want killed", cmd.ProcessState)
	}
}
