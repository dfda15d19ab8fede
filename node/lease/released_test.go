package lease

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestReleasedLeaseSettlesAtOnce: the final report of a lease its renter
// released (a late confirm) is answered with the renter's signed release,
// and the provider's settlement ends there instead of being retried for
// the settlement window (issue 23: "no lease X" answers, retried for a
// day). Its job had started when the release came: the provider's ledger
// says so as a dispute, not a silent zero.
func TestReleasedLeaseSettlesAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	p.crash.dropHeartbeats.Store(true)
	_, lost := lostAward(t, r, p)
	h.waitFor(5*time.Second, "the released lease's settlement over", func() bool {
		return counter(p, "provider.settle_released") == 1
	})
	pl, _ := p.lease(lost)
	if pl.Run != terms.RunCancelled || pl.Detail != "cancelled by the renter" {
		t.Fatalf("released lease ended %s: %q", pl.Run, pl.Detail)
	}
	// The gated job had started when the release came: it ran, unbilled.
	if pl.Started.IsZero() || !pl.Ended.After(pl.Started) || pl.Dispute != lifecycle.ReleasedDispute {
		t.Fatalf("released lease ran %s to %s: dispute %q", pl.Started, pl.Ended, pl.Dispute)
	}
	if n := counter(p, "provider.settle_retry"); n > 1 {
		t.Fatalf("provider.settle_retry = %d", n)
	}
	// (the job's "running" notice may come while the renter is still
	// deciding about the award, and be answered "unknown": it needs no
	// answer)
	if n := counter(r, "renter.event_unknown_lease"); n > 1 {
		t.Fatalf("renter.event_unknown_lease = %d", n)
	}
	if n := counter(r, "renter.event_released_lease"); n < 1 {
		t.Fatalf("renter.event_released_lease = %d", n)
	}
	h.waitFor(3*time.Second, "the provider's dispute in its ledger", func() bool { return len(p.entries(record.KindDispute, lost)) == 1 })
}

// TestReleasedAnswerSurvivesRestart: a renter restarted after it released
// a lease still answers the lease's final report with its release.
func TestReleasedAnswerSurvivesRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	p.crash.dropHeartbeats.Store(true)
	jobID, lost := lostAward(t, r, p)
	h.waitFor(5*time.Second, "the release persisted", func() bool {
		var rec jobRecord
		_ = r.db.State("renter-jobs").List(func(key string, raw []byte) error {
			if key == jobID {
				_ = json.Unmarshal(raw, &rec)
			}
			return nil
		})
		return len(rec.Released) == 1 && rec.Released[0].Lease == lost
	})
	r.kill()
	r = r.restart()
	b, ok, err := r.tracker.releasedAnswer(p.id(), lost)
	if !ok || err != nil {
		t.Fatalf("restarted renter: released %t, err %v", ok, err)
	}
	var ans wire.LeaseEventAnswer
	if json.Unmarshal(b, &ans) != nil || ans.CheckReleased(r.signer.ID(), lost, jobID) != nil {
		t.Fatalf("answer %s", b)
	}
	// Only to the lease's provider.
	if _, ok, _ := r.tracker.releasedAnswer(r.id(), lost); ok {
		t.Fatal("released answer to a peer that is not the lease's provider")
	}
}

// TestRenterSayingReleasedForARunIsDisputed: a hostile renter that
// watched a job run to its end and answers its final report "released"
// to avoid paying gets a dispute in the provider's ledger, not a settled
// zero, and the settlement is not retried.
func TestRenterSayingReleasedForARunIsDisputed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	r.tr.OnRequest(wire.ProtoLeaseEvent, h.notifying(func(ctx context.Context, from peer.ID, data []byte) ([]byte, error) {
		var ev wire.LeaseEvent
		if err := sign.OpenFrom(data, sign.DomainLeaseEvent, sign.ID(from), &ev); err == nil && ev.Run.Terminal() {
			return ReleasedAnswer(r.signer, ev.LeaseID, ev.JobID)
		}
		return r.tracker.HandleLeaseEvent(ctx, from, data)
	}))
	// The renter watches the job run, then it ends (a job of a fixed
	// few milliseconds may end before its start is recorded on a busy
	// host: a run that is empty, not one the renter watched).
	v := r.post(job(terms.Silver, 5, time.Minute, "gate", "done", "0"))
	l := *v.Lease
	r.waitJob(v.Job.ID, "seen running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	p.exec.open("done")
	var pl api.ProviderLease
	h.waitFor(5*time.Second, "the provider's settlement disputed", func() bool {
		pl, _ = p.lease(l.ID)
		return pl.Dispute != ""
	})
	if pl.Run != terms.RunSucceeded || pl.Dispute != lifecycle.ReleasedDispute {
		t.Fatalf("provider's lease: run %s, dispute %q", pl.Run, pl.Dispute)
	}
	h.waitFor(3*time.Second, "the provider's dispute in its ledger", func() bool { return len(p.entries(record.KindDispute, l.ID)) == 1 })
	if n := counter(p, "provider.settle_retry"); n != 0 {
		t.Fatalf("provider.settle_retry = %d", n)
	}
	if n := counter(p, "provider.settle_released"); n != 1 {
		t.Fatalf("provider.settle_released = %d", n)
	}
}

// TestForgedReleaseIsRetried: a "release" its renter did not sign (or for
// another lease) ends nothing: the provider tries its report again, and
// settles once the renter answers it.
func TestForgedReleaseIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	p := h.provider(provSpec{model: "H100", price: 1})
	forger := signtest.New(t)
	r.tr.OnRequest(wire.ProtoLeaseEvent, h.notifying(func(ctx context.Context, from peer.ID, data []byte) ([]byte, error) {
		var ev wire.LeaseEvent
		if err := sign.OpenFrom(data, sign.DomainLeaseEvent, sign.ID(from), &ev); err == nil && ev.Run.Terminal() {
			return ReleasedAnswer(forger, ev.LeaseID, ev.JobID)
		}
		return r.tracker.HandleLeaseEvent(ctx, from, data)
	}))
	v := r.post(job(terms.Silver, 5, time.Minute, "run", "10", "0"))
	h.waitFor(5*time.Second, "the forged release's report tried again", func() bool { return counter(p, "provider.settle_retry") >= 1 })
	r.tr.OnRequest(wire.ProtoLeaseEvent, h.notifying(r.tracker.HandleLeaseEvent))
	v = r.waitJob(v.Job.ID, "settled", settled)
	if pl, _ := p.lease(v.Lease.ID); pl.Dispute != "" || counter(p, "provider.settle_released") != 0 {
		t.Fatalf("provider's lease: dispute %q, settle_released %d", pl.Dispute, counter(p, "provider.settle_released"))
	}
}
