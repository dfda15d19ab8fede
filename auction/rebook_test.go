package auction

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestRebookTakesASoonerStartElsewhere: a job booked an hour out behind
// another is offered again once a GPU frees on another provider: the new
// lease starts there now, for the job's next attempt, and the job keeps
// its own start deadline and exclusions.
func TestRebookTakesASoonerStartElsewhere(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"a", "eu-west", "A100", 80, 2, pol(1), 0.9}, {"b", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	r, _ := m.renter(t, RenterConfig{})
	ctx := context.Background()
	var leases []terms.Lease
	var jobs []terms.Job
	for range 3 {
		j, err := r.Post(ctx, euJob(m.now()))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := r.Status(j.ID)
		jobs, leases = append(jobs, st.Job), append(leases, *st.Lease)
	}
	queued := leases[2]
	if queued.Start.Sub(m.now()) < 30*time.Minute {
		t.Fatalf("third job starts %s: want it booked behind another", queued.Start.Sub(m.now()))
	}
	// The other provider's job ends early: its GPUs are free now.
	other := slices.IndexFunc(leases[:2], func(l terms.Lease) bool { return l.Provider != queued.Provider })
	if !m.byID[leases[other].Provider].cal.Release(leases[other].ID) {
		t.Fatal("no booking to release")
	}
	l, err := r.Rebook(ctx, jobs[2].ID, queued.Start.Add(-time.Minute))
	if err != nil {
		t.Fatalf("rebook: %v", err)
	}
	if l.Provider != leases[other].Provider || !l.Start.Before(queued.Start.Add(-time.Minute)) || l.Attempt != 1 {
		t.Fatalf("rebooked onto %s starting %s, attempt %d: want %s now, attempt 1", m.name(l.Provider), l.Start.Sub(m.now()), l.Attempt, m.name(leases[other].Provider))
	}
	st, _ := r.Status(jobs[2].ID)
	if st.State != terms.JobLeased || st.Lease.ID != l.ID || !st.Job.Deadline.Equal(jobs[2].Deadline) || len(st.Job.Exclude) != 0 {
		t.Fatalf("after the rebook: %s lease %v deadline %s (was %s) exclude %v", st.State, st.Lease, st.Job.Deadline, jobs[2].Deadline, st.Job.Exclude)
	}
}

// TestRebookWithoutASoonerStartKeepsTheLease: with no other provider, the
// rebook finds nothing; the job stays leased where it was, as its auction
// left it, and can still be requeued.
func TestRebookWithoutASoonerStartKeepsTheLease(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"a", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	r, _ := m.renter(t, RenterConfig{})
	ctx := context.Background()
	if _, err := r.Post(ctx, euJob(m.now())); err != nil {
		t.Fatal(err)
	}
	j, err := r.Post(ctx, euJob(m.now()))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := r.Status(j.ID)
	if _, err := r.Rebook(ctx, j.ID, before.Lease.Start.Add(-time.Minute)); err == nil {
		t.Fatal("rebooked with no other provider")
	}
	if _, err := r.Rebook(ctx, j.ID, m.now().Add(-time.Second)); err == nil || !strings.Contains(err.Error(), "nothing to gain") {
		t.Fatalf("rebook for a start already past: %v", err)
	}
	after, _ := r.Status(j.ID)
	if after.State != terms.JobLeased || after.Lease.ID != before.Lease.ID || after.Job.Attempt != before.Job.Attempt {
		t.Fatalf("after a rebook that found nothing: %s lease %v attempt %d, want leased on %s attempt %d",
			after.State, after.Lease, after.Job.Attempt, before.Lease.ID, before.Job.Attempt)
	}
	if _, err := r.Requeue(ctx, j.ID, RequeueOptions{Reason: "lost"}); err != nil && strings.Contains(err.Error(), "not leased") {
		t.Fatalf("requeue after the rebook: %v", err)
	}
}
