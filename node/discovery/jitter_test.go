package discovery

import (
	"testing"
	"time"
)

// TestJitteredStaysWithinItsFraction: a background round's interval is
// drawn within frac of its nominal length either side, and draws differ
// (daemons started together drift apart).
func TestJitteredStaysWithinItsFraction(t *testing.T) {
	const d = 20 * time.Second
	lo, hi := d, d
	for i := 0; i < 1000; i++ {
		j := jittered(d, renewJitter)
		if j < d-d/10 || j > d+d/10 {
			t.Fatalf("jittered(%s, %v) = %s, outside ±10 %%", d, renewJitter, j)
		}
		lo, hi = min(lo, j), max(hi, j)
	}
	// 1000 uniform draws over ±2 s leave no gap of a second at either end
	// (chance 0.75^1000 each).
	if lo > d-time.Second || hi < d+time.Second {
		t.Fatalf("draws span only [%s, %s]", lo, hi)
	}
	if got := jittered(d, 0); got != d {
		t.Fatalf("no jitter: %s", got)
	}
}
