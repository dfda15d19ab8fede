package auction

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// DefaultPatience is how far ahead a provider offers a start for a job
// without a deadline.
const DefaultPatience = 24 * time.Hour

// MinBackfill is the shortest slice a bronze job is offered when it takes a
// gap shorter than its duration (or the job's duration, if shorter).
const MinBackfill = 5 * time.Minute

// ProviderState is what a provider knows about itself when a call arrives.
type ProviderState struct {
	Cap         *terms.Capability
	Cal         *Calendar
	TempC       int
	PowerW      int
	Reliability float64 // the provider's own verified reliability in [0,1]
	// FirmOnly evaluates against the calendar's bookings alone, ignoring
	// the tentative holds of outstanding bids.
	FirmOnly bool
	// Moving is the id of a confirmed lease being moved earlier: its own
	// booking is not in the way (see Provider and Lease.Moved).
	Moving string
}

// Offer is what a provider would bid for a job.
type Offer struct {
	Price    float64   // per GPU-hour, USD
	Start    time.Time // lease start
	End      time.Time // lease end; before Start+Duration only for bronze backfill
	GPUModel string
	VRAMGB   int
	Datasets []string // the job's datasets this provider holds
	Preempts []string // bronze lease ids to evict (gold only)
	// MissingBytes is how much of the job's inputs the provider lacks.
	MissingBytes int64
	// Devices are the calendar devices of the offered model that may hold
	// the lease, those free throughout [Start, End) first: the award books
	// the first GPUCount of them still free (see Booking.Devices).
	Devices []int
}

// KindBusy is the Ineligible kind of a provider whose GPUs are all booked
// until past the job's start deadline.
const KindBusy = "busy"

// Ineligible is the error Evaluate returns when a provider must not bid. Its
// Reason is short and meant for humans; Kind is a stable, low-cardinality
// key for counters ("region", "workload", "preemptible", "thermal", "power",
// "reliability", "gpu_model", "vram", "gpu_count", "price", "capacity",
// "max_lease", "deadline", "availability", "window", "busy", "excluded",
// "no_persist").
type Ineligible struct {
	Kind   string
	Reason string
}

func (e *Ineligible) Error() string { return "ineligible: " + e.Reason }

// IneligibleReason returns the reason if err is (or wraps) an *Ineligible.
func IneligibleReason(err error) (string, bool) {
	var in *Ineligible
	if errors.As(err, &in) {
		return in.Reason, true
	}
	return "", false
}

