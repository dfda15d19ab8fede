package lease

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
)

// TestManyOutputFilesSettle: a job that leaves more files than are
// collected (1,500) does not stop its provider from reporting the end and
// settling. Collection stops at
// runtime.MaxOutputFiles (the job's log says so); the final report lists
// at most wire.MaxEventOutputs files with the whole manifest's count and
// hash; the receipt names that hash, and a receipt naming another result
// is refused. The provider is not slashed.
func TestManyOutputFilesSettle(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.abandonGrace = 200 * time.Millisecond
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	p.crash.noReceipts.Store(true)
	j := job(terms.Silver, 2, 10*time.Second, "gate", "done", "0")
	j.Run.Outputs = "out"
	// Half as many again as are collected: as many more would change
	// nothing the test sees, but the fake writes them within the lease's
	// 10 s, as it starts (12,000 took 8.4 s of them on a loaded host, and
	// the final report, collected after, came past the lease's end and
	// grace: the renter rightly called the provider abandoned).
	j.Run.Env = map[string]string{"FAKE_OUTPUT_FILES": strconv.Itoa(runtime.MaxOutputFiles * 3 / 2)}
	v := r.post(j)
	// Writing the files takes a while (the fake job writes them as it starts).
	h.waitFor(10*time.Second, "running", func() bool { v, _ := r.tracker.View(v.Job.ID); return v.Run == terms.RunRunning })
	p.exec.open("done")
	h.waitFor(10*time.Second, "final report", func() bool { v, _ = r.tracker.View(v.Job.ID); return v.Run.Terminal() })
	if v.Run != terms.RunSucceeded || v.OutputCount != runtime.MaxOutputFiles || len(v.Outputs) != wire.MaxEventOutputs {
		t.Fatalf("run %s (%s), %d outputs listed of %d", v.Run, v.Detail, len(v.Outputs), v.OutputCount)
	}
	if n := p.crash.maxEvent.Load(); n > 16<<10 {
		t.Fatalf("largest lease event %d bytes: the output listing is not capped", n)
	}
	acc, ok := p.sup.Authorize(v.Lease.ID, peer.ID(r.signer.ID()))
	if !ok {
		t.Fatal("renter may not read its lease")
	}
	all, _ := acc.Outputs()
	if len(all) != runtime.MaxOutputFiles || terms.ManifestHash(all) != v.OutputsHash || all[0] != v.Outputs[0] {
		t.Fatalf("provider's manifest: %d files, hash %s, event's %s", len(all), terms.ManifestHash(all), v.OutputsHash)
	}
	if log, err := os.ReadFile(acc.LogPath()); err != nil || !strings.Contains(string(log), "exceed 1000 files") {
		t.Fatalf("job log %q (%v)", log, err)
	}

	// A receipt that names another result (the short list's hash) is refused.
	l := *v.Lease
	other := attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: l.Provider,
		Start: v.Started, End: v.Ended, GPUCount: 1, GPUSeconds: 0, Price: l.Price, Outcome: terms.RunSucceeded,
		ResultHash: terms.ManifestHash(v.Outputs), Heartbeats: *v.Heartbeats, IssuedAt: time.Now()}
	sr, err := attest.NewReceipt(p.signer, other)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sr.Marshal()
	if _, err := p.tr.Request(t.Context(), peer.ID(r.signer.ID()), wire.ProtoReceipt, b); err == nil || !strings.Contains(err.Error(), "result hash") {
		t.Fatalf("receipt with another result hash: %v", err)
	}
	if n := r.counters.Snapshot()["renter.receipt_result_mismatch"]; n != 1 {
		t.Fatalf("receipt_result_mismatch = %d", n)
	}

	p.crash.noReceipts.Store(false)
	v = r.waitJob(v.Job.ID, "settled", settled)
	if v.Receipt.ResultHash != v.OutputsHash {
		t.Fatalf("receipt result hash %s, outputs hash %s", v.Receipt.ResultHash, v.OutputsHash)
	}
	h.waitFor(3*time.Second, "provider settled", func() bool { return len(p.entries(record.KindReceipt, l.ID)) == 1 })
	// Past the lease's end and the abandonment grace, once the renter's
	// abandonment check ran: still not slashed.
	h.waitFor(time.Until(l.End.Add(h.abandonGrace))+3*time.Second, "abandonment checked", func() bool { return counter(r, "renter.abandon_checked") != 0 })
	if st := r.book.Stats(p.id()); st.Slashes != 0 || st.Completed != 1 {
		t.Fatalf("provider's reputation %+v", st)
	}
}
