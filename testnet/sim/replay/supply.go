package replay

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Provider is one simulated seller: its advertised capability and policy,
// and the rate at which it silently fails leases (never shown to renters,
// who only learn it from outcomes).
type Provider struct {
	Capability terms.Capability `json:"capability"`
	Kind       string           `json:"kind"`
	FailRate   float64          `json:"fail_rate"`
}

// Provider kinds accepted in Supply.Kinds.
const (
	KindNights = "nights" // owner sells nights and weekends, local time
	KindRacks  = "racks"  // part-time reserved rack, gaps sold as backfill
	KindAlways = "always" // always-on specialist
)

var kindNames = []string{KindNights, KindRacks, KindAlways}

// Supply is the seeded distribution of the provider population:
//
//   - nights: one (70%) or two GPUs, RTX 4090 / RTX 3090 (24 GB) or RTX A4000
//     (16 GB); sells weekdays 19:00-08:00 and all weekend in its region's
//     time zone; floor $0.25-0.55; 80% accept preemptible work; 85% fail 1%
//     of leases, 10% fail 5%, 5% fail 20%.
//   - racks: 8 (60%), 16 (30%) or 32 GPUs, A100 80 GB or H100 80 GB; the owner
//     holds reservations of 1-6 days with gaps of 6 h-3 days between them,
//     and sells the gaps; floor $1.0-1.4 (A100) or $1.6-2.2 (H100); take
//     preemptible work and let gold preempt it; fail 0.5% of leases.
//   - always: 4 or 8 GPUs, A100 40 GB, L40S 48 GB or A10 24 GB, always on;
//     floor $0.7-1.3, 1.3x on weekday office hours; 60% accept preemptible
//     work; fail 1% (80%) or 3% of leases.
//   - slices (sellSlices): 40% of nights owners sell each device in 2 or 4
//     slices, 50% of always-on specialists and 25% of racks in 2, 4 or 8.
//
// Regions are us-east (30%), us-west, eu-west, eu-central (20% each) and
// ap-northeast (10%), each with its own time zone.
type Supply struct {
	Count int
	Kinds Mix
}

// DefaultSupply is 1,000 providers: 60% nights, 10% racks, 30% always.
func DefaultSupply() Supply {
	return Supply{Count: 1000, Kinds: Mix{KindNights: 0.6, KindRacks: 0.1, KindAlways: 0.3}}
}

type regionTZ struct{ name, tz string }

var regions = weighted[regionTZ]{
	{regionTZ{"us-east", "America/New_York"}, 0.3},
	{regionTZ{"us-west", "America/Los_Angeles"}, 0.2},
	{regionTZ{"eu-west", "Europe/London"}, 0.2},
	{regionTZ{"eu-central", "Europe/Berlin"}, 0.2},
	{regionTZ{"ap-northeast", "Asia/Tokyo"}, 0.1},
}

var (
	weekdays = []string{"mon", "tue", "wed", "thu", "fri"}
	weekend  = []string{"sat", "sun"}
)

