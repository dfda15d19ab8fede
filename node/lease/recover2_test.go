package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestGoldEvictsFutureBronzeBooking: a bronze job booked on the only H100
// for after a running silver lease (further ahead than the clock skew a
// report's times may have) is evicted by a gold award before its start
// comes; the provider reports it preempted with no start, the renter takes
// that report and requeues the bronze job elsewhere at once, and nothing
// is billed for the booking that never ran.
func TestGoldEvictsFutureBronzeBooking(t *testing.T) {
	h := newHarness(t)
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 0.5, preempt: true})

	silver := job(auction.Silver, 2, 45*time.Second, "gate", "silver", "0")
	sv := r.post(silver)
	bronze := job(auction.Bronze, 1, time.Minute, "gate", "bronze", "0")
	bronze.Deadline = time.Now().Add(2 * time.Minute)
	bv := r.post(bronze)
	if bv.Winner != pa.id() || !bv.Lease.Start.After(time.Now().Add(attest.HeartbeatSkew)) {
		t.Fatalf("bronze on %s from %s: want a future booking on the H100 node after silver's %s", bv.Winner, bv.Lease.Start, sv.Lease.End)
	}
	bronzeStart := bv.Lease.Start
	// Another node, cheaper, for the bronze job to go to once evicted.
	pb := h.provider(provSpec{model: "A100", price: 0.3})

	gold := job(auction.Gold, 5, time.Minute, "gate", "gold", "0")
	gold.GPUModels = []string{"H100"}
	gold.Deadline = time.Now().Add(time.Minute)
	gv := r.post(gold)
	if gv.Winner != pa.id() {
		t.Fatalf("gold went to %s", gv.Winner)
	}
	bv = r.waitJob(bv.Job.ID, "bronze requeued elsewhere", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run == auction.RunRunning
	})
	if time.Now().After(bronzeStart) {
		t.Fatalf("the bronze job was requeued only after its evicted booking's start %s", bronzeStart)
	}
	first := bv.History[0]
	if first.Run != auction.RunPreempted || first.Lease.Provider != pa.id() || first.Fault != auction.FaultNone ||
		!first.Started.IsZero() || first.Receipt || first.CostUSD != 0 || !strings.HasPrefix(first.Detail, "preempted by gold lease") {
		t.Fatalf("evicted bronze booking: %+v", first)
	}
	if bv.Lease.Provider != pb.id() || bv.Job.Duration != time.Minute {
		t.Fatalf("requeued bronze on %s for %s", bv.Lease.Provider, bv.Job.Duration)
	}
	if n := counter(r, "renter.event_bad_time"); n != 0 {
		t.Fatalf("renter refused %d lease events for their times", n)
	}
	// Nothing to settle: the provider holds the booking reported and
	// settled without a receipt, and neither ledger has one.
	waitFor(t, 3*time.Second, "evicted booking closed on the provider", func() bool {
		pl, ok := pa.lease(first.Lease.ID)
		return ok && pl.Run == auction.RunPreempted && pl.Started.IsZero()
	})
	if n := len(r.entries(ledger.KindReceipt, first.Lease.ID)) + len(pa.entries(ledger.KindReceipt, first.Lease.ID)); n != 0 {
		t.Fatalf("%d receipts for a booking that never ran", n)
	}
	pa.exec.open("silver")
	pa.exec.open("gold")
	pb.exec.open("bronze")
}

// TestLostServiceReplicaIsNotRequeued: a service replica's job (a port to
// serve) whose provider goes silent ends failed through the provider's
// fault and stays ended: its service, which sees the lease end, replaces
// the replica itself; the renter runs no auction for it, whatever its
// attempt budget.
func TestLostServiceReplicaIsNotRequeued(t *testing.T) {
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	provs := map[string]*node{}
	for _, price := range []float64{1, 1.5} {
		p := h.provider(provSpec{model: "H100", price: price})
		provs[p.id()] = p
	}
	j := job(auction.Gold, 5, time.Minute, "gate", "serve", "0")
	j.Run.ServicePort = 8000
	j.MaxAttempts = 5
	v := r.post(j)
	r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == auction.RunRunning && v.LastTelemetry != nil })
	lost := provs[v.Winner]
	delete(provs, lost.id())
	h.net.Drop(lost.signer.ID())
	v = r.waitJob(v.Job.ID, "ended", func(v api.JobView) bool { return v.State == auction.JobFinished })
	if v.Run != auction.RunFailed || v.Fault != auction.FaultProvider || len(v.History) != 0 || v.Lease.Provider != lost.id() ||
		!strings.Contains(v.Detail, "provider lost: no heartbeat") || !strings.Contains(v.Detail, "a service replica: its service replaces it") {
		t.Fatalf("lost replica: %s %s (fault %q) %q, %d earlier attempts", v.State, v.Run, v.Fault, v.Detail, len(v.History))
	}
	if n := counter(r, "renter.lease_lost"); n != 1 {
		t.Fatalf("renter.lease_lost = %d", n)
	}
	// No auction follows: the other provider is never called for it.
	time.Sleep(3 * h.lossAfter)
	for _, p := range provs {
		if s := p.provider.Stats(); len(s.Leases) != 0 {
			t.Fatalf("the other provider got %d leases", len(s.Leases))
		}
	}
	if v, _ := r.tracker.View(v.Job.ID); v.State != auction.JobFinished || v.Job.Attempt != 0 {
		t.Fatalf("replica job after its loss: %s, attempt %d", v.State, v.Job.Attempt)
	}
}
