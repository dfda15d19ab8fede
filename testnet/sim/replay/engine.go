package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Policy names accepted in Config.Policies.
const (
	PolicyAuction = "auction" // reliability-weighted reverse auction + backfill + lanes
	PolicyFIFO    = "fifo"    // FIFO first-fit baseline
)

// SLA start-wait targets per tier: a job that starts later than this after
// its submission, or does not finish within the replay, violates its SLA.
var slaWait = map[terms.Tier]time.Duration{
	terms.Gold:   15 * time.Minute,
	terms.Silver: 2 * time.Hour,
	terms.Bronze: 24 * time.Hour,
}

// retryEvery is the virtual period at which waiting jobs are offered to the
// market again even when no lease ended, so that windows opening and the
// providers' 24 h look-ahead sliding are seen.
const retryEvery = 15 * time.Minute

// maxRetriesPerPass bounds how many waiting jobs one retry pass solicits
// bids for (in lane order), keeping a pass's cost bounded on long queues.
const maxRetriesPerPass = 256

const sec = int64(time.Second)

// vt converts virtual seconds since Epoch to a time.
func vt(s int64) time.Time { return Epoch.Add(time.Duration(s * sec)) }

// span is a free span in virtual seconds.
type span struct{ start, end int64 }

type provState struct {
	p     *Provider
	idx   int
	ps    auction.ProviderState
	spans []span // sellable spans over the whole replay, merged
	gpus  int
	vram  int // largest device VRAM
	lat   time.Duration
	// Observed outcomes, the renter's only view of reliability.
	ok, failed int
	earned     float64
	// lastFree is when capacity last came free (a lease ended); changes are
	// the times when the provider's offers can change without a lease
	// ending: a free span starts, comes into the 24 h look-ahead, or a
	// peak window ends.
	lastFree int64
	changes  []int64
}

// changedSince reports whether anything that could change the provider's
// answer to a call for bids happened in (t, now].
func (p *provState) changedSince(t, now int64) bool {
	if p.lastFree > t {
		return true
	}
	i := sort.Search(len(p.changes), func(i int) bool { return p.changes[i] > t })
	return i < len(p.changes) && p.changes[i] <= now
}

// observed is the renter's reliability estimate: (ok+1)/(ok+failed+2), so
// every provider starts at terms.NeutralReliability (0.5).
func (p *provState) observed() float64 {
	return float64(p.ok+1) / float64(p.ok+p.failed+2)
}

// spanAt returns the index of the span containing t, or -1.
func (p *provState) spanAt(t int64) int {
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].end > t })
	if i < len(p.spans) && p.spans[i].start <= t {
		return i
	}
	return -1
}

// couldOffer is a conservative, cheap filter: it is false only when
// auction.Evaluate is certain to find no span, because no free span of
// length minSlice begins by latest.
func (p *provState) couldOffer(now, latest, minSlice int64) bool {
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].end > now })
	for ; i < len(p.spans) && p.spans[i].start <= latest; i++ {
		s := max(p.spans[i].start, now)
		if p.spans[i].end-s >= minSlice {
			return true
		}
	}
	return false
}

type jobState struct {
	spec       terms.Job
	shape      shape
	live       []int // the job's live leases: one, or a gang's members
	submit     int64
	remaining  int64 // seconds of work left
	firstStart int64 // -1 until started
	doneAt     int64 // -1 until done
	attempt    int
	queued     bool
	leased     bool  // holds a live lease
	lastTry    int64 // virtual time of the last failed call for bids, -1 if none
	cands      []int32
	paid       float64
	paidGPUSec float64
}

type leaseState struct {
	id         string
	job, prov  int
	start, end int64 // booked span
	runEnd     int64 // when it actually ends (failure or booked end)
	fails      bool
	count      int     // GPUCount
	fraction   float64 // GPUFraction: 0 for whole GPUs
	gpus       float64 // billed: count, or the slice's fraction of one
	asked      float64 // what the trace asked for of those (see shape)
	price      float64
	alive      bool
	evicted    bool // preempted by a gold award
}

type evKind uint8

// Event kinds, in processing order at equal times: leases end before new
// work arrives, so freed capacity is visible to it.
const (
	evLeaseEnd evKind = iota
	evArrival
	evTick
)

