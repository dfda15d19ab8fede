package runtime

import (
	"context"
	"net"
)

// Dialer is a started job whose TCP ports the provider can reach: a service
// job's server listens on the job's own loopback, which (in a job network
// namespace) only a dial from inside that namespace reaches. Process jobs'
// handles implement it; a handle that does not cannot serve a service.
type Dialer interface {
	// Dial connects to the job's loopback port.
	Dial(ctx context.Context, port int) (net.Conn, error)
}
