package replay

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Config is one replay.
type Config struct {
	// TracePath is a trace CSV (see ReadTrace). Trace, when set, is used
	// instead; Jobs, when set, replaces both with ready-made job specs
	// (CreatedAt is the submission time, Epoch is trace time zero).
	TracePath string
	Trace     []TraceJob
	Jobs      []terms.Job
	// Seed drives every random draw: job specs, providers, failures.
	Seed uint64
	// Demand and Supply are the seeded distributions; zero values mean
	// DefaultDemand and DefaultSupply. Providers, when set, replaces the
	// generated population.
	Demand    Demand
	Supply    Supply
	Providers []Provider
	// Drain is how long the replay runs past the last submission (default
	// 7 days). Nothing is counted after it.
	Drain time.Duration
	// Policies to compare (default auction and fifo).
	Policies []string
	// Flat replays the market without the two shapes: a trace's fraction of
	// a GPU is rounded up to a whole GPU, and a job on several machines asks
	// one provider for all their GPUs. Without it (the default), fractions
	// are sold as slices of a device and multi-machine jobs are gangs, one
	// member per provider (see buildJobs). Ready-made Jobs are as given.
	Flat bool
	// Bucket is the chart's time resolution (default 6 h).
	Bucket time.Duration
	// Progress, when set, receives a progress line per policy.
	Progress io.Writer
}

// Report is a replay's result.
type Report struct {
	Trace string `json:"trace"`
	Seed  uint64 `json:"seed"`
	// Flat is Config.Flat: the market without fractions and gangs.
	Flat bool `json:"flat"`
	// TraceSkipped are the trace's rows without GPU work (ReadTrace).
	TraceSkipped int `json:"trace_rows_skipped,omitempty"`
	// FractionalJobs ask for part of one GPU in the trace, GangJobs span
	// several machines (as sliced or gang jobs, or rounded up when Flat).
	FractionalJobs int       `json:"fractional_jobs"`
	GangJobs       int       `json:"gang_jobs"`
	Start          time.Time `json:"start"`
	End            time.Time `json:"end"`
	Jobs           int       `json:"jobs"`
	Providers      int       `json:"providers"`
	GPUs           int       `json:"gpus"`
	// Unplaceable jobs fit no provider at all (too many GPUs, too much
	// VRAM, residency, price cap below every floor): every policy misses
	// them, and the bound excludes them.
	Unplaceable         int            `json:"unplaceable_jobs"`
	UnplaceableGPUHours float64        `json:"unplaceable_gpu_hours"`
	DemandGPUHours      float64        `json:"demand_gpu_hours"`
	OfferedGPUHours     float64        `json:"offered_idle_gpu_hours"`
	Bound               Bound          `json:"bound"`
	Policies            []PolicyReport `json:"policies"`

	// Perf is wall-clock data, left out of the JSON so that a seed's JSON
	// report is byte-identical from run to run.
	Perf Perf `json:"-"`

	bucket  time.Duration
	offered []float64
	bound   []float64
}

// Bound is the upper bound on fillable idle GPU-hours.
type Bound struct {
	// Simple is min(offered idle GPU-hours, placeable demand GPU-hours).
	Simple float64 `json:"simple_gpu_hours"`
	// Fluid is the fluid relaxation (see the report footer): never above
	// Simple.
	Fluid    float64 `json:"fluid_gpu_hours"`
	FillRate float64 `json:"fill_rate"`
}