type event struct {
	at   int64
	kind evKind
	seq  uint64
	ref  int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	if h[a].at != h[b].at {
		return h[a].at < h[b].at
	}
	if h[a].kind != h[b].kind {
		return h[a].kind < h[b].kind
	}
	return h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// world is the shared, read-only input of every policy's replay.
type world struct {
	seed      uint64
	jobs      []terms.Job
	provs     []Provider
	spans     [][]span
	changes   [][]int64
	horizon   int64 // virtual end of the replay, seconds
	bucket    int64 // chart bucket, seconds
	placeable []bool
	shapes    []shape
}

// sim is one policy's replay over a world.
type sim struct {
	w       *world
	policy  string
	now     int64
	events  eventHeap
	seq     uint64
	jobs    []jobState
	provs   []provState
	leases  []leaseState
	byID    map[string]int
	peerIdx map[string]int
	lanes   [3][]int // waiting jobs per lane (gold, silver, bronze), FIFO order by job index
	fifo    []int    // waiting jobs in arrival order (FIFO policy)
	nEvents int

	filled, lost []float64 // GPU-seconds per chart bucket
	preemptGold  int
	preemptGap   int
	failures     int
	wasted       float64 // GPU-seconds delivered beyond what jobs asked for
	progress     io.Writer
	lastPct      int
}

func laneOf(t terms.Tier) int {
	switch t {
	case terms.Gold:
		return 0
	case terms.Silver:
		return 1
	}
	return 2
}

// draw is a deterministic uniform [0,1) value for a key, so failures depend
// on (seed, job, attempt, provider) and not on the order a policy runs in.
func draw(seed uint64, parts ...string) float64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(seed >> (8 * i))
	}
	h.Write(b[:])
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return float64(x>>11) / (1 << 53)
}

func newSim(w *world, policy string, progress io.Writer) (*sim, error) {
	s := &sim{w: w, policy: policy, byID: make(map[string]int), peerIdx: make(map[string]int, len(w.provs)), progress: progress}
	s.provs = make([]provState, len(w.provs))
	for i := range w.provs {
		p := &w.provs[i]
		ps := &s.provs[i]
		ps.p, ps.idx = p, i
		s.peerIdx[p.Capability.Peer] = i
		ps.gpus = len(p.Capability.GPUs)
		for _, g := range p.Capability.GPUs {
			ps.vram = max(ps.vram, g.VRAMGB)
		}
		ps.spans = w.spans[i]
		ps.lastFree = -1
		ps.changes = w.changes[i]
		cal := auction.NewCalendar(ps.gpus)
		if err := cal.SetSlices(p.Capability.Policy.SliceMap()); err != nil {
			return nil, fmt.Errorf("replay: provider %s: slices: %w", p.Capability.Peer, err)
		}
		ps.ps = auction.ProviderState{Cap: &p.Capability, Cal: cal, Reliability: terms.NeutralReliability}
		ps.lat = time.Duration(5+int(draw(w.seed, "latency", p.Capability.Peer)*145)) * time.Millisecond
	}
	s.jobs = make([]jobState, len(w.jobs))
	for i := range w.jobs {
		j := &s.jobs[i]
		j.spec = w.jobs[i]
		j.shape = w.shapes[i]
		j.submit = int64(j.spec.CreatedAt.Sub(Epoch) / time.Second)
		j.remaining = int64(j.spec.Duration / time.Second)
		j.firstStart, j.doneAt, j.lastTry = -1, -1, -1
		if w.placeable[i] {
			s.push(j.submit, evArrival, i)
		}
	}
	for t := int64(0); t < w.horizon; t += int64(retryEvery / time.Second) {
		s.push(t, evTick, 0)
	}
	nb := (w.horizon + w.bucket - 1) / w.bucket
	s.filled = make([]float64, nb)
	s.lost = make([]float64, nb)
	return s, nil
}

func (s *sim) push(at int64, k evKind, ref int) {
	s.seq++
	heap.Push(&s.events, event{at: at, kind: k, seq: s.seq, ref: ref})
}

