//go:build linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// jobNamespaces are a running job's namespaces that differ from the
// daemon's, opened for setns.
type jobNamespaces struct {
	files []*os.File
	flags []int
}

func (n *jobNamespaces) close() {
	for _, f := range n.files {
		f.Close()
	}
}

// enter moves the calling thread, which must be locked and discarded
// afterwards, into the namespaces. Joining a mount namespace needs a
// thread that shares no filesystem attributes (CLONE_FS) with the others;
// joining a PID namespace moves the thread's next children there, not the
// thread.
func (n *jobNamespaces) enter() error {
	if len(n.files) == 0 {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("runtime: unshare filesystem attributes: %w", err)
	}
	for i, f := range n.files {
		if err := unix.Setns(int(f.Fd()), n.flags[i]); err != nil {
			return fmt.Errorf("runtime: enter the job's %s namespace: %w", filepath.Base(f.Name()), err)
		}
	}
	return nil
}

// namespaces opens the job's IPC, network, mount and PID namespaces (those
// of its main process, its init when it has one; the job has no user
// namespace of its own). Only a process of the job's own uid is trusted to
// be the job's: once the main process is reaped its pid may be another's.
func (h *processHandle) namespaces() (*jobNamespaces, error) {
	ns := &jobNamespaces{}
	if h.e.sb == nil {
		return ns, nil // the job shares the daemon's
	}
	pid := strconv.Itoa(h.pgid)
	for _, k := range []struct {
		name string
		flag int
	}{{"ipc", unix.CLONE_NEWIPC}, {"net", unix.CLONE_NEWNET}, {"mnt", unix.CLONE_NEWNS}, {"pid", unix.CLONE_NEWPID}} {
		path := "/proc/" + pid + "/ns/" + k.name
		own, err := os.Readlink(path)
		if err != nil {
			ns.close()
			return nil, fmt.Errorf("runtime: job %s has ended", h.spec.ID)
		}
		if self, err := os.Readlink("/proc/self/ns/" + k.name); err == nil && self == own {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			ns.close()
			return nil, fmt.Errorf("runtime: job %s: open its %s namespace: %w", h.spec.ID, k.name, err)
		}
		ns.files = append(ns.files, f)
		ns.flags = append(ns.flags, k.flag)
	}
	if procUID(h.pgid) != h.uid {
		ns.close()
		return nil, fmt.Errorf("runtime: job %s has ended", h.spec.ID)
	}
	return ns, nil
}

