package lease

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
)

// putStore keeps nothing: DrainWait only needs saves to happen.
type putStore struct{}

func (putStore) Put(string, any) error                 { return nil }
func (putStore) List(func(string, []byte) error) error { return nil }

// drainingSupervisor is a supervisor draining one running lease (to
// finish), with no background work: enough for DrainView and DrainWait.
func drainingSupervisor() (*Supervisor, *leaseRun) {
	s := &Supervisor{cfg: SupervisorConfig{Now: time.Now, Store: putStore{}}, log: slog.New(slog.DiscardHandler), runs: map[string]*leaseRun{}}
	r := &leaseRun{s: s}
	r.pr.Rec.Lease = terms.Lease{ID: "l1", JobID: "j1", Start: time.Now(), End: time.Now().Add(time.Hour)}
	r.pr.Rec.Run = terms.RunRunning
	s.runs["l1"] = r
	s.drain = &drainState{at: time.Now(), actions: map[string]string{"l1": api.DrainFinish}}
	return s, r
}

func drainWaitAsync(s *Supervisor) <-chan api.DrainView {
	got := make(chan api.DrainView, 1)
	go func() {
		v, _ := s.DrainWait(context.Background())
		got <- v
	}()
	return got
}

// TestDrainWaitWokenBySettlement: DrainWait returns as the last lease's
// settlement is saved, not at some later tick (in a synctest bubble, time
// does not move while DrainWait should have woken: a polling DrainWait is
// still asleep).
func TestDrainWaitWokenBySettlement(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, r := drainingSupervisor()
		start := time.Now()
		got := drainWaitAsync(s)
		synctest.Wait()
		select {
		case v := <-got:
			t.Fatalf("drain done with a lease running: %+v", v)
		default:
		}
		r.mu.Lock()
		r.pr.Rec.Run, r.pr.Rec.Ended, r.pr.Rec.Phase = terms.RunSucceeded, time.Now(), lifecycle.Settled
		r.mu.Unlock()
		s.saveRun(r)
		synctest.Wait()
		select {
		case v := <-got:
			if !v.Done || time.Since(start) != 0 {
				t.Fatalf("drain %+v returned after %v, want done at once", v, time.Since(start))
			}
		default:
			t.Fatal("DrainWait still waiting after the last lease settled")
		}
	})
}

// TestDrainWaitUndrain: undraining wakes DrainWait at once (no drain is
// done).
func TestDrainWaitUndrain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, _ := drainingSupervisor()
		got := drainWaitAsync(s)
		synctest.Wait()
		s.Undrain()
		synctest.Wait()
		select {
		case v := <-got:
			if !v.Done {
				t.Fatalf("drain %+v, want done", v)
			}
		default:
			t.Fatal("DrainWait still waiting after Undrain")
		}
	})
}

// TestDrainWaitSettleDeadline: a lease that ended but whose renter never
// settles it counts as done exactly when its DrainSettleWait runs out.
func TestDrainWaitSettleDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, r := drainingSupervisor()
		ended := time.Now().Add(-50 * time.Millisecond)
		r.pr.Rec.Run, r.pr.Rec.Ended = terms.RunSucceeded, ended
		v := <-drainWaitAsync(s)
		if !v.Done || time.Since(ended) != DrainSettleWait {
			t.Fatalf("drain %+v returned %v after the lease ended, want %v", v, time.Since(ended), DrainSettleWait)
		}
	})
}

// TestDrainChange: the drain's long poll answers at the drain's next change
// (a lease's end saved), at once when the drain is done, and otherwise
// after its wait, never at some tick of its own (in a synctest bubble).
func TestDrainChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, r := drainingSupervisor()
		start := time.Now()
		if v := s.DrainChange(context.Background(), 10*time.Second); v.Done || time.Since(start) != 10*time.Second {
			t.Fatalf("no change: %+v after %v, want not done after the 10s wait", v, time.Since(start))
		}
		got := make(chan api.DrainView, 1)
		go func() { got <- s.DrainChange(context.Background(), time.Minute) }()
		synctest.Wait()
		select {
		case v := <-got:
			t.Fatalf("answered %+v with nothing changed", v)
		default:
		}
		start = time.Now()
		r.mu.Lock()
		r.pr.Rec.Run, r.pr.Rec.Ended = terms.RunSucceeded, time.Now()
		r.mu.Unlock()
		s.saveRun(r)
		synctest.Wait()
		select {
		case v := <-got:
			if v.Done || len(v.Leases) != 1 || v.Leases[0].Run != terms.RunSucceeded || time.Since(start) != 0 {
				t.Fatalf("at the lease's end: %+v after %v, want its end at once, not done (unsettled)", v, time.Since(start))
			}
		default:
			t.Fatal("DrainChange still waiting after the lease ended")
		}
		r.mu.Lock()
		r.pr.Rec.Phase = lifecycle.Settled
		r.mu.Unlock()
		if v := s.DrainChange(context.Background(), time.Minute); !v.Done || time.Since(start) != 0 {
			t.Fatalf("a done drain: %+v after %v, want done at once", v, time.Since(start))
		}
	})
}
