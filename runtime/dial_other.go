//go:build !linux

package runtime

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// Dial connects to the job's port on the host's loopback (jobs have no
// network namespace of their own here).
func (h *processHandle) Dial(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("runtime: job %s: invalid port %d", h.spec.ID, port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}
