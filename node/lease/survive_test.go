package lease

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestLeaseIDNeverReusedAfterRestart: a renter that saw another renter's
// lease id (receipts are gossiped) awards its own job under that id to the
// provider after the provider restarted (its memory of confirms gone). The
// provider refuses the award: the id stays bound to its first renter, whose
// record, log and outputs the second renter can never read. A job id of
// another renter's lease is refused the same way.
func TestLeaseIDNeverReusedAfterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	alice, p, mallory := h.renter(), h.provider(provSpec{model: "A100", price: 1}), h.renter()
	v := alice.post(job(terms.Silver, 2, time.Minute, "run", "20", "0"))
	v = alice.waitJob(v.Job.ID, "settled", settled)
	victim := *v.Lease
	h.waitFor(3*time.Second, "provider settled", func() bool { return len(p.entries(record.KindReceipt, victim.ID)) == 1 })
	p.kill()
	p = p.restart()

	// Mallory's awards carry Alice's lease id, signed by Mallory.
	rewrite := func(data []byte) []byte {
		a, err := terms.DecodeAward(data)
		if err != nil {
			t.Errorf("decode own award: %v", err)
			return data
		}
		a.LeaseID = victim.ID
		b, err := terms.EncodeAward(mallory.signer, a)
		if err != nil {
			t.Errorf("encode award: %v", err)
			return data
		}
		return b
	}
	mallory.crash.rewriteAward.Store(&rewrite)
	mv, err := mallory.tracker.Post(job(terms.Silver, 2, time.Minute, "run", "20", "0"))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	if mv.Lease != nil {
		t.Fatalf("mallory's job leased: %+v", mv.Lease)
	}
	if _, ok := p.sup.Authorize(victim.ID, peer.ID(mallory.signer.ID())); ok {
		log, _ := os.ReadFile(p.sup.logPath(victim.ID))
		t.Fatalf("mallory may read alice's lease %s after the provider's restart; its log: %q", victim.ID, log)
	}
	if got := p.provider.Stats().Rejected["lease_id_in_use"]; got == 0 {
		t.Fatal("the award reusing a lease id was not refused as such")
	}
	if got := counter(p, "provider.lease_id_reused"); got == 0 {
		t.Fatal("provider.lease_id_reused not counted")
	}
	if pl, ok := p.lease(victim.ID); ok && pl.Lease.Renter != alice.id() {
		t.Fatalf("alice's lease record now names %s", pl.Lease.Renter)
	}

	// Alice's job id, under a fresh lease id of Mallory's: refused too.
	if _, err := mallory.tracker.Cancel(mv.Job.ID); err != nil { // no more offers of it
		t.Fatal(err)
	}
	mallory.crash.rewriteAward.Store(nil)
	j := job(terms.Silver, 2, time.Minute, "run", "20", "0")
	j.ID = victim.JobID
	mv, err = mallory.tracker.Post(j)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	if mv.Lease != nil {
		t.Fatalf("mallory's job with alice's job id was leased: %+v", mv.Lease)
	}
	if _, err := mallory.tracker.Cancel(mv.Job.ID); err != nil {
		t.Fatal(err)
	}
	// An honest award still runs on the restarted provider.
	v2 := alice.post(job(terms.Silver, 2, time.Minute, "run", "20", "0"))
	alice.waitJob(v2.Job.ID, "settled", func(v api.JobView) bool { return settled(v) && v.Run == terms.RunSucceeded })
}

