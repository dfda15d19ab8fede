package attest_test

import (
	"math"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
)

// TestCheckBilled: a receipt may bill what its renter observed times the
// lease's GPUs, plus a second of rounding, and no more; a hostile bill
// (the booked span, a NaN, an infinity) is refused.
func TestCheckBilled(t *testing.T) {
	lease := auction.Lease{ID: "L1", Start: t0, End: t0.Add(time.Hour), GPUCount: 2}
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
			err := attest.CheckBilled(r, lease, obsStart, obsEnd, now, attest.HeartbeatSummary{})
			if (err == nil) != c.ok {
				t.Fatalf("CheckBilled(%v) = %v, want ok %v", c.billed, err, c.ok)
			}
		})
	}
	r := attest.Receipt{LeaseID: "L1", GPUSeconds: 1}
	if err := attest.CheckBilled(r, lease, time.Time{}, obsEnd, now, attest.HeartbeatSummary{}); err != nil {
		t.Fatalf("a second's rounding is allowed even unobserved: %v", err)
	}
	r.GPUSeconds = 2
	if err := attest.CheckBilled(r, lease, time.Time{}, obsEnd, now, attest.HeartbeatSummary{}); err == nil {
		t.Fatal("a run its renter never saw start billed 2 s")
	}
}
