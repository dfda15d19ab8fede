package attest_test

import (
	"math"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestCheckBilled: a receipt may bill what its renter observed times the
// lease's GPUs, plus a second of rounding, and no more; a hostile bill
// (the booked span, a NaN, an infinity) is refused.
func TestCheckBilled(t *testing.T) {
	lease := terms.Lease{ID: "L1", Start: t0, End: t0.Add(time.Hour), GPUCount: 2}
	obsStart, obsEnd := t0.Add(10*time.Minute), t0.Add(40*time.Minute)
	now := t0.Add(time.Hour)
	seen := 30 * 60 * 2.0 // 30 minutes on 2 GPUs
	for _, c := range []struct {
		name   string
		billed float64
		ok     bool
	}{
		{"what was observed", seen, true},
		{"within the rounding allowance", seen + 1, true},
		{"past the allowance", seen + 1.5, false},
		{"the booked span", 3600 * 2, false},
		{"NaN", math.NaN(), true}, // not a finite bill: refused earlier, by the receipt's own validation
		{"infinite", math.Inf(1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := attest.Receipt{LeaseID: "L1", GPUSeconds: c.billed}
			err := attest.CheckBilled(r, lease, obsStart, obsEnd, now, attest.ClockOffset{}, attest.HeartbeatSummary{})
			if (err == nil) != c.ok {
				t.Fatalf("CheckBilled(%v) = %v, want ok %v", c.billed, err, c.ok)
			}
		})
	}
	r := attest.Receipt{LeaseID: "L1", GPUSeconds: 1}
	if err := attest.CheckBilled(r, lease, time.Time{}, obsEnd, now, attest.ClockOffset{}, attest.HeartbeatSummary{}); err != nil {
		t.Fatalf("a second's rounding is allowed even unobserved: %v", err)
	}
	r.GPUSeconds = 2
	if err := attest.CheckBilled(r, lease, time.Time{}, obsEnd, now, attest.ClockOffset{}, attest.HeartbeatSummary{}); err == nil {
		t.Fatal("a run its renter never saw start billed 2 s")
	}
}

// TestClockOffsetNote: the estimate is the largest sample (a time cannot
// arrive before it was stamped), whichever way the clocks differ; zero
// times are no sample.
func TestClockOffsetNote(t *testing.T) {
	var o attest.ClockOffset
	o.Note(time.Time{}, t0)
	o.Note(t0, time.Time{})
	if o.Samples != 0 {
		t.Fatalf("zero times sampled: %+v", o)
	}
	o.Note(t0.Add(-3*time.Second), t0)                            // behind by 3 s, delivered at once
	o.Note(t0.Add(-4*time.Second), t0.Add(-100*time.Millisecond)) // behind by 3 s, delivered in 900 ms
	if o.Ahead != -3*time.Second || o.Samples != 2 {
		t.Fatalf("estimate %+v, want -3s from 2 samples", o)
	}
	if got := o.OnProvider(t0); !got.Equal(t0.Add(-3 * time.Second)) {
		t.Fatalf("OnProvider(t0) = %v", got)
	}
	if !o.OnProvider(time.Time{}).IsZero() {
		t.Fatal("a zero time moved")
	}
	o.Note(t0.Add(time.Hour), t0) // a wild stamp
	if got := o.OnProvider(t0); !got.Equal(t0.Add(attest.HeartbeatSkew)) {
		t.Fatalf("a wild estimate moved a time to %v, past HeartbeatSkew", got)
	}
}

// TestCheckBilledAcrossSkew: an honest provider whose clock is 3 s ahead
// of its renter's is paid for the whole lease it ran once the renter
// corrects for the offset it measured; a provider that lies about its
// clock never gets more than its renter saw it run, nor more than
// HeartbeatSkew outside the lease.
func TestCheckBilledAcrossSkew(t *testing.T) {
	lease := terms.Lease{ID: "L1", Start: t0, End: t0.Add(time.Hour), GPUCount: 1}
	r := attest.Receipt{LeaseID: "L1", GPUSeconds: 3600}
	check := func(bill float64, from, to time.Time, off attest.ClockOffset) error {
		r := r
		r.GPUSeconds = bill
		return attest.CheckBilled(r, lease, from, to, to, off, attest.HeartbeatSummary{})
	}

	// Honest, 3 s ahead: the run spans the lease on the provider's clock;
	// its reports arrive 100 and 200 ms after they were stamped.
	const skew = 3 * time.Second
	from, to := t0.Add(-skew+100*time.Millisecond), t0.Add(time.Hour-skew+200*time.Millisecond)
	if err := check(3600, from, to, attest.ClockOffset{}); err == nil {
		t.Fatal("without an estimate the skew still clips 3 s off what the renter saw (the bug this fixes): want a refusal")
	}
	var honest attest.ClockOffset
	honest.Note(t0, from)
	honest.Note(t0.Add(time.Hour), to)
	if err := check(3600, from, to, honest); err != nil {
		t.Fatalf("honest bill across 3 s of skew refused: %v", err)
	}

	// Hostile: whatever clock it claims, a 10-minute run seen inside the
	// lease is billed 10 minutes at most.
	from, to = t0.Add(10*time.Minute), t0.Add(20*time.Minute)
	for _, claim := range []time.Duration{-time.Hour, -attest.HeartbeatSkew, -skew, 0, skew, attest.HeartbeatSkew, time.Hour} {
		var o attest.ClockOffset
		o.Note(to.Add(claim), to)
		if err := check(601.5, from, to, o); err == nil {
			t.Fatalf("claiming a clock %v ahead billed more than the renter saw", claim)
		}
		if err := check(600, from, to, o); err != nil {
			t.Fatalf("claiming a clock %v ahead: the seen run refused: %v", claim, err)
		}
	}

	// Hostile: it ran 5 minutes before the lease (its renter saw it) and
	// claims a clock an hour ahead to have them counted: it gains at most
	// HeartbeatSkew; claiming one behind gains nothing.
	from, to = t0.Add(-5*time.Minute), t0.Add(10*time.Minute)
	var ahead, behind attest.ClockOffset
	ahead.Note(to.Add(time.Hour), to)
	behind.Note(to.Add(-time.Hour), to)
	gain := attest.HeartbeatSkew.Seconds()
	if err := check(600+gain, from, to, ahead); err != nil {
		t.Fatalf("bill within HeartbeatSkew of the lease refused: %v", err)
	}
	if err := check(600+gain+1.5, from, to, ahead); err == nil {
		t.Fatal("a claimed clock gained more than HeartbeatSkew")
	}
	if err := check(600+1.5, from, to, behind); err == nil {
		t.Fatal("a clock claimed behind gained time")
	}

	// Never beyond the lease's length, whatever the claim.
	from, to = t0.Add(-time.Hour), t0.Add(2*time.Hour)
	if err := check(3601.5, from, to, ahead); err == nil {
		t.Fatal("billed beyond the lease's length")
	}
}
