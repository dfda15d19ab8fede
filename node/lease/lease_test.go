package lease

import (
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

func settled(v api.JobView) bool { return v.Receipt != nil }

// TestRunToSuccess: a job runs on the winner with heartbeats, ends
// succeeded, and both ledgers hold the same two-party receipt with matching
// payments; an observer that only heard the gossip counts the receipt.
func TestRunToSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p, observer := h.renter(), h.provider(provSpec{model: "A100", price: 1}), h.renter()
	j := job(terms.Silver, 2, time.Minute, "gate", "done", "0")
	j.Run.Outputs = "out"
	v := r.post(j)
	if v.Winner != p.id() || v.State != terms.JobLeased && v.State != terms.JobFinished {
		t.Fatalf("leased to %s (%s), want %s", v.Winner, v.State, p.id())
	}
	// The job runs until the renter holds heartbeats that bill some of
	// it, up to the latest (a job of a fixed 200 ms could end, on a loaded
	// host, with its 40 ms heartbeats all sent late: nothing billable).
	r.waitJob(v.Job.ID, "running with billable heartbeats", func(v api.JobView) bool {
		if v.Run != terms.RunRunning || v.Heartbeats == nil || v.LastTelemetry == nil || v.Heartbeats.Count < 2 {
			return false
		}
		last := v.LastTelemetry.Time
		return attest.BillableSeconds(*v.Lease, v.Started, last, last, *v.Heartbeats) > 0
	})
	p.exec.open("done")
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.ExitCode == nil || *v.ExitCode != 0 {
		t.Fatalf("run %s exit %v (%s)", v.Run, v.ExitCode, v.Detail)
	}
	if v.State != terms.JobFinished || v.Lease.State != terms.RunSucceeded {
		t.Fatalf("finished job: state %s, lease %s", v.State, v.Lease.State)
	}
	rc := v.Receipt
	if rc.Outcome != terms.RunSucceeded || rc.Heartbeats.Count < 2 || rc.Heartbeats.Rejected != 0 || rc.Amount <= 0 || v.CostUSD != rc.Amount {
		t.Fatalf("receipt %+v, cost %v", rc, v.CostUSD)
	}
	h.waitFor(3*time.Second, "provider settled", func() bool { return len(p.entries(record.KindReceipt, v.Lease.ID)) == 1 })
	owed, earned := r.entries(record.KindPaymentOwed, rc.LeaseID), p.entries(record.KindPaymentEarned, rc.LeaseID)
	rr, pr := r.entries(record.KindReceipt, rc.LeaseID), p.entries(record.KindReceipt, rc.LeaseID)
	if len(owed) != 1 || len(earned) != 1 || owed[0].Amount != rc.Amount || earned[0].Amount != rc.Amount ||
		len(rr) != 1 || len(pr) != 1 || string(rr[0].Data) != string(pr[0].Data) {
		t.Fatalf("ledgers: owed %v earned %v receipts %d/%d", owed, earned, len(rr), len(pr))
	}
	if pl, ok := p.lease(v.Lease.ID); !ok || pl.Run != terms.RunSucceeded {
		t.Fatalf("provider's record %+v", pl)
	}
	// Outputs: reported with their checksums, bound into the receipt, and
	// readable by the renter alone.
	if len(v.Outputs) != 1 || v.Outputs[0].Path != "r.txt" || rc.ResultHash != terms.ManifestHash(v.Outputs) {
		t.Fatalf("outputs %+v, receipt result hash %q", v.Outputs, rc.ResultHash)
	}
	if _, ok := p.sup.Authorize(v.Lease.ID, peer.ID(observer.signer.ID())); ok {
		t.Fatal("a peer that is not the renter may read the lease")
	}
	if n := p.counters.Snapshot()["provider.unauthorized_stream"]; n != 1 {
		t.Fatalf("unauthorized_stream = %d", n)
	}
	acc, ok := p.sup.Authorize(v.Lease.ID, peer.ID(r.signer.ID()))
	if !ok || !acc.Ended() {
		t.Fatalf("renter's access %v, ended %v", ok, ok && acc.Ended())
	}
	outs, done := acc.Outputs()
	body, err := os.ReadFile(filepath.Join(acc.OutputDir(), "r.txt"))
	if !done || len(outs) != 1 || outs[0] != v.Outputs[0] || err != nil || string(body) != "result\n" {
		t.Fatalf("provider's outputs %+v (ended %v), file %q (%v)", outs, done, body, err)
	}
	if log, err := os.ReadFile(acc.LogPath()); err != nil || !strings.Contains(string(log), "fake job "+v.Lease.ID+" started") {
		t.Fatalf("log %q (%v)", log, err)
	}
	h.waitFor(3*time.Second, "observer heard the receipt", func() bool { return observer.book.Stats(p.id()).Receipts == 1 })
	if st := r.book.Stats(p.id()); st.Completed != 1 {
		t.Fatalf("renter's book %+v", st)
	}
}

