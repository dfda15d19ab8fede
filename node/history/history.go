// Package history keeps what the console charts over time: one sample a
// period, the newest Keep of them, in memory. A sample is whatever its
// owner measures (a provider's earnings and occupancy, a service's
// latency); this package only decides when one is due and which are kept,
// so every chart of the daemon has the same period and span.
package history

import (
	"sync"
	"time"
)

// Every is the period of the samples, and Keep how many a Ring holds: a
// day of minutes. Nothing survives a restart: the ledger and the logs are
// the record, these only draw the recent past.
const (
	Every = time.Minute
	Keep  = 24 * 60
)

// Ring is the last samples of one series, oldest dropped first. Its zero
// value is not usable; see New.
type Ring[T any] struct {
	mu   sync.Mutex
	buf  []T
	next int
	n    int
	last time.Time // when the newest sample was taken
}

// New returns a Ring of at most size samples (Keep when size < 1).
func New[T any](size int) *Ring[T] {
	if size < 1 {
		size = Keep
	}
	return &Ring[T]{buf: make([]T, size)}
}

// Sample adds take()'s sample when one is due at now: on the first call,
// and then on the first call of each later period (periods are whole
// minutes of the clock, so a caller's jitter neither skips one nor takes
// two in one). A clock that went back adds nothing until it passes the
// last sample's period. It reports whether it sampled; take runs without
// the Ring's lock.
func (r *Ring[T]) Sample(now time.Time, take func() T) bool {
	r.mu.Lock()
	due := r.last.IsZero() || now.Truncate(Every).After(r.last.Truncate(Every))
	if due {
		r.last = now
	}
	r.mu.Unlock()
	if !due {
		return false
	}
	v := take()
	r.mu.Lock()
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
	r.mu.Unlock()
	return true
}

// All returns the samples kept, oldest first.
func (r *Ring[T]) All() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]T, 0, r.n)
	for i := r.n; i > 0; i-- {
		out = append(out, r.buf[(r.next-i+len(r.buf))%len(r.buf)])
	}
	return out
}

// Next is how long after now the next period begins: when a caller that
// has nothing else to wake it should call Sample again.
func Next(now time.Time) time.Duration {
	return now.Truncate(Every).Add(Every).Sub(now)
}
