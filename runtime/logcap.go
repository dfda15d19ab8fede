package runtime

import (
	"fmt"
	"io"
	"sync"
)

// DefaultMaxLogBytes is the default cap on what one job may write to its
// log (stdout and stderr together).
const DefaultMaxLogBytes = 64 << 20

// CapWriter passes writes through to a writer until a byte budget is spent,
// then writes one note saying the log was truncated and drops the rest while
// reporting success, so that a job neither fills the provider's disk through
// its log nor blocks on a full pipe. It is safe for concurrent use.
type CapWriter struct {
	w io.Writer
	b *capBudget
}

// capBudget is the byte budget CapWriters made by Share draw on together.
type capBudget struct {
	mu      sync.Mutex
	max     int64
	written int64
	dropped int64
}

// NewCapWriter caps what reaches w at max bytes (max <= 0:
// DefaultMaxLogBytes).
func NewCapWriter(w io.Writer, max int64) *CapWriter {
	if max <= 0 {
		max = DefaultMaxLogBytes
	}
	return &CapWriter{w: w, b: &capBudget{max: max}}
}

// Share returns a CapWriter to w that draws on the same budget as c (a
// job's stdout and stderr share one).
func (c *CapWriter) Share(w io.Writer) *CapWriter { return &CapWriter{w: w, b: c.b} }

// Write writes what is left of the budget of p and drops the rest. Past the
// budget it returns len(p) and no error; the first write that overflows it
// appends the truncation note.
func (c *CapWriter) Write(p []byte) (int, error) {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	k := int64(len(p))
	if left := b.max - b.written; k > left {
		k = max(left, 0)
	}
	if k > 0 {
		n, err := c.w.Write(p[:k])
		b.written += int64(n)
		if err != nil {
			return n, err
		}
	}
	if k == int64(len(p)) {
		return len(p), nil
	}
	if b.dropped == 0 {
		fmt.Fprintf(c.w, "\n[gpumesh: log truncated at %d bytes; further output dropped]\n", b.max)
	}
	b.dropped += int64(len(p)) - k
	return len(p), nil
}

// Truncated reports whether anything was dropped.
func (c *CapWriter) Truncated() bool { return c.Dropped() > 0 }

// Dropped is the number of bytes dropped so far.
func (c *CapWriter) Dropped() int64 {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	return c.b.dropped
}

// capLogs wraps a job's stdout and stderr (nil: discarded) in one CapWriter
// budget of max bytes (< 0: no cap, 0: DefaultMaxLogBytes).
func capLogs(stdout, stderr io.Writer, max int64) (io.Writer, io.Writer) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if max < 0 {
		return stdout, stderr
	}
	c := NewCapWriter(stdout, max)
	return c, c.Share(stderr)
}