// TestFailedRunSettles: a non-zero exit is a failed, finished run that
// still settles for the time used.
func TestFailedRunSettles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, _ := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "run", "50", "3"))
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunFailed || v.ExitCode == nil || *v.ExitCode != 3 || v.Receipt.Outcome != terms.RunFailed || v.State != terms.JobFinished {
		t.Fatalf("run %s exit %v outcome %s state %s", v.Run, v.ExitCode, v.Receipt.Outcome, v.State)
	}
}

// TestCancel: the renter cancels a running job; its provider stops it and
// the lease settles as cancelled. A cancel signed by anyone else is refused.
func TestCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p, other := h.renter(), h.provider(provSpec{model: "A100", price: 1}), h.renter()
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "never", "0"))
	r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })

	forged, err := sealed(other.signer, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: v.Lease.ID, JobID: v.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.tr.Request(t.Context(), peer.ID(p.signer.ID()), wire.ProtoCancel, forged); err == nil {
		t.Fatal("a cancel from a peer that is not the renter was accepted")
	}
	if n := p.counters.Snapshot()["provider.cancel_rejected"]; n != 1 {
		t.Fatalf("cancel_rejected = %d", n)
	}
	if pl, _ := p.lease(v.Lease.ID); pl.Run != terms.RunRunning {
		t.Fatalf("forged cancel stopped the job: %s", pl.Run)
	}

	if _, err := r.tracker.Cancel(v.Job.ID); err != nil {
		t.Fatal(err)
	}
	v = r.waitJob(v.Job.ID, "cancelled and settled", func(v api.JobView) bool { return v.Run == terms.RunCancelled && settled(v) })
	if v.State != terms.JobFinished || v.Detail != "cancelled by the renter" || v.Receipt.Outcome != terms.RunCancelled {
		t.Fatalf("state %s detail %q outcome %s", v.State, v.Detail, v.Receipt.Outcome)
	}
	var re *RequestError
	if _, err := r.tracker.Cancel(v.Job.ID); !errors.As(err, &re) || re.Missing {
		t.Fatalf("cancelling a finished job: %v", err)
	}
	if _, err := r.tracker.Cancel("job-nope"); !errors.As(err, &re) || !re.Missing {
		t.Fatalf("cancelling an unknown job: %v", err)
	}
}