// TestRepeatedHandBackExcludesProvider: a provider that wins a job and
// hands it back (a drain's "preempted, draining"), wins it again and hands
// it back again, is excluded from the job at its second hand-back: the
// job's last attempt runs elsewhere instead of being handed back a third
// time.
func TestRepeatedHandBackExcludesProvider(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, churner := h.renter(), h.provider(provSpec{model: "A100", price: 0.05})
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "work", "0"))
	for i := 1; i <= MaxHandBacks; i++ {
		r.waitJob(v.Job.ID, "running on the churner", func(v api.JobView) bool {
			return v.Lease != nil && v.Lease.Provider == churner.id() && v.Run == terms.RunRunning && len(v.History) == i-1
		})
		churner.provider.SetDraining(true)
		churner.sup.Drain(0, false)
		v = r.waitJob(v.Job.ID, "handed back", func(v api.JobView) bool { return len(v.History) == i })
		if h := v.History[i-1]; h.Run != terms.RunPreempted || h.Detail != terms.HandBackDetail || h.Fault != terms.FaultNone {
			t.Fatalf("hand-back %d: %+v", i, h)
		}
		churner.sup.Undrain()
		churner.provider.SetDraining(false)
	}
	// (after one hand-back the churner won the job again, above)
	r.waitJob(v.Job.ID, "the churner excluded", func(v api.JobView) bool { return v.Job.Excludes(churner.id()) })
	if got := counter(r, "renter.hand_back_churn"); got != 1 {
		t.Fatalf("renter.hand_back_churn = %d", got)
	}
	other := h.provider(provSpec{model: "A100", price: 1})
	v = r.waitJobWithin(v.Job.ID, 10*time.Second, "last attempt elsewhere", func(v api.JobView) bool {
		return v.Lease != nil && len(v.History) == MaxHandBacks && v.Run == terms.RunRunning
	})
	if v.Lease.Provider != other.id() {
		t.Fatalf("last attempt on %s, want %s (churner %s)", v.Lease.Provider, other.id(), churner.id())
	}
	other.exec.open("work")
	if v = r.waitJob(v.Job.ID, "settled", settled); v.Run != terms.RunSucceeded {
		t.Fatalf("run %s (%s)", v.Run, v.Detail)
	}
}

// TestPanicInLeaseEndsOnlyThatLease: a panic in one lease's path (its
// executor) ends that lease, failed through the provider's fault and
// reported to its renter; the provider goes on running other leases.
func TestPanicInLeaseEndsOnlyThatLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	j := job(terms.Silver, 2, time.Minute, "panic", "-", "0")
	j.MaxAttempts = 1
	v := r.post(j)
	v = r.waitJob(v.Job.ID, "failed", func(v api.JobView) bool { return v.Run == terms.RunFailed })
	if v.Fault != terms.FaultProvider || !strings.Contains(v.Detail, "provider internal error") {
		t.Fatalf("panicked lease: fault %q, detail %q", v.Fault, v.Detail)
	}
	if got := counter(p, "provider.lease_panic"); got != 1 {
		t.Fatalf("provider.lease_panic = %d", got)
	}
	v2 := r.post(job(terms.Silver, 2, time.Minute, "run", "20", "0"))
	if v2.Lease.Provider != p.id() {
		t.Fatalf("second job leased to %s", v2.Lease.Provider)
	}
	if v2 = r.waitJob(v2.Job.ID, "settled", settled); v2.Run != terms.RunSucceeded {
		t.Fatalf("second lease: %s (%s)", v2.Run, v2.Detail)
	}
}

// TestLeaseConfirmedWhileStoppingIsNotRun: an award still in flight as the
// daemon stops may be confirmed by the auction after the supervisor's
// Close began. Its lease is not run (as if the provider crashed just after
// the confirm: its renter recovers the job elsewhere), so no run outlives
// Close, and none joins the goroutines Close waits for (go test -race saw
// that Add race with Close's Wait).
func TestLeaseConfirmedWhileStoppingIsNotRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := h.provider(provSpec{model: "A100", price: 1})
	p.cancel()
	p.sup.Close()
	now := time.Now()
	j := job(terms.Silver, 2, time.Minute, "run", "20", "0")
	j.ID, j.Owner = "job-late-award", "renter-of-a-late-award"
	l := terms.Lease{ID: "lease-late-award", JobID: j.ID, Renter: j.Owner, Provider: p.id(), Price: 2,
		Start: now, End: now.Add(time.Minute), GPUCount: 1, State: terms.RunPending}
	p.sup.OnLease(l, j, nil)
	if r := p.sup.run(l.ID); r != nil {
		t.Fatalf("lease confirmed after Close is run (phase %s)", r.phase())
	}
	if ids := p.exec.startedJobs(); len(ids) > 0 {
		t.Fatalf("provider started %v after Close", ids)
	}
}
