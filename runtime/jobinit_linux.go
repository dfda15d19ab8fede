//go:build linux

package runtime

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/runtime/internal/jobinit"
)

// A process job runs under an init of its own (package jobinit): the
// daemon's own binary, re-executed through /proc/self/exe, so that it is
// the image the daemon runs even if the file on disk was replaced since (the
// path is resolved in the forked child, which is still the daemon's image;
// no path the job's mount namespace hides is involved). Commands run in a
// job (Exec) go through the same binary, as a wrapper.

// initPath is the daemon's own image, resolved in the child it forks.
const initPath = "/proc/self/exe"

// initToken is this daemon process's half of jobinit.Env: a job's init
// checks the Config it is sent carries it.
var initToken = sync.OnceValue(func() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
})

// jobInit is the daemon's end of a job's init (PID1 only).
type jobInit struct {
	conn *os.File
	r    *bufio.Reader
	pid  int // the job's command, in its namespace
}

// startViaInit starts cmd, an unstarted command for a job (its Credential,
// if any, is the job's uid), through a job's init: it rewrites cmd into the
// init's command, calls start (which must start cmd, as spawnIn does, from
// the thread it moves into the job's namespaces), sends the init its
// config and waits until the job's command runs. As PID 1, the returned
// jobInit reads the command's exit status (cmd.Process is the init's);
// else cmd.Process has become the command itself and jobInit is nil. A
// command that could not be executed fails with the *os.PathError
// ("fork/exec") that cmd.Start would have returned.
func startViaInit(cmd *exec.Cmd, pid1, filter bool, start func() error) (*jobInit, error) {
	cfg := jobinit.Config{Token: initToken(), PID1: pid1, UID: -1, GID: -1,
		Path: cmd.Path, Args: cmd.Args, Env: cmd.Environ(), Dir: cmd.Dir}
	if filter {
		prog, err := seccompProgram()
		if err != nil {
			return nil, err
		}
		cfg.Filter = prog
	}
	sys := syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		sys = *cmd.SysProcAttr
	}
	if c := sys.Credential; c != nil {
		cfg.UID, cfg.GID = int(c.Uid), int(c.Gid)
		sys.Credential = nil
	}
	wire, err := cfg.Encode()
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("job init: socketpair: %w", err)
	}
	conn, remote := os.NewFile(uintptr(fds[0]), "job-init"), os.NewFile(uintptr(fds[1]), "job-init")
	cmd.Path, cmd.Args = initPath, []string{jobinit.Arg0}
	cmd.Env = []string{jobinit.Env + "=" + strconv.Itoa(3+len(cmd.ExtraFiles)) + ":" + cfg.Token}
	cmd.ExtraFiles = append(cmd.ExtraFiles, remote)
	cmd.SysProcAttr = &sys
	err = start()
	remote.Close()
	if err != nil {
		conn.Close()
		return nil, err
	}
	ji := &jobInit{conn: conn, r: bufio.NewReaderSize(conn, 64)}
	var m jobinit.Msg
	_, err = conn.Write(wire)
	if err == nil {
		m, err = jobinit.ReadMsg(ji.r)
	}
	switch {
	case pid1 && err == nil && m.Err == "" && m.PID > 0:
		ji.pid = m.PID
		return ji, nil
	case !pid1 && errors.Is(err, io.EOF):
		// The socket closed on exec: cmd.Process is the command now.
		conn.Close()
		return nil, nil
	}
	conn.Close()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	switch {
	case m.Errno != 0:
		return nil, &os.PathError{Op: "fork/exec", Path: cfg.Path, Err: syscall.Errno(m.Errno)}
	case m.Err != "":
		return nil, fmt.Errorf("job init: %s", m.Err)
	case err != nil:
		return nil, fmt.Errorf("job init ended before the job started (%v): %w", cmd.ProcessState, err)
	}
	return nil, fmt.Errorf("job init: unexpected answer %+v", m)
}

// exitStatus is the job's command's wait status, as its init reported it;
// ws (the process's own) when it did not (it was killed first) or there is
// no init (ji is nil).
func (ji *jobInit) exitStatus(ws syscall.WaitStatus) syscall.WaitStatus {
	if ji == nil {
		return ws
	}
	defer ji.conn.Close()
	if m, err := jobinit.ReadMsg(ji.r); err == nil && m.Status != nil {
		return *m.Status
	}
	return ws
}
