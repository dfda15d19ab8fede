package lease

import (
	"context"
	"github.com/libp2p/go-libp2p/core/peer"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

// TestGoldEvictsFutureBronzeBooking: a bronze job booked on the only H100
// for after a running silver lease (further ahead than the clock skew a
// report's times may have) is evicted by a gold award before its start
// comes; the provider reports it preempted with no start, the renter takes
// that report and requeues the bronze job elsewhere at once, and nothing
// is billed for the booking that never ran.
func TestGoldEvictsFutureBronzeBooking(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 0.5, preempt: true})

	silver := job(terms.Silver, 2, 45*time.Second, "gate", "silver", "0")
	sv := r.post(silver)
	bronze := job(terms.Bronze, 1, time.Minute, "gate", "bronze", "0")
	bronze.Deadline = time.Now().Add(2 * time.Minute)
	bv := r.post(bronze)
	if bv.Winner != pa.id() || !bv.Lease.Start.After(time.Now().Add(attest.HeartbeatSkew)) {
		t.Fatalf("bronze on %s from %s: want a future booking on the H100 node after silver's %s", bv.Winner, bv.Lease.Start, sv.Lease.End)
	}
	bronzeStart := bv.Lease.Start
	// Another node, cheaper, for the bronze job to go to once evicted.
	pb := h.provider(provSpec{model: "A100", price: 0.3})

	gold := job(terms.Gold, 5, time.Minute, "gate", "gold", "0")
	gold.GPUModels = []string{"H100"}
	gold.Deadline = time.Now().Add(time.Minute)
	gv := r.post(gold)
	if gv.Winner != pa.id() {
		t.Fatalf("gold went to %s", gv.Winner)
	}
	bv = r.waitJob(bv.Job.ID, "bronze requeued elsewhere", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run == terms.RunRunning
	})
	if time.Now().After(bronzeStart) {
		t.Fatalf("the bronze job was requeued only after its evicted booking's start %s", bronzeStart)
	}
	first := bv.History[0]
	if first.Run != terms.RunPreempted || first.Lease.Provider != pa.id() || first.Fault != terms.FaultNone ||
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
	h.waitFor(3*time.Second, "evicted booking closed on the provider", func() bool {
		pl, ok := pa.lease(first.Lease.ID)
		return ok && pl.Run == terms.RunPreempted && pl.Started.IsZero()
	})
	if n := len(r.entries(record.KindReceipt, first.Lease.ID)) + len(pa.entries(record.KindReceipt, first.Lease.ID)); n != 0 {
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
	t.Parallel()
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	provs := map[string]*node{}
	for _, price := range []float64{1, 1.5} {
		p := h.provider(provSpec{model: "H100", price: price})
		provs[p.id()] = p
	}
	j := job(terms.Gold, 5, time.Minute, "gate", "serve", "0")
	j.Run.ServicePort = 8000
	j.MaxAttempts = 5
	v := r.post(j)
	r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	lost := provs[v.Winner]
	delete(provs, lost.id())
	h.net.Drop(peer.ID(lost.signer.ID()))
	v = r.waitJob(v.Job.ID, "ended", func(v api.JobView) bool { return v.State == terms.JobFinished })
	if v.Run != terms.RunFailed || v.Fault != terms.FaultProvider || len(v.History) != 0 || v.Lease.Provider != lost.id() ||
		!strings.Contains(v.Detail, "provider lost: no heartbeat") || !strings.Contains(v.Detail, "a service replica: its service replaces it") {
		t.Fatalf("lost replica: %s %s (fault %q) %q, %d earlier attempts", v.State, v.Run, v.Fault, v.Detail, len(v.History))
	}
	if n := counter(r, "renter.lease_lost"); n != 1 {
		t.Fatalf("renter.lease_lost = %d", n)
	}
	// No auction follows: the loss left the job finished (a requeue
	// would have left it queued), no re-offer of it waits, and the other
	// provider holds no lease.
	r.tracker.mu.Lock()
	_, queued := r.tracker.wake[v.Job.ID]
	r.tracker.mu.Unlock()
	if queued {
		t.Fatal("the lost replica's job waits to be offered again")
	}
	for _, p := range provs {
		if s := p.provider.Stats(); len(s.Leases) != 0 {
			t.Fatalf("the other provider got %d leases", len(s.Leases))
		}
	}
	if v, _ := r.tracker.View(v.Job.ID); v.State != terms.JobFinished || v.Job.Attempt != 0 {
		t.Fatalf("replica job after its loss: %s, attempt %d", v.State, v.Job.Attempt)
	}
}