// run replays events until the horizon.
func (s *sim) run() error {
	for s.events.Len() > 0 {
		at := s.events[0].at
		if at >= s.w.horizon {
			break
		}
		s.now = at
		retry := false
		var arrivals []int
		for s.events.Len() > 0 && s.events[0].at == at {
			e := heap.Pop(&s.events).(event)
			s.nEvents++
			switch e.kind {
			case evLeaseEnd:
				if err := s.endLease(e.ref); err != nil {
					return err
				}
				retry = true
			case evArrival:
				arrivals = append(arrivals, e.ref)
			case evTick:
				retry = true
			}
		}
		if retry {
			if err := s.retry(); err != nil {
				return err
			}
		}
		for _, j := range arrivals {
			if err := s.arrive(j); err != nil {
				return err
			}
		}
		s.report()
	}
	s.now = s.w.horizon
	// Account for leases still running at the horizon.
	for i := range s.leases {
		l := &s.leases[i]
		if l.alive {
			s.account(l, min(l.runEnd, s.w.horizon), l.fails && l.runEnd <= s.w.horizon)
		}
	}
	if s.progress != nil {
		fmt.Fprintf(s.progress, "\r%-8s 100%% %d events\n", s.policy, s.nEvents)
	}
	return nil
}

func (s *sim) report() {
	if s.progress == nil {
		return
	}
	pct := int(100 * s.now / s.w.horizon)
	if pct != s.lastPct {
		s.lastPct = pct
		fmt.Fprintf(s.progress, "\r%-8s %3d%% %d events", s.policy, pct, s.nEvents)
	}
}

// enqueue puts a waiting job in its lane (auction) or the FIFO queue, in
// order of job index (which is arrival order).
func (s *sim) enqueue(j int) {
	js := &s.jobs[j]
	if js.queued || js.doneAt >= 0 {
		return
	}
	js.queued = true
	q := &s.fifo
	if s.policy == PolicyAuction {
		q = &s.lanes[laneOf(js.spec.Tier)]
	}
	i := sort.SearchInts(*q, j)
	*q = append(*q, 0)
	copy((*q)[i+1:], (*q)[i:])
	(*q)[i] = j
}

func (s *sim) arrive(j int) error {
	ok, err := s.place(j)
	if err != nil {
		return err
	}
	if !ok {
		s.enqueue(j)
	}
	return nil
}

// retry offers waiting jobs to the market again, at most maxRetriesPerPass
// per pass: the FIFO queue in arrival order, or the lanes gold first.
func (s *sim) retry() error {
	budget := maxRetriesPerPass
	var err error
	if s.policy == PolicyFIFO {
		s.fifo, err = s.retryQueue(s.fifo, &budget)
		return err
	}
	for lane := range s.lanes {
		if s.lanes[lane], err = s.retryQueue(s.lanes[lane], &budget); err != nil {
			return err
		}
	}
	return nil
}

// retryQueue tries to place the queued jobs in order while budget lasts and
// returns those still waiting, in their order.
func (s *sim) retryQueue(q []int, budget *int) ([]int, error) {
	keep := q[:0]
	for i, j := range q {
		if *budget == 0 {
			return append(keep, q[i:]...), nil
		}
		*budget--
		ok, err := s.place(j)
		if err != nil {
			return append(keep, q[i:]...), err
		}
		if ok {
			s.jobs[j].queued = false
			continue
		}
		keep = append(keep, j)
	}
	return keep, nil
}

// request is the job spec as posted for the current attempt: the remaining
// work, the attempt number.
func (s *sim) request(j int) terms.Job {
	js := &s.jobs[j]
	spec := js.spec
	spec.Duration = time.Duration(js.remaining * sec)
	spec.Attempt = js.attempt
	// Gold and silver renters post a start deadline of their SLA's wait
	// target, counted from now when a retry is already late.
	if t, ok := slaWait[spec.Tier]; ok && spec.Tier != terms.Bronze {
		dl := max(js.submit, s.now) + int64(t/time.Second)
		spec.Deadline = vt(dl)
	}
	return spec
}

// place runs one call for bids for job j and awards it if any provider
// wins. It reports whether the job got a lease.
func (s *sim) place(j int) (bool, error) {
	js := &s.jobs[j]
	if js.leased || js.doneAt >= 0 || js.remaining <= 0 {
		return true, nil
	}
	req := s.request(j)
	// Each attempt's call enters the market here, as a requeued attempt
	// enters a renter's (auction.Renter.Requeue): validated once, and
	// trusted by the providers' Evaluate.
	if err := req.Validate(); err != nil {
		return false, fmt.Errorf("replay: job %s attempt %d: %w", req.ID, req.Attempt, err)
	}
	if js.cands == nil {
		js.cands = s.staticCandidates(&req)
	}
	if js.lastTry >= 0 && !s.anyChanged(js.cands, js.lastTry) {
		return false, nil // same answers as last time
	}
	ok, err := s.call(j, &req)
	if err == nil && !ok {
		js.lastTry = s.now
	}
	return ok, err
}

