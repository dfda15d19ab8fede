package lease

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

// TestSucceededRunIsPaidOnItsLog: an honest run's final report names its
// log; the renter fetches the log, finds the same digest, and countersigns
// a receipt that carries it.
func TestSucceededRunIsPaidOnItsLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "run", "20", "0"))
	v = r.waitJob(v.Job.ID, "settled", settled)
	digest, size := logDigest(t, p, r, v.Lease.ID)
	if size == 0 || v.Run != terms.RunSucceeded || v.Receipt.LogDigest != digest || v.LogDigest != digest || v.LogBytes != size {
		t.Fatalf("run %s: receipt's log digest %q, reported %q (%d bytes), fetched %q (%d bytes)",
			v.Run, v.Receipt.LogDigest, v.LogDigest, v.LogBytes, digest, size)
	}
	if !strings.HasPrefix(v.Evidence, evidenceVerified) {
		t.Fatalf("evidence %q", v.Evidence)
	}
	h.waitFor(3*time.Second, "provider settled", func() bool { return len(p.entries(record.KindReceipt, v.Lease.ID)) == 1 })
}

// TestSilentJobIsPaidOnItsEmptyLog: a job that writes no log and no
// outputs is evidenced by the empty log's digest, which the renter's own
// fetch (empty too) matches.
func TestSilentJobIsPaidOnItsEmptyLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	h.provider(provSpec{model: "A100", price: 1, exec: realProcessExec(t)})
	v := r.post(job(terms.Silver, 2, time.Minute, "/bin/true"))
	v = r.waitJob(v.Job.ID, "settled", settled)
	empty := sha256.Sum256(nil)
	if v.Run != terms.RunSucceeded || v.LogBytes != 0 || v.Receipt.LogDigest != hex.EncodeToString(empty[:]) || v.OutputCount != 0 {
		t.Fatalf("silent job: run %s (%s), %d log bytes, receipt's log digest %q, %d outputs", v.Run, v.Detail, v.LogBytes, v.Receipt.LogDigest, v.OutputCount)
	}
}

// TestForgedLogIsNotPaid: a provider that reports success but serves its
// renter a log other than the one its report names is not paid: the renter
// holds the run failed through the provider's fault, refuses the succeeded
// receipt, and runs the job again elsewhere without that provider. (The
// log is longer than a report carries, so the renter fetches it.)
func TestForgedLogIsNotPaid(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	liar := h.provider(provSpec{model: "A100", price: 1})
	honest := h.provider(provSpec{model: "A100", price: 1.5})
	forged := func(string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("epoch 1 loss 0.1\n")), nil }
	liar.crash.serveLog.Store(&forged)
	j := job(terms.Silver, 2, time.Minute, "run", "20", "0")
	j.Run.Env = map[string]string{"FAKE_LOG_BYTES": strconv.Itoa(2 * wire.MaxInlineLog)}
	v := r.post(j)
	if v.Winner != liar.id() {
		t.Fatalf("the cheaper provider did not win")
	}
	first := v.Lease.ID
	v = r.waitJob(v.Job.ID, "run again and settled", func(v api.JobView) bool { return len(v.History) == 1 && v.Receipt != nil })
	hr := v.History[0]
	if hr.Lease.ID != first || hr.Run != terms.RunFailed || hr.Fault != terms.FaultProvider || hr.Receipt ||
		!strings.Contains(hr.Detail, "no evidence of work") {
		t.Fatalf("forged attempt in history: %+v", hr)
	}
	if v.Lease.Provider != honest.id() || v.Run != terms.RunSucceeded || !v.Job.Excludes(liar.id()) {
		t.Fatalf("second attempt on %s (honest %s): run %s, excluded %v", v.Lease.Provider, honest.id(), v.Run, v.Job.Exclude)
	}
	h.waitFor(3*time.Second, "the liar's receipt refused", func() bool { return counter(liar, "provider.settle_retry") >= 1 })
	if es := r.entries(record.KindPaymentOwed, first); len(es) != 0 {
		t.Fatalf("renter owes %v for the forged run", es)
	}
	if es := liar.entries(record.KindReceipt, first); len(es) != 0 {
		t.Fatalf("liar holds %d receipts for the forged run", len(es))
	}
	if got := counter(r, "renter.no_evidence"); got != 1 {
		t.Fatalf("renter.no_evidence = %d", got)
	}
}

// TestSuccessWithoutEvidenceIsNotCountersigned: the finding: a provider
// sends heartbeats for a while, then reports "succeeded" with no outputs
// and no log digest, and asks for a receipt whose result hash is the empty
// manifest's: the renter does not countersign it.
func TestSuccessWithoutEvidenceIsNotCountersigned(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "never", "0"))
	v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	l := *v.Lease
	ended := time.Now()
	resp, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunSucceeded,
		Started: l.Start, Ended: ended, Time: ended})
	if err != nil {
		t.Fatalf("final report refused: %v", err)
	}
	var sum attest.HeartbeatSummary
	if err := json.Unmarshal(resp, &sum); err != nil {
		t.Fatal(err)
	}
	rc := attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: l.Provider, Start: l.Start, End: ended,
		GPUCount: 1, GPUSeconds: attest.BillableSeconds(l, l.Start, ended, ended, sum), Price: l.Price,
		Outcome: terms.RunSucceeded, ResultHash: terms.ManifestHash(nil), Heartbeats: sum, IssuedAt: time.Now()}
	rc.Amount = attest.AmountFor(rc.GPUSeconds, rc.Price)
	// Refused while the check runs or once it failed (the run is then
	// failed at the provider's fault, which the receipt contradicts).
	if _, err := claim(t, p, r, rc); err == nil {
		t.Fatal("a succeeded receipt without evidence was countersigned")
	}
	if es := r.entries(record.KindPaymentOwed, l.ID); len(es) != 0 {
		t.Fatalf("renter owes %v for a run it has no evidence of", es)
	}
	got := r.waitJob(v.Job.ID, "attempt archived", func(v api.JobView) bool { return len(v.History) == 1 })
	if hr := got.History[0]; hr.Run != terms.RunFailed || hr.Fault != terms.FaultProvider || !strings.Contains(hr.Detail, "no evidence of work: the provider's final report names no log digest") {
		t.Fatalf("run without evidence: %+v", hr)
	}
}

// TestForgedInlineLogIsNotPaid: a final report that carries a log (short
// logs ride in it, unfetched) other than the one its digest names is no
// evidence: the succeeded run is held failed through the provider's
// fault, as a forged fetch is.
func TestForgedInlineLogIsNotPaid(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "never", "0"))
	v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	l := *v.Lease
	// The report names the log the provider serves (a fetch would match
	// it) but carries another of the same length.
	digest, size := logDigest(t, p, r, l.ID)
	ended := time.Now()
	_, err := lie(t, p, r, wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: l.Provider, Run: terms.RunSucceeded,
		Started: l.Start, Ended: ended, Time: ended, LogDigest: digest, LogBytes: size,
		Log: bytes.Repeat([]byte("y"), int(size)), LogInline: true})
	if err != nil {
		t.Fatalf("final report refused: %v", err)
	}
	got := r.waitJob(v.Job.ID, "attempt archived", func(v api.JobView) bool { return len(v.History) == 1 })
	if hr := got.History[0]; hr.Run != terms.RunFailed || hr.Fault != terms.FaultProvider || !strings.Contains(hr.Detail, "is not the one reported") {
		t.Fatalf("run on a forged inline log: %+v", hr)
	}
	if got := counter(r, "renter.no_evidence"); got != 1 {
		t.Fatalf("renter.no_evidence = %d", got)
	}
}
