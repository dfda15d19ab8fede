package lease

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// lostAward posts a job whose award reaches the provider but whose
// confirm is lost, and returns the lease the provider booked for it.
func lostAward(t *testing.T, r, p *node) (jobID, leaseID string) {
	t.Helper()
	r.crash.loseConfirms.Store(true)
	v, err := r.tracker.Post(job(terms.Gold, 5, time.Minute, "gate", "never", "0"))
	r.crash.loseConfirms.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Lease != nil || len(v.Attempts) != 1 || v.Attempts[0].Result != "timeout" {
		t.Fatalf("job %s: lease %v, awards %+v; want one timed-out award", v.Job.ID, v.Lease, v.Attempts)
	}
	if _, ok := p.lease(v.Attempts[0].LeaseID); !ok {
		t.Fatalf("the provider did not book the award whose confirm was lost")
	}
	return v.Job.ID, v.Attempts[0].LeaseID
}

// TestTimedOutAwardIsReleased: an award whose confirm came too late is
// released by the renter, so the provider does not keep its GPU for a
// lease nobody uses; the job, queued, then leases that GPU and runs.
func TestTimedOutAwardIsReleased(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	// Without heartbeats the renter cannot answer "unknown": only the
	// release frees the GPU.
	p.crash.dropHeartbeats.Store(true)
	jobID, lost := lostAward(t, r, p)
	h.waitFor(5*time.Second, "the unconfirmed lease cancelled on the provider", func() bool {
		pl, _ := p.lease(lost)
		return pl.Run == terms.RunCancelled
	})
	pl, _ := p.lease(lost)
	if pl.Detail != "cancelled by the renter" {
		t.Fatalf("unconfirmed lease ended %s: %q", pl.Run, pl.Detail)
	}
	if n := counter(r, "renter.lease_released"); n != 1 {
		t.Fatalf("renter.lease_released = %d, want 1", n)
	}
	p.crash.dropHeartbeats.Store(false)
	p.exec.open("never")
	v := r.waitJobWithin(jobID, 15*time.Second, "re-offered, leased on the freed GPU and finished", func(v api.JobView) bool {
		return v.Lease != nil && v.Run == terms.RunSucceeded
	})
	if v.Lease.Provider != p.id() || v.Lease.ID == lost {
		t.Fatalf("job leased %s on %s", v.Lease.ID, v.Lease.Provider)
	}
}

// TestLeaseUnknownToRenterStops: when the release is lost too, the
// renter answers the lease's heartbeats "unknown" and the provider stops
// it after wire.UnknownLeaseBeats of them, freeing the GPU.
func TestLeaseUnknownToRenterStops(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	r.crash.dropCancels.Store(true)
	_, lost := lostAward(t, r, p)
	h.waitFor(5*time.Second, "the lease unknown to its renter stopped", func() bool {
		pl, _ := p.lease(lost)
		return pl.Run.Terminal()
	})
	pl, _ := p.lease(lost)
	if pl.Run != terms.RunCancelled || pl.Detail != "the renter holds no such lease (an award it gave up on)" {
		t.Fatalf("unknown lease ended %s: %q", pl.Run, pl.Detail)
	}
	if n := counter(p, "provider.lease_unknown_to_renter"); n != 1 {
		t.Fatalf("provider.lease_unknown_to_renter = %d, want 1", n)
	}
	if n := counter(r, "renter.heartbeat_unknown_lease"); n < 3 {
		t.Fatalf("renter.heartbeat_unknown_lease = %d, want at least 3", n)
	}
}

// TestReportBeforeConfirmWaits: a provider runs a job as soon as it
// confirms the award, so its reports can reach the renter before the
// confirm has; the renter holds them until it has recorded the lease
// instead of refusing an unknown lease (the provider would try again only
// seconds later, and the renter, hearing nothing, could call it lost).
func TestReportBeforeConfirmWaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	// The confirm comes back only once a report of the provider's is
	// waiting for the lease (bounded: without the wait the award would
	// time out instead).
	hold := func() {
		deadline := time.NewTimer(5 * time.Second)
		defer deadline.Stop()
		for {
			next := r.counters.changed.Wait()
			if counter(r, "renter.event_before_lease") != 0 {
				return
			}
			select {
			case <-next:
			case <-deadline.C:
				return
			}
		}
	}
	r.crash.holdConfirm.Store(&hold)
	v := r.post(job(terms.Silver, 5, time.Minute, "run", "0", "0"))
	r.crash.holdConfirm.Store(nil)
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.Lease.Provider != p.id() || len(v.History) != 0 {
		t.Fatalf("job %s: run %s on %s, history %+v", v.Job.ID, v.Run, v.Lease.Provider, v.History)
	}
	if n := counter(r, "renter.event_before_lease"); n == 0 {
		t.Fatal("no report came before the confirm")
	}
	if n := counter(r, "renter.event_unknown_lease"); n != 0 {
		t.Fatalf("%d reports refused as an unknown lease", n)
	}
}

// TestLateConfirmIsNotProviderSilence: a confirm that reaches a busy
// renter late (here half a second, within its award's timeout) leaves the
// lease unrecorded that long, and the heartbeats its provider sends
// meanwhile are refused (not yet the job's). That wait is the renter's,
// not the provider's silence: the lease is not given up as lost once
// recorded (the renter's guard counted silence from the lease's start,
// gave the lease up at once, and requeued a job that ran fine).
func TestLateConfirmIsNotProviderSilence(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	// The network's latency on the way back, as awardDelay's on the way
	// there: longer than lossAfter, shorter than the award's timeout.
	slow := func() {
		in := time.NewTimer(500 * time.Millisecond)
		defer in.Stop()
		<-in.C
	}
	r.crash.holdConfirm.Store(&slow)
	v := r.post(job(terms.Silver, 5, time.Minute, "gate", "done", "0"))
	r.crash.holdConfirm.Store(nil)
	v = r.waitJob(v.Job.ID, "running with heartbeats", func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.Heartbeats != nil && v.Heartbeats.Count >= 3
	})
	p.exec.open("done")
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.Lease.Provider != p.id() || len(v.History) != 0 {
		t.Fatalf("job %s: run %s (%s) on %s, history %+v", v.Job.ID, v.Run, v.Detail, v.Lease.Provider, v.History)
	}
	if n := counter(r, "renter.lease_lost"); n != 0 {
		t.Fatalf("renter.lease_lost = %d: a late confirm was taken for the provider's silence", n)
	}
}