// anyChanged reports whether any of the providers changed since t.
func (s *sim) anyChanged(cands []int32, t int64) bool {
	for _, pi := range cands {
		if s.provs[pi].changedSince(t, s.now) {
			return true
		}
	}
	return false
}

// call is one call for bids under the sim's policy.
func (s *sim) call(j int, req *terms.Job) (bool, error) {
	if n := s.jobs[j].shape.nodes; n > 1 {
		// A gang starts all its members at once or waits: it asks for an
		// immediate start of the whole remaining work on n providers.
		now := *req
		now.Deadline = vt(s.now)
		if s.policy == PolicyFIFO {
			return s.firstFit(j, &now, n)
		}
		return s.auction(j, &now, n)
	}
	if s.policy == PolicyFIFO {
		return s.firstFit(j, req, 1)
	}
	// The renter first asks for an immediate start (a deadline of now), and
	// only when nobody can start now asks again for a reservation within
	// its deadline (or the providers' look-ahead): an immediate start is
	// worth more than a cheaper later one.
	now := *req
	now.Deadline = vt(s.now)
	if ok, err := s.auction(j, &now, 1); ok || err != nil || req.Preemptible {
		// Spot (preemptible) work does not reserve: it waits for the next
		// immediate slice rather than holding capacity ahead of time.
		return ok, err
	}
	return s.auction(j, req, 1)
}

// winner is one provider's offer awarded a job (a gang has several).
type winner struct {
	prov int
	off  auction.Offer
}

// staticCandidates lists providers that can ever host the job
// (auction.StaticFit: residency, workload, preemptibility, hardware, price
// floor). It is a superset of the providers auction.Evaluate may accept,
// used as an index.
func (s *sim) staticCandidates(j *terms.Job) []int32 {
	out := []int32{}
	for i := range s.provs {
		if auction.StaticFit(&s.w.provs[i].Capability, j) == nil {
			out = append(out, int32(i))
		}
	}
	return out
}

// firstFit is the FIFO baseline's placement: the first want providers, in
// fixed provider order, whose auction.Evaluate offers start now, cover the
// whole remaining duration and evict nobody (want is a gang's members:
// all of them or none).
func (s *sim) firstFit(j int, req *terms.Job, want int) (bool, error) {
	js := &s.jobs[j]
	now := vt(s.now)
	end := s.now + js.remaining
	var win []winner
	for _, pi := range js.cands {
		p := &s.provs[pi]
		si := p.spanAt(s.now)
		if si < 0 || p.spans[si].end < end {
			continue
		}
		if !p.ps.Cal.HasRoom(now, vt(end), nil, req.GPUCount, req.GPUFraction) {
			continue
		}
		off, err := auction.Evaluate(p.ps, req, now)
		if err != nil {
			if _, ok := auction.IneligibleReason(err); ok {
				continue
			}
			return false, fmt.Errorf("replay: fifo: job %s on %s: %w", req.ID, p.p.Capability.Peer, err)
		}
		if !off.Start.Equal(now) || !off.End.Equal(vt(end)) || len(off.Preempts) > 0 {
			continue
		}
		if win = append(win, winner{int(pi), off}); len(win) == want {
			return true, s.award(j, win)
		}
	}
	return false, nil
}

type lbCand struct {
	prov int32
	lb   float64
}

