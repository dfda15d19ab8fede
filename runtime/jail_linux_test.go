package runtime

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"regexp"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// needJail skips a test of the job's PID namespace and seccomp filter where
// the host cannot give them (and says why).
func needJail(t *testing.T, e *ProcessExecutor) {
	t.Helper()
	needSandbox(t, e)
	if !e.sb.pidns || !e.sb.seccomp {
		t.Skip("this host gives jobs no PID namespace or seccomp filter: " + e.Limits())
	}
}

// deniedCalls are the calls the filter refuses with EPERM, as jobhelper
// syscalls names them (issue 22); clone3 fails with ENOSYS.
var deniedCalls = []string{
	"clone-newuser", "clone-newnet", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
	"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "fanotify_init",
	"ptrace-attach", "ptrace-seize", "process_vm_readv", "process_vm_writev",
	"name_to_handle_at", "open_by_handle_at",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"acct", "quotactl", "quotactl_fd", "syslog", "lookup_dcookie", "vhangup",
}

// checkSyscalls checks jobhelper syscalls' report: every denied call
// failed as the filter fails it, and what a job needs (a child, threads,
// tracing its own child) worked.
func checkSyscalls(t *testing.T, out string) {
	t.Helper()
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	want := map[string]string{"clone3": "ENOSYS", "fork": "ok", "threads": "ok", "ptrace-traceme": "ok"}
	for _, name := range deniedCalls {
		want[name] = "EPERM"
	}
	if goruntime.GOARCH == "amd64" {
		want["iopl"], want["ioperm"] = "EPERM", "EPERM"
	}
	var bad []string
	for name, w := range want {
		if got[name] != w {
			bad = append(bad, name+": "+got[name]+", want "+w)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("under the job's filter:\n%s\nfull report:\n%s", strings.Join(bad, "\n"), out)
	}
}

// A hostile job, as its own uid, cannot make a user namespace (unshare -U,
// unshare -r), mount, or reach the kernel's keyrings, bpf, perf, other
// processes' memory, file handles or the host's clocks; an ordinary job (a
// shell, fork and exec, threads, a Go program, a debugger tracing its own
// child) still runs (issue 22).
func TestProcessJobSeccomp(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needJail(t, e)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs util-linux's unshare")
	}
	script := `unshare -U true; echo "unshare -U: $?"; unshare -r true; echo "unshare -r: $?"
mkdir -p m; mount -t tmpfs none m; echo "mount: $?"
` + helperBin + ` syscalls > report; echo "report: $?"; echo pipeline | tr a-z A-Z`
	res, out, errOut, h := run(t, e, Spec{ID: "seccomp", Command: []string{"sh", "-c", script}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q %q", res, out, errOut)
	}
	for _, want := range []string{"unshare -U: 1\n", "unshare -r: 1\n", "report: 0\n", "PIPELINE\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q: %q", want, out)
		}
	}
	if n := strings.Count(errOut, "unshare failed: Operation not permitted"); n != 2 {
		t.Errorf("unshare -U and -r: %d refusals in stderr, want 2: %q", n, errOut)
	}
	if strings.Contains(out, "mount: 0\n") {
		t.Errorf("a job mounted a tmpfs: %q", out)
	}
	report, err := os.ReadFile(h.WorkDir() + "/report")
	if err != nil {
		t.Fatal(err)
	}
	checkSyscalls(t, string(report))
	if !strings.Contains(e.Limits(), "seccomp: namespaces, mounts") {
		t.Errorf("limits do not show the filter: %s", e.Limits())
	}
}

