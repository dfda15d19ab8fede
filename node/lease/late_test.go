package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestExpiredLeaseSettles: a job still running at its lease's end is
// stopped there (expired), and the lease is settled: its receipt ends at
// the lease's end, though the job's process ended a moment after it
// (issue 23: such receipts disagreed with the lease's end and were retried
// forever).
func TestExpiredLeaseSettles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, _ := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	v := r.post(job(terms.Silver, 5, 300*time.Millisecond, "gate", "never", "0"))
	v = r.waitJob(v.Job.ID, "expired and settled", settled)
	if v.Run != terms.RunExpired || !v.Receipt.End.Equal(v.Lease.End) || v.Receipt.Start.Before(v.Lease.Start) {
		t.Fatalf("run %s, receipt %s → %s, lease %s → %s", v.Run, v.Receipt.Start, v.Receipt.End, v.Lease.Start, v.Lease.End)
	}
	if n := counter(r, "renter.receipt_mismatch"); n != 0 {
		t.Fatalf("%d receipts refused as disagreeing with the lease", n)
	}
}

// TestLeaseNotStartedAfterItsEnd: a lease whose start comes when its span
// is over (the provider took it up too late) is not run: started, it would
// hold its devices past its booking, which the calendar has given to the
// next lease. It is reported failed, the provider's fault (its renter
// requeues such a job).
func TestLeaseNotStartedAfterItsEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	now := time.Now()
	j := job(terms.Silver, 5, time.Second, "run", "10", "0")
	j.ID, j.Owner = "job-late", r.id()
	l := terms.Lease{ID: "lease-late", JobID: j.ID, Renter: r.id(), Provider: p.id(), Price: 1, Start: now.Add(-2 * time.Second),
		End: now.Add(-time.Second), GPUCount: 1, Tier: j.Tier, State: terms.RunPending}
	p.sup.OnLease(l, j, nil)
	var pl api.ProviderLease
	h.waitFor(3*time.Second, "the late lease reported", func() bool {
		pl, _ = p.lease(l.ID)
		return pl.Run.Terminal()
	})
	if _, ran := p.exec.specs.Load(l.ID); ran {
		t.Fatal("the job ran after its lease's end")
	}
	if pl.Run != terms.RunFailed || pl.Fault != terms.FaultProvider || !strings.Contains(pl.Detail, "before the provider started it") {
		t.Fatalf("late lease ended %s (fault %q): %q", pl.Run, pl.Fault, pl.Detail)
	}
}
