package lease

import "sync"

// broadcast wakes every waiter at once at each change of some state, so
// that no one polls it: a waiter takes the channel (wait) before it checks
// the state and then waits on it; a change closes the channel and drops
// it (notify), so a change made after the take is never missed. The zero
// value is ready; while no one waits a change costs no allocation.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns the channel closed at the next change.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// notify wakes whoever waits (made the change already).
func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