// TestGoldPreemptsBronze: a gold lease evicts a running bronze one on the
// only node with an H100; the bronze job is stopped, settled for the time
// it ran, and requeued (without a checkpoint: from the start), which runs
// on the other node.
func TestGoldPreemptsBronze(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 0.5, preempt: true})
	pb := h.provider(provSpec{model: "A100", price: 0.8})

	bronze := job(terms.Bronze, 1, time.Minute, "gate", "bronze", "0")
	// It must start within two minutes: the H100 node, booked by gold for
	// ten, cannot take it back.
	bronze.Deadline = time.Now().Add(2 * time.Minute)
	bv := r.post(bronze)
	if bv.Winner != pa.id() {
		t.Fatalf("bronze went to %s, want the cheaper H100 node", bv.Winner)
	}
	// Running for a few heartbeats, so that its billable span is not all
	// scheduling jitter (a gold auction closes at its first good bid).
	r.waitJob(bv.Job.ID, "bronze running", func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.Heartbeats != nil && v.Heartbeats.Count >= 3
	})

	gold := job(terms.Gold, 5, 10*time.Minute, "gate", "gold", "0")
	gold.GPUModels = []string{"H100"}
	gv := r.post(gold)
	if gv.Winner != pa.id() {
		t.Fatalf("gold went to %s", gv.Winner)
	}
	// Running on the second lease with telemetry: a run that sent no
	// heartbeat bills nothing (attest.BillableSeconds), and the test below
	// wants the second lease billed.
	bv = r.waitJob(bv.Job.ID, "bronze on its second lease", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run == terms.RunRunning && v.Heartbeats != nil && v.Heartbeats.Count >= 2
	})
	first := bv.History[0]
	if first.Run != terms.RunPreempted || first.Lease.Provider != pa.id() || !first.Receipt || first.Attempt != 0 {
		t.Fatalf("first bronze lease: %+v", first)
	}
	// The job saved no checkpoint (these providers take none): it starts
	// over and needs its whole minute again.
	if bv.Lease.Provider != pb.id() || bv.Job.Attempt != 1 || bv.State != terms.JobLeased || bv.Job.Duration != time.Minute || len(bv.Job.Restore) != 0 {
		t.Fatalf("requeued bronze: provider %s attempt %d state %s duration %s", bv.Lease.Provider, bv.Job.Attempt, bv.State, bv.Job.Duration)
	}
	used := first.Ended.Sub(first.Started)
	// The receipt bills the run's span, clamped to the lease, less the
	// heartbeat gaps in the summary both sides agreed on (exactly what
	// attest.BillableSeconds allows). How much of the run the gaps take is
	// the host's scheduling (go test -race on a loaded host saw 125 ms of a
	// 199 ms run): the summary carries at least the heartbeats the renter
	// saw before the preemption, and the bill is more than nothing.
	es := r.entries(record.KindReceipt, first.Lease.ID)
	if len(es) != 1 {
		t.Fatalf("%d receipts for the preempted lease", len(es))
	}
	sr, err := attest.UnmarshalReceipt(es[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	billable := attest.BillableSeconds(first.Lease, first.Started, first.Ended, first.Ended, sr.Receipt.Heartbeats)
	if n := sr.Receipt.Heartbeats.Count; n < 3 {
		t.Fatalf("preempted lease's receipt counts %d heartbeats, the renter saw 3 before the preemption", n)
	}
	if want := attest.AmountFor(billable, first.Lease.Price); used <= 0 || billable <= 0 || math.Abs(first.CostUSD-want) > 1e-9 {
		t.Fatalf("preempted lease billed %v for %s (billable %.4fs), want %v", first.CostUSD, used, billable, want)
	}
	if !strings.Contains(strings.Join(bv.Reasons, ";"), "requeued after attempt 0") {
		t.Fatalf("reasons %v", bv.Reasons)
	}

	pa.exec.open("gold")
	pb.exec.open("bronze")
	gv = r.waitJob(gv.Job.ID, "gold settled", settled)
	bv = r.waitJob(bv.Job.ID, "bronze settled", settled)
	for _, v := range []api.JobView{gv, bv} {
		if v.Run != terms.RunSucceeded || v.State != terms.JobFinished {
			t.Fatalf("job %s: run %s state %s", v.Job.ID, v.Run, v.State)
		}
	}
	if bv.CostUSD <= first.CostUSD {
		t.Fatalf("bronze total %v should add the second lease to the first %v", bv.CostUSD, first.CostUSD)
	}
}

// TestReceiptMismatchRejected: the renter refuses to countersign a receipt
// that disagrees with the lease or with the heartbeats it verified, and
// records nothing; the honest receipt then settles.
func TestReceiptMismatchRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "done", "0"))
	v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	l := *v.Lease
	honest := attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: l.Provider,
		Start: l.Start, End: l.Start.Add(time.Second), GPUCount: 1, GPUSeconds: 1, Price: l.Price,
		Amount: attest.AmountFor(1, l.Price), Outcome: terms.RunSucceeded, IssuedAt: time.Now()}
	tests := []struct {
		name    string
		tamper  func(*attest.Receipt)
		counter string
	}{
		{"price", func(rc *attest.Receipt) { rc.Price *= 2; rc.Amount *= 2 }, "renter.receipt_mismatch"},
		{"end after the lease", func(rc *attest.Receipt) { rc.Start, rc.End = l.End, l.End.Add(time.Second) }, "renter.receipt_mismatch"},
		{"heartbeats", func(rc *attest.Receipt) { rc.Heartbeats.Count = 1000 }, "renter.receipt_telemetry_mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := honest
			tc.tamper(&rc)
			sr, err := attest.NewReceipt(p.signer, rc)
			if err != nil {
				t.Fatal(err)
			}
			b, err := sr.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			before := r.counters.Snapshot()[tc.counter]
			if _, err := p.tr.Request(t.Context(), peer.ID(r.signer.ID()), wire.ProtoReceipt, b); err == nil {
				t.Fatal("tampered receipt countersigned")
			}
			if got := r.counters.Snapshot()[tc.counter]; got != before+1 {
				t.Fatalf("%s = %d, was %d", tc.counter, got, before)
			}
		})
	}
	if es := r.entries(record.KindReceipt, l.ID); len(es) != 0 {
		t.Fatalf("renter recorded %d receipts for tampered claims", len(es))
	}
	p.exec.open("done")
	v = r.waitJob(v.Job.ID, "settled", settled)
	if es := r.entries(record.KindReceipt, l.ID); len(es) != 1 || v.Receipt.Outcome != terms.RunSucceeded {
		t.Fatalf("honest receipt: %d entries, outcome %s", len(es), v.Receipt.Outcome)
	}
}