// buildSupply draws the provider population for a replay covering
// [Epoch, end).
func buildSupply(s Supply, seed uint64, end time.Time) ([]Provider, error) {
	if s.Count < 1 {
		return nil, fmt.Errorf("supply: provider count %d must be at least 1", s.Count)
	}
	r := rand.New(rand.NewPCG(seed, 0x70726f76)) // "prov"
	out := make([]Provider, s.Count)
	for i := range out {
		kind := s.Kinds.draw(r)
		reg := regions.draw(r)
		p := Provider{Kind: kind}
		c := &p.Capability
		c.Peer = fmt.Sprintf("p%04d-%s", i, kind)
		c.Region = reg.name
		c.Policy.Timezone = reg.tz
		c.Policy.AllowPreemption = true
		c.Policy.OccupancySurcharge = 0.1
		c.IssuedAt = Epoch
		c.ExpiresAt = end
		var n int
		var g terms.GPU
		switch kind {
		case KindNights:
			n = weighted[int]{{1, 0.7}, {2, 0.3}}.draw(r)
			g = weighted[terms.GPU]{
				{terms.GPU{Model: "RTX 4090", VRAMGB: 24}, 0.5},
				{terms.GPU{Model: "RTX 3090", VRAMGB: 24}, 0.3},
				{terms.GPU{Model: "RTX A4000", VRAMGB: 16}, 0.2},
			}.draw(r)
			c.Policy.PriceFloor = round2(uniform(r, 0.25, 0.55))
			c.Policy.Availability = []terms.Window{
				{Days: weekdays, From: "19:00", To: "08:00"},
				{Days: weekend, From: "00:00", To: "24:00"},
			}
			c.Policy.AcceptPreemptible = r.Float64() < 0.8
			p.FailRate = weighted[float64]{{0.01, 0.85}, {0.05, 0.10}, {0.2, 0.05}}.draw(r)
		case KindRacks:
			n = weighted[int]{{8, 0.6}, {16, 0.3}, {32, 0.1}}.draw(r)
			if r.Float64() < 0.6 {
				g = terms.GPU{Model: "A100", VRAMGB: 80}
				c.Policy.PriceFloor = round2(uniform(r, 1.0, 1.4))
			} else {
				g = terms.GPU{Model: "H100", VRAMGB: 80}
				c.Policy.PriceFloor = round2(uniform(r, 1.6, 2.2))
			}
			c.Policy.Reserved = reservations(r, end)
			c.Policy.AcceptPreemptible = true
			p.FailRate = 0.005
		default: // KindAlways
			n = weighted[int]{{4, 0.5}, {8, 0.5}}.draw(r)
			g = weighted[terms.GPU]{
				{terms.GPU{Model: "A100", VRAMGB: 40}, 0.4},
				{terms.GPU{Model: "L40S", VRAMGB: 48}, 0.4},
				{terms.GPU{Model: "A10", VRAMGB: 24}, 0.2},
			}.draw(r)
			c.Policy.PriceFloor = round2(uniform(r, 0.7, 1.3))
			c.Policy.PeakWindows = []terms.Window{{Days: weekdays, From: "09:00", To: "18:00"}}
			c.Policy.PeakMultiplier = 1.3
			c.Policy.AcceptPreemptible = r.Float64() < 0.6
			p.FailRate = weighted[float64]{{0.01, 0.8}, {0.03, 0.2}}.draw(r)
		}
		c.GPUs = make([]terms.GPU, n)
		for k := range c.GPUs {
			c.GPUs[k] = g
			c.GPUs[k].UUID = fmt.Sprintf("GPU-%s-%d", c.Peer, k)
		}
		out[i] = p
	}
	// Slices come from a stream of their own, so that the population above
	// is the same as before providers sold slices.
	sr := rand.New(rand.NewPCG(seed, 0x736c6963)) // "slic"
	for i := range out {
		sellSlices(&out[i], sr)
	}
	return out, nil
}

// sellSlices draws whether a provider sells its devices in slices, and
// into how many: 40% of nights owners cut theirs into 2 or 4, 50% of
// always-on specialists and 25% of racks into 2, 4 or 8. A slice is
// enforced by MIG on A100 and H100, by MPS on the others.
func sellSlices(p *Provider, r *rand.Rand) {
	var counts weighted[int]
	switch p.Kind {
	case KindNights:
		if r.Float64() >= 0.4 {
			return
		}
		counts = weighted[int]{{2, 0.5}, {4, 0.5}}
	case KindAlways:
		if r.Float64() >= 0.5 {
			return
		}
		counts = weighted[int]{{2, 0.3}, {4, 0.5}, {8, 0.2}}
	default: // KindRacks
		if r.Float64() >= 0.25 {
			return
		}
		counts = weighted[int]{{2, 0.3}, {4, 0.4}, {8, 0.3}}
	}
	c := &p.Capability
	rule := terms.SliceRule{Count: counts.draw(r)}
	for d := range c.GPUs {
		rule.Devices = append(rule.Devices, d)
		c.GPUs[d].Isolation = terms.IsolationMPS
		if m := c.GPUs[d].Model; m == "A100" || m == "H100" {
			c.GPUs[d].Isolation = terms.IsolationMIG
		}
	}
	c.Policy.Slices = []terms.SliceRule{rule}
}

// reservations draws the owner's own bookings of a part-time rack: blocks of
// 1-6 days separated by gaps of 6 hours to 3 days, from a random phase.
func reservations(r *rand.Rand, end time.Time) []terms.Interval {
	var out []terms.Interval
	t := Epoch.Add(-time.Duration(r.Float64()*4*24) * time.Hour)
	for t.Before(end) {
		block := time.Duration(uniform(r, 24, 6*24) * float64(time.Hour)).Truncate(time.Hour)
		out = append(out, terms.Interval{Start: t, End: t.Add(block)})
		gap := time.Duration(uniform(r, 6, 3*24) * float64(time.Hour)).Truncate(time.Hour)
		t = t.Add(block + gap)
	}
	return out
}
