package lease

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestRequeueFollowsTheReceipt: a job whose lease failed through its
// provider's fault goes back to auction as soon as that lease's receipt is
// recorded (the requeue waits for it, so that history shows the settled
// cost), not when its wait for the receipt (SettleWait, a minute here)
// runs out: over nine such requeues every archived lease carries its
// receipt, each re-offer's call follows its receipt by a small part of
// that wait, and all nine end within one. The bounds are the system's own
// fallback, not the host's speed: a busy host slows every step a little,
// only a missed wake-up costs a whole SettleWait.
func TestRequeueFollowsTheReceipt(t *testing.T) {
	t.Parallel()
	const attempts = 10
	h := newHarness(t)
	h.settleWait = time.Minute
	var (
		mu       sync.Mutex
		receipts = map[int]time.Time{} // attempt → when its receipt was recorded
		calls    = map[int]time.Time{} // attempt → when its call reached a provider
		finished = make(chan api.JobView, 1)
	)
	h.onSave = func(v api.JobView) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if v.Lease != nil && v.Receipt != nil && receipts[v.Lease.Attempt].IsZero() {
			receipts[v.Lease.Attempt] = now
		}
		// The receipt's save may read the record only after the requeue
		// (woken by that save) archived the lease: then the archived
		// lease is where the receipt shows first.
		for _, old := range v.History {
			if old.Receipt && receipts[old.Attempt].IsZero() {
				receipts[old.Attempt] = now
			}
		}
		if v.State == terms.JobFinished && v.Receipt != nil {
			select {
			case finished <- v:
			default:
			}
		}
	}
	h.onCall = func(c terms.Call) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if calls[c.Job.Attempt].IsZero() {
			calls[c.Job.Attempt] = now
		}
	}
	r := h.renter()
	for i := 0; i < attempts; i++ {
		h.provider(provSpec{model: "A100", price: 1})
	}
	// Every provider's executor fails the job (its fault): the job is
	// requeued elsewhere until its attempts are spent.
	j := job(terms.Silver, 5, time.Minute, "panic", "-", "0")
	j.MaxAttempts = attempts
	posted := r.post(j)
	var v api.JobView
	select {
	case v = <-finished:
	case <-time.After(h.settleWait):
		// Where it stood: the attempt that waited, and what its lease had.
		now, _ := r.tracker.View(posted.Job.ID)
		cur := "none"
		if now.Lease != nil {
			cur = fmt.Sprintf("%s (attempt %d) run %q receipt %v", now.Lease.ID, now.Lease.Attempt, now.Run, now.Receipt != nil)
		}
		t.Fatalf("the job did not finish its attempts within one SettleWait (%s): a requeue waited it out; job %s, %d archived, lease %s; renter counters %v",
			h.settleWait, now.State, len(now.History), cur, r.counters.Snapshot())
	}
	if len(v.History) != attempts-1 || v.Run != terms.RunFailed {
		t.Fatalf("job finished %s after %d earlier attempts, want %d", v.Run, len(v.History), attempts-1)
	}
	for _, old := range v.History {
		if !old.Receipt {
			t.Fatalf("attempt %d archived without its receipt: the requeue went on before it", old.Attempt)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var lags []time.Duration
	for _, old := range v.History {
		// Attempts number the job's offers, not its leases: an offer that
		// leased nothing (its award timed out on a busy host) is followed
		// by another, so a lease's attempt is not its index in History.
		// The requeue's own call is the lease's attempt plus one.
		a := old.Lease.Attempt
		if receipts[a].IsZero() || calls[a+1].IsZero() {
			t.Fatalf("attempt %d: receipt at %s, next call at %s", a, receipts[a], calls[a+1])
		}
		// (the receipt's time is taken once its record is written, and the
		// requeue may go on before that)
		lags = append(lags, max(calls[a+1].Sub(receipts[a]), 0))
	}
	sort.Slice(lags, func(i, k int) bool { return lags[i] < lags[k] })
	if worst := lags[len(lags)-1]; worst > h.settleWait/4 {
		t.Fatalf("receipt → re-offer took %v (worst %v, SettleWait %v): a requeue did not follow its receipt", lags, worst, h.settleWait)
	}
}
