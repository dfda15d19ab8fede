// Package lease is the post-award half of the market: what happens to a
// lease once a provider has confirmed it. The Supervisor runs leases on a
// provider (start, heartbeats, stop, outputs, lease events, settlement,
// recovery after a restart): each lease's decisions are its state
// machine's (package lifecycle), whose effects the Supervisor carries out;
// the Tracker is a renter's one record of each of its jobs (auction
// outcome, heartbeats, lease events, receipt checks, requeue, abandonment,
// persistence); Receipts records two-party receipts in the ledger and the
// reputation book and gossips them.
//
// The package talks to the world only through the small interfaces below,
// so a whole market runs in memory in tests (auction/auctiontest.MemNetwork) and over
// libp2p in the daemon (package node wires the adapters).
package lease

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Transport carries the post-award protocol between daemons: a
// request/response to a peer by protocol ID (node/wire), and a publish to a
// gossip topic.
type Transport interface {
	Request(ctx context.Context, to peer.ID, proto protocol.ID, data []byte) ([]byte, error)
	Publish(ctx context.Context, topic string, data []byte) error
}

// Store is a namespaced key/value store of JSON records (ledger.State).
type Store interface {
	Put(key string, v any) error
	List(fn func(key string, raw []byte) error) error
}

// Ledger is the hash-chained ledger (ledger.DB).
type Ledger interface {
	AppendAll(entries []record.Entry) ([]record.Entry, error)
	List(f record.Filter) ([]record.Entry, error)
}

// Clock is the time source.
type Clock func() time.Time

// Counters counts rejected or notable messages by key
// ("renter.heartbeat_rejected", "provider.cancel_rejected", ...). The
// Supervisor, Tracker and Receipts of one node share one.
type Counters struct {
	mu sync.Mutex
	m  map[string]int
	// changed is notified at each count, so that a waiter for one needs
	// no polling.
	changed broadcast.Signal
}

// Changed returns a channel closed at the next count: take it before
// reading the counts it waits on.
func (c *Counters) Changed() <-chan struct{} { return c.changed.Wait() }

// NewCounters returns empty counters.
func NewCounters() *Counters { return &Counters{m: map[string]int{}} }

// Add counts one occurrence of what.
func (c *Counters) Add(what string) { c.AddN(what, 1) }

// AddN counts n occurrences of what.
func (c *Counters) AddN(what string, n int) {
	c.mu.Lock()
	c.m[what] += n
	c.mu.Unlock()
	c.changed.Notify()
}

// Snapshot returns a copy of the counts.
func (c *Counters) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// RequestError refuses a caller's request (a control API call): Missing
// for an unknown job or lease, otherwise bad input or a request that does
// not fit the job's state.
type RequestError struct {
	Missing bool
	Msg     string
	// Err is the cause, when the request was refused for one (an invalid
	// job's validation error, whose field errors a caller may explain).
	Err error
}

func (e *RequestError) Error() string { return e.Msg }

// Unwrap is the cause (nil for none).
func (e *RequestError) Unwrap() error { return e.Err }

// HTTPStatus is the control API's answer to it (api.WriteError): 404 when
// Missing, else 400.
func (e *RequestError) HTTPStatus() int {
	if e.Missing {
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

func badRequest(format string, a ...any) error {
	return &RequestError{Msg: fmt.Sprintf(format, a...)}
}

// invalidRequest is a bad request refused for err, which it wraps.
func invalidRequest(err error) error { return &RequestError{Msg: err.Error(), Err: err} }

func notFound(format string, a ...any) error {
	return &RequestError{Missing: true, Msg: fmt.Sprintf(format, a...)}
}

// DefaultHeartbeatInterval is how often a provider sends telemetry when
// not configured otherwise.
const DefaultHeartbeatInterval = 5 * time.Second
