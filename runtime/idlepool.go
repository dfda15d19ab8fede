package runtime

import "sync"

// idlePool keeps what an ended job leaves that the next job can reuse (a
// network namespace, a work dir's mount point), at most max of them, last
// in first out; discard gives back one that is not kept (the pool full or
// closed). A nil pool keeps nothing. It is safe for concurrent use.
type idlePool[T any] struct {
	max     int
	discard func(T)

	mu     sync.Mutex
	idle   []T
	closed bool // close was called: nothing is kept any more
}

func newIdlePool[T any](max int, discard func(T)) *idlePool[T] {
	return &idlePool[T]{max: max, discard: discard}
}

// take returns an idle one, if there is one.
func (p *idlePool[T]) take() (v T, ok bool) {
	if p == nil {
		return v, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return v, false
	}
	v, p.idle = p.idle[n-1], p.idle[:n-1]
	return v, true
}

// room reports whether put would keep one now.
func (p *idlePool[T]) room() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.idle) < p.max
}

// put keeps v for a later job, or discards it when there is no room.
func (p *idlePool[T]) put(v T) {
	if p == nil {
		return
	}
	p.mu.Lock()
	kept := !p.closed && len(p.idle) < p.max
	if kept {
		p.idle = append(p.idle, v)
	}
	p.mu.Unlock()
	if !kept && p.discard != nil {
		p.discard(v)
	}
}

// close discards every idle one, and keeps none from now on.
func (p *idlePool[T]) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, v := range idle {
		if p.discard != nil {
			p.discard(v)
		}
	}
}
