package replay

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Epoch is trace time zero: Monday 2021-03-01 00:00 UTC, so that the
// providers' night and weekend windows line up with real weekdays.
var Epoch = time.Date(2021, time.March, 1, 0, 0, 0, 0, time.UTC)

// Demand is the seeded distribution that turns trace rows into market jobs.
// A trace only says when a job came, how long it ran and how many GPUs it
// used; everything a renter states in a job spec is drawn from here:
//
//   - Tier from Tiers (default gold=0.2, silver=0.5, bronze=0.3). Bronze jobs
//     are preemptible (spot); gold and silver are not.
//   - MaxPrice per GPU-hour, uniform in [2.2, 3.6] for gold, [1.4, 2.6] for
//     silver and [0.5, 1.3] for bronze, times PriceScale (default 1).
//   - MinVRAMGB: jobs on one or two GPUs want 16 (50%), 24 (30%), 40 (15%)
//     or 80 GB (5%); wider jobs want 24 (20%), 40 (40%) or 80 GB (40%).
//   - Region residency from Regions (default any=0.7, eu=0.15, us=0.1,
//     ap=0.05); "any" means no constraint, the others are region prefixes.
type Demand struct {
	Tiers      Mix
	Regions    Mix
	PriceScale float64
}

// Tier and region names accepted in Demand mixes.
var (
	tierNames       = []string{string(terms.Gold), string(terms.Silver), string(terms.Bronze)}
	demandRegionSet = []string{"any", "eu", "us", "ap"}
)

// DefaultDemand returns the documented default demand distribution.
func DefaultDemand() Demand {
	return Demand{
		Tiers:      Mix{"gold": 0.2, "silver": 0.5, "bronze": 0.3},
		Regions:    Mix{"any": 0.7, "eu": 0.15, "us": 0.1, "ap": 0.05},
		PriceScale: 1,
	}
}

var priceCap = map[terms.Tier][2]float64{
	terms.Gold:   {2.2, 3.6},
	terms.Silver: {1.4, 2.6},
	terms.Bronze: {0.5, 1.3},
}

var (
	vramNarrow = weighted[int]{{16, 0.5}, {24, 0.3}, {40, 0.15}, {80, 0.05}}
	vramWide   = weighted[int]{{24, 0.2}, {40, 0.4}, {80, 0.4}}
)

// shape is how a job spreads over GPUs beyond its terms.Job: the
// machines it spans at once (each a member asking for GPUCount of the
// job's spec), and the GPUs each member asked for in the trace (a
// fraction below the market's slice it was rounded up to, or the member's
// whole GPUs).
type shape struct {
	nodes int
	asked float64
}

// marketFraction is the slice the market sells for a trace's fraction f
// of a GPU: the smallest of terms.GPUFractions that holds it, or 0 (a
// whole GPU) above the largest.
func marketFraction(f float64) float64 {
	for _, m := range terms.GPUFractions {
		if f <= m {
			return m
		}
	}
	return 0
}

// buildJobs assigns job specs to trace rows, sorted by submission time then
// ID. The draw for each job depends only on the seed and the order of rows
// after sorting, so the same trace and seed give the same jobs, with shapes
// or flat.
//
// With shapes, a fractional row asks for the market's slice that holds it
// (marketFraction; its MinVRAMGB is then the slice's share of the drawn
// memory), and a row on several machines is a gang of as many members,
// each asking for the row's GPUs per machine. Flat (the market without
// these shapes), a fraction is rounded up to a whole GPU and a gang's
// GPUs are asked of one provider.
func buildJobs(trace []TraceJob, d Demand, seed uint64, flat bool) ([]terms.Job, []shape) {
	rows := append([]TraceJob(nil), trace...)
	sort.SliceStable(rows, func(a, b int) bool {
		if rows[a].Submit != rows[b].Submit {
			return rows[a].Submit < rows[b].Submit
		}
		return rows[a].ID < rows[b].ID
	})
	r := rand.New(rand.NewPCG(seed, 0x6a6f6273)) // "jobs"
	jobs := make([]terms.Job, len(rows))
	shapes := make([]shape, len(rows))
	for i, t := range rows {
		tier := terms.Tier(d.Tiers.draw(r))
		pc := priceCap[tier]
		vram := vramNarrow
		if t.nodes()*t.GPUs > 2 {
			vram = vramWide
		}
		region := d.Regions.draw(r)
		if region == "any" {
			region = ""
		}
		created := Epoch.Add(time.Duration(t.Submit) * time.Second)
		jobs[i] = terms.Job{
			ID:          t.ID,
			Owner:       "renter",
			Tier:        tier,
			MaxPrice:    round2(uniform(r, pc[0], pc[1]) * d.PriceScale),
			GPUCount:    t.nodes() * t.GPUs,
			MinVRAMGB:   vram.draw(r),
			Region:      region,
			Preemptible: tier == terms.Bronze,
			Duration:    time.Duration(t.Duration) * time.Second,
			Run:         terms.RunSpec{Command: []string{"replay"}},
			CreatedAt:   created,
		}
		shapes[i] = shape{nodes: 1, asked: t.askedGPUs()}
		if flat {
			continue
		}
		if f := marketFraction(t.Fraction); t.Fraction > 0 && f > 0 {
			jobs[i].GPUFraction = f
			jobs[i].MinVRAMGB = int(math.Ceil(float64(jobs[i].MinVRAMGB) * f))
		}
		if t.nodes() > 1 {
			jobs[i].GPUCount = t.GPUs
			shapes[i] = shape{nodes: t.nodes(), asked: float64(t.GPUs)}
		}
	}
	return jobs, shapes
}