// The filter holds for what even root could otherwise do: a command
// started through the job's init without dropping its uid (not something
// the executor does) is refused every denied call.
func TestJobInitFilterHoldsForRoot(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needJail(t, e)
	var out syncBuffer
	cmd := &exec.Cmd{Path: helperBin, Args: []string{helperBin, "syscalls"}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: traversableTempDir(t), Stdout: &out, Stderr: &out, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	ji, err := spawn(cmd, nil, e.sb, cmd.Dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the job's init: %v: %s", err, out.String())
	}
	if ws := ji.exitStatus(cmd.ProcessState.Sys().(syscall.WaitStatus)); ws.ExitStatus() != 0 {
		t.Fatalf("jobhelper syscalls as root: %v: %s", ws, out.String())
	}
	checkSyscalls(t, out.String())
}

// A job sees only its own processes, numbered in its own namespace: not
// its init (PID 1, which the job cannot trace), nor the daemon, which it can
// neither signal nor find in /proc (issue 22).
func TestProcessJobOwnPIDNamespace(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needJail(t, e)
	self := strconv.Itoa(os.Getpid())
	script := `echo "shell $$"; echo "procs $(ls /proc | grep -E '^[0-9]+$' | tr '\n' ' ')"
kill -9 ` + self + ` 2>&1; ls /proc/` + self + ` 2>&1; kill -0 $$ && echo "self signalled"`
	res, out, errOut, h := run(t, e, Spec{ID: "pidns", Command: []string{"sh", "-c", script}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q %q", res, out, errOut)
	}
	ji := h.(*processHandle).init
	if ji == nil {
		t.Fatal("the job has no init")
	}
	shell := strconv.Itoa(ji.pid)
	if !strings.Contains(out, "shell "+shell+"\n") || !strings.Contains(out, "self signalled\n") {
		t.Fatalf("the job's shell is not its init's child %s: %q", shell, out)
	}
	procs := regexp.MustCompile(`procs ([0-9 ]*)\n`).FindStringSubmatch(out)
	if procs == nil {
		t.Fatalf("no process list: %q", out)
	}
	pids := strings.Fields(procs[1])
	for _, p := range pids {
		// Its init's threads take the first few numbers.
		if n, _ := strconv.Atoi(p); n <= 1 || n > 64 {
			t.Fatalf("the job sees process %s, not one of its own few: %q", p, out)
		}
	}
	if !slices.Contains(pids, shell) {
		t.Fatalf("the job's /proc lists %v, not its shell %s", pids, shell)
	}
	if !strings.Contains(out, "No such process") || !strings.Contains(out, "No such file") {
		t.Fatalf("the daemon (pid %s) is visible to the job: %q", self, out)
	}
	if !strings.Contains(e.Limits(), "own PID namespace") {
		t.Fatalf("limits do not show the PID namespace: %s", e.Limits())
	}
}

// When a job's init exits, the kernel ends every process left in its
// namespace before the init can be reaped: an orphan the job left behind
// dies with it, with no sweep of the daemon's (issue 22).
func TestJobOrphansDieWithTheirInit(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needJail(t, e)
	mark := uniqueMarker(t)
	t.Cleanup(func() {
		for _, p := range procsWith(t, mark) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	uid, err := e.uids.get()
	if err != nil {
		t.Fatal(err)
	}
	defer e.uids.put(uid)
	dir := traversableTempDir(t)
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	// jobhelper spawn starts a sleeper and exits: the sleeper is an
	// orphan; then the shell exits too.
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", helperBin + " spawn " + mark + " && echo spawned"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir, Stdout: &out, Stderr: &out,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}}
	ji, err := spawn(cmd, nil, e.sb, dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The sleeper holds the output pipe: Wait would wait for it.
	st, err := cmd.Process.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if ws := ji.exitStatus(st.Sys().(syscall.WaitStatus)); ws.ExitStatus() != 0 {
		t.Fatalf("job: %v", ws)
	}
	if left := procsWith(t, mark); len(left) > 0 {
		t.Fatalf("the job's orphan outlived its init: %v", left)
	}
	_ = cmd.Wait()
	if !strings.Contains(out.String(), "spawned") {
		t.Fatalf("the job did not start its orphan: %q", out.String())
	}
}

// A command run in a job (Exec) is in the job's PID namespace and under
// its filter: its /proc shows the job's processes, its init's numbers.
func TestExecJoinsTheJobsPIDNamespaceAndFilter(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needJail(t, e)
	mark := uniqueMarker(t)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "exec-pidns", Command: []string{helperBin, "sleep", "1h", mark}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	ph := h.(*processHandle)
	if ph.init == nil {
		t.Fatal("the job has no init")
	}
	job := strconv.Itoa(ph.init.pid)
	code, got, errOut, err := execOut(t, h, "", "sh", "-c", "tr '\\0' ' ' < /proc/"+job+"/cmdline; echo; readlink /proc/self/ns/pid")
	if err != nil || code != 0 {
		t.Fatalf("exec: code %d err %v: %q", code, err, errOut)
	}
	lines := strings.Split(got, "\n")
	if !strings.Contains(lines[0], mark) {
		t.Fatalf("the exec'd shell's /proc/%s is not the job's command: %q", job, got)
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(ph.pgid) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 2 || lines[1] != ns {
		t.Fatalf("exec'd in PID namespace %q, the job's is %q", got, ns)
	}
	code, _, errOut, err = execOut(t, h, "", "unshare", "-U", "true")
	if code == 0 || err != nil || !strings.Contains(errOut, "Operation not permitted") {
		t.Fatalf("exec unshare -U: code %d err %v: %q", code, err, errOut)
	}
	// An exec that cannot run is still told apart from a missing one.
	if code, _, _, err := execOut(t, h, "", "/proc/self/cwd"); code != ExecCannotRun || err == nil {
		t.Fatalf("exec of a directory: code %d err %v", code, err)
	}
}

// Where the host cannot give them, the executor's limits say which of the
// PID namespace and the filter jobs run without, and why.
func TestSandboxDescribesWhatItLacks(t *testing.T) {
	s := sandbox{pidWhy: "no pid ns here", seccompWhy: "no filter here"}
	d := s.describe()
	for _, want := range []string{"PID namespace: none (no pid ns here)", "seccomp: none (no filter here)"} {
		if !strings.Contains(d, want) {
			t.Errorf("describe lacks %q: %s", want, d)
		}
	}
	s = sandbox{pidns: true, seccomp: true}
	if d := s.describe(); !strings.Contains(d, "own PID namespace") || !strings.Contains(d, seccompSummary) || strings.Contains(d, "PID namespace: none") {
		t.Errorf("describe with both: %s", d)
	}
}

// The filter, run on seccomp_data as the kernel lays it out: each listed
// call is refused, clone only with a namespace flag, ptrace only to
// attach, clone3 with ENOSYS; another ABI is killed.
func TestSeccompProgram(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Skip(err.Error())
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, in := range prog {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter holds instructions the BPF package cannot decode")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	// The VM loads words big-endian; the filter reads each 32-bit field of
	// the (little-endian) struct at its offset, so each is stored whole.
	eval := func(arch, nr uint32, arg0 uint64) uint32 {
		data := make([]byte, 64)
		binary.BigEndian.PutUint32(data[0:], nr)
		binary.BigEndian.PutUint32(data[4:], arch)
		binary.BigEndian.PutUint32(data[16:], uint32(arg0))
		binary.BigEndian.PutUint32(data[20:], uint32(arg0>>32))
		n, err := vm.Run(data)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(n)
	}
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		kill   = unix.SECCOMP_RET_KILL_PROCESS
	)
	arch := uint32(seccompAuditArch)
	denied := map[string]uintptr{
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT,
		"setns": unix.SYS_SETNS, "unshare": unix.SYS_UNSHARE, "keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY,
		"request_key": unix.SYS_REQUEST_KEY, "bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN,
		"process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
		"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
		"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		"userfaultfd": unix.SYS_USERFAULTFD, "fanotify_init": unix.SYS_FANOTIFY_INIT,
		"swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT,
		"settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME,
		"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "adjtimex": unix.SYS_ADJTIMEX, "acct": unix.SYS_ACCT,
		"quotactl": unix.SYS_QUOTACTL, "syslog": unix.SYS_SYSLOG, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE,
		"vhangup": unix.SYS_VHANGUP, "fsopen": unix.SYS_FSOPEN, "fsmount": unix.SYS_FSMOUNT,
		"move_mount": unix.SYS_MOVE_MOUNT, "fsconfig": unix.SYS_FSCONFIG, "fspick": unix.SYS_FSPICK,
		"open_tree": unix.SYS_OPEN_TREE, "mount_setattr": unix.SYS_MOUNT_SETATTR,
	}
	for name, nr := range denied {
		if got := eval(arch, uint32(nr), 0); got != eperm {
			t.Errorf("%s: %#x, want EPERM", name, got)
		}
	}
	for name, nr := range map[string]uintptr{"read": unix.SYS_READ, "write": unix.SYS_WRITE, "openat": unix.SYS_OPENAT,
		"execve": unix.SYS_EXECVE, "wait4": unix.SYS_WAIT4, "seccomp": unix.SYS_SECCOMP, "setuid": unix.SYS_SETUID} {
		if got := eval(arch, uint32(nr), 0); got != allow {
			t.Errorf("%s: %#x, want allowed", name, got)
		}
	}
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	for _, flags := range []uint64{uint64(unix.SIGCHLD), unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD), thread} {
		if got := eval(arch, unix.SYS_CLONE, flags); got != allow {
			t.Errorf("clone %#x: %#x, want allowed", flags, got)
		}
	}
	for _, ns := range []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
		unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP} {
		if got := eval(arch, unix.SYS_CLONE, ns|uint64(unix.SIGCHLD)); got != eperm {
			t.Errorf("clone with %#x: %#x, want EPERM", ns, got)
		}
	}
	if got := eval(arch, unix.SYS_CLONE3, 0); got != enosys {
		t.Errorf("clone3: %#x, want ENOSYS", got)
	}
	for req, want := range map[uint64]uint32{unix.PTRACE_TRACEME: allow, unix.PTRACE_PEEKDATA: allow, unix.PTRACE_CONT: allow,
		unix.PTRACE_ATTACH: eperm, unix.PTRACE_SEIZE: eperm} {
		if got := eval(arch, unix.SYS_PTRACE, req); got != want {
			t.Errorf("ptrace request %#x: %#x, want %#x", req, got, want)
		}
	}
	for _, other := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, unix.AUDIT_ARCH_X86_64 ^ unix.AUDIT_ARCH_AARCH64 ^ arch} {
		if got := eval(other, unix.SYS_READ, 0); got != kill {
			t.Errorf("a call of ABI %#x: %#x, want the process killed", other, got)
		}
	}
	if arch == unix.AUDIT_ARCH_X86_64 {
		if got := eval(arch, 0x40000000|unix.SYS_READ, 0); got != enosys {
			t.Errorf("an x32 call: %#x, want ENOSYS", got)
		}
	}
}
