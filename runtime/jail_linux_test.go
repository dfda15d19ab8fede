package runtime

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

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