// PolicyReport is one policy's outcome.
type PolicyReport struct {
	Policy string `json:"policy"`
	// FilledGPUHours are delivered lease GPU-hours (failed leases excluded)
	// within the replay; FillRate divides them by the offered idle hours.
	FilledGPUHours float64 `json:"filled_gpu_hours"`
	FillRate       float64 `json:"fill_rate"`
	LostGPUHours   float64 `json:"lost_gpu_hours"`
	// IdleBilledGPUHours are delivered GPU-hours (of FilledGPUHours) the
	// jobs did not ask for: a fraction rounded up to the slice (or, Flat,
	// the whole GPU) it got.
	IdleBilledGPUHours float64 `json:"idle_billed_gpu_hours"`
	// CostPerGPUHour is what renters paid per GPU-hour they asked for.
	CostPerGPUHour float64      `json:"cost_per_gpu_hour"`
	Completed      int          `json:"completed"`
	NeverStarted   int          `json:"never_started"`
	SLAViolations  int          `json:"sla_violations"`
	PreemptGold    int          `json:"preemptions_by_gold"`
	PreemptGap     int          `json:"preemptions_at_gap_end"`
	Failures       int          `json:"lease_failures"`
	Tiers          []TierReport `json:"tiers"`
	Earnings       Earnings     `json:"provider_earnings"`
	Events         int          `json:"events"`

	util []float64
}

// TierReport is one tier's outcome under a policy (the last one, "all",
// covers every tier), over placeable jobs
// (Report.Unplaceable are left out). Waits are from submission to first
// start, in hours; jobs that never start count with their wait censored at
// the end of the replay.
type TierReport struct {
	Tier           terms.Tier `json:"tier"`
	Jobs           int        `json:"jobs"`
	Completed      int        `json:"completed"`
	CostPerGPUHour float64    `json:"cost_per_gpu_hour"`
	WaitP50        float64    `json:"wait_p50_h"`
	WaitP95        float64    `json:"wait_p95_h"`
	WaitP99        float64    `json:"wait_p99_h"`
	SLAViolations  int        `json:"sla_violations"`
}

// tierAll labels the TierReport over all tiers together.
const tierAll terms.Tier = "all"

// Earnings summarises what providers earned over the replay, in USD.
type Earnings struct {
	Total     float64 `json:"total"`
	P50       float64 `json:"p50"`
	P90       float64 `json:"p90"`
	P99       float64 `json:"p99"`
	Max       float64 `json:"max"`
	ZeroShare float64 `json:"zero_share"`
	Gini      float64 `json:"gini"`
}

// Perf is the replay's cost.
type Perf struct {
	Wall         time.Duration
	Events       int
	EventsPerSec float64
	PeakRSSMB    float64
}

