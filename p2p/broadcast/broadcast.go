// Package broadcast is the one change signal of this module: a Signal
// wakes every waiter at once at each change of some state, so that no one
// polls it. Standard library only, so any package (production or test, the
// auction's included) may use it; it lives in p2p/, the lowest layer that
// signals with it (reachability).
package broadcast

import "sync"

// Signal wakes every waiter at each change of some state: a waiter takes
// the channel (Wait) before it checks the state and then waits on it; a
// change closes the channel and drops it (Notify), so a change made after
// the take is never missed. The zero value is ready; while no one waits a
// change costs no allocation.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns the channel closed at the next change.
func (s *Signal) Wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Notify wakes whoever waits; call it once the change is made.
func (s *Signal) Notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
