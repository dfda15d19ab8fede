package lease

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestBookedFarAheadRebookedWhenAGPUFrees: a job booked behind a long one
// on provider B moves, before it starts, to provider A's GPU the moment A's
// job ends (late binding), instead of waiting for B's job; B's booking is
// released unrun and the job's attempt budget is untouched. Without the
// rebook it would start only at the end of B's 30 s lease.
func TestBookedFarAheadRebookedWhenAGPUFrees(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	a := h.provider(provSpec{model: "A100", price: 1})
	b := h.provider(provSpec{model: "H100", price: 1})

	onA := job(terms.Silver, 5, time.Minute, "gate", "a", "0")
	onA.GPUModels = []string{"A100"}
	first := r.post(onA)
	onB := job(terms.Silver, 5, 30*time.Second, "gate", "b", "0")
	onB.GPUModels = []string{"H100"}
	long := r.post(onB)
	if first.Winner != a.id() || long.Winner != b.id() {
		t.Fatalf("first on %s, long on %s: want A and B", first.Winner, long.Winner)
	}
	// Both GPUs busy: the next job books the sooner one, B's, 30 s out.
	next := r.post(job(terms.Silver, 5, time.Minute, "gate", "next", "0"))
	booked := *next.Lease
	if booked.Provider != b.id() || booked.State != terms.RunPending || time.Until(booked.Start) < 20*time.Second {
		t.Fatalf("next booked on %s (%s), starting in %s: want pending behind B's job", booked.Provider, booked.State, time.Until(booked.Start))
	}

	// A's job ends: its GPU is free, and the job booked on B moves there.
	a.exec.open("a")
	v := r.waitJobWithin(next.Job.ID, 10*time.Second, "rebooked onto A and running", func(v api.JobView) bool {
		return v.Lease != nil && v.Lease.Provider == a.id() && v.Run == terms.RunRunning
	})
	if v.Lease.ID == booked.ID || v.Job.Attempt != 1 || v.State != terms.JobLeased {
		t.Fatalf("after the rebook: lease %s attempt %d state %s", v.Lease.ID, v.Job.Attempt, v.State)
	}
	if !slices.ContainsFunc(v.Reasons, func(s string) bool { return strings.HasPrefix(s, "rebooked: lease "+v.Lease.ID) }) {
		t.Fatalf("reasons do not say it was rebooked: %q", v.Reasons)
	}
	// The rebook's bounds (its start deadline, B excluded) were its call's
	// only, not the job's.
	if !v.Job.Deadline.Equal(next.Job.Deadline) || slices.Contains(v.Job.Exclude, b.id()) {
		t.Fatalf("job after the rebook: deadline %s (was %s), exclude %v", v.Job.Deadline, next.Job.Deadline, v.Job.Exclude)
	}
	if got := counter(r, "renter.rebooked"); got != 1 {
		t.Fatalf("renter.rebooked = %d, want 1", got)
	}
	// B's booking was released before it began: cancelled there, never run.
	h.waitFor(5*time.Second, "B's booking cancelled", func() bool {
		pl, ok := b.lease(booked.ID)
		return ok && pl.Run == terms.RunCancelled
	})
	if pl, _ := b.lease(booked.ID); !pl.Started.IsZero() {
		t.Fatalf("B's released booking ran: started %s", pl.Started)
	}
	// The job runs once, on A, to its end; one lease counts against its
	// budget.
	a.exec.open("next")
	v = r.waitJobWithin(next.Job.ID, 10*time.Second, "finished on A", func(v api.JobView) bool {
		return v.Run == terms.RunSucceeded && v.State == terms.JobFinished
	})
	if v.Lease.Provider != a.id() || len(v.History) != 0 {
		t.Fatalf("finished on %s with history %+v: want A, no earlier attempt", v.Lease.Provider, v.History)
	}
	b.exec.open("b")
}