// Exec runs a command inside the job: its uid, its network, mount, IPC and
// PID namespaces, its cgroup, its environment, its work dir, no_new_privs
// and seccomp filter, in a process group of its own. The command is killed
// when ctx ends or the job's main process ends.
func (h *processHandle) Exec(ctx context.Context, req ExecRequest) (int, error) {
	id := h.spec.ID
	if err := checkExecCommand(id, req.Command); err != nil {
		return -1, err
	}
	h.mu.Lock()
	select {
	case <-h.exited:
		h.mu.Unlock()
		return -1, fmt.Errorf("runtime: job %s has ended", id)
	default:
	}
	h.execs.Add(1)
	h.mu.Unlock()
	defer h.execs.Done()

	argv0, err := lookPath(req.Command[0], h.e.path)
	if err != nil {
		return ExecCommandNotFound, fmt.Errorf("runtime: job %s: exec: %w", id, err)
	}
	ns, err := h.namespaces()
	if err != nil {
		return -1, err
	}
	defer ns.close()
	rel, _ := h.spec.outputsRel()
	env := jobEnv(&h.spec, h.e.path, h.wd, filepath.Join(h.wd, rel))
	if req.TTY && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "TERM=") }) {
		env = append(env, "TERM=xterm-256color")
	}
	cmd := &exec.Cmd{Path: argv0, Args: req.Command, Env: env, Dir: h.wd,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	// A background process of the command that keeps its output open
	// does not hold the command's end past this.
	cmd.WaitDelay = time.Second

	var term, tty *os.File // the terminal's two sides (TTY)
	var stdinW *os.File    // the command's input (not TTY)
	if req.TTY {
		term, tty, err = openPTY()
		if err != nil {
			return -1, fmt.Errorf("runtime: job %s: exec: %w", id, err)
		}
		defer term.Close()
		if h.e.uids != nil {
			_ = tty.Chown(h.uid, h.uid)
		}
		_ = setWinSize(term, req.Size)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		cmd.Stdout, cmd.Stderr = req.Stdout, req.Stderr
		if req.Stdin != nil {
			r, w, err := os.Pipe()
			if err != nil {
				return -1, fmt.Errorf("runtime: job %s: exec: pipe: %w", id, err)
			}
			cmd.Stdin, stdinW = r, w // r is closed once the command has it
		}
	}
	if h.e.uids != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(h.uid), Gid: uint32(h.uid), Groups: []uint32{}}
	}
	start := func() error { return spawnIn(cmd, h.cg, ns.enter) }
	if h.e.sb != nil && h.e.sb.seccomp {
		// Through the job's init binary, which installs the filter and
		// executes the command in its place.
		_, err = startViaInit(cmd, false, true, start)
	} else {
		err = start()
	}
	if tty != nil {
		tty.Close()
	}
	if f, ok := cmd.Stdin.(*os.File); ok && !req.TTY {
		f.Close()
	}
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		code := -1
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Op == "fork/exec" {
			code = ExecCannotRun
			if errors.Is(pe.Err, syscall.ENOENT) || errors.Is(pe.Err, syscall.ENOTDIR) {
				code = ExecCommandNotFound
			}
		}
		return code, fmt.Errorf("runtime: job %s: exec %s: %w", id, req.Command[0], err)
	}
	pgid := cmd.Process.Pid
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-ctx.Done():
		case <-h.exited:
		case <-finished:
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}()
	switch {
	case req.TTY:
		if req.Stdin != nil {
			go func() { _, _ = io.Copy(term, req.Stdin) }()
		}
		if req.Resize != nil {
			go func() {
				for {
					select {
					case sz := <-req.Resize:
						_ = setWinSize(term, sz)
					case <-finished:
						return
					}
				}
			}()
		}
	case stdinW != nil:
		go func() {
			_, _ = io.Copy(stdinW, req.Stdin)
			stdinW.Close()
		}()
	}
	var outDone chan struct{}
	if req.TTY {
		outDone = make(chan struct{})
		out := req.Stdout
		if out == nil {
			out = io.Discard
		}
		go func() {
			defer close(outDone)
			// Ends with EIO once no process holds the terminal.
			_, _ = io.Copy(out, term)
		}()
	}
	werr := cmd.Wait()
	if outDone != nil {
		select {
		case <-outDone:
		case <-time.After(time.Second):
			// A background process still holds the terminal.
			term.Close()
			<-outDone
		}
	}
	if stdinW != nil {
		// The copy may still wait for input: the command is gone.
		stdinW.Close()
	}
	st := cmd.ProcessState
	if st == nil {
		return -1, fmt.Errorf("runtime: job %s: exec %s: %w", id, req.Command[0], werr)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return st.ExitCode(), nil
}

// openPTY opens a new pseudo-terminal: its controlling side and the
// terminal a command gets.
func openPTY() (term, tty *os.File, err error) {
	term, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	var n uint32
	err = control(term, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return err
		}
		var err error
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	})
	if err != nil {
		term.Close()
		return nil, nil, fmt.Errorf("set up a terminal: %w", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		term.Close()
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	return term, tty, nil
}

// setWinSize sets a terminal's size (a zero size is left as it is).
func setWinSize(term *os.File, sz WinSize) error {
	if sz.Rows == 0 || sz.Cols == 0 {
		return nil
	}
	return control(term, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Rows, Col: sz.Cols})
	})
}

// control runs f on f's descriptor without taking it out of the runtime's
// poller (as File.Fd would).
func control(file *os.File, f func(fd int) error) error {
	rc, err := file.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Forward connects to 127.0.0.1:port inside the job's own network
// namespace; a job without one (no sandbox, or AllowNetwork) is refused.
func (h *processHandle) Forward(ctx context.Context, port int) (net.Conn, error) {
	if h.e.sb == nil || h.e.sb.network {
		return nil, fmt.Errorf("runtime: job %s: %w", h.spec.ID, ErrSharedNetwork)
	}
	select {
	case <-h.exited:
		return nil, fmt.Errorf("runtime: job %s has ended", h.spec.ID)
	default:
	}
	return dialJobNet(ctx, h.spec.ID, h.pgid, port, true, func() error {
		if procUID(h.pgid) != h.uid {
			return fmt.Errorf("runtime: job %s has ended", h.spec.ID)
		}
		return nil
	})
}
