package auction

import (
	"math"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// DefaultPeakMultiplier applies when a policy declares peak windows but no
// multiplier.
const DefaultPeakMultiplier = 1.5

// peakMultiplier is the policy's effective peak multiplier.
func peakMultiplier(p terms.Policy) float64 {
	if p.PeakMultiplier >= 1 {
		return p.PeakMultiplier
	}
	return DefaultPeakMultiplier
}

// peakFraction is the fraction of [start, start+d) inside peak windows; for
// d <= 0 it is 1 if start is peak and 0 otherwise.
func peakFraction(p terms.Policy, start time.Time, d time.Duration) float64 {
	if len(p.PeakWindows) == 0 {
		return 0
	}
	if d <= 0 {
		if p.IsPeak(start) {
			return 1
		}
		return 0
	}
	var peak time.Duration
	for _, iv := range p.PeakSpans(start, start.Add(d)) {
		peak += iv.End.Sub(iv.Start)
	}
	return float64(peak) / float64(d)
}

// FloorFor is the least the policy sells j's GPU-hour for: PriceFloor,
// less InterruptibleDiscount for a job it may interrupt (Job.Preemptible).
func FloorFor(p terms.Policy, j *terms.Job) float64 {
	return p.PriceFloor * discount(p, j.Preemptible)
}

// discount is the factor an interruptible job's price is multiplied by: 1
// for any other, and for a discount that is not in [0, 1).
func discount(p terms.Policy, interruptible bool) float64 {
	d := p.InterruptibleDiscount
	if !interruptible || math.IsNaN(d) || d <= 0 || d >= 1 {
		return 1
	}
	return 1 - d
}

// Quote is the provider's price per GPU-hour, in USD, for a lease of d
// starting at start while occupancy (in [0,1], clamped) of its GPUs is
// booked, for a job it may interrupt (Job.Preemptible) or not:
//
//	PriceFloor × (1 + (PeakMultiplier−1) × peakFraction) × (1 + OccupancySurcharge × occupancy) × (1 − InterruptibleDiscount if interruptible)
//
// where peakFraction is the time-weighted share of [start, start+d) inside
// peak windows, so a lease that is half peak pays half the peak premium.
// The price is always per whole GPU-hour: a lease on a slice of a device
// pays its fraction of it (LeaseCost), as its receipts bill its fraction
// of the GPU-seconds.
func Quote(p terms.Policy, start time.Time, d time.Duration, occupancy float64, interruptible bool) float64 {
	if math.IsNaN(occupancy) || occupancy < 0 {
		occupancy = 0
	} else if occupancy > 1 {
		occupancy = 1
	}
	floor := p.PriceFloor
	if math.IsNaN(floor) || floor < 0 {
		floor = 0
	}
	surcharge := p.OccupancySurcharge
	if math.IsNaN(surcharge) || surcharge < 0 {
		surcharge = 0
	}
	peak := 1 + (peakMultiplier(p)-1)*peakFraction(p, start, d)
	return floor * peak * (1 + surcharge*occupancy) * discount(p, interruptible)
}

// PriceNow is what the provider of record c would quote for one GPU-hour
// starting at now (Quote of its policy, for a job it may not interrupt) at
// the occupancy the record reports (none, when it does not say): a
// renter's estimate before any call for bids, whose bids carry the
// provider's quote of the moment.
func PriceNow(c terms.Capability, now time.Time) float64 {
	occ := 0.0
	if c.FreeGPUs != nil && len(c.GPUs) > 0 {
		occ = 1 - float64(*c.FreeGPUs)/float64(len(c.GPUs))
	}
	return Quote(c.Policy, now, time.Hour, occ, false)
}