// auction is the market's placement: solicit bids (auction.Evaluate at each
// provider that could offer), rank them with auction.RankAt, award the
// want best (one, or each member of a gang on a provider of its own).
// Providers are asked in order of a lower bound on their score (price
// floor / observed reliability); asking stops once no remaining provider
// can reach the tie band of the want-th best bid, which yields exactly the
// winners that asking everyone would. A gang's members must all start now
// and run the whole remaining work: a bid that does not is no bid for it.
func (s *sim) auction(j int, req *terms.Job, want int) (bool, error) {
	js := &s.jobs[j]
	now := vt(s.now)
	latest := int64(auction.Horizon(req, now).Sub(Epoch) / time.Second)
	order := make([]lbCand, 0, len(js.cands))
	for _, pi := range js.cands {
		p := &s.provs[pi]
		ms := int64(auction.MinSlice(p.p.Capability.Policy, req) / time.Second)
		if !p.couldOffer(s.now, latest, ms) {
			continue
		}
		order = append(order, lbCand{pi, auction.Score(p.p.Capability.Policy.PriceFloor, p.observed())})
	}
	sort.Slice(order, func(a, b int) bool {
		if order[a].lb != order[b].lb {
			return order[a].lb < order[b].lb
		}
		return order[a].prov < order[b].prov
	})
	var cands []terms.Candidate
	offers := map[string]auction.Offer{}
	// scores are the bids' scores since the last ranking, ascending: asking
	// stops beyond the tie band of the want-th.
	var scores []float64
	bar := func() float64 {
		if len(scores) < want {
			return math.Inf(1)
		}
		return scores[want-1] * (1 + auction.TieTolerance)
	}
	gangEnd := vt(s.now + js.remaining)
	for k := 0; k <= len(order); k++ {
		if k == len(order) || order[k].lb > bar() {
			if len(cands) < want {
				return false, nil
			}
			var win []winner
			for _, r := range auction.RankAt(req, cands, now) {
				if r.Rejected == "" {
					w := r.Bid.Provider
					if win = append(win, winner{s.provIndex(w), offers[w]}); len(win) == want {
						return true, s.award(j, win)
					}
				}
			}
			if k == len(order) {
				return false, nil
			}
			// Too many bids so far were rejected: keep asking.
			scores = scores[:0]
		}
		p := &s.provs[order[k].prov]
		p.ps.Reliability = p.observed()
		off, err := auction.Evaluate(p.ps, req, now)
		if err != nil {
			if _, ok := auction.IneligibleReason(err); ok {
				continue
			}
			return false, fmt.Errorf("replay: auction: job %s on %s: %w", req.ID, p.p.Capability.Peer, err)
		}
		if want > 1 && (!off.Start.Equal(now) || !off.End.Equal(gangEnd)) {
			continue
		}
		peer := p.p.Capability.Peer
		offers[peer] = off
		cands = append(cands, terms.Candidate{
			Bid: terms.Bid{
				JobID: req.ID, Attempt: req.Attempt, Provider: peer, Region: p.p.Capability.Region,
				Price: off.Price, Start: off.Start, End: off.End, GPUModel: off.GPUModel, VRAMGB: off.VRAMGB,
				Datasets: off.Datasets, Evicts: len(off.Preempts), IssuedAt: now,
			},
			Reliability: p.observed(),
			RTT:         p.lat,
		})
		sc := auction.Score(off.Price, p.observed())
		i := sort.SearchFloat64s(scores, sc)
		scores = append(scores, 0)
		copy(scores[i+1:], scores[i:])
		scores[i] = sc
	}
	return false, nil
}

func (s *sim) provIndex(peer string) int {
	if i, ok := s.peerIdx[peer]; ok {
		return i
	}
	return -1
}

// award books the winning offers, one lease each (a gang's members on
// their own providers, all starting together), evicting the bronze leases
// they preempt.
func (s *sim) award(j int, win []winner) error {
	js := &s.jobs[j]
	for m, w := range win {
		id := fmt.Sprintf("%s#%d", js.spec.ID, js.attempt)
		if len(win) > 1 {
			id = fmt.Sprintf("%s#%d.%d", js.spec.ID, js.attempt, m)
		}
		if err := s.book(j, w.prov, w.off, id); err != nil {
			return err
		}
	}
	js.leased = true
	js.lastTry = -1
	js.attempt++
	if js.firstStart < 0 {
		js.firstStart = s.leases[js.live[0]].start
	}
	return nil
}