// TestLossWhilePreparingInputs: a provider fetching a job's inputs sends
// heartbeats from the lease's start (marked preparing: they are not the
// run's start), so a slow fetch is not a loss; when it dies before the job
// starts, the renter calls the lease lost after LossAfter, not at the
// lease's end, and the job runs elsewhere.
func TestLossWhilePreparingInputs(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	// The inputs of the first provider to fetch them never arrive; the
	// others' do at once.
	var fetching sync.Mutex
	var stuck string
	slowFor := func(id *string) func(ctx context.Context, job terms.Job, dir string, keys *wire.LeaseKeys) (func(), string, error) {
		return func(ctx context.Context, job terms.Job, dir string, keys *wire.LeaseKeys) (func(), string, error) {
			fetching.Lock()
			first := stuck == ""
			if first {
				stuck = *id
			}
			fetching.Unlock()
			if first {
				<-ctx.Done()
				return nil, "", ctx.Err()
			}
			return func() {}, "", os.MkdirAll(dir, 0o700)
		}
	}
	provs := map[string]*node{}
	for _, price := range []float64{1, 1.5} {
		var id string
		p := h.provider(provSpec{model: "H100", price: price, inputs: slowFor(&id)})
		id = p.id()
		provs[id] = p
	}
	j := job(terms.Gold, 5, time.Minute, "gate", "work", "0")
	j.Run.Inputs = map[string]string{"data": strings.Repeat("ab", 32)}
	v := r.post(j)
	slow := provs[v.Winner]
	// A fetch several LossAfter long is no loss: the provider is heard.
	v = r.waitJob(v.Job.ID, "preparing heartbeats", func(v api.JobView) bool {
		return v.Heartbeats != nil && v.Heartbeats.Count >= 3*int(h.lossAfter/hbEvery)
	})
	if v.Run != terms.RunPending || !v.ObservedStart.IsZero() || v.LastTelemetry == nil || !v.LastTelemetry.Preparing ||
		counter(r, "renter.lease_lost") != 0 || len(v.History) != 0 {
		t.Fatalf("while its inputs are fetched: run %s, observed start %s, lost %d, %d earlier attempts",
			v.Run, v.ObservedStart, counter(r, "renter.lease_lost"), len(v.History))
	}
	fetching.Lock()
	if stuck != slow.id() {
		t.Fatalf("the stuck fetch is on %s, the lease on %s", stuck, slow.id())
	}
	fetching.Unlock()
	silentAt := time.Now()
	h.net.Drop(peer.ID(slow.signer.ID()))
	v = r.waitJob(v.Job.ID, "requeued elsewhere", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run == terms.RunRunning
	})
	if took := time.Since(silentAt); took > 10*h.lossAfter {
		t.Fatalf("loss before the start noticed after %s", took)
	}
	first := v.History[0]
	if first.Lease.Provider != slow.id() || first.Run != terms.RunFailed || first.Fault != terms.FaultProvider ||
		!strings.HasPrefix(first.Detail, "provider lost: no heartbeat for ") || !strings.Contains(first.Detail, "the job had not started") ||
		!first.Started.IsZero() {
		t.Fatalf("lost attempt %+v", first)
	}
	if v.Lease.Provider == slow.id() || !v.Job.Excludes(slow.id()) {
		t.Fatalf("second attempt on %s, excluding %v", v.Lease.Provider, v.Job.Exclude)
	}
	provs[v.Lease.Provider].exec.open("work")
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.State != terms.JobFinished {
		t.Fatalf("job ended %s (%s)", v.Run, v.State)
	}
}

// TestLostLeaseSettlesAfterRenterRestart: a renter calls a silent
// provider's lease lost and requeues the job, then restarts; the lost
// provider comes back and reports: the restarted renter still takes its
// late report and countersigns its receipt, bounded by the heartbeats it
// saw before the loss.
func TestLostLeaseSettlesAfterRenterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 1})
	pb := h.provider(provSpec{model: "H100", price: 1.5})
	v := r.post(job(terms.Gold, 5, time.Minute, "gate", "work", "0"))
	lost, other := pa, pb
	if v.Winner == pb.id() {
		lost, other = pb, pa
	}
	r.waitJob(v.Job.ID, "running with heartbeats", func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.Heartbeats != nil && v.Heartbeats.Count >= 3
	})
	h.net.Drop(peer.ID(lost.signer.ID()))
	v = r.waitJob(v.Job.ID, "requeued elsewhere", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Lease.Provider == other.id() && v.Run == terms.RunRunning
	})
	first := v.History[0]
	r.kill()
	r = r.restart()
	h.net.Restore(peer.ID(lost.signer.ID()))
	lost.exec.open("work")
	h.waitFor(5*time.Second, "the lost lease settled with the restarted renter", func() bool {
		got, err := r.tracker.View(v.Job.ID)
		return err == nil && len(got.History) == 1 && got.History[0].Receipt
	})
	es := r.entries(record.KindReceipt, first.Lease.ID)
	if len(es) != 1 {
		t.Fatalf("%d receipts for the lost lease", len(es))
	}
	sr, err := attest.UnmarshalReceipt(es[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	seen := first.Ended.Sub(first.Started).Seconds()
	if billed := sr.Receipt.GPUSeconds; billed <= 0 || billed > seen+2*hbEvery.Seconds() {
		t.Fatalf("lost lease billed %.3f GPU-s; the renter saw %.3f s of it", billed, seen)
	}
	got, _ := r.tracker.View(v.Job.ID)
	if rec := got.History[0]; rec.CostUSD != sr.Receipt.Amount || !strings.Contains(rec.Detail, "its provider reported later: succeeded") {
		t.Fatalf("lost attempt after its late settlement %+v", rec)
	}
	other.exec.open("work")
	r.waitJob(v.Job.ID, "settled", settled)
}
