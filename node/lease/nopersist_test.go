package lease

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/runtime"
)

// noPersistJob is a one-minute job that writes r.txt into its outputs and
// runs 50 ms, under the no-persistence policy.
func noPersistJob() terms.Job {
	j := job(terms.Silver, 2, time.Minute, "run", "50", "0")
	j.Run.Outputs = "out"
	j.NoPersist = true
	return j
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestNoPersistLeaseLeavesNothing: a no-persist job runs without swap, its
// renter takes its log and outputs before it countersigns a receipt that
// states the policy held, and once settled its provider keeps neither
// the log, nor the outputs, nor their manifest in its record.
func TestNoPersistLeaseLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := h.provider(provSpec{model: "H100", price: 0.5, noPersist: terms.NoPersistOffer})
	r := h.renter()
	v := r.post(noPersistJob())
	l := *v.Lease
	v = r.waitJob(v.Job.ID, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	if v.Run != terms.RunSucceeded || !v.Receipt.NoPersist {
		t.Fatalf("run %s (%s), receipt no_persist %v", v.Run, v.Detail, v.Receipt.NoPersist)
	}
	if spec, ok := p.exec.specs.Load(l.ID); !ok || !spec.(runtime.Spec).NoSwap {
		t.Fatalf("the job ran with swap allowed: %+v", spec)
	}
	dir, ok := r.tracker.KeptDir(l.ID)
	if !ok || v.Kept != dir {
		t.Fatalf("renter keeps the lease's files at %q (%v); its view says %q", dir, ok, v.Kept)
	}
	if b, err := os.ReadFile(KeptLog(dir)); err != nil || string(b) != "fake job "+l.ID+" started\n" {
		t.Fatalf("kept log %q, %v", b, err)
	}
	outDir, outs, err := KeptOutputs(dir)
	if err != nil || len(outs) != 1 || terms.ManifestHash(outs) != v.Receipt.ResultHash {
		t.Fatalf("kept outputs manifest %+v (%v), receipt names %s", outs, err, v.Receipt.ResultHash)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "r.txt")); err != nil || string(b) != "result\n" {
		t.Fatalf("kept output %q, %v", b, err)
	}
	h.waitFor(3*time.Second, "provider purges the settled lease", func() bool {
		return p.counters.Snapshot()["provider.no_persist_purged"] == 1
	})
	for _, f := range []string{p.sup.logPath(l.ID), p.sup.outDir(l.ID)} {
		if exists(f) {
			t.Fatalf("%s left on the provider after settlement", f)
		}
	}
	run := p.sup.run(l.ID)
	run.mu.Lock()
	defer run.mu.Unlock()
	if len(run.pr.Outputs) != 0 {
		t.Fatalf("provider's record keeps the outputs manifest: %+v", run.pr.Outputs)
	}
}

// TestNoPersistReceiptMustStateIt: a hostile provider runs a no-persist
// job but signs a receipt that does not state the policy held: its renter
// refuses to countersign it, and nothing is settled.
func TestNoPersistReceiptMustStateIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := h.provider(provSpec{model: "H100", price: 0.5, noPersist: terms.NoPersistOffer})
	r := h.renter()
	var rewritten atomic.Int64
	omit := func(b []byte) []byte {
		sr, err := attest.UnmarshalReceipt(b)
		if err != nil {
			return b
		}
		rc := sr.Receipt
		rc.NoPersist = false
		forged, err := attest.NewReceipt(p.signer, rc)
		if err != nil {
			t.Errorf("re-sign: %v", err)
			return b
		}
		out, _ := forged.Marshal()
		rewritten.Add(1)
		return out
	}
	p.crash.rewriteReceipt.Store(&omit)
	v := r.post(noPersistJob())
	h.waitFor(5*time.Second, "renter refuses the receipt", func() bool {
		return r.counters.Snapshot()["renter.receipt_no_persist_unstated"] >= 2 // and the retry
	})
	v, _ = r.tracker.View(v.Job.ID)
	if v.Receipt != nil || len(r.entries(record.KindReceipt, v.Lease.ID)) != 0 || len(p.entries(record.KindReceipt, v.Lease.ID)) != 0 {
		t.Fatalf("a receipt without the no-persist statement was settled: %+v", v.Receipt)
	}
	if rewritten.Load() == 0 {
		t.Fatal("no receipt was rewritten")
	}
}

// TestRetainRemovesJobFiles: a lease's job files are kept for its job's
// retention (--retain), capped by the provider's maximum (which also
// bounds the default week), then removed by the janitor, by the
// supervisor's clock.
func TestRetainRemovesJobFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	p := h.provider(provSpec{model: "H100", price: 0.5, now: clock, maxRetain: 2 * time.Hour})
	r := h.renter()
	leases := map[time.Duration]string{}
	for _, keep := range []time.Duration{time.Hour, 0, 3 * time.Hour} {
		j := job(terms.Silver, 2, time.Minute, "run", "10", "0")
		j.Run.Outputs, j.Retain = "out", keep
		v := r.post(j)
		r.waitJob(v.Job.ID, "settled", func(v api.JobView) bool { return v.Receipt != nil })
		leases[keep] = v.Lease.ID
	}
	held := func(keep time.Duration) bool {
		id := leases[keep]
		return exists(p.sup.logPath(id)) && exists(filepath.Join(p.sup.outDir(id), "r.txt"))
	}
	gone := func(keep time.Duration) bool {
		id := leases[keep]
		return !exists(p.sup.logPath(id)) && !exists(p.sup.outDir(id))
	}
	for _, step := range []struct {
		at         time.Duration
		held, gone []time.Duration
	}{
		{59 * time.Minute, []time.Duration{time.Hour, 0, 3 * time.Hour}, nil},
		{61 * time.Minute, []time.Duration{0, 3 * time.Hour}, []time.Duration{time.Hour}},
		{121 * time.Minute, nil, []time.Duration{time.Hour, 0, 3 * time.Hour}},
	} {
		ahead.Store(int64(step.at))
		p.sup.expireJobFiles()
		for _, k := range step.held {
			if !held(k) {
				t.Fatalf("%v after the lease: the files of a job retained %v (capped at 2h) are gone", step.at, k)
			}
		}
		for _, k := range step.gone {
			if !gone(k) {
				t.Fatalf("%v after the lease: the files of a job retained %v (capped at 2h) are still there", step.at, k)
			}
		}
	}
}
