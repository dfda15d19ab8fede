package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/libp2p/go-libp2p/core/peer"
	"io"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

// lie sends a lease event signed by the provider's own key: the provider
// itself is the liar, so only the renter's checks stand in the way.
func lie(t *testing.T, p, r *node, ev wire.LeaseEvent) ([]byte, error) {
	t.Helper()
	b, err := sealed(p.signer, sign.DomainLeaseEvent, ev)
	if err != nil {
		t.Fatal(err)
	}
	return p.tr.Request(t.Context(), peer.ID(r.signer.ID()), wire.ProtoLeaseEvent, b)
}

// claim sends a receipt signed by the provider for the renter to countersign.
func claim(t *testing.T, p, r *node, rc attest.Receipt) ([]byte, error) {
	t.Helper()
	sr, err := attest.NewReceipt(p.signer, rc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return p.tr.Request(t.Context(), peer.ID(r.signer.ID()), wire.ProtoReceipt, b)
}

func counter(n *node, key string) int { return n.counters.Snapshot()[key] }

// logDigest is the SHA-256 (hex) and length of the log provider p serves
// renter r for a lease, as r's own fetch reads it.
func logDigest(t *testing.T, p, r *node, leaseID string) (string, int64) {
	t.Helper()
	rc, err := streams{p.h, peer.ID(r.signer.ID())}.FetchLog(t.Context(), peer.ID(p.signer.ID()), leaseID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// TestProviderIsPaidOnlyForWhatTheRenterSaw: a provider that claims its job
// ended hours in the future, asks for a receipt before reporting the end,
// bills the whole lease, and then settles again and again, is refused each
// time; the renter countersigns one receipt bounded by what it observed, a
// retry of that same receipt gets the same answer, and its ledger owes one
// payment.
func TestProviderIsPaidOnlyForWhatTheRenterSaw(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "done", "0"))
	v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	l := *v.Lease
	receipt := func(start, end time.Time, gpuSec float64, hs attest.HeartbeatSummary) attest.Receipt {
		return attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: l.Provider,
			Start: start, End: end, GPUCount: 1, GPUSeconds: gpuSec, Price: l.Price,
			Amount: attest.AmountFor(gpuSec, l.Price), Outcome: terms.RunSucceeded, Heartbeats: hs, IssuedAt: time.Now()}
	}

	// 1. An end hours in the future (and past the lease) is refused.
	if _, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunSucceeded,
		Started: l.Start, Ended: time.Now().Add(3 * time.Hour), Time: time.Now()}); err == nil {
		t.Fatal("an end hours in the future was taken")
	}
	if got := counter(r, "renter.event_bad_time"); got != 1 {
		t.Fatalf("renter.event_bad_time = %d", got)
	}
	// 2. A receipt for the whole lease before any final report is refused.
	if _, err := claim(t, p, r, receipt(l.Start, l.End, l.End.Sub(l.Start).Seconds(), attest.HeartbeatSummary{})); err == nil {
		t.Fatal("a receipt before the final report was countersigned")
	}
	// 3. The provider now reports an end (its own word, by its own key)...
	ended := time.Now()
	digest, size := logDigest(t, p, r, l.ID) // the log so far: evidence the renter can check
	resp, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunSucceeded,
		Started: l.Start, Ended: ended, Time: ended, LogDigest: digest, LogBytes: size})
	if err != nil {
		t.Fatalf("final report refused: %v", err)
	}
	var sum attest.HeartbeatSummary
	if err := json.Unmarshal(resp, &sum); err != nil || sum.Count == 0 {
		t.Fatalf("renter's heartbeat summary %+v (%v)", sum, err)
	}
	// ...and bills 20 s it never ran (the end is within the clock skew).
	if _, err := claim(t, p, r, receipt(l.Start, ended.Add(20*time.Second), ended.Add(20*time.Second).Sub(l.Start).Seconds(), sum)); err == nil {
		t.Fatal("an overbilled receipt was countersigned")
	}
	if got := counter(r, "renter.receipt_overbilled"); got != 1 {
		t.Fatalf("renter.receipt_overbilled = %d", got)
	}
	// 4. A receipt within what the renter saw settles; its retry gets the
	// same countersigned receipt back; any other receipt is refused.
	fair := receipt(l.Start, ended, attest.BillableSeconds(l, l.Start, ended, ended, sum), sum)
	fair.LogDigest = digest
	first, err := claim(t, p, r, fair)
	if err != nil {
		t.Fatalf("fair receipt refused: %v", err)
	}
	again, err := claim(t, p, r, fair)
	if err != nil || string(again) != string(first) {
		t.Fatalf("retry of the settled receipt: %v (same answer: %v)", err, string(again) == string(first))
	}
	more := fair
	more.GPUSeconds, more.Amount = fair.GPUSeconds/2, attest.AmountFor(fair.GPUSeconds/2, l.Price)
	if _, err := claim(t, p, r, more); err == nil {
		t.Fatal("a second, different receipt for a settled lease was countersigned")
	}
	// 5. The real job ends later: its report and receipt change nothing.
	p.exec.open("done")
	h.waitFor(3*time.Second, "provider's own settlement attempt refused", func() bool {
		return counter(r, "renter.receipt_duplicate") >= 2
	})
	if es := r.entries(record.KindPaymentOwed, l.ID); len(es) != 1 || es[0].Amount != fair.Amount {
		t.Fatalf("renter owes %v for the lease, want one payment of %v", es, fair.Amount)
	}
	if es := r.entries(record.KindReceipt, l.ID); len(es) != 1 {
		t.Fatalf("renter recorded %d receipts", len(es))
	}
}

// TestLateEventsNeverMoveStateBack: a "running" report arriving after the
// lease ended (late or replayed) is ignored and counted; the job stays
// finished, and no abandonment is declared after the lease's end.
func TestLateEventsNeverMoveStateBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.abandonGrace = 50 * time.Millisecond
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Second, "run", "20", "0"))
	v = r.waitJob(v.Job.ID, "settled", settled)
	l := *v.Lease
	if _, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunRunning,
		Started: v.Started, Time: time.Now()}); err != nil {
		t.Fatalf("late event answered with an error: %v", err)
	}
	if got := counter(r, "renter.event_stale"); got != 1 {
		t.Fatalf("renter.event_stale = %d", got)
	}
	// Past the lease end and the grace, once the renter's abandonment
	// check ran.
	h.waitFor(time.Until(l.End.Add(h.abandonGrace))+3*time.Second, "abandonment checked", func() bool { return counter(r, "renter.abandon_checked") != 0 })
	got, err := r.tracker.View(v.Job.ID)
	if err != nil || got.Run != terms.RunSucceeded || got.State != terms.JobFinished {
		t.Fatalf("after a late event: run %s state %s (%v)", got.Run, got.State, err)
	}
	if st := r.book.Stats(p.id()); st.Slashes != 0 {
		t.Fatalf("provider slashed %d times for a lease it completed", st.Slashes)
	}
}

// TestFailingJobIsTheJobsFault: a job whose command exits non-zero fails
// through its own fault: the final report and the two-party receipt say so,
// and the renter's book does not count it against the provider.
func TestFailingJobIsTheJobsFault(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "run", "20", "3"))
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunFailed || v.Fault != terms.FaultJob || v.Receipt.Fault != terms.FaultJob {
		t.Fatalf("run %s fault %q receipt fault %q", v.Run, v.Fault, v.Receipt.Fault)
	}
	if st := r.book.Stats(p.id()); st.Failed != 0 || st.JobFaults != 1 {
		t.Fatalf("provider's record %+v", st)
	}
}
