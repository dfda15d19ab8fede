//go:build linux

package runtime

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dial connects to 127.0.0.1:port as the job sees it: inside the job's
// network namespace when it has its own, on the host's loopback otherwise.
// The socket is created on a spare OS thread that enters the namespace and
// is then discarded, so no daemon code ever runs in the job's network.
func (h *processHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("runtime: job %s: invalid port %d", h.spec.ID, port)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var d net.Dialer
	nsPath := "/proc/" + strconv.Itoa(h.pgid) + "/ns/net"
	own, err1 := os.Readlink(nsPath)
	self, err2 := os.Readlink("/proc/self/ns/net")
	if err1 != nil {
		return nil, fmt.Errorf("runtime: job %s: its process is gone: %w", h.spec.ID, err1)
	}
	if err2 == nil && own == self {
		return d.DialContext(ctx, "tcp", addr)
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("runtime: job %s: open network namespace: %w", h.spec.ID, err)
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
			ch <- result{nil, fmt.Errorf("runtime: job %s: enter network namespace: %w", h.spec.ID, err)}
			return
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	})
	r := <-ch
	return r.c, r.err
}
