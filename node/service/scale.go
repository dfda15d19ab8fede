package service

import "time"

// minScaleSamples is how many requests a scaling window needs before its
// latency counts.
const minScaleSamples = 5

// scaleInput is what one autoscaling decision looks at.
type scaleInput struct {
	now               time.Time
	desired, min, max int
	pending           int // replicas being leased or started
	ready             int // replicas in routing
	outstanding       int // requests in flight on the ready replicas
	p95               time.Duration
	samples           int // requests in the scaling window
	target            time.Duration
	targetConcurrency int
	lowSince          time.Time // when load last became low (zero: it is not)
	downAfter         time.Duration
}

// decide is the autoscaler: one replica up at a time when the window's p95
// is above target or replicas carry more than the target concurrency
// (and no earlier step is still starting); one replica down once load has
// stayed low (p95 under half the target, concurrency under half its
// target) for downAfter, the hysteresis, which each further step waits out
// again. It returns the new desired count and low-load start.
func decide(in scaleInput) (desired int, lowSince time.Time) {
	perReplica := 0.0
	if in.ready > 0 {
		perReplica = float64(in.outstanding) / float64(in.ready)
	}
	latencyKnown := in.target > 0 && in.samples >= minScaleSamples
	high := (latencyKnown && in.p95 > in.target) || perReplica > float64(in.targetConcurrency)
	low := (!latencyKnown || in.p95 <= in.target/2) && perReplica < float64(in.targetConcurrency)/2
	switch {
	case high:
		if in.pending == 0 && in.desired < in.max {
			return in.desired + 1, time.Time{}
		}
		return in.desired, time.Time{}
	case low:
		if in.lowSince.IsZero() {
			return in.desired, in.now
		}
		if in.now.Sub(in.lowSince) >= in.downAfter && in.desired > in.min {
			return in.desired - 1, in.now
		}
		return in.desired, in.lowSince
	}
	return in.desired, time.Time{}
}
