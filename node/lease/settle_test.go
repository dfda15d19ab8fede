package lease

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
)

// TestSettlementSurvivesRenterOutage: the renter is down when the job
// ends, so the final report and the receipt cannot be exchanged. The
// provider keeps retrying (also after its own restart, from Recover) and
// the lease settles in both ledgers once the renter is back; the returning
// renter does not take its own outage for an abandoned lease.
func TestSettlementSurvivesRenterOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		restartProvider bool
	}{
		{"renter returns", false},
		{"provider restarts meanwhile", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
			v := r.post(job(terms.Silver, 2, time.Minute, "gate", "end", "0"))
			r.waitJob(v.Job.ID, "running with telemetry", func(v api.JobView) bool {
				return v.Run == terms.RunRunning && v.LastTelemetry != nil
			})
			r.kill()
			p.exec.open("end")
			// The renter stays away for many attempts (before, the provider
			// tried its final report 5 times over ~7.5 s, then gave up).
			retried := func(n *node) func() bool {
				return func() bool { return n.counters.Snapshot()["provider.settle_retry"] >= 8 }
			}
			h.waitFor(3*time.Second, "provider retries the settlement", retried(p))
			if pl, ok := p.lease(v.Lease.ID); !ok || pl.Run != terms.RunSucceeded {
				t.Fatalf("provider's record %+v", pl)
			}
			if len(p.entries(record.KindReceipt, v.Lease.ID)) != 0 {
				t.Fatal("settled without the renter")
			}
			if tc.restartProvider {
				p.kill()
				p = p.restart()
				h.waitFor(3*time.Second, "restarted provider retries the settlement", retried(p))
			}
			r = r.restart()
			v = r.waitJob(v.Job.ID, "settled", settled)
			if v.Run != terms.RunSucceeded || v.Receipt.Outcome != terms.RunSucceeded || v.State != terms.JobFinished {
				t.Fatalf("run %s outcome %s state %s (%s)", v.Run, v.Receipt.Outcome, v.State, v.Detail)
			}
			h.waitFor(3*time.Second, "provider settled", func() bool { return len(p.entries(record.KindReceipt, v.Lease.ID)) == 1 })
			rr, pr := r.entries(record.KindReceipt, v.Lease.ID), p.entries(record.KindReceipt, v.Lease.ID)
			if len(rr) != 1 || string(rr[0].Data) != string(pr[0].Data) {
				t.Fatalf("receipts: renter %d, provider %d", len(rr), len(pr))
			}
			if st := r.book.Stats(p.id()); st.Slashes != 0 {
				t.Fatalf("provider slashed for the renter's outage: %+v", st)
			}
			// Settled: the provider stops retrying.
			p.waitFinal(v.Lease.ID, lifecycle.Settled)
		})
	}
}

// TestSettlementGivesUpAfterWindow: a lease whose end lies further back
// than the settlement window is not retried for ever.
func TestSettlementGivesUpAfterWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	p.sup.cfg.SettleWindow = time.Millisecond
	v := r.post(job(terms.Silver, 2, 200*time.Millisecond, "gate", "never", "0"))
	// The 200 ms lease may end before a late "running" report (which the
	// renter then ignores as stale): started is what matters here.
	r.waitJob(v.Job.ID, "started", func(v api.JobView) bool { return v.Run == terms.RunRunning || v.Run.Terminal() })
	r.kill()
	h.waitFor(3*time.Second, "provider gives up", func() bool { return p.counters.Snapshot()["provider.settle_abandoned"] == 1 })
	p.waitFinal(v.Lease.ID, lifecycle.Abandoned)
}

// waitFinal waits until the provider's machine of lease id reaches the
// final phase want, and fails unless it then has no timer armed: a final
// phase takes no timer (lifecycle's rule), so the lease's settlement is
// tried no more.
func (n *node) waitFinal(id string, want lifecycle.Phase) {
	n.h.t.Helper()
	r := n.sup.run(id)
	if r == nil {
		n.h.t.Fatalf("provider runs no lease %s", id)
	}
	n.h.waitFor(3*time.Second, "lease "+id+" "+string(want), func() bool { return r.phase() == want })
	r.mu.Lock()
	due := r.pr.Rec.Due
	r.mu.Unlock()
	if !due.IsZero() {
		n.h.t.Fatalf("lease %s %s with a timer due at %s", id, want, due)
	}
}
