package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// syscalls tries each system call the provider's seccomp filter is about,
// with arguments that change nothing on the host, and prints one line per
// call: "name=ok" or "name=ERRNO" (the errno's symbol, e.g. EPERM).
func syscalls() {
	self := "/proc/self/exe"
	if p, err := os.Executable(); err == nil {
		self = p
	}
	str := func(s string) uintptr { p, _ := unix.BytePtrFromString(s); return uintptr(unsafe.Pointer(p)) }
	raw := func(nr uintptr, a ...uintptr) error {
		var x [6]uintptr
		copy(x[:], a)
		r, _, e := unix.Syscall6(nr, x[0], x[1], x[2], x[3], x[4], x[5])
		if e != 0 {
			return e
		}
		if int(r) > 2 && nr != unix.SYS_KEYCTL && nr != unix.SYS_ADD_KEY {
			unix.Close(int(r)) // a descriptor
		}
		return nil
	}
	child := func(attr *syscall.SysProcAttr, args ...string) error {
		cmd := exec.Command(self, args...)
		cmd.SysProcAttr = attr
		return cmd.Run()
	}
	// traced runs fn on a sleeping child of ours, then kills it.
	traced := func(fn func(pid int) error) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(self, "sleep", "1h")
		if err := cmd.Start(); err != nil {
			return err
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		return fn(cmd.Process.Pid)
	}
	dir, _ := os.MkdirTemp("", "sys")
	// Negative int arguments, as the kernel reads them.
	cwd, ring := unix.AT_FDCWD, unix.KEY_SPEC_PROCESS_KEYRING
	var tx unix.Timex
	var ts unix.Timespec
	probes := []struct {
		name string
		call func() error
	}{
		// Namespaces and mounts.
		{"clone-newuser", func() error { return child(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}, "exit", "0") }},
		{"clone-newnet", func() error { return child(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}, "exit", "0") }},
		{"clone3", func() error { return raw(unix.SYS_CLONE3, 0, 0) }},
		{"unshare", func() error { return raw(unix.SYS_UNSHARE, unix.CLONE_NEWUTS) }},
		{"setns", func() error {
			fd, err := unix.Open("/proc/self/ns/uts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return raw(unix.SYS_SETNS, uintptr(fd), 0)
		}},
		{"mount", func() error { return unix.Mount("none", dir, "tmpfs", 0, "") }},
		{"umount2", func() error { return unix.Unmount("/nonexistent-gpumesh", 0) }},
		{"pivot_root", func() error { return unix.PivotRoot("/nonexistent-a", "/nonexistent-b") }},
		{"chroot", func() error { return unix.Chroot("/") }},
		{"fsopen", func() error { return raw(unix.SYS_FSOPEN, str("tmpfs"), 0) }},
		{"fsconfig", func() error { return raw(unix.SYS_FSCONFIG, ^uintptr(0), 0) }},
		{"fsmount", func() error { return raw(unix.SYS_FSMOUNT, ^uintptr(0), 0, 0) }},
		{"fspick", func() error { return raw(unix.SYS_FSPICK, uintptr(cwd), str("/"), 0) }},
		{"move_mount", func() error { return raw(unix.SYS_MOVE_MOUNT, ^uintptr(0), str(""), ^uintptr(0), str(""), 0) }},
		{"open_tree", func() error { return raw(unix.SYS_OPEN_TREE, uintptr(cwd), str("/nonexistent-gpumesh"), 0) }},
		{"open_tree_attr", func() error {
			return raw(unix.SYS_OPEN_TREE_ATTR, uintptr(cwd), str("/nonexistent-gpumesh"), 0, 0, 0)
		}},
		{"mount_setattr", func() error { return raw(unix.SYS_MOUNT_SETATTR, ^uintptr(0), str(""), 0, 0, 0) }},
		// Keyrings, bpf, perf, userfaultfd, fanotify.
		{"keyctl", func() error {
			return raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(ring), 1)
		}},
		{"add_key", func() error {
			return raw(unix.SYS_ADD_KEY, str("user"), str("gpumesh-test"), str("x"), 1, uintptr(ring))
		}},
		{"request_key", func() error {
			return raw(unix.SYS_REQUEST_KEY, str("user"), str("gpumesh-nonexistent"), 0, uintptr(ring))
		}},
		{"bpf", func() error { return raw(unix.SYS_BPF, 9999, 0, 0) }},
		{"perf_event_open", func() error {
			attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK,
				Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
			attr.Size = uint32(unsafe.Sizeof(attr))
			fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"userfaultfd", func() error { return raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */) }},
		{"fanotify_init", func() error { return raw(unix.SYS_FANOTIFY_INIT, 0, 0) }},
		// Other processes.
		{"ptrace-attach", func() error {
			return traced(func(pid int) error { return raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid)) })
		}},
		{"ptrace-seize", func() error {
			return traced(func(pid int) error { return raw(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0) })
		}},
		{"process_vm_readv", func() error {
			var a, b [8]byte
			l := []unix.Iovec{{Base: &a[0], Len: 8}}
			r := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&b[0])), Len: 8}}
			_, err := unix.ProcessVMReadv(os.Getpid(), l, r, 0)
			return err
		}},
		{"process_vm_writev", func() error {
			var a, b [8]byte
			l := []unix.Iovec{{Base: &a[0], Len: 8}}
			r := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&b[0])), Len: 8}}
			_, err := unix.ProcessVMWritev(os.Getpid(), l, r, 0)
			return err
		}},
		// File handles.
		{"name_to_handle_at", func() error {
			_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
			return err
		}},
		{"open_by_handle_at", func() error { return raw(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0) }},
		// The host. Invalid flags, names or magic make each a no-op where
		// it is allowed.
		{"kexec_load", func() error { return raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xffffffff) }},
		{"kexec_file_load", func() error { return raw(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0xffffffff) }},
		{"init_module", func() error { return raw(unix.SYS_INIT_MODULE, 0, 0, str("")) }},
		{"finit_module", func() error { return raw(unix.SYS_FINIT_MODULE, ^uintptr(0), str(""), 0) }},
		{"delete_module", func() error { return raw(unix.SYS_DELETE_MODULE, str("gpumesh_nonexistent"), 0) }},
		{"swapon", func() error { return raw(unix.SYS_SWAPON, str("/nonexistent-gpumesh"), 0) }},
		{"swapoff", func() error { return raw(unix.SYS_SWAPOFF, str("/nonexistent-gpumesh")) }},
		{"reboot", func() error { return raw(unix.SYS_REBOOT, 0, 0, 0, 0) }},
		{"settimeofday", func() error { return raw(unix.SYS_SETTIMEOFDAY, 0, 0) }},
		{"clock_settime", func() error {
			return raw(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)))
		}},
		{"clock_adjtime", func() error {
			return raw(unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&tx)))
		}},
		{"adjtimex", func() error { return raw(unix.SYS_ADJTIMEX, uintptr(unsafe.Pointer(&tx))) }},
		{"acct", func() error { return raw(unix.SYS_ACCT, str("/nonexistent-gpumesh")) }},
		{"quotactl", func() error { return raw(unix.SYS_QUOTACTL, 0xdead, str("/nonexistent-gpumesh"), 0, 0) }},
		{"quotactl_fd", func() error { return raw(unix.SYS_QUOTACTL_FD, ^uintptr(0), 0, 0, 0) }},
		{"syslog", func() error { return raw(unix.SYS_SYSLOG, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0) }},
		{"lookup_dcookie", func() error { return raw(unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0) }},
		// In a child of its own session: it has no terminal to hang up.
		{"vhangup", func() error { return child(&syscall.SysProcAttr{Setsid: true}, "vhangup") }},
		// Allowed: a child, threads, and tracing a child of one's own.
		{"fork", func() error { return child(nil, "exit", "0") }},
		{"threads", func() error {
			done := make(chan struct{})
			go func() { runtime.LockOSThread(); close(done) }()
			<-done
			return nil
		}},
		{"ptrace-traceme", func() error {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cmd := exec.Command(self, "exit", "0")
			cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
			if err := cmd.Start(); err != nil {
				return err
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
				cmd.Process.Kill()
				cmd.Wait()
				return fmt.Errorf("not stopped at exec: %v", err)
			}
			if err := unix.PtraceDetach(cmd.Process.Pid); err != nil {
				cmd.Process.Kill()
			}
			return cmd.Wait()
		}},
	}
	probes = append(probes, archProbes(raw)...)
	for _, p := range probes {
		err := p.call()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 100 {
			// A child probe reports its errno as its exit status.
			err = syscall.Errno(ee.ExitCode() - 100)
		}
		fmt.Printf("%s=%s\n", p.name, errName(err))
	}
}

// vhangup calls vhangup(2) and exits 0, or 100 + its errno.
func vhangup() {
	if _, _, e := unix.Syscall(unix.SYS_VHANGUP, 0, 0, 0); e != 0 {
		os.Exit(100 + int(e))
	}
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return fmt.Sprintf("%q", err.Error())
}
