package lease

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestSettlesAcrossClockSkew: a renter whose clock runs 3 s behind its
// provider's measures the offset from the provider's reports and
// heartbeats, and settles the honest receipt for the run it saw. (This
// harness's executor keeps the real clock, so it is the renter's clock that
// is set back; attest's TestCheckBilledAcrossSkew covers the bills a
// skew-blind renter refused.)
func TestSettlesAcrossClockSkew(t *testing.T) {
	t.Parallel()
	const skew = 3 * time.Second
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	// The renter's clock runs behind (the provider's executor keeps the
	// real clock, as a real one shares its daemon's).
	r.tracker.cfg.Now = func() time.Time { return time.Now().Add(-skew) }
	v := r.post(job(terms.Silver, 2, time.Minute, "gate", "end", "0"))
	v = r.waitJob(v.Job.ID, "running with telemetry", func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.LastTelemetry != nil
	})
	// Let it run for a few heartbeats: a bill of something, not of nothing.
	first := v.LastTelemetry.Time
	r.waitJob(v.Job.ID, "five heartbeats later", func(v api.JobView) bool {
		return v.LastTelemetry != nil && v.LastTelemetry.Time.Sub(first) >= 5*hbEvery
	})
	p.exec.open("end")
	v = r.waitJob(v.Job.ID, "settled or disputed", func(v api.JobView) bool { return v.Receipt != nil || v.Dispute != "" })
	if v.Receipt == nil || v.Dispute != "" {
		t.Fatalf("not settled: dispute %q, detail %q", v.Dispute, v.Detail)
	}
	// The renter saw it run from its first report to its last; it pays
	// that, less at most a heartbeat interval at each end and less the
	// heartbeat gaps (billing's rule: a loaded host delays heartbeats past
	// two intervals, and those spans are not billed).
	seen := v.ObservedEnd.Sub(v.ObservedStart)
	for _, g := range v.Receipt.Heartbeats.Gaps {
		seen -= g.End.Sub(g.Start)
	}
	if got := v.Receipt.GPUSeconds; got < (seen - 2*hbEvery).Seconds() {
		t.Fatalf("receipt bills %.3f GPU-seconds of a run the renter saw for %v (heartbeats %+v)", got, seen, v.Receipt.Heartbeats)
	}
	if got := v.ProviderClock.Ahead; v.ProviderClock.Samples == 0 || got > skew || got < skew-time.Second {
		t.Fatalf("renter measured the provider's clock %v ahead (%d samples), want about %v", got, v.ProviderClock.Samples, skew)
	}
}
