package lease

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestFirstHeartbeatIntoTheLease: a provider's first heartbeat goes out
// two fifths of an interval into the lease, then one per interval. A job
// that ends sooner sends none (none is expected of it) and is still paid;
// a longer one's first heartbeat covers the lease from its start.
func TestFirstHeartbeatIntoTheLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// An interval long enough that a job of milliseconds settles well
	// before its first heartbeat is due, on a loaded host too.
	h.hbEvery = 4 * time.Second
	h.lossAfter = 4 * h.hbEvery
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})

	short := r.post(job(terms.Silver, 2, time.Minute, "ended", "-", "0"))
	sv := r.waitJobWithin(short.Job.ID, 3*time.Second, "settled", settled)
	if sv.Run != terms.RunSucceeded || sv.Receipt.Heartbeats.Count != 0 || sv.Receipt.Heartbeats.Expected != 0 {
		t.Fatalf("short job: run %s, receipt heartbeats %+v: want success with none sent and none expected", sv.Run, sv.Receipt.Heartbeats)
	}
	if sv.LastTelemetry != nil {
		t.Fatalf("short job: a heartbeat reached the renter at %v", sv.LastTelemetry.Time)
	}

	long := r.post(job(terms.Silver, 2, time.Minute, "gate", "long", "0"))
	lv := r.waitJobWithin(long.Job.ID, 2*h.hbEvery, "first heartbeat", func(v api.JobView) bool { return v.LastTelemetry != nil })
	if in := lv.LastTelemetry.Time.Sub(lv.Lease.Start); in < firstHeartbeatAfter(h.hbEvery) || lv.LastTelemetry.Seq != 1 {
		t.Fatalf("first heartbeat (seq %d) %v into the lease, want %v or more", lv.LastTelemetry.Seq, in, firstHeartbeatAfter(h.hbEvery))
	}
	p.exec.open("long")
	lv = r.waitJobWithin(long.Job.ID, 3*time.Second, "settled", settled)
	// The run lasted under an interval: its one heartbeat vouches for all
	// of it.
	if hs := lv.Receipt.Heartbeats; lv.Run != terms.RunSucceeded || hs.Count != 1 || hs.Coverage != 1 || lv.Receipt.Amount <= 0 {
		t.Fatalf("long job: run %s, receipt %+v: want one heartbeat covering the whole run, paid", lv.Run, lv.Receipt)
	}
}