// book books one lease of job j on provider pi, evicting the bronze leases
// its offer preempts.
func (s *sim) book(j, pi int, off auction.Offer, id string) error {
	if pi < 0 {
		return errors.New("replay: award to unknown provider")
	}
	js := &s.jobs[j]
	p := &s.provs[pi]
	b := auction.Booking{LeaseID: id, Start: off.Start, End: off.End, GPUs: js.spec.GPUCount, Fraction: js.spec.GPUFraction,
		Tier: js.spec.Tier, Preemptible: js.spec.Preemptible, Devices: off.Devices}
	// As the provider daemon does: evict only if the planned preemptions
	// are still needed.
	evicted, err := p.ps.Cal.ReserveThenEvict(b, off.Preempts)
	if err != nil {
		return fmt.Errorf("replay: %s: book lease %s: %w", s.policy, id, err)
	}
	for _, e := range evicted {
		li, ok := s.byID[e.LeaseID]
		if !ok {
			continue
		}
		s.preemptGold++
		l := &s.leases[li]
		l.evicted = true
		// The evicted lease runs until the gold lease starts (the daemon
		// ends it at max(award start, its own start)); its booking is put
		// back, shortened, so that nobody else is sold those GPUs. An
		// evicted gang member stops its whole gang then.
		stop := min(max(int64(off.Start.Sub(Epoch)/time.Second), l.start), l.runEnd)
		if stop <= s.now || stop <= l.start {
			s.stopLease(li, s.now, false)
			continue
		}
		short := e
		short.End = vt(stop)
		if err := p.ps.Cal.Reserve(short); err != nil {
			return fmt.Errorf("replay: %s: shorten evicted lease %s: %w", s.policy, e.LeaseID, err)
		}
		if stop < l.runEnd {
			l.end, l.runEnd, l.fails = stop, stop, false
			s.push(stop, evLeaseEnd, li)
		}
	}
	start := int64(off.Start.Sub(Epoch) / time.Second)
	end := int64(off.End.Sub(Epoch) / time.Second)
	l := leaseState{id: id, job: j, prov: pi, start: start, end: end, runEnd: end, count: b.GPUs, fraction: b.Fraction,
		gpus: terms.BilledGPUs(b.GPUs, b.Fraction), asked: js.shape.asked, price: off.Price, alive: true}
	if js.shape.nodes == 1 {
		l.asked = min(js.shape.asked, l.gpus)
	}
	if u := draw(s.w.seed, "fail", js.spec.ID, fmt.Sprint(js.attempt), p.p.Capability.Peer); u < p.p.FailRate {
		l.fails = true
		l.runEnd = start + max(1, int64(draw(s.w.seed, "failat", id, p.p.Capability.Peer)*float64(end-start)))
	}
	s.leases = append(s.leases, l)
	li := len(s.leases) - 1
	s.byID[id] = li
	js.live = append(js.live, li)
	s.push(l.runEnd, evLeaseEnd, li)
	return nil
}

// stopLease ends lease li at t, and with it every other live lease of its
// job (a gang lives and dies together): a preemption (work done so far is
// kept, the job checkpoints) or a failure of li's provider (the work of
// every member since their start is lost; only li's provider is counted
// as having failed).
func (s *sim) stopLease(li int, t int64, failed bool) {
	l := &s.leases[li]
	if !l.alive {
		return
	}
	js := &s.jobs[l.job]
	ran := max(0, t-l.start)
	for _, m := range js.live {
		ml := &s.leases[m]
		if !ml.alive {
			continue
		}
		ml.alive = false
		p := &s.provs[ml.prov]
		p.ps.Cal.Release(ml.id)
		p.lastFree = t
		delete(s.byID, ml.id)
		s.account(ml, t, failed)
		switch {
		case !failed:
			p.ok++
		case m == li:
			s.failures++
			p.failed++
		}
	}
	js.live = js.live[:0]
	js.leased = false
	if !failed {
		js.remaining -= ran
	}
	if js.remaining <= 0 {
		js.remaining = 0
		js.doneAt = t
		return
	}
	s.enqueue(l.job)
}

// account books the GPU-seconds of [l.start, t) into the chart buckets and
// money into the renter's and the provider's accounts. A renter's cost is
// counted per GPU-hour it asked for, so that a fraction rounded up to a
// whole GPU shows what the rounding costs it.
func (s *sim) account(l *leaseState, t int64, failed bool) {
	from, to := l.start, min(t, s.w.horizon)
	if to <= from {
		return
	}
	series := s.filled
	if failed {
		series = s.lost
	} else {
		s.wasted += (l.gpus - l.asked) * float64(to-from)
		pay := terms.LeaseCost(l.price, l.count, l.fraction, time.Duration(to-from)*time.Second)
		s.jobs[l.job].paid += pay
		s.jobs[l.job].paidGPUSec += l.asked * float64(to-from)
		s.provs[l.prov].earned += pay
	}
	addSpan(series, s.w.bucket, from, to, l.gpus)
}

func (s *sim) endLease(li int) error {
	l := &s.leases[li]
	if !l.alive || l.runEnd != s.now {
		return nil // evicted earlier, or its gang stopped
	}
	if !l.fails && !l.evicted && l.end < l.start+s.jobs[l.job].remaining {
		s.preemptGap++
	}
	s.stopLease(li, s.now, l.fails)
	return nil
}
