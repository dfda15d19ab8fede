package lease

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// busyJob is a job that runs ms milliseconds on a lease of a minute and
// must start within 20 s: a provider whose GPU is leased cannot bid for it.
func busyJob(ms int) terms.Job {
	j := job(terms.Silver, 5, time.Minute, "run", fmt.Sprint(ms), "0")
	j.Deadline = time.Now().Add(20 * time.Second)
	return j
}

// waitAllSucceeded waits, within all, until every job of ids ran to
// success and is finished, failing at the first that ends otherwise.
func (n *node) waitAllSucceeded(ids []string, within time.Duration) {
	n.h.t.Helper()
	deadline := time.Now().Add(within)
	for _, id := range ids {
		var v api.JobView
		n.h.waitFor(time.Until(deadline), "job "+id+" succeeded", func() bool {
			v, _ = n.tracker.View(id)
			return v.Run == terms.RunSucceeded || v.State == terms.JobUnplaceable || v.State == terms.JobFailed
		})
		if v.Run != terms.RunSucceeded || v.State != terms.JobFinished {
			n.h.t.Fatalf("job %s: state %s run %s: %v", id, v.State, v.Run, v.Reasons)
		}
	}
}

// TestJobsQueueForCapacity: 40 jobs posted at once against 4 one-GPU
// providers: those that find every GPU busy are queued (not rejected) and
// offered again as GPUs free up, until all of them ran.
func TestJobsQueueForCapacity(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	for i := 0; i < 4; i++ {
		h.provider(provSpec{model: "A100", price: 1})
	}
	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := r.tracker.Post(busyJob(30))
			if err != nil {
				errs <- err
				return
			}
			ids[i] = v.Job.ID
			if v.State != terms.JobLeased && v.State != terms.JobQueued && v.State != terms.JobFinished {
				errs <- fmt.Errorf("job %s posted as %s: %v", v.Job.ID, v.State, v.Reasons)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	queued := r.counters.Snapshot()["renter.job_queued"]
	if queued == 0 {
		t.Fatal("no job was queued: 40 jobs on 4 GPUs should find them busy")
	}
	r.waitAllSucceeded(ids, 20*time.Second)
	t.Logf("%d jobs queued at least once, %d re-offers", queued, r.counters.Snapshot()["renter.job_reoffered"])
}

// TestQueuedJobStatus: a job no provider can take now is queued with the
// reason, offered again, cancellable while queued, and given up at its
// start deadline.
func TestQueuedJobStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	first := r.post(job(terms.Silver, 2, time.Minute, "gate", "hold", "0"))
	r.waitJob(first.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })

	v, err := r.tracker.Post(busyJob(10))
	if err != nil {
		t.Fatal(err)
	}
	if v.State != terms.JobQueued || !strings.HasPrefix(v.Reasons[len(v.Reasons)-1], "queued: no bids") {
		t.Fatalf("posted job: %s %v, want queued: no bids", v.State, v.Reasons)
	}
	r.waitJob(v.Job.ID, "offered again", func(v api.JobView) bool { return v.Offers >= 2 && v.State == terms.JobQueued })

	short := busyJob(10)
	short.Deadline = time.Now().Add(500 * time.Millisecond)
	s, err := r.tracker.Post(short)
	if err != nil || s.State != terms.JobQueued {
		t.Fatalf("short job %s (%v)", s.State, err)
	}
	c, err := r.tracker.Cancel(v.Job.ID)
	if err != nil || c.State != terms.JobCancelled {
		t.Fatalf("cancel queued job: %s (%v)", c.State, err)
	}
	s = r.waitJob(s.Job.ID, "given up", func(v api.JobView) bool { return v.State == terms.JobUnplaceable })
	if !strings.Contains(strings.Join(s.Reasons, ";"), "start deadline passed while queued") {
		t.Fatalf("reasons %v", s.Reasons)
	}
	p.exec.open("hold")
	// The cancelled job stays cancelled though the GPU frees up.
	r.waitJob(first.Job.ID, "first finished", func(v api.JobView) bool { return v.Run == terms.RunSucceeded })
	if c, _ := r.tracker.View(v.Job.ID); c.State != terms.JobCancelled || c.Lease != nil {
		t.Fatalf("cancelled job became %s", c.State)
	}
}