func inelig(kind, format string, args ...any) error {
	return &Ineligible{Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// Evaluate decides whether the provider in state ps may bid for job j at
// time now, and on what terms. It returns an *Ineligible error naming the
// first hard constraint that fails, checked in this order:
//
//   - first the time-independent rules, shared with StaticFit:
//     exclusion: a provider the job's Exclude names (it lost an earlier
//     attempt) never bids; residency: the provider's region equals Job.Region or starts with it
//     followed by a dash, case-insensitively ("eu" matches "eu-west" and
//     "EU-West", not "europe-x"); workload kind, when the policy restricts
//     it; preemptible jobs only go to providers that accept preemptible
//     work; a no-persist job only goes to providers that offer it, and a
//     provider that requires it takes no other; a job with an image needs a container engine, and GPU
//     passthrough for its GPUs (Capability.Containers); hardware: GPUCount devices of one model in Job.GPUModels (any
//     model if empty, case-insensitive), each with at least MinVRAMGB; price
//     floor not above the job's MaxPrice;
//   - thermal and power limits (TempC > MaxTempC, PowerW > MaxPowerW);
//   - the provider's own reliability must reach Job.MinReliability;
//   - the calendar's capacity must reach GPUCount;
//   - time: the earliest affordable start >= now, and <= the job's deadline (or
//     now+DefaultPatience), such that [start, start+Duration) lies within one
//     free span of the policy (availability windows minus reserved spans) and
//     the calendar has GPUCount free GPUs throughout. A lease never exceeds
//     MaxLease: a longer non-preemptible job is ineligible, a longer
//     preemptible one gets a capped slice;
//   - price: the Quote for the offered span at the calendar's occupancy at
//     its start must not exceed MaxPrice. When the earliest span is too
//     expensive (peak hours, occupancy), later candidate starts (when
//     capacity frees or a peak window ends) are tried within the horizon.
//
// A preemptible job may take a gap shorter than its Duration (at least
// MinBackfill): its Offer ends at the gap's end, where it will be preempted
// and requeued. A gold job on a provider whose policy allows preemption
// counts preemptible bookings as evictable: when they are in the way, the
// Offer lists in Preempts the fewest (then latest-started) to evict.
//
// Offer.Datasets is the intersection of Job.Datasets and the provider's;
// Offer.MissingBytes is what the provider lacks of the job's inputs.
// Errors other than *Ineligible report bad input (nil state, invalid
// policy). j must be valid (Job.Validate): a provider's jobs were validated
// where they entered it, in their call's decoding (terms.DecodeCall).
func Evaluate(ps ProviderState, j *terms.Job, now time.Time) (Offer, error) {
	if ps.Cap == nil || ps.Cal == nil {
		return Offer{}, errors.New("auction: evaluate: provider state needs a capability and a calendar")
	}
	if j == nil {
		return Offer{}, errors.New("auction: evaluate: nil job")
	}
	p := ps.Cap.Policy
	if err := p.Validate(); err != nil {
		return Offer{}, fmt.Errorf("auction: evaluate: provider %s: %w", ps.Cap.Peer, err)
	}

	model, vram, err := staticFit(ps.Cap, j)
	if err != nil {
		return Offer{}, err
	}
	pool := modelDevices(ps.Cap, terms.GPU{Model: model, VRAMGB: vram}, j, ps.Cal.Capacity())
	if len(pool) < j.GPUCount {
		return Offer{}, inelig("capacity", "calendar holds %d %s gpus < %d required", len(pool), model, j.GPUCount)
	}
	if p.MaxTempC > 0 && ps.TempC > p.MaxTempC {
		return Offer{}, inelig("thermal", "gpu temperature %dC above limit %dC", ps.TempC, p.MaxTempC)
	}
	if p.MaxPowerW > 0 && ps.PowerW > p.MaxPowerW {
		return Offer{}, inelig("power", "power draw %dW above limit %dW", ps.PowerW, p.MaxPowerW)
	}
	if math.IsNaN(ps.Reliability) || ps.Reliability < j.MinReliability {
		return Offer{}, inelig("reliability", "reliability %.2f below required %.2f", ps.Reliability, j.MinReliability)
	}
	if j.GPUCount > ps.Cal.Capacity() {
		return Offer{}, inelig("capacity", "calendar capacity %d gpus < %d required", ps.Cal.Capacity(), j.GPUCount)
	}

	var price, overQuote float64
	books := ps.Cal.Planned(now) // tentative holds of other bids count too
	if ps.FirmOnly {
		books = ps.Cal.Bookings()
	}
	if ps.Moving != "" {
		books = slices.DeleteFunc(books, func(b Booking) bool { return b.LeaseID == ps.Moving })
	}
	affordable := func(s, e time.Time) bool {
		occ := billedAt(books, s) / float64(ps.Cal.Capacity())
		q := Quote(p, s, e.Sub(s), occ, j.Preemptible)
		if q > j.MaxPrice {
			if overQuote == 0 {
				overQuote = q
			}
			return false
		}
		price = q
		return true
	}
	start, end, preempts, err := placeLease(p, ps.Cal, books, pool, j, now, affordable)
	if err != nil {
		if overQuote > 0 {
			return Offer{}, inelig("price", "quote %.2f > max %.2f", overQuote, j.MaxPrice)
		}
		return Offer{}, err
	}
	offer := Offer{
		Price:    price,
		Start:    start,
		End:      end,
		GPUModel: model,
		VRAMGB:   vram,
		Datasets: intersect(j.Datasets, ps.Cap.Datasets),
		Preempts: preempts,
		Devices:  preferFree(books, ps.Cal.layout(), ps.Cal.Capacity(), start, end, pool, j.GPUFraction),
	}
	offer.MissingBytes = MissingBytes(j, ps.Cap.Artifacts)
	return offer, nil
}

// MissingBytes is how many bytes of j's artifacts (inputs and image) a
// provider holding the artifacts held lacks (each distinct artifact
// counted once, at its size in j.InputBytes).
func MissingBytes(j *terms.Job, held []string) int64 {
	have := make(map[string]bool, len(held))
	for _, id := range held {
		have[id] = true
	}
	var n int64
	for _, id := range j.Run.Artifacts() {
		if !have[id] && !have[terms.HeldToken(j.Owner, id)] {
			n += j.InputBytes[id]
		}
	}
	return n
}

// modelDevices is the calendar devices (indices into c.GPUs, below
// capacity) of the model of device offered (pickModel's) that can hold
// j: with at least its MinVRAMGB (of a slice, for a fractional job) and,
// for a fractional job, sold in slices no larger than its fraction and
// enforced as it asks. They are the devices a lease for that model may
// hold.
func modelDevices(c *terms.Capability, offered terms.GPU, j *terms.Job, capacity int) []int {
	key := offered.Identity().Key()
	var out []int
	for i, g := range c.GPUs {
		if i < capacity && vramFits(g, j) && sliceFits(c, i, j) && isolationFits(j, g) && g.Identity().Key() == key {
			out = append(out, i)
		}
	}
	return out
}

// vramFits reports whether device g has the memory j asks for: MinVRAMGB
// of the device, or of the slice a fractional job takes (on a device in
// MIG mode, of its instance).
func vramFits(g terms.GPU, j *terms.Job) bool {
	return sliceVRAMGB(g, j.GPUFraction) >= float64(j.MinVRAMGB)
}

// sliceFits reports whether device i of provider c can hold j: for whole
// GPUs any device but one in MIG mode with other than one instance (CUDA
// sees only instances there, and a process only one of them); for a
// fractional job, one the policy cuts into slices no larger than its
// fraction, and in MIG mode exactly one slice, which is one instance.
func sliceFits(c *terms.Capability, i int, j *terms.Job) bool {
	mig := i < len(c.GPUs) && c.GPUs[i].MIG.Partitioned()
	if j.GPUFraction == 0 {
		return !mig || len(c.GPUs[i].MIG.Instances) == 1
	}
	k := slicesFor(j.GPUFraction, c.Policy.SliceCount(i))
	return k == 1 || (k > 1 && !mig)
}

// isolationFits reports whether a slice of device g is enforced as j asks
// (Job.Isolation): any way for IsolationAny (or none asked), else exactly.
// Whole devices need none.
func isolationFits(j *terms.Job, g terms.GPU) bool {
	return j.GPUFraction == 0 || j.Isolation == "" || j.Isolation == terms.IsolationAny || j.Isolation == g.Isolation
}

// preferFree orders pool with the devices that have room for fraction
// (0: whole devices) throughout [start, end) first.
func preferFree(bs []Booking, lay []int, capacity int, start, end time.Time, pool []int, fraction float64) []int {
	out := freeDevices(bs, lay, capacity, start, end, nil, pool, fraction)
	in := map[int]bool{}
	for _, d := range out {
		in[d] = true
	}
	for _, d := range pool {
		if !in[d] {
			out = append(out, d)
		}
	}
	return out
}

// StaticFit is the time-independent part of Evaluate's eligibility: whether
// a provider with capability c could ever bid for j, whatever its calendar,
// temperature, power draw or reliability. It returns nil or the *Ineligible
// naming the first rule that fails, checked in this order: residency,
// workload kind, preemptible work, no-persistence, container support for an image job,
// hardware (GPU model; for a fractional job, devices sold in slices no
// larger than its fraction, then enforced as it asks; VRAM, GPU count of
// one model), price floor (less the interruptible discount for a
// preemptible job, Policy.FloorFor) above the job's MaxPrice. Evaluate applies the same
// checks first, so a provider that fails StaticFit never gets an Offer.
// A nil capability or job is bad input (a plain error).
func StaticFit(c *terms.Capability, j *terms.Job) error {
	if c == nil || j == nil {
		return errors.New("auction: static fit: nil capability or job")
	}
	_, _, err := staticFit(c, j)
	return err
}

// StaticMisfits is every rule of StaticFit that a provider with capability
// c fails for j, in StaticFit's order, so the first is StaticFit's error:
// nil when it fits. It tells a renter everything it would have to change
// for this provider, not only the first thing.
func StaticMisfits(c *terms.Capability, j *terms.Job) []*Ineligible {
	if c == nil || j == nil {
		return nil
	}
	_, _, errs := staticChecks(c, j, false)
	out := make([]*Ineligible, 0, len(errs))
	for _, err := range errs {
		var in *Ineligible
		if !errors.As(err, &in) {
			in = &Ineligible{Kind: "other", Reason: err.Error()}
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// staticFit is StaticFit, also returning the GPU model to offer and its
// smallest device's VRAM (see pickModel).
func staticFit(c *terms.Capability, j *terms.Job) (string, int, error) {
	model, vram, errs := staticChecks(c, j, true)
	if len(errs) > 0 {
		return "", 0, errs[0]
	}
	return model, vram, nil
}

// staticChecks applies StaticFit's rules in order, stopping at the first
// that fails when first is set, and returns the GPU model to offer and its
// smallest device's VRAM with the rules that failed.
func staticChecks(c *terms.Capability, j *terms.Job, first bool) (model string, vram int, errs []error) {
	p := &c.Policy
	// fail records err and says whether to stop.
	fail := func(err error) bool {
		errs = append(errs, err)
		return first
	}
	if j.Excludes(c.Peer) && fail(inelig("excluded", "this provider lost an earlier attempt of the job")) {
		return "", 0, errs
	}
	if !regionSatisfies(j.Region, c.Region) && fail(inelig("region", "region %s does not satisfy %s", orNone(c.Region), j.Region)) {
		return "", 0, errs
	}
	if len(p.AllowedWorkloads) > 0 && !containsFold(p.AllowedWorkloads, j.Workload) &&
		fail(inelig("workload", "workload %s not accepted (accepts %s)", orNone(j.Workload), strings.Join(p.AllowedWorkloads, ","))) {
		return "", 0, errs
	}
	if j.Preemptible && !p.AcceptPreemptible && fail(inelig("preemptible", "preemptible work not accepted")) {
		return "", 0, errs
	}
	if j.Sealed && !p.Sealed && fail(inelig("sealed", "sealed jobs not taken: this provider cannot keep their plaintext on a tmpfs (it does not run as root)")) {
		return "", 0, errs
	}
	if err := noPersistFit(p, j); err != nil && fail(err) {
		return "", 0, errs
	}
	if err := containerFit(c, j); err != nil && fail(err) {
		return "", 0, errs
	}
	model, vram, err := pickModel(c, j)
	if err != nil && fail(err) {
		return "", 0, errs
	}
	if floor := FloorFor(*p, j); floor > j.MaxPrice && fail(inelig("price", "price floor %.2f > max %.2f", floor, j.MaxPrice)) {
		return "", 0, errs
	}
	if len(errs) > 0 {
		return "", 0, errs
	}
	return model, vram, nil
}

// noPersistFit is the no-persistence rule: a no-persist job goes only to
// a provider whose policy offers it, and a provider that requires it
// takes no other job.
func noPersistFit(p *terms.Policy, j *terms.Job) error {
	switch {
	case j.NoPersist && p.NoPersist != terms.NoPersistOffer && p.NoPersist != terms.NoPersistRequire:
		return inelig("no_persist", "no-persist jobs not offered (policy no_persist is not %s or %s)", terms.NoPersistOffer, terms.NoPersistRequire)
	case !j.NoPersist && p.NoPersist == terms.NoPersistRequire:
		return inelig("no_persist", "only no-persist jobs taken (policy no_persist: %s)", terms.NoPersistRequire)
	}
	return nil
}

// pickModel chooses the GPU model to offer: among models the job accepts
// with at least GPUCount devices that can hold it (MinVRAMGB; for a
// fractional job, sold in slices no larger than its fraction and enforced
// as it asks), the one with the most VRAM (then by name). It returns the
// model and its smallest such device's VRAM.
func pickModel(c *terms.Capability, j *terms.Job) (string, int, error) {
	type group struct {
		name    string
		n, vram int
	}
	gpus := c.GPUs
	groups := map[string]*group{}
	var models, sliced, isolated, tooSmall int
	for i, g := range gpus {
		if !j.AcceptsGPU(g) {
			continue
		}
		models++
		if !sliceFits(c, i, j) {
			continue
		}
		sliced++
		if !isolationFits(j, g) {
			continue
		}
		isolated++
		if !vramFits(g, j) {
			tooSmall++
			continue
		}
		key := g.Identity().Key()
		gr := groups[key]
		if gr == nil {
			gr = &group{name: g.Model, vram: g.VRAMGB}
			groups[key] = gr
		}
		gr.n++
		if g.VRAMGB < gr.vram {
			// The smallest device names the group: modelDevices finds
			// the group again by its identity.
			gr.name, gr.vram = g.Model, g.VRAMGB
		}
	}
	switch {
	case len(gpus) == 0:
		return "", 0, inelig("gpu_model", "no gpus")
	case models == 0:
		return "", 0, inelig("gpu_model", "gpu model %s not in %s", gpus[0].Model, strings.Join(j.GPUModels, ","))
	case sliced == 0 && j.GPUFraction == 0:
		return "", 0, inelig("slices", "no gpu sold whole (a gpu in MIG mode is sold as its MIG instances)")
	case sliced == 0:
		return "", 0, inelig("slices", "no gpu sold in slices of %v gpu or less (policy slices; a gpu in MIG mode only in slices of exactly that)", j.GPUFraction)
	case isolated == 0:
		return "", 0, inelig("isolation", "no gpu slice enforced by %s (here: %s)", j.Isolation, strings.Join(slicedIsolations(c, j), ","))
	case tooSmall == isolated && j.GPUFraction > 0:
		return "", 0, inelig("vram", "slice vram below required %dGB", j.MinVRAMGB)
	case tooSmall == isolated:
		return "", 0, inelig("vram", "vram below required %dGB", j.MinVRAMGB)
	}
	var best *group
	most := 0
	for _, gr := range groups {
		if gr.n > most {
			most = gr.n
		}
		if gr.n < j.GPUCount {
			continue
		}
		if best == nil || gr.vram > best.vram || (gr.vram == best.vram && gr.name < best.name) {
			best = gr
		}
	}
	if best == nil {
		return "", 0, inelig("gpu_count", "%d qualifying gpus < %d required", most, j.GPUCount)
	}
	return best.name, best.vram, nil
}

// slicedIsolations is how the slices of the devices that could hold j's
// fraction are enforced, sorted and without repeats.
func slicedIsolations(c *terms.Capability, j *terms.Job) []string {
	var out []string
	for i, g := range c.GPUs {
		if v := orNone(g.Isolation); j.AcceptsGPU(g) && sliceFits(c, i, j) && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// leaseLength is the longest lease a provider with policy p offers j: its
// Duration, capped at MaxLease.
func leaseLength(p terms.Policy, j *terms.Job) time.Duration {
	if p.MaxLease > 0 && j.Duration > p.MaxLease {
		return p.MaxLease
	}
	return j.Duration
}

// MinSlice is the shortest lease Evaluate offers j under policy p: the
// job's Duration capped at MaxLease, and for a preemptible job at most
// MinBackfill (it may take a shorter gap and be requeued). A free span
// shorter than this can never hold j's lease.
func MinSlice(p terms.Policy, j *terms.Job) time.Duration {
	d := leaseLength(p, j)
	if j.Preemptible && d > MinBackfill {
		d = MinBackfill
	}
	return d
}

// Horizon is the latest start Evaluate offers j at now: its Deadline, or
// now+DefaultPatience without one.
func Horizon(j *terms.Job, now time.Time) time.Time {
	if j.Deadline.IsZero() {
		return now.Add(DefaultPatience)
	}
	return j.Deadline
}

// placeLease finds the earliest lease span for j that accept takes, with
// j.GPUCount devices of pool free throughout; see Evaluate. bs is a snapshot
// of cal's bookings.
func placeLease(p terms.Policy, cal *Calendar, bs []Booking, pool []int, j *terms.Job, now time.Time, accept func(s, e time.Time) bool) (start, end time.Time, preempts []string, err error) {
	d := leaseLength(p, j)
	if d < j.Duration && !j.Preemptible {
		return start, end, nil, inelig("max_lease", "duration %v exceeds max lease %v", j.Duration, p.MaxLease)
	}
	if !j.Deadline.IsZero() && j.Deadline.Before(now) {
		return start, end, nil, inelig("deadline", "deadline %s passed", j.Deadline.UTC().Format(time.RFC3339))
	}
	latest := Horizon(j, now)
	minSlice := MinSlice(p, j)
	capacity, lay := cal.Capacity(), cal.layout()
	fits := func(s, e time.Time, skip func(*Booking) bool) bool {
		return hasFree(bs, lay, capacity, s, e, skip, pool, j.GPUCount, j.GPUFraction)
	}
	// Peak windows end where a lease may become cheap enough.
	var peakEnds []time.Time
	for _, iv := range p.PeakSpans(now, latest) {
		peakEnds = append(peakEnds, iv.End)
	}
	var skip func(*Booking) bool
	if j.Tier == terms.Gold && p.AllowPreemption {
		skip = func(b *Booking) bool { return b.Preemptible }
	}
	spans := p.FreeSpans(now, latest.Add(d))
	longEnough := false
	found := false
	for _, sp := range spans {
		if sp.Start.After(latest) {
			break
		}
		if sp.End.Sub(sp.Start) >= minSlice {
			longEnough = true
		}
		cands := []time.Time{sp.Start}
		for _, b := range bs {
			if b.End.After(sp.Start) && b.End.Before(sp.End) {
				cands = append(cands, b.End)
			}
		}
		for _, t := range peakEnds {
			if t.After(sp.Start) && t.Before(sp.End) {
				cands = append(cands, t)
			}
		}
		sort.Slice(cands, func(a, b int) bool { return cands[a].Before(cands[b]) })
		for _, s := range cands {
			if s.After(latest) {
				break
			}
			if e := s.Add(d); !e.After(sp.End) && fits(s, e, skip) {
				if accept(s, e) {
					start, end, found = s, e, true
					break
				}
				continue
			}
			if !j.Preemptible {
				continue
			}
			e := s.Add(d)
			if e.After(sp.End) {
				e = sp.End
			}
			// Stop at the first booking start that leaves too few devices.
			for _, b := range bs {
				if b.Start.After(s) && b.Start.Before(e) && !fits(s, b.Start.Add(time.Nanosecond), skip) {
					e = b.Start
				}
			}
			if e.Sub(s) >= minSlice && fits(s, e, skip) && accept(s, e) {
				start, end, found = s, e, true
				break
			}
		}
		if found {
			break
		}
	}
	switch {
	case found:
	case len(spans) == 0 || spans[0].Start.After(latest):
		return start, end, nil, inelig("availability", "not available before %s", latest.UTC().Format(time.RFC3339))
	case !longEnough:
		return start, end, nil, inelig("window", "no free window of %v before %s", minSlice, latest.UTC().Format(time.RFC3339))
	default:
		if j.GPUFraction > 0 {
			return start, end, nil, inelig(KindBusy, "no free %v-gpu slice for %v before %s", j.GPUFraction, minSlice, latest.UTC().Format(time.RFC3339))
		}
		return start, end, nil, inelig(KindBusy, "no %d free gpus for %v before %s", j.GPUCount, minSlice, latest.UTC().Format(time.RFC3339))
	}
	if skip != nil && !fits(start, end, nil) {
		preempts = pickEvictions(bs, lay, start, end, j.GPUCount, j.GPUFraction, capacity, pool)
	}
	return start, end, preempts, nil
}

// pickEvictions chooses preemptible bookings overlapping [start, end) to
// evict so that gpus devices of pool have room for fraction (0: whole
// devices): greedily the largest (then latest-started), then drops any
// that turn out unnecessary, latest-added first. Only bookings holding a
// device of pool are candidates.
func pickEvictions(bs []Booking, lay []int, start, end time.Time, gpus int, fraction float64, capacity int, pool []int) []string {
	inPool := map[int]bool{}
	for _, d := range pool {
		inPool[d] = true
	}
	holdsPool := func(b Booking) bool {
		for _, d := range b.Devices {
			if inPool[d] {
				return true
			}
		}
		return false
	}
	var cands []Booking
	for _, b := range bs {
		if b.Preemptible && b.Start.Before(end) && b.End.After(start) && holdsPool(b) {
			cands = append(cands, b)
		}
	}
	sort.Slice(cands, func(a, b int) bool {
		if ga, gb := cands[a].billed(), cands[b].billed(); ga != gb {
			return ga > gb
		}
		if !cands[a].Start.Equal(cands[b].Start) {
			return cands[a].Start.After(cands[b].Start)
		}
		return cands[a].LeaseID < cands[b].LeaseID
	})
	evict := map[string]bool{}
	skip := func(b *Booking) bool { return evict[b.LeaseID] }
	var chosen []string
	fits := func() bool { return hasFree(bs, lay, capacity, start, end, skip, pool, gpus, fraction) }
	for _, c := range cands {
		if fits() {
			break
		}
		evict[c.LeaseID] = true
		chosen = append(chosen, c.LeaseID)
	}
	for i := len(chosen) - 1; i >= 0; i-- {
		delete(evict, chosen[i])
		if !fits() {
			evict[chosen[i]] = true
		}
	}
	out := chosen[:0]
	for _, id := range chosen {
		if evict[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(strings.TrimSpace(x), strings.TrimSpace(s)) {
			return true
		}
	}
	return false
}

// intersect returns the elements of want that are in have, in want's order,
// without duplicates.
func intersect(want, have []string) []string {
	if len(want) == 0 || len(have) == 0 {
		return nil
	}
	set := make(map[string]bool, len(have))
	for _, h := range have {
		set[h] = true
	}
	var out []string
	for _, w := range want {
		if set[w] {
			out = append(out, w)
			delete(set, w)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// sliceVRAMGB is the memory, in GB, a job holding fraction of device g
// (0: all of it) gets: its share of the device's, or on a device in MIG
// mode its smallest instance's, the most any one of them is sure to get.
func sliceVRAMGB(g terms.GPU, fraction float64) float64 {
	if !g.MIG.Partitioned() {
		return float64(g.VRAMGB) * terms.BilledGPUs(1, fraction)
	}
	if len(g.MIG.Instances) == 0 {
		return 0
	}
	least := g.MIG.Instances[0].MemoryMB
	for _, in := range g.MIG.Instances[1:] {
		least = min(least, in.MemoryMB)
	}
	return float64(least) / 1024
}

// regionSatisfies reports whether a provider in region have satisfies the
// residency constraint want: want is empty (anywhere), equal to have, or a
// dash-delimited prefix of it ("eu" matches "eu-west" but not "europe-x").
func regionSatisfies(want, have string) bool {
	want = strings.ToLower(strings.TrimSpace(want))
	if want == "" {
		return true
	}
	have = strings.ToLower(strings.TrimSpace(have))
	return have == want || strings.HasPrefix(have, want+"-")
}

// containerFit is the image rule of eligibility: a job with an image needs
// a container engine, and one that uses GPUs needs GPU passthrough.
func containerFit(c *terms.Capability, j *terms.Job) error {
	if j.Run.Image == "" {
		return nil
	}
	switch {
	case c.Containers == terms.ContainersNone:
		return inelig("image", "no container engine here: image jobs are not run")
	case j.GPUCount > 0 && c.Containers != terms.ContainersGPU:
		return inelig("image", "the container engine cannot give containers their GPUs (no NVIDIA runtime or CDI devices)")
	}
	return nil
}
