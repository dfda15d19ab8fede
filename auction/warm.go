package auction

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// WarmTargets orders providers for pre-staging a job's data (cache
// warming) the way their bids would likely rank: by Score of their quote
// for an hour starting now at zero occupancy and the renter-verified
// reliability, best first, ties by peer id. reliability nil means
// NeutralReliability.
func WarmTargets(caps []terms.Capability, reliability func(provider string) float64, now time.Time) []terms.Capability {
	type scored struct {
		c     terms.Capability
		score float64
	}
	s := make([]scored, 0, len(caps))
	for _, c := range caps {
		rel := terms.NeutralReliability
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
	out := make([]terms.Capability, len(s))
	for i := range s {
		out[i] = s[i].c
	}
	return out
}