// TestRenterRestartMidAuction: a renter killed during a job's auction
// queues the job again at its restart (it was persisted before bidding),
// and the job runs.
func TestRenterRestartMidAuction(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	j := busyJob(10)
	j.BidWindow = 3 * time.Second
	j.ID = terms.NewID("job")
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.tracker.Post(j)
	}()
	h.waitFor(3*time.Second, "job persisted while bidding", func() bool {
		var saved api.JobView
		ok, err := r.db.State("renter-jobs").Get(j.ID, &saved)
		return err == nil && ok && saved.State == terms.JobBidding
	})
	r.kill()
	<-done
	h.provider(provSpec{model: "A100", price: 1})
	r2 := r.restart()
	v := r2.waitJob(j.ID, "requeued", func(v api.JobView) bool { return v.State != terms.JobBidding })
	if !strings.Contains(strings.Join(v.Reasons, ";"), "renter daemon restarted during the auction") {
		t.Fatalf("reasons %v", v.Reasons)
	}
	h.waitFor(10*time.Second, "requeued job succeeded", func() bool {
		v, _ = r2.tracker.View(j.ID)
		return v.Run == terms.RunSucceeded
	})
}

// TestEarlyEndMovesNextLeaseEarlier: a job booked behind a running lease
// (its provider's only GPU is leased for a minute) starts as soon as that
// job finishes early, not at the lease's declared end: the provider moves
// the booking earlier and tells the renter, who watches, bills and settles
// the moved lease.
func TestEarlyEndMovesNextLeaseEarlier(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	first := r.post(job(terms.Silver, 5, time.Minute, "gate", "first", "0"))
	r.waitJob(first.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })

	next := r.post(job(terms.Silver, 5, time.Minute, "run", "10", "0"))
	if next.State != terms.JobLeased || next.Lease == nil {
		t.Fatalf("second job %s %v: want a lease behind the first", next.State, next.Reasons)
	}
	booked := next.Lease.Start
	if time.Until(booked) < 30*time.Second {
		t.Fatalf("second lease starts %s: want it behind the first lease's minute", booked)
	}
	p.exec.open("first")
	v := r.waitJobWithin(next.Job.ID, 20*time.Second, "second job settled well before its booked start", func(v api.JobView) bool {
		return v.Run == terms.RunSucceeded && v.Receipt != nil
	})
	if !v.Lease.Start.Before(booked.Add(-30*time.Second)) || v.Lease.End.Sub(v.Lease.Start) != next.Lease.End.Sub(next.Lease.Start) {
		t.Fatalf("renter's lease %s → %s, booked at %s", v.Lease.Start, v.Lease.End, booked)
	}
	if v.Started.Before(v.Lease.Start) || v.Started.After(booked) {
		t.Fatalf("started %s, lease moved to %s", v.Started, v.Lease.Start)
	}
	if pl, ok := p.lease(v.Lease.ID); !ok || !pl.Lease.Start.Equal(v.Lease.Start) {
		t.Fatalf("provider's record %+v", pl.Lease)
	}
	if got := r.counters.Snapshot()["renter.lease_moved"]; got != 1 {
		t.Fatalf("renter.lease_moved %d", got)
	}
	if got := p.counters.Snapshot()["provider.lease_moved"]; got != 1 {
		t.Fatalf("provider.lease_moved %d", got)
	}
}