// TestAbandonedLeaseSlashed: a provider that never reports the end of a
// lease is marked as having abandoned it once the grace after the lease's
// end passed, and the renter's book slashes it; the job goes back to
// auction without it (here no other provider can take it: it waits).
func TestAbandonedLeaseSlashed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.abandonGrace = 100 * time.Millisecond
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Second, "gate", "never", "0"))
	r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	h.net.Drop(peer.ID(p.signer.ID())) // the provider goes silent
	v = r.waitJob(v.Job.ID, "abandoned", func(v api.JobView) bool { return len(v.History) == 1 && v.State == terms.JobQueued })
	lost := v.History[0]
	if lost.Run != terms.RunFailed || lost.Fault != terms.FaultProvider || !strings.Contains(lost.Detail, "abandoned") || lost.Receipt {
		t.Fatalf("abandoned attempt %+v", lost)
	}
	if got := time.Now(); got.Before(lost.Lease.End.Add(h.abandonGrace)) {
		t.Fatalf("abandoned at %s, before the lease end %s plus grace", got, lost.Lease.End)
	}
	if !v.Job.Excludes(p.id()) {
		t.Fatalf("requeued job excludes %v, not the provider that abandoned it", v.Job.Exclude)
	}
	h.waitFor(3*time.Second, "provider slashed", func() bool { return r.book.Stats(p.id()).Slashes == 1 })
	if rep := r.book.Stats(p.id()); rep.Score >= attest.Prior {
		t.Fatalf("abandoning provider's score %.3f, not below the prior %.3f", rep.Score, attest.Prior)
	}
	h.net.Restore(peer.ID(p.signer.ID()))
}

// TestProviderRestartRecovery: a provider that dies while a job runs
// reports the lease failed through its own fault after its restart and
// settles it; the job is requeued at once, without that provider, and
// completes on another.
func TestProviderRestartRecovery(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	other := h.provider(provSpec{model: "A100", price: 1.5})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "work", "0"))
	if v.Winner == other.id() { // the auction closed at its first bid
		p, other = other, p
	}
	r.waitJob(v.Job.ID, "running with telemetry", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	p.kill()
	p2 := p.restart()
	v = r.waitJob(v.Job.ID, "requeued elsewhere", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run == terms.RunRunning
	})
	first := v.History[0]
	if first.Run != terms.RunFailed || first.Fault != terms.FaultProvider || first.Lease.Provider != p.id() ||
		first.Detail != "provider daemon restarted while the job was running; the job was stopped" || !first.Receipt {
		t.Fatalf("first attempt %+v", first)
	}
	if v.Lease.Provider != other.id() || !v.Job.Excludes(p.id()) || v.Job.Duration != time.Minute {
		t.Fatalf("second attempt on %s, exclude %v, duration %v", v.Lease.Provider, v.Job.Exclude, v.Job.Duration)
	}
	h.waitFor(3*time.Second, "provider settled", func() bool { return len(p2.entries(record.KindReceipt, first.Lease.ID)) == 1 })
	if pl, ok := p2.lease(first.Lease.ID); !ok || pl.Run != terms.RunFailed {
		t.Fatalf("restarted provider's record %+v", pl)
	}
	other.exec.open("work")
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.State != terms.JobFinished || v.Lease.Provider != other.id() {
		t.Fatalf("run %s state %s on %s", v.Run, v.State, v.Lease.Provider)
	}
}

