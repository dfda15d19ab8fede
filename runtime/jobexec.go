package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
)

// WinSize is a terminal's size in characters.
type WinSize struct {
	Rows, Cols uint16
}

// ExecRequest is a command to run inside a running job (Execer.Exec).
type ExecRequest struct {
	// Command is the program and its arguments; a name without '/' is
	// looked up in the job's PATH.
	Command []string
	// Stdin feeds the command's standard input (nil: none). Its EOF
	// closes the command's input.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output (nil: discarded).
	// With TTY everything goes to Stdout.
	Stdout, Stderr io.Writer
	// TTY runs the command on a terminal of Size, resized to each size
	// Resize delivers (Resize may be nil).
	TTY    bool
	Size   WinSize
	Resize <-chan WinSize
}

// Execer is a started job that runs commands inside its sandbox: with the
// job's uid, namespaces, cgroup and environment (CUDA_VISIBLE_DEVICES
// included), in its work dir, with no_new_privs; never with the daemon's
// identity. A command ends with the job at the latest.
type Execer interface {
	// Exec runs req and returns its exit status (128+signal when a signal
	// killed it). An error means the command did not run (or its result
	// was lost); the code is then 127 for a command that is not there,
	// 126 for one that cannot be executed, else -1.
	Exec(ctx context.Context, req ExecRequest) (int, error)
}

// Forwarder is a started job whose own network the provider can reach for
// its renter (port forwarding). Unlike Dialer, it refuses a job that
// shares the provider's network namespace, where 127.0.0.1 would be the
// provider's own loopback.
type Forwarder interface {
	// Forward connects to 127.0.0.1:port inside the job's own network
	// namespace.
	Forward(ctx context.Context, port int) (net.Conn, error)
}

// ErrSharedNetwork is returned by Forward for a job without a network
// namespace of its own.
var ErrSharedNetwork = errors.New("the job shares the provider's network (no namespace of its own), so its ports cannot be forwarded")

// ExecCommandNotFound and ExecCannotRun are the exit codes of a command
// that is not there or cannot be executed, as a shell's.
const (
	ExecCommandNotFound = 127
	ExecCannotRun       = 126
)

// checkExecCommand checks a command to run in a job.
func checkExecCommand(id string, cmd []string) error {
	if len(cmd) == 0 || cmd[0] == "" {
		return fmt.Errorf("runtime: job %s: exec: empty command", id)
	}
	for _, a := range cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("runtime: job %s: exec: the command contains a NUL byte", id)
		}
	}
	return nil
}
