package lease

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestSilentProviderJobRecoversElsewhere: the provider of a running gold
// job goes silent; once no heartbeat came for LossAfter the renter calls
// the lease lost and the job goes back to auction at once, for its whole
// duration, the silent provider excluded; it completes on another
// provider. When the lost provider comes back and reports, it is paid up
// to the last heartbeat the renter saw, not for the time it ran on after.
func TestSilentProviderJobRecoversElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 1})
	pb := h.provider(provSpec{model: "H100", price: 1.5})
	v := r.post(job(terms.Gold, 5, time.Minute, "gate", "work", "0"))
	// A gold auction closes at the first bid that can start at once.
	lost, other := pa, pb
	if v.Winner == pb.id() {
		lost, other = pb, pa
	}
	r.waitJob(v.Job.ID, "running with heartbeats", func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.Heartbeats != nil && v.Heartbeats.Count >= 3
	})
	silentAt := time.Now()
	h.net.Drop(peer.ID(lost.signer.ID()))
	v = r.waitJob(v.Job.ID, "requeued elsewhere", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run == terms.RunRunning
	})
	first := v.History[0]
	if first.Lease.Provider != lost.id() || first.Run != terms.RunFailed || first.Fault != terms.FaultProvider ||
		!strings.HasPrefix(first.Detail, "provider lost: no heartbeat for ") || first.Receipt {
		t.Fatalf("lost attempt %+v", first)
	}
	if first.Ended.After(silentAt.Add(2*hbEvery)) || first.Ended.Before(first.Started) {
		t.Fatalf("lost attempt observed until %s; the provider went silent at %s", first.Ended, silentAt)
	}
	if v.Lease.Provider != other.id() || v.Job.Duration != time.Minute || !v.Job.Excludes(lost.id()) || len(v.Job.Exclude) != 1 {
		t.Fatalf("second attempt on %s: duration %v exclude %v", v.Lease.Provider, v.Job.Duration, v.Job.Exclude)
	}
	if v.Lease.Attempt <= first.Attempt || v.Lease.Tier != terms.Gold {
		t.Fatalf("second lease attempt %d tier %s after attempt %d", v.Lease.Attempt, v.Lease.Tier, first.Attempt)
	}
	if n := counter(r, "renter.lease_lost"); n != 1 {
		t.Fatalf("renter.lease_lost = %d", n)
	}

	// The lost provider comes back (its job ran on meanwhile): its
	// heartbeats are refused, and its late report settles for what the
	// renter saw.
	h.net.Restore(peer.ID(lost.signer.ID()))
	h.waitFor(3*time.Second, "the lost provider's heartbeats refused", func() bool {
		return counter(r, "renter.heartbeat_after_loss") > 0
	})
	lost.exec.open("work")
	h.waitFor(5*time.Second, "lost lease settled", func() bool {
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
	pl, _ := lost.lease(first.Lease.ID)
	ran := pl.Ended.Sub(pl.Started).Seconds()
	seen := first.Ended.Sub(first.Started).Seconds()
	if billed := sr.Receipt.GPUSeconds; billed > seen+2*hbEvery.Seconds() || ran < seen+h.lossAfter.Seconds() {
		t.Fatalf("lost lease billed %.3f GPU-s; the renter saw %.3f s of it, the provider ran %.3f s", billed, seen, ran)
	}
	got, _ := r.tracker.View(v.Job.ID)
	if rec := got.History[0]; math.Abs(rec.CostUSD-sr.Receipt.Amount) > 1e-12 || !strings.Contains(rec.Detail, "its provider reported later: succeeded") {
		t.Fatalf("lost attempt after its late settlement %+v", rec)
	}
	// It reported before the lease's end: no abandonment.
	if st := r.book.Stats(lost.id()); st.Slashes != 0 {
		t.Fatalf("provider that reported its lost lease slashed %d times", st.Slashes)
	}

	other.exec.open("work")
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.State != terms.JobFinished || v.Lease.Provider != other.id() {
		t.Fatalf("job ended %s (%s) on %s", v.Run, v.State, v.Lease.Provider)
	}
	if want := got.History[0].CostUSD + v.Receipt.Amount; math.Abs(v.CostUSD-want) > 1e-12 {
		t.Fatalf("job cost %v, want both attempts' %v", v.CostUSD, want)
	}
}

// TestAttemptBudgetEndsJob: a job of two attempts whose providers both go
// silent ends failed after the second, saying its budget is spent; the
// third provider never gets it.
func TestAttemptBudgetEndsJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.lossAfter = 300 * time.Millisecond
	r := h.renter()
	provs := map[string]*node{}
	for _, price := range []float64{1, 1.2, 1.4} {
		p := h.provider(provSpec{model: "A100", price: price})
		provs[p.id()] = p
	}
	j := job(terms.Silver, 5, time.Minute, "gate", "work", "0")
	j.MaxAttempts = 2
	v := r.post(j)
	for i := range 2 {
		v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool {
			return len(v.History) == i && v.Lease != nil && v.Run == terms.RunRunning && v.LastTelemetry != nil
		})
		p := provs[v.Lease.Provider]
		delete(provs, p.id())
		h.net.Drop(peer.ID(p.signer.ID()))
	}
	var p3 *node
	for _, p := range provs {
		p3 = p
	}
	v = r.waitJob(v.Job.ID, "ended", func(v api.JobView) bool { return v.State == terms.JobFinished })
	if len(v.History) != 1 || v.Lease.Provider == v.History[0].Lease.Provider || v.Run != terms.RunFailed || v.Fault != terms.FaultProvider ||
		!strings.Contains(v.Detail, "provider lost: no heartbeat") || !strings.Contains(v.Detail, "attempt budget spent (2 of 2 attempts used)") {
		t.Fatalf("job ended %s (%s, fault %q): %q after %d earlier attempts", v.State, v.Run, v.Fault, v.Detail, len(v.History))
	}
	if s := p3.provider.Stats(); len(s.Leases) != 0 {
		t.Fatalf("third provider got %d leases", len(s.Leases))
	}
}