// TestRenterRestartReload: a renter restarted while its job runs reloads
// the job's record and still takes its end and receipt; a job that was in
// auction when the renter died is queued again, with the reason, and runs.
func TestRenterRestartReload(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "done", "0"))
	r.waitJob(v.Job.ID, "running with telemetry", func(v api.JobView) bool { return v.Run == terms.RunRunning && v.LastTelemetry != nil })
	// The crash comes once the running state is on disk.
	h.waitFor(3*time.Second, "running state persisted", func() bool {
		var saved api.JobView
		ok, err := r.db.State("renter-jobs").Get(v.Job.ID, &saved)
		return err == nil && ok && saved.Run == terms.RunRunning
	})
	inAuction := job(terms.Silver, 2, time.Minute, "run", "10", "0")
	inAuction.ID, inAuction.Owner, inAuction.CreatedAt = "job-bidding", r.id(), time.Now()
	bidding := api.JobView{JobStatus: terms.JobStatus{Job: inAuction, State: terms.JobBidding}}
	if err := r.db.State("renter-jobs").Put("job-bidding", bidding); err != nil {
		t.Fatal(err)
	}
	r.kill()
	r2 := r.restart()
	got, err := r2.tracker.View(v.Job.ID)
	if err != nil || got.Lease == nil || got.Lease.ID != v.Lease.ID || got.Run != terms.RunRunning {
		t.Fatalf("reloaded job %+v (%v)", got, err)
	}
	if b, err := r2.tracker.View("job-bidding"); err != nil || b.State == terms.JobFailed ||
		!strings.Contains(strings.Join(b.Reasons, ";"), "renter daemon restarted during the auction") {
		t.Fatalf("job in auction at the crash: %+v (%v)", b, err)
	}
	p.exec.open("done")
	// The job in auction at the crash is offered again, and runs.
	r2.waitJob("job-bidding", "requeued job succeeded", func(v api.JobView) bool { return v.Run == terms.RunSucceeded })
	got = r2.waitJob(v.Job.ID, "settled after the restart", settled)
	if got.Run != terms.RunSucceeded || got.State != terms.JobFinished {
		t.Fatalf("run %s state %s", got.Run, got.State)
	}
	if es := r2.entries(record.KindPaymentOwed, v.Lease.ID); len(es) != 1 || es[0].Amount != got.Receipt.Amount {
		t.Fatalf("renter ledger after restart: %v", es)
	}
	if n := len(r2.tracker.List()); n != 2 {
		t.Fatalf("%d jobs listed after the restart", n)
	}
}

// TestJobOverBeforeStartReturned: a job that ended before the executor's
// Start returned (milliseconds of work on a busy host) is reported with an
// empty run from its recorded start, not an end before its start, which
// the renter refuses: it then heard nothing and called a provider that
// had finished lost.
func TestJobOverBeforeStartReturned(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	v := r.post(job(terms.Silver, 5, time.Minute, "ended", "-", "0"))
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Run != terms.RunSucceeded || v.Lease.Provider != p.id() || len(v.History) != 0 || v.Receipt == nil {
		t.Fatalf("job %s: run %s (%s), history %+v, receipt %v", v.Job.ID, v.Run, v.Detail, v.History, v.Receipt != nil)
	}
	if v.Ended.Before(v.Started) {
		t.Fatalf("reported end %s before start %s", v.Ended, v.Started)
	}
	if n := counter(r, "renter.event_bad_time"); n != 0 {
		t.Fatalf("%d reports refused for their times", n)
	}
}
