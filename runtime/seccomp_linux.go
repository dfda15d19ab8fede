//go:build linux

package runtime

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// A process job, and every command run in one (Exec), runs under a seccomp
// filter that refuses the system calls a tenant has no use for and that
// reach past its sandbox into the kernel's shared state. Everything else is
// allowed. The job's init (package jobinit) installs it on itself, once
// /proc is mounted and its uid dropped, and the job inherits it across fork
// and exec; it
// cannot be lifted (no_new_privs, and seccomp itself is not denied: a
// further filter can only deny more).
//
// Refused with EPERM (the error an unprivileged caller gets anyway, so
// programs that probe for them already handle it):
//
//   - namespaces and mounts: mount, umount2, pivot_root, chroot, setns,
//     unshare, clone with any CLONE_NEW* flag (CLONE_NEWUSER above all: an
//     unprivileged user namespace is the usual door to the kernel's
//     root-only code), and the new mount API (fsopen, fsconfig, fsmount,
//     fspick, move_mount, open_tree, open_tree_attr, mount_setattr);
//   - the kernel keyring (keyctl, add_key, request_key), bpf,
//     perf_event_open, userfaultfd, fanotify_init;
//   - other processes' memory: ptrace PTRACE_ATTACH and PTRACE_SEIZE
//     (PTRACE_TRACEME, a debugger tracing its own children, stays),
//     process_vm_readv, process_vm_writev;
//   - file handles, which bypass path permissions: open_by_handle_at,
//     name_to_handle_at;
//   - the host itself: kexec_load, kexec_file_load, init_module,
//     finit_module, delete_module, swapon, swapoff, reboot, settimeofday,
//     clock_settime, clock_adjtime, adjtimex, acct, quotactl, quotactl_fd,
//     syslog, lookup_dcookie, vhangup, and on x86-64 iopl and ioperm.
//
// clone3 fails with ENOSYS instead: its flags live in memory a filter
// cannot read, and ENOSYS makes the C library fall back to clone, whose
// flags it can (Docker's default profile does the same). A system call of
// another ABI than the daemon's own (i386 on x86-64, arm32 on arm64) kills
// the process: the numbers below would not mean the same calls there; the
// x32 ABI on x86-64 fails with ENOSYS, as on a kernel built without it.

// seccompDenied are the system calls refused outright (EPERM); clone,
// clone3 and ptrace are judged by their arguments, below.
var seccompDenied = append([]uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_SETNS, unix.SYS_UNSHARE,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_OPEN_TREE_ATTR, unix.SYS_MOUNT_SETATTR,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_FANOTIFY_INIT,
	unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_SYSLOG,
	unix.SYS_LOOKUP_DCOOKIE, unix.SYS_VHANGUP,
}, seccompArchDenied...)

// cloneNamespaces are clone's flags that make new namespaces. CLONE_NEWTIME
// is not among them: clone's low byte is the exit signal, and a time
// namespace takes clone3 or unshare, both refused.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// seccompSummary is the filter in a few words, for the executor's Limits.
const seccompSummary = "seccomp: namespaces, mounts, keyrings, bpf, perf, ptrace attach, " +
	"other processes' memory, file handles, modules, kexec, swap, clocks and reboot refused"

// Offsets in struct seccomp_data: the call's number, its ABI, and the low
// 32 bits of its first argument (both ABIs here are little-endian).
const (
	seccompNR   = 0
	seccompArch = 4
	seccompArg0 = 16
)

// seccompProgram assembles the filter. It fails on an architecture it has
// no table for (seccompArch is 0 there).
func seccompProgram() ([]unix.SockFilter, error) {
	if seccompAuditArch == 0 {
		return nil, fmt.Errorf("no seccomp table for this architecture")
	}
	var a bpfAsm
	a.load(seccompArch)
	a.jumpIf(unix.BPF_JEQ, seccompAuditArch, "", "kill")
	a.load(seccompNR)
	if seccompX32Bit != 0 {
		a.jumpIf(unix.BPF_JSET, seccompX32Bit, "enosys", "")
	}
	a.jumpIf(unix.BPF_JEQ, unix.SYS_CLONE, "clone", "")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_PTRACE, "ptrace", "")
	a.jumpIf(unix.BPF_JEQ, unix.SYS_CLONE3, "enosys", "")
	for _, nr := range seccompDenied {
		a.jumpIf(unix.BPF_JEQ, uint32(nr), "eperm", "")
	}
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("clone")
	a.load(seccompArg0)
	a.jumpIf(unix.BPF_JSET, cloneNamespaces, "eperm", "")
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("ptrace")
	a.load(seccompArg0)
	a.jumpIf(unix.BPF_JEQ, unix.PTRACE_ATTACH, "eperm", "")
	a.jumpIf(unix.BPF_JEQ, unix.PTRACE_SEIZE, "eperm", "")
	a.ret(unix.SECCOMP_RET_ALLOW)
	a.label("eperm")
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	a.label("enosys")
	a.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	a.label("kill")
	a.ret(unix.SECCOMP_RET_KILL_PROCESS)
	return a.assemble()
}

// bpfAsm assembles a classic BPF program whose conditional jumps name
// labels ("" is the next instruction).
type bpfAsm struct {
	prog   []unix.SockFilter
	labels map[string]int
	jumps  map[int][2]string // instruction → its true and false targets
}

func (a *bpfAsm) load(off uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off})
}

func (a *bpfAsm) jumpIf(op uint16, k uint32, jt, jf string) {
	if a.jumps == nil {
		a.jumps = map[int][2]string{}
	}
	a.jumps[len(a.prog)] = [2]string{jt, jf}
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k})
}

func (a *bpfAsm) ret(k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k})
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

// assemble resolves the jumps: classic BPF jumps only forward, at most 255
// instructions.
func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	for i, to := range a.jumps {
		for k, name := range to {
			off := 0
			if name != "" {
				at, ok := a.labels[name]
				if !ok {
					return nil, fmt.Errorf("bpf: no label %q", name)
				}
				off = at - i - 1
			}
			if off < 0 || off > 255 {
				return nil, fmt.Errorf("bpf: jump from %d to %q out of range", i, name)
			}
			if k == 0 {
				a.prog[i].Jt = uint8(off)
			} else {
				a.prog[i].Jf = uint8(off)
			}
		}
	}
	return a.prog, nil
}
