package broadcast

import "testing"

// A channel taken before a change is closed by it; one taken after is
// not, until the next change.
func TestNotifyClosesWhatWasTaken(t *testing.T) {
	var s Signal
	s.Notify() // no one waits: nothing to close
	before := s.Wait()
	if s.Wait() != before {
		t.Fatal("two waiters before a change got different channels")
	}
	s.Notify()
	select {
	case <-before:
	default:
		t.Fatal("a change did not wake a waiter that took the channel before it")
	}
	after := s.Wait()
	select {
	case <-after:
		t.Fatal("a channel taken after the change is already closed")
	default:
	}
	s.Notify()
	<-after
}
