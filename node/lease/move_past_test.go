package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

// TestLeaseMoveIntoThePastIsRefused: a provider that tells its renter a
// pending lease moved to three hours ago (which would make the renter
// declare it abandoned at once, or bill time that never was) is refused;
// the lease keeps its booked span and is not abandoned. A move to now is
// taken.
func TestLeaseMoveIntoThePastIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	first := r.post(job(terms.Silver, 5, time.Minute, "gate", "first", "0"))
	r.waitJob(first.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	next := r.post(job(terms.Silver, 5, time.Minute, "gate", "next", "0"))
	l := *next.Lease
	if l.State != terms.RunPending || time.Until(l.Start) < 30*time.Second {
		t.Fatalf("second lease %s starts %s: want it pending behind the first", l.State, l.Start)
	}
	past := time.Now().Add(-3 * time.Hour)
	_, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunPending,
		Time: time.Now(), Moved: &wire.LeaseMove{Start: past}})
	if err == nil || !strings.Contains(err.Error(), "in the past") {
		t.Fatalf("move 3 h into the past: %v", err)
	}
	if got := counter(r, "renter.move_refused"); got != 1 {
		t.Fatalf("renter.move_refused = %d", got)
	}
	v, err := r.tracker.View(next.Job.ID)
	if err != nil || !v.Lease.Start.Equal(l.Start) || !v.Lease.End.Equal(l.End) || v.Run != terms.RunPending || v.State != terms.JobLeased {
		t.Fatalf("after a refused move: lease %s → %s (booked %s → %s), run %s state %s (%v)",
			v.Lease.Start, v.Lease.End, l.Start, l.End, v.Run, v.State, err)
	}
	// The rule still takes a move to now.
	now := time.Now()
	if _, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunPending,
		Time: now, Moved: &wire.LeaseMove{Start: now}}); err != nil {
		t.Fatalf("move to now refused: %v", err)
	}
	if v, _ := r.tracker.View(next.Job.ID); !v.Lease.Start.Equal(now) {
		t.Fatalf("moved lease starts %s, want %s", v.Lease.Start, now)
	}
}