// TestCapacityNoticeWakesQueuedJob: a job its only fitting provider turned
// away (the GPU is leased past the job's start deadline) is queued; when
// the running job ends early, the provider tells the renter it has room for
// that job, and the renter offers it again at once, long before its queue
// backoff (a minute here) would have.
func TestCapacityNoticeWakesQueuedJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.queueBackoff, h.queueBackoffMax = time.Minute, time.Minute
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	first := r.post(job(terms.Silver, 5, time.Minute, "gate", "first", "0"))
	r.waitJob(first.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })

	v, err := r.tracker.Post(busyJob(10))
	if err != nil || v.State != terms.JobQueued {
		t.Fatalf("second job %s %v (%v): want queued", v.State, v.Reasons, err)
	}
	p.exec.open("first")
	v = r.waitJobWithin(v.Job.ID, 15*time.Second, "queued job woken, leased and run", func(v api.JobView) bool {
		return v.Run == terms.RunSucceeded
	})
	c := r.counters.Snapshot()
	if c["renter.capacity_notice"] != 1 || c["renter.queued_woken"] != 1 {
		t.Fatalf("notices %d, woken %d", c["renter.capacity_notice"], c["renter.queued_woken"])
	}
	if st := p.provider.Stats(); st.Notices != 1 {
		t.Fatalf("provider sent %d notices", st.Notices)
	}
}

// TestUntoldMoveIsNotRun: a provider that cannot tell the renter its lease
// moved earlier does not run it there (the renter would refuse its
// heartbeats); the lease ends unstarted, its report sends the job back to
// auction, and the job runs on its next lease.
func TestUntoldMoveIsNotRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.rebookAhead = -1 // the provider's own move is the subject: the renter does not rebook the lease onto the new provider
	r := h.renter()
	p := h.provider(provSpec{model: "A100", price: 1})
	first := r.post(job(terms.Silver, 5, time.Minute, "gate", "first", "0"))
	r.waitJob(first.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	next := r.post(job(terms.Silver, 5, time.Minute, "run", "10", "0"))
	if next.State != terms.JobLeased || next.Lease == nil {
		t.Fatalf("second job %s %v: want a lease behind the first", next.State, next.Reasons)
	}
	booked := *next.Lease
	h.provider(provSpec{model: "A100", price: 2}) // where the job goes next
	p.crash.dropMoves.Store(true)
	p.exec.open("first")
	v := r.waitJobWithin(next.Job.ID, 20*time.Second, "second job run on its next lease", func(v api.JobView) bool {
		return v.Run == terms.RunSucceeded
	})
	if v.Lease.ID == booked.ID || len(v.History) == 0 || v.History[0].Lease.ID != booked.ID || !v.History[0].Started.IsZero() {
		t.Fatalf("want the moved lease %s ended unstarted in the history, then another: lease %s, history %+v", booked.ID, v.Lease.ID, v.History)
	}
	if got := p.counters.Snapshot()["provider.move_untold"]; got != 1 {
		t.Fatalf("provider.move_untold %d", got)
	}
	if pl, ok := p.lease(booked.ID); !ok || !pl.Started.IsZero() {
		t.Fatalf("provider's record of the untold lease: %+v", pl)
	}
}

// TestStackedBookingsMoveUp: 40 jobs of 300 ms, each declaring a minute,
// posted at once against 4 one-GPU providers: all but 4 are booked behind
// busy GPUs, minutes ahead, and each early end moves the next booking up,
// so all 40 run in seconds, not the minutes their declared spans add up
// to. (The acceptance run of the same, 200 × 20 s on 20 GPUs over real
// daemons, is testnet/load's: see the README.)
func TestStackedBookingsMoveUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	provs := make([]*node, 4)
	for i := range provs {
		provs[i] = h.provider(provSpec{model: "A100", price: 1})
	}
	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := r.tracker.Post(job(terms.Silver, 5, time.Minute, "run", "300", "0"))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = v.Job.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	r.waitAllSucceeded(ids, 30*time.Second)
	moved := r.counters.Snapshot()["renter.lease_moved"]
	if moved == 0 {
		t.Fatal("no lease moved: the jobs cannot all have been booked behind busy GPUs")
	}
	t.Logf("%d moves told to the renter, %d jobs queued at least once", moved, r.counters.Snapshot()["renter.job_queued"])
}
