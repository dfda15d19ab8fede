//go:build linux

package runtime

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dial connects to 127.0.0.1:port as the job sees it: inside the job's
// network namespace when it has its own, on the host's loopback otherwise.
func (h *processHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	return dialJobNet(ctx, h.spec.ID, h.pgid, port, false, nil)
}

// Dial connects to 127.0.0.1:port inside the container's network
// namespace (a container without a network still has its loopback),
// entered through the container's main process, which the daemon on the
// same host can see.
func (h *dockerHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	pid, err := h.pid(ctx)
	if err != nil {
		return nil, err
	}
	return dialJobNet(ctx, h.spec.ID, pid, port, false, nil)
}

// Forward connects to 127.0.0.1:port inside the container's own network
// namespace (see Dial); a container on the host's network is refused.
func (h *dockerHandle) Forward(ctx context.Context, port int) (net.Conn, error) {
	pid, err := h.pid(ctx)
	if err != nil {
		return nil, err
	}
	return dialJobNet(ctx, h.spec.ID, pid, port, true, func() error {
		// The container's main process runs as the job's uid (it cannot
		// change it): a reused pid is another's.
		if procUID(pid) != h.uid {
			return fmt.Errorf("runtime: job %s: its container is not running", h.spec.ID)
		}
		return nil
	})
}

// pid is the container's main process on this host, while it runs.
func (h *dockerHandle) pid(ctx context.Context) (int, error) {
	var info struct {
		State struct {
			Running bool
			Pid     int
		}
	}
	if err := h.e.c.do(ctx, http.MethodGet, "/containers/"+h.id+"/json", nil, &info); err != nil {
		return 0, fmt.Errorf("runtime: job %s: inspect container: %w", h.spec.ID, err)
	}
	if !info.State.Running || info.State.Pid <= 0 {
		return 0, fmt.Errorf("runtime: job %s: its container is not running", h.spec.ID)
	}
	return info.State.Pid, nil
}

// dialJobNet connects to 127.0.0.1:port in the network namespace of
// process pid. The socket is created on a spare OS thread that enters the
// namespace and is then discarded, so no daemon code ever runs in the
// job's network. With ownOnly a namespace that is the daemon's own is
// refused (ErrSharedNetwork); verify, when set, is called once the
// namespace is open, to check that pid is still the job's.
func dialJobNet(ctx context.Context, id string, pid, port int, ownOnly bool, verify func() error) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("runtime: job %s: invalid port %d", id, port)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var d net.Dialer
	nsPath := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	own, err1 := os.Readlink(nsPath)
	self, err2 := os.Readlink("/proc/self/ns/net")
	if err1 != nil {
		return nil, fmt.Errorf("runtime: job %s: its process is gone: %w", id, err1)
	}
	if err2 == nil && own == self {
		if ownOnly {
			return nil, fmt.Errorf("runtime: job %s: %w", id, ErrSharedNetwork)
		}
		return d.DialContext(ctx, "tcp", addr)
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("runtime: job %s: open network namespace: %w", id, err)
	}
	defer ns.Close()
	if verify != nil {
		if err := verify(); err != nil {
			return nil, err
		}
	}
	return dialIn(ctx, id, ns, d, addr)
}

// dialIn connects to addr with d from inside the network namespace ns,
// on a spare OS thread that enters it and is then discarded.
func dialIn(ctx context.Context, id string, ns *os.File, d net.Dialer, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	// Exits locked: the runtime discards the thread with its namespace.
	onSpareThread(func() {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("runtime: job %s: enter network namespace: %w", id, err)}
			return
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	})
	r := <-ch
	return r.c, r.err
}