// Run replays the trace against the supply under every policy.
func Run(cfg Config) (*Report, error) {
	t0 := time.Now()
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 7 * 24 * time.Hour
	}
	if cfg.Bucket <= 0 {
		cfg.Bucket = 6 * time.Hour
	}
	if cfg.Bucket < time.Minute {
		return nil, fmt.Errorf("replay: bucket %v shorter than a minute", cfg.Bucket)
	}
	if len(cfg.Policies) == 0 {
		cfg.Policies = []string{PolicyAuction, PolicyFIFO}
	}
	for _, p := range cfg.Policies {
		if p != PolicyAuction && p != PolicyFIFO {
			return nil, fmt.Errorf("replay: unknown policy %q (want %s or %s)", p, PolicyAuction, PolicyFIFO)
		}
	}
	if cfg.Demand.Tiers == nil {
		cfg.Demand = DefaultDemand()
	}
	if cfg.Demand.Regions == nil {
		cfg.Demand.Regions = DefaultDemand().Regions
	}
	if cfg.Demand.PriceScale <= 0 {
		cfg.Demand.PriceScale = 1
	}
	if cfg.Supply.Count == 0 {
		cfg.Supply.Count = DefaultSupply().Count
	}
	if cfg.Supply.Kinds == nil {
		cfg.Supply.Kinds = DefaultSupply().Kinds
	}

	rep := &Report{Trace: cfg.TracePath, Seed: cfg.Seed, Flat: cfg.Flat, bucket: cfg.Bucket}
	jobs := cfg.Jobs
	var shapes []shape
	if jobs == nil {
		trace := cfg.Trace
		if trace == nil {
			if cfg.TracePath == "" {
				return nil, errors.New("replay: no trace (set a trace file)")
			}
			var err error
			if trace, rep.TraceSkipped, err = readTraceFile(cfg.TracePath); err != nil {
				return nil, err
			}
		}
		for _, t := range trace {
			if t.Fraction > 0 {
				rep.FractionalJobs++
			}
			if t.nodes() > 1 {
				rep.GangJobs++
			}
		}
		jobs, shapes = buildJobs(trace, cfg.Demand, cfg.Seed, cfg.Flat)
	} else {
		jobs = append([]terms.Job(nil), jobs...)
		sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].CreatedAt.Before(jobs[b].CreatedAt) })
		for i := range jobs {
			shapes = append(shapes, shape{nodes: 1, asked: jobs[i].BilledGPUs()})
		}
	}
	if len(jobs) == 0 {
		return nil, errors.New("replay: no jobs")
	}
	var last time.Time
	var longest time.Duration
	for i := range jobs {
		j := jobs[i]
		if err := j.Validate(); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if j.CreatedAt.Before(Epoch) {
			return nil, fmt.Errorf("replay: job %s submitted before the epoch %s", j.ID, Epoch.Format(time.RFC3339))
		}
		if j.CreatedAt.After(last) {
			last = j.CreatedAt
		}
		longest = max(longest, j.Duration)
	}
	end := last.Add(cfg.Drain)
	// Spans are needed past the horizon for the providers' look-ahead.
	spanEnd := end.Add(auction.DefaultPatience + longest)
	if spanEnd.Sub(Epoch) > 399*24*time.Hour {
		return nil, fmt.Errorf("replay: trace plus drain and longest job spans %v, over the 399 days a provider calendar expands", spanEnd.Sub(Epoch).Round(time.Hour))
	}
	provs := cfg.Providers
	if provs == nil {
		var err error
		if provs, err = buildSupply(cfg.Supply, cfg.Seed, spanEnd); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
	}
	if len(provs) == 0 {
		return nil, errors.New("replay: no providers")
	}
	w := &world{seed: cfg.Seed, jobs: jobs, shapes: shapes, provs: provs, horizon: int64(end.Sub(Epoch) / time.Second), bucket: int64(cfg.Bucket / time.Second)}
	seen := map[string]bool{}
	for i := range provs {
		c := &provs[i].Capability
		if c.Peer == "" || seen[c.Peer] {
			return nil, fmt.Errorf("replay: provider %d: empty or duplicate peer id %q", i, c.Peer)
		}
		seen[c.Peer] = true
		if err := c.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("replay: provider %s: %w", c.Peer, err)
		}
		if len(c.GPUs) == 0 {
			return nil, fmt.Errorf("replay: provider %s has no gpus", c.Peer)
		}
		var sp []span
		for _, iv := range c.Policy.FreeSpans(Epoch, spanEnd) {
			sp = append(sp, span{int64(iv.Start.Sub(Epoch) / time.Second), int64(iv.End.Sub(Epoch) / time.Second)})
		}
		w.spans = append(w.spans, sp)
		w.changes = append(w.changes, changePoints(sp, c.Policy, spanEnd))
		rep.GPUs += len(c.GPUs)
	}
	w.placeable = make([]bool, len(jobs))
	for i := range jobs {
		// A job fits when as many providers as it has members could ever
		// host one (auction.StaticFit).
		fit := 0
		for k := range provs {
			if auction.StaticFit(&provs[k].Capability, &jobs[i]) == nil {
				if fit++; fit == shapes[i].nodes {
					w.placeable[i] = true
					break
				}
			}
		}
		gh := w.jobGPUs(i) * jobs[i].Duration.Hours()
		rep.DemandGPUHours += gh
		if !w.placeable[i] {
			rep.Unplaceable++
			rep.UnplaceableGPUHours += gh
		}
	}
	rep.Start, rep.End = Epoch, end
	rep.Jobs, rep.Providers = len(jobs), len(provs)

	curve := capacityCurve(w)
	nb := (w.horizon + w.bucket - 1) / w.bucket
	rep.offered = make([]float64, nb)
	for k, st := range curve {
		e := w.horizon
		if k+1 < len(curve) {
			e = curve[k+1].at
		}
		addSpan(rep.offered, w.bucket, st.at, e, float64(st.gpus))
	}
	for _, v := range rep.offered {
		rep.OfferedGPUHours += v / 3600
	}
	fluid, fb := fluidBound(w, curve)
	rep.bound = fb
	rep.Bound.Fluid = fluid / 3600
	placeableDemand := 0.0
	for i := range jobs {
		if w.placeable[i] {
			placeableDemand += w.jobGPUs(i) * jobs[i].Duration.Hours()
		}
	}
	rep.Bound.Simple = math.Min(rep.OfferedGPUHours, placeableDemand)
	rep.Bound.FillRate = ratio(rep.Bound.Fluid, rep.OfferedGPUHours)

	for _, pol := range cfg.Policies {
		s, err := newSim(w, pol, cfg.Progress)
		if err != nil {
			return nil, err
		}
		if err := s.run(); err != nil {
			return nil, err
		}
		rep.Policies = append(rep.Policies, s.summarise())
		rep.Perf.Events += s.nEvents
	}
	rep.Perf.Wall = time.Since(t0)
	rep.Perf.EventsPerSec = float64(rep.Perf.Events) / rep.Perf.Wall.Seconds()
	rep.Perf.PeakRSSMB = peakRSSMB()
	round(rep)
	return rep, nil
}

