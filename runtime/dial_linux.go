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
	return dialJob(ctx, h.spec.ID, h.pgid, port)
}

// Dial connects to 127.0.0.1:port inside the container's network
// namespace (a container without a network still has its loopback),
// entered through the container's main process, which the daemon on the
// same host can see.
func (h *dockerHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	var info struct {
		State struct {
			Running bool
			Pid     int
		}
	}
	if err := h.e.c.do(ctx, http.MethodGet, "/containers/"+h.id+"/json", nil, &info); err != nil {
		return nil, fmt.Errorf("runtime: job %s: inspect container: %w", h.spec.ID, err)
	}
	if !info.State.Running || info.State.Pid <= 0 {
		return nil, fmt.Errorf("runtime: job %s: its container is not running", h.spec.ID)
	}
	return dialJob(ctx, h.spec.ID, info.State.Pid, port)
}

// dialJob connects to 127.0.0.1:port in the network namespace of process
// pid. The socket is created on a spare OS thread that enters the
// namespace and is then discarded, so no daemon code ever runs in the
// job's network.
func dialJob(ctx context.Context, id string, pid, port int) (net.Conn, error) {
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
		return d.DialContext(ctx, "tcp", addr)
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("runtime: job %s: open network namespace: %w", id, err)
	}
	defer ns.Close()
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