// TestJobFaultIsNotRequeuedNorHeldAgainstTheProvider: a job that exits 1
// ends there (its own fault: not requeued, though another provider could
// take it), and the provider's reputation as a third node sees it, from
// the gossiped receipt, is what it was.
func TestJobFaultIsNotRequeuedNorHeldAgainstTheProvider(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	third := h.renter()
	provs := map[string]*node{}
	for _, price := range []float64{1, 1.5} {
		p := h.provider(provSpec{model: "A100", price: price})
		provs[p.id()] = p
	}
	v := r.post(job(terms.Silver, 2, time.Minute, "run", "20", "1"))
	p := provs[v.Winner]
	before := third.book.Stats(p.id()).Score
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunFailed || v.Fault != terms.FaultJob || v.State != terms.JobFinished || len(v.History) != 0 || v.Job.Attempt != 0 {
		t.Fatalf("job that exited 1: run %s fault %q state %s, %d earlier attempts", v.Run, v.Fault, v.State, len(v.History))
	}
	h.waitFor(3*time.Second, "third node heard the receipt", func() bool { return third.book.Stats(p.id()).JobFaults == 1 })
	if st := third.book.Stats(p.id()); math.Abs(st.Score-before) > 1e-12 || st.Failed != 0 {
		t.Fatalf("third node's view of the provider: score %.6f (was %.6f), %+v", st.Score, before, st)
	}
	// A provider fault, by contrast, costs it there: a restarted
	// provider's failure, gossiped with its receipt.
	v = r.post(job(terms.Silver, 2, time.Minute, "gate", "never", "0"))
	p = provs[v.Winner]
	r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	p.kill()
	p.restart()
	h.waitFor(5*time.Second, "third node heard the provider's failure", func() bool { return third.book.Stats(p.id()).Failed == 1 })
	if st := third.book.Stats(p.id()); st.Completion >= attest.Prior {
		t.Fatalf("third node's view after a provider fault: completion %.6f, prior %.6f", st.Completion, attest.Prior)
	}
}