// jobGPUs is the GPUs job i leases at once: its billed GPUs (a slice
// counts its fraction) times its members.
func (w *world) jobGPUs(i int) float64 {
	return w.jobs[i].BilledGPUs() * float64(w.shapes[i].nodes)
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func (s *sim) summarise() PolicyReport {
	w := s.w
	pr := PolicyReport{Policy: s.policy, PreemptGold: s.preemptGold, PreemptGap: s.preemptGap, Failures: s.failures, Events: s.nEvents,
		IdleBilledGPUHours: s.wasted / 3600}
	for _, v := range s.filled {
		pr.FilledGPUHours += v / 3600
	}
	for _, v := range s.lost {
		pr.LostGPUHours += v / 3600
	}
	pr.util = s.filled
	var paid, paidSec float64
	type tierAcc struct {
		waits         []float64
		jobs, done    int
		paid, paidSec float64
		viol          int
	}
	acc := map[terms.Tier]*tierAcc{}
	for i := range s.jobs {
		js := &s.jobs[i]
		if !w.placeable[i] {
			continue // reported as unplaceable, the same under every policy
		}
		a := acc[js.spec.Tier]
		if a == nil {
			a = &tierAcc{}
			acc[js.spec.Tier] = a
		}
		a.jobs++
		paid += js.paid
		paidSec += js.paidGPUSec
		a.paid += js.paid
		a.paidSec += js.paidGPUSec
		wait := w.horizon - js.submit
		if js.firstStart >= 0 {
			wait = js.firstStart - js.submit
		} else {
			pr.NeverStarted++
		}
		a.waits = append(a.waits, float64(wait)/3600)
		done := js.doneAt >= 0 && js.doneAt <= w.horizon
		if done {
			pr.Completed++
			a.done++
		}
		if !done || time.Duration(wait)*time.Second > slaWait[js.spec.Tier] {
			a.viol++
			pr.SLAViolations++
		}
	}
	pr.CostPerGPUHour = ratio(paid, paidSec/3600)
	pr.FillRate = ratio(pr.FilledGPUHours, 0) // set by caller below
	all := &tierAcc{}
	for _, t := range []terms.Tier{terms.Gold, terms.Silver, terms.Bronze} {
		a := acc[t]
		if a == nil {
			continue
		}
		all.waits = append(all.waits, a.waits...)
		all.jobs += a.jobs
		all.done += a.done
		all.paid += a.paid
		all.paidSec += a.paidSec
		all.viol += a.viol
	}
	acc[tierAll] = all
	for _, t := range []terms.Tier{terms.Gold, terms.Silver, terms.Bronze, tierAll} {
		a := acc[t]
		if a == nil || a.jobs == 0 {
			continue
		}
		sort.Float64s(a.waits)
		pr.Tiers = append(pr.Tiers, TierReport{
			Tier: t, Jobs: a.jobs, Completed: a.done, CostPerGPUHour: ratio(a.paid, a.paidSec/3600),
			WaitP50: quantile(a.waits, 0.5), WaitP95: quantile(a.waits, 0.95), WaitP99: quantile(a.waits, 0.99),
			SLAViolations: a.viol,
		})
	}
	earn := make([]float64, len(s.provs))
	for i := range s.provs {
		earn[i] = s.provs[i].earned
	}
	pr.Earnings = earnings(earn)
	offered := 0.0
	for i, sp := range w.spans {
		g := float64(len(w.provs[i].Capability.GPUs))
		for _, x := range sp {
			if hi, lo := min(x.end, w.horizon), max(x.start, 0); hi > lo {
				offered += g * float64(hi-lo) / 3600
			}
		}
	}
	pr.FillRate = ratio(pr.FilledGPUHours, offered)
	return pr
}

// quantile is the nearest-rank quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

func earnings(e []float64) Earnings {
	sort.Float64s(e)
	var out Earnings
	zero := 0
	var cum, weighted float64
	for i, x := range e {
		out.Total += x
		if x == 0 {
			zero++
		}
		cum += x
		weighted += float64(i+1) * x
	}
	n := float64(len(e))
	out.P50, out.P90, out.P99 = quantile(e, 0.5), quantile(e, 0.9), quantile(e, 0.99)
	out.Max = e[len(e)-1]
	out.ZeroShare = float64(zero) / n
	if cum > 0 {
		out.Gini = (2*weighted)/(n*cum) - (n+1)/n
	}
	return out
}

// round trims floats so that the JSON is stable and readable.
func round(r *Report) {
	f := func(x *float64, d float64) { *x = math.Round(*x*d) / d }
	f(&r.UnplaceableGPUHours, 100)
	f(&r.DemandGPUHours, 100)
	f(&r.OfferedGPUHours, 100)
	f(&r.Bound.Simple, 100)
	f(&r.Bound.Fluid, 100)
	f(&r.Bound.FillRate, 1e4)
	for i := range r.Policies {
		p := &r.Policies[i]
		f(&p.FilledGPUHours, 100)
		f(&p.LostGPUHours, 100)
		f(&p.IdleBilledGPUHours, 100)
		f(&p.FillRate, 1e4)
		f(&p.CostPerGPUHour, 1e4)
		for k := range p.Tiers {
			t := &p.Tiers[k]
			f(&t.CostPerGPUHour, 1e4)
			f(&t.WaitP50, 1e3)
			f(&t.WaitP95, 1e3)
			f(&t.WaitP99, 1e3)
		}
		e := &p.Earnings
		for _, x := range []*float64{&e.Total, &e.P50, &e.P90, &e.P99, &e.Max} {
			f(x, 100)
		}
		f(&e.ZeroShare, 1e4)
		f(&e.Gini, 1e4)
	}
}

// changePoints lists, sorted, the times at which a provider's answer to a
// call for bids can change without a lease ending: each free span's start,
// that start minus the 24 h look-ahead, and each peak window's end.
func changePoints(sp []span, p terms.Policy, end time.Time) []int64 {
	look := int64(auction.DefaultPatience / time.Second)
	var out []int64
	for _, x := range sp {
		out = append(out, x.start-look, x.start)
	}
	if len(p.PeakWindows) > 0 {
		peak := terms.Policy{Availability: p.PeakWindows, Timezone: p.Timezone}
		for _, iv := range peak.FreeSpans(Epoch, end) {
			out = append(out, int64(iv.End.Sub(Epoch)/time.Second))
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}
