package auction

import (
	"cmp"
	"slices"
	"time"
)

// WarmTargets orders providers for pre-staging a job's data (cache
// warming) the way their bids would likely rank: by Score of their quote
// for an hour starting now at zero occupancy and the renter-verified
// reliability, best first, ties by peer id. reliability nil means
// NeutralReliability.
func WarmTargets(caps []Capability, reliability func(provider string) float64, now time.Time) []Capability {
	type scored struct {
		c     Capability
		score float64
	}
	s := make([]scored, 0, len(caps))
	for _, c := range caps {
		rel := NeutralReliability
		if reliability != nil {
			rel = reliability(c.Peer)
		}
		s = append(s, scored{c, Score(Quote(c.Policy, now, time.Hour, 0, false), rel)})
	}
	slices.SortStableFunc(s, func(x, y scored) int {
		if c := cmp.Compare(x.score, y.score); c != 0 {
			return c
		}
		return cmp.Compare(x.c.Peer, y.c.Peer)
	})
	out := make([]Capability, len(s))
	for i := range s {
		out[i] = s[i].c
	}
	return out
}
