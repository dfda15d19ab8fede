package service

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// Regional serving. A service with regions (api.ServiceSpec.Regions)
// leases each replica in one of them (its job's Region), keeping each
// region's share of the desired count (wants); the gateway routes each
// request to the nearest region with a ready replica (routeGroups).

// normalizeRegions checks a service's regions and sets its replica bounds
// from them; s.mu is not needed (the spec is not shared yet).
func normalizeRegions(spec *api.ServiceSpec) error {
	if len(spec.Regions) == 0 {
		if spec.ReplicasPerRegion != 0 {
			return badRequest("service: replicas per region is for a service with regions: give regions too")
		}
		return nil
	}
	if spec.Job.Region != "" {
		return badRequest("service: give a region (every replica's residency) or regions (replicas spread over them), not both")
	}
	seen := map[string]bool{}
	for i, r := range spec.Regions {
		r = strings.TrimSpace(r)
		if p := terms.RegionProblem(r); p != "" {
			return badRequest("service: regions: %s", p)
		}
		if seen[strings.ToLower(r)] {
			return badRequest("service: regions: %s given twice", r)
		}
		seen[strings.ToLower(r)] = true
		spec.Regions[i] = r
	}
	if spec.ReplicasPerRegion == 0 {
		spec.ReplicasPerRegion = 1
	}
	if spec.ReplicasPerRegion < 0 {
		return badRequest("service: replicas per region must be at least 1, got %d", spec.ReplicasPerRegion)
	}
	floor := len(spec.Regions) * spec.ReplicasPerRegion
	if floor > MaxReplicas {
		return badRequest("service: %d regions × %d replicas is over %d replicas", len(spec.Regions), spec.ReplicasPerRegion, MaxReplicas)
	}
	if spec.Replicas == 0 {
		spec.Replicas = floor
	}
	if spec.Replicas < floor {
		return badRequest("service: replicas %d is fewer than %d regions × %d per region", spec.Replicas, len(spec.Regions), spec.ReplicasPerRegion)
	}
	return nil
}

// regionFloor is the fewest replicas the service's regions need (0
// without regions).
func regionFloor(spec *api.ServiceSpec) int { return len(spec.Regions) * spec.ReplicasPerRegion }

// wants is how many of desired replicas each region holds: an equal
// share, the remainder to the first regions in the spec's order.
func wants(spec *api.ServiceSpec, desired int) map[string]int {
	n := len(spec.Regions)
	w := make(map[string]int, n)
	for i, r := range spec.Regions {
		w[r] = desired / n
		if i < desired%n {
			w[r]++
		}
	}
	return w
}

// regionFor is the region a new replica is leased in: the one furthest
// below its share of the desired count, counting live (those neither
// draining nor being renewed) and extra replicas, the first in the spec's
// order among equals; "" for a service without regions. s.mu is held.
func (s *Service) regionFor(live []*replica, extra map[string]int) string {
	if len(s.spec.Regions) == 0 {
		return ""
	}
	have := countRegions(live, extra)
	w := wants(&s.spec, s.desired)
	best, gap := "", math.MinInt
	for _, r := range s.spec.Regions {
		if g := w[r] - have[r]; g > gap {
			best, gap = r, g
		}
	}
	return best
}

// countRegions counts replicas per region, plus extra.
func countRegions(reps []*replica, extra map[string]int) map[string]int {
	have := map[string]int{}
	for r, n := range extra {
		have[r] += n
	}
	for _, r := range reps {
		have[r.region]++
	}
	return have
}

// drainOrder sorts the candidates to drain, most useful last: first those
// of the regions most over their share, then starting or unhealthy before
// ready ones, then the newest first. s.mu is held.
func (s *Service) drainOrder(cands, live []*replica) {
	over := map[string]int{}
	if len(s.spec.Regions) > 0 {
		w := wants(&s.spec, s.desired)
		for r, n := range countRegions(live, nil) {
			over[r] = n - w[r]
		}
	}
	rank := map[string]int{api.ReplicaUnhealthy: 0, api.ReplicaStarting: 1, api.ReplicaReady: 2}
	slices.SortStableFunc(cands, func(a, b *replica) int {
		return cmp.Or(cmp.Compare(over[b.region], over[a.region]), cmp.Compare(rank[a.state], rank[b.state]),
			b.leasedAt.Compare(a.leasedAt))
	})
}

// group is the routable replicas of one region.
type group struct {
	region string
	reps   []*replica
	near   int           // the highest auction.Nearness of its replicas to the job's Near
	rtt    time.Duration // the lowest measured round trip of its replicas (0: none)
}

// routeGroups orders the routable replicas for the gateway: one group per
// region, nearest first (by auction.Nearness to the job's Near region,
// then by the lowest measured round trip: an unmeasured region after the
// measured ones, then by name). A service without regions has one group.
func (s *Service) routeGroups(reps []*replica) []group {
	if len(s.spec.Regions) == 0 {
		if len(reps) == 0 {
			return nil
		}
		return []group{{reps: reps}}
	}
	var gs []group
	for _, r := range reps {
		i := slices.IndexFunc(gs, func(g group) bool { return g.region == r.region })
		if i < 0 {
			gs = append(gs, group{region: r.region})
			i = len(gs) - 1
		}
		g := &gs[i]
		g.reps = append(g.reps, r)
		g.near = max(g.near, auction.Nearness(&s.spec.Job, cmp.Or(r.providerRegion, r.region)))
		if d := time.Duration(r.rtt.Load()); d > 0 && (g.rtt == 0 || d < g.rtt) {
			g.rtt = d
		}
	}
	slices.SortStableFunc(gs, func(a, b group) int {
		return cmp.Or(cmp.Compare(b.near, a.near), compareRTT(a.rtt, b.rtt), strings.Compare(a.region, b.region))
	})
	return gs
}

// compareRTT orders round trips, an unmeasured one (0) last.
func compareRTT(a, b time.Duration) int {
	switch {
	case a == b:
		return 0
	case a == 0:
		return 1
	case b == 0:
		return -1
	}
	return cmp.Compare(a, b)
}

// measureRTT takes the round trip to r's provider (Config.Latency: a fresh
// sample, else one measured now) after a passed probe, and reroutes a
// service with regions when it changed (the region's rank may have);
// s.mu is not held.
func (s *Service) measureRTT(r *replica) {
	if s.m.cfg.Latency == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.probeTimeout())
	defer cancel()
	d, ok := s.m.cfg.Latency.Measure(ctx, r.provider)
	if !ok || time.Duration(r.rtt.Swap(int64(d))) == d || len(s.spec.Regions) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.reroute()
	}
}

// regionViews is each region's status; s.mu is held.
func (s *Service) regionViews() []api.RegionView {
	if len(s.spec.Regions) == 0 {
		return nil
	}
	w := wants(&s.spec, s.desired)
	out := make([]api.RegionView, 0, len(s.spec.Regions))
	for _, r := range s.spec.Regions {
		out = append(out, api.RegionView{Region: r, Want: w[r]})
	}
	for rank, g := range *s.routable.Load() {
		i := slices.IndexFunc(out, func(v api.RegionView) bool { return v.Region == g.region })
		if i < 0 {
			continue
		}
		for _, r := range g.reps {
			if r.state == api.ReplicaReady {
				out[i].Ready++
			}
		}
		out[i].Rank, out[i].RTTMS = rank+1, ms(g.rtt)
	}
	return out
}
