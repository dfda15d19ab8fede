package lease

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestSettlementAnswerLost: the renter countersigns and records the
// receipt, but its answer is lost on the way back. The provider's next
// attempt sends the same receipt (its payload does not change between
// attempts), so the renter answers it with the countersigned one and
// both ledgers hold it; before, each attempt was issued anew, refused as
// a second settlement, and the provider gave the lease up as disputed
// (found by the deterministic simulation, testnet/dst seed 1).
func TestSettlementAnswerLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	p.crash.loseReceiptAnswer.Store(true)
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "end", "0"))
	r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	p.exec.open("end")
	v = r.waitJob(v.Job.ID, "settled", settled)
	h.waitFor(5*time.Second, "provider settled", func() bool { return len(p.entries(record.KindReceipt, v.Lease.ID)) == 1 })
	if p.crash.loseReceiptAnswer.Load() {
		t.Fatal("no receipt answer was lost")
	}
	rr, pr := r.entries(record.KindReceipt, v.Lease.ID), p.entries(record.KindReceipt, v.Lease.ID)
	if len(rr) != 1 || len(pr) != 1 || string(rr[0].Data) != string(pr[0].Data) {
		t.Fatalf("receipts: renter %d, provider %d (the same: %v)", len(rr), len(pr), len(rr) == 1 && len(pr) == 1 && string(rr[0].Data) == string(pr[0].Data))
	}
	if d := p.entries(record.KindDispute, v.Lease.ID); len(d) != 0 {
		t.Fatalf("provider disputed a lease its renter settled: %s", d[0].Data)
	}
	if n := r.counters.Snapshot()["renter.receipt_duplicate"]; n != 0 {
		t.Fatalf("renter refused %d retries as second settlements", n)
	}
}
