package lease

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestDisagreeingReceiptIsDisputed: a provider whose every receipt bills
// twice the lease's price (so its renter refuses each one) is not answered
// forever: after maxReceiptRefusals refusals both sides give the
// settlement up, each ledger records a dispute with the reason, the job's
// status and the provider's lease say so, and no receipt is sent again
// (issue 23: receipts that disagreed were retried every few seconds
// forever).
func TestDisagreeingReceiptIsDisputed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	var sent atomic.Int64
	overbill := func(b []byte) []byte {
		sr, err := attest.UnmarshalReceipt(b)
		if err != nil {
			return b
		}
		rc := sr.Receipt
		rc.Price *= 2
		rc.Amount = attest.AmountFor(rc.GPUSeconds, rc.Price)
		forged, err := attest.NewReceipt(p.signer, rc)
		if err != nil {
			t.Errorf("re-sign: %v", err)
			return b
		}
		out, _ := forged.Marshal()
		sent.Add(1)
		return out
	}
	p.crash.rewriteReceipt.Store(&overbill)
	v := r.post(job(terms.Silver, 5, time.Minute, "run", "10", "0"))
	l := *v.Lease
	v = r.waitJob(v.Job.ID, "settlement disputed", func(v api.JobView) bool { return v.Dispute != "" })
	if v.Receipt != nil || v.Run != terms.RunSucceeded || !strings.Contains(v.Dispute, "refused 5 times") ||
		!strings.Contains(v.Dispute, "disagrees with the lease: price") {
		t.Fatalf("job: run %s, receipt %v, dispute %q", v.Run, v.Receipt, v.Dispute)
	}
	var pl api.ProviderLease
	h.waitFor(3*time.Second, "the provider gives the settlement up", func() bool {
		pl, _ = p.lease(l.ID)
		return pl.Dispute != ""
	})
	if !strings.Contains(pl.Dispute, "refused 5 times by the renter") || !strings.Contains(pl.Dispute, "disagrees with the lease: price") {
		t.Fatalf("provider's lease: dispute %q", pl.Dispute)
	}
	// The provider records its dispute once its record says so.
	h.waitFor(3*time.Second, "the provider's dispute in its ledger", func() bool { return len(p.entries(record.KindDispute, l.ID)) != 0 })
	for _, n := range []*node{r, p} {
		es := n.entries(record.KindDispute, l.ID)
		var d struct{ Reason string }
		if len(es) != 1 || json.Unmarshal(es[0].Data, &d) != nil || !strings.Contains(d.Reason, "disagrees with the lease: price") || es[0].JobID != l.JobID {
			t.Fatalf("ledger disputes of the lease: %+v", es)
		}
		if got := n.entries(record.KindReceipt, l.ID); len(got) != 0 {
			t.Fatalf("a refused receipt was recorded: %+v", got)
		}
	}
	// Given up: once the provider's goroutines are done, it has sent
	// exactly as many receipts as were refused.
	p.close()
	if n := sent.Load(); n != maxReceiptRefusals || counter(p, "provider.settle_refused") != maxReceiptRefusals {
		t.Fatalf("%d receipts sent, %d refusals counted; want %d", n, counter(p, "provider.settle_refused"), maxReceiptRefusals)
	}
}
