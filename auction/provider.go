package auction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultBidGrace is how long a bid stays valid after the job's bid window
// (so that the renter can still award it while failing over).
const DefaultBidGrace = 30 * time.Second

// seenTTL is how long a provider remembers a call to deduplicate it.
const seenTTL = time.Hour

// Defaults of the provider's bid sending and call admission (see
// ProviderConfig).
const (
	DefaultSendWorkers      = 64
	DefaultSendQueue        = 256
	DefaultSendTimeout      = 2 * time.Second
	DefaultCallRate         = 200.0 // calls per second per owner: a busy renter posts a hundred jobs a second and more
	DefaultCallBurst        = 200
	DefaultMaxOwnerInflight = 16 // a renter with many jobs in auction at once still hears from every provider
	// DefaultHoldGrace is how long past the job's bid window a bid's
	// tentative hold on the calendar lasts (see ProviderConfig.HoldGrace);
	// a hold never lasts longer than maxHold plus the grace.
	DefaultHoldGrace = 500 * time.Millisecond
	maxHold          = 2 * time.Second
)

// Self is what a provider knows of itself.
type Self interface {
	// Capability is the provider's current capability record.
	Capability() terms.Capability
	// Reliability is the provider's own verified reliability
	// (NeutralReliability when it has none).
	Reliability() float64
}

// Sensors reads the provider's GPUs: the hottest device's temperature and
// all devices' power draw.
type Sensors interface {
	Reading() (tempC, powerW int)
}

// Runtime runs the leases a provider confirms (node/lease's Supervisor).
type Runtime interface {
	// OnLease is called after a lease is confirmed, with the lease ids of
	// the bronze bookings it evicted (the runtime must stop them).
	OnLease(lease terms.Lease, job terms.Job, preempts []string)
	// OnMove is told of a confirmed lease moved earlier (Lease.Moved:
	// GPUs freed before its start); the runtime runs it at its new start
	// and tells its renter. It reports false when the lease already began
	// there (or is unknown), and the move is undone. Called with the
	// provider's lock held, in order with OnLease; it must not call back
	// into the provider synchronously.
	OnMove(moved terms.Lease, job terms.Job) bool
	// Admit vets an award's lease and job ids before it is booked, with
	// the provider's lock held: a non-nil error (the id is held already,
	// in memory or in the runtime's persisted records, or the job id is
	// another renter's) refuses the award. The provider itself refuses a
	// lease id it confirmed or booked before; Admit adds what survives a
	// restart.
	Admit(leaseID, jobID, renter string) error
}

// ProviderConfig configures a Provider.
type ProviderConfig struct {
	Signer    *sign.Signer
	Transport Transport
	// Self is the provider's own capability record and reliability.
	Self Self
	// Calendar is the provider's lease book, the only authority on capacity.
	Calendar *Calendar
	// Sensors reads the GPUs' temperature and power draw; nil means no
	// readings (limits are not enforced).
	Sensors Sensors
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives protocol events; nil discards them.
	Log *slog.Logger
	// Runtime runs the confirmed leases; nil: nobody is told of them,
	// only the provider's own memory vets an award's ids, and leases
	// never move.
	Runtime Runtime
	// GangHold is how long a confirmed gang member (an award with a Gang)
	// is held booked for its renter's commit before it is freed; 0 means
	// DefaultGangHold.
	GangHold time.Duration
	// BidGrace is added to the job's bid window to set a bid's expiry; 0
	// means DefaultBidGrace.
	BidGrace time.Duration
	// SendWorkers bound how many bids are being sent at once and SendQueue
	// how many more may wait; a bid that finds the queue full is dropped and
	// counted (Rejected["send_queue_full"]). 0 means the defaults.
	SendWorkers, SendQueue int
	// SendTimeout bounds one bid's delivery (and the job's bid window bounds
	// it too); 0 means DefaultSendTimeout.
	SendTimeout time.Duration
	// CallRate and CallBurst are each owner's token bucket for calls that
	// are evaluated (duplicates are free); a call over it is dropped and
	// counted (Rejected["rate_limited"]). 0 means the defaults.
	CallRate  float64
	CallBurst int
	// HoldGrace: each bid holds its span on the calendar tentatively
	// (Calendar.Hold) for the job's bid window (at most 2 s) plus
	// HoldGrace, or until its award or release comes, so that concurrent
	// auctions are not offered the same GPUs; one owner's bids hold at most
	// half the GPUs. A call that only other bids' holds keep from an
	// earlier start waits (parked) for a release while its window is open.
	// 0 or negative disables holds (the default; DefaultHoldGrace is the
	// suggested value). They are opt-in because an owner that never awards
	// or releases its bids (a call flood) would hold GPUs away from honest
	// calls: holds need the caller's standing, which is not built yet.
	HoldGrace time.Duration
	// MaxOwnerInflight caps the bids to one owner that are queued or being
	// sent; more are dropped and counted (Rejected["owner_inflight"]), so an
	// owner that never answers holds at most this many send workers. 0 means
	// DefaultMaxOwnerInflight.
	MaxOwnerInflight int
}

type confirmRec struct {
	data   []byte
	at     time.Time
	renter string // who the confirm answered: a lease id is bound to its renter
}

// maxLeaseHistory bounds how many ended leases Stats keeps.
const maxLeaseHistory = 1000

// callKey identifies a call for deduplication. Job ids are chosen by their
// owners, so a call is only a duplicate of one from the same owner: nobody
// can squat another owner's job id or its next attempt.
type callKey struct {
	owner   string
	jobID   string
	attempt int
}

// bucket is one owner's token bucket of calls.
type bucket struct {
	tokens float64
	last   time.Time
}

// bidSend is a bid waiting for a send worker.
type bidSend struct {
	owner   peer.ID
	jobID   string
	msg     []byte
	timeout time.Duration
}

type sentBid struct {
	bid   terms.Bid
	job   terms.Job
	offer Offer
}

// Provider answers calls for bids: it evaluates each call against its
// capability, sensors, reliability and calendar (Evaluate), bids when
// eligible, and turns awards into calendar reservations. It is safe for
// concurrent use.
type Provider struct {
	cfg ProviderConfig
	log *slog.Logger

	mu        sync.Mutex
	seen      map[callKey]time.Time // owner, job id, attempt -> when
	bids      map[string]*sentBid   // nonce -> bid
	confirms  map[string]confirmRec // lease id -> signed confirm
	leases    map[string]*terms.Lease
	jobs      map[string]terms.Job  // lease id -> its job, while the lease has not ended (to move it)
	away      map[string]turnedAway // owner/job id -> a call turned away for busy GPUs
	order     []string
	stats     terms.ProviderStats
	lastPrune time.Time
	buckets   map[string]*bucket   // owner -> calls
	inflight  map[peer.ID]int      // owner -> bids queued or being sent
	parked    []parkedCall         // calls refused only for other bids' holds
	draining  atomic.Bool          // takes no new work (SetDraining)
	gangHeld  map[string]*gangHold // lease id -> a gang member confirmed, awaiting its commit

	evalMu  sync.Mutex // makes a call's evaluation and its hold one step
	sendMu  sync.Mutex // guards sendQ's senders and workers
	sendQ   chan bidSend
	workers int
}

// NewProvider returns a provider. Signer, Transport, Capability and
// Calendar are required.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	if cfg.Signer == nil || cfg.Transport == nil || cfg.Self == nil || cfg.Calendar == nil {
		return nil, errors.New("auction: provider needs a signer, a transport, a capability and a calendar")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BidGrace <= 0 {
		cfg.BidGrace = DefaultBidGrace
	}
	if cfg.GangHold <= 0 {
		cfg.GangHold = DefaultGangHold
	}
	if cfg.SendWorkers <= 0 {
		cfg.SendWorkers = DefaultSendWorkers
	}
	if cfg.SendQueue <= 0 {
		cfg.SendQueue = DefaultSendQueue
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	if cfg.CallRate <= 0 {
		cfg.CallRate = DefaultCallRate
	}
	if cfg.CallBurst <= 0 {
		cfg.CallBurst = DefaultCallBurst
	}
	if cfg.MaxOwnerInflight <= 0 {
		cfg.MaxOwnerInflight = DefaultMaxOwnerInflight
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{
		cfg: cfg, log: log.With("role", "provider"),
		seen: map[callKey]time.Time{}, bids: map[string]*sentBid{}, confirms: map[string]confirmRec{}, leases: map[string]*terms.Lease{}, jobs: map[string]terms.Job{}, away: map[string]turnedAway{},
		stats:   terms.ProviderStats{Rejected: map[string]int{}, Ineligible: map[string]int{}},
		buckets: map[string]*bucket{}, inflight: map[peer.ID]int{},
		sendQ: make(chan bidSend, cfg.SendQueue),
	}, nil
}

func (p *Provider) reject(reason string, err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Rejected[reason]++
	return &Rejection{Reason: reason, Err: err}
}

// prune forgets old calls and expired bids (counting them as lost). Called
// with p.mu held.
func (p *Provider) prune(now time.Time) {
	if now.Sub(p.lastPrune) < time.Second && now.After(p.lastPrune) {
		return
	}
	p.lastPrune = now
	for k, t := range p.seen {
		if now.Sub(t) > seenTTL {
			delete(p.seen, k)
		}
	}
	// A bucket idle long enough to be full again is the same as none.
	full := time.Duration(float64(p.cfg.CallBurst) / p.cfg.CallRate * float64(time.Second))
	for o, b := range p.buckets {
		if now.Sub(b.last) > full {
			delete(p.buckets, o)
		}
	}
	for n, sb := range p.bids {
		if !now.Before(sb.bid.ExpiresAt) {
			delete(p.bids, n)
			p.stats.Lost++
		}
	}
	// Confirms only need to outlive award retries.
	for id, c := range p.confirms {
		if now.Sub(c.at) > seenTTL {
			delete(p.confirms, id)
		}
	}
	// Keep the most recent ended leases; live ones are always kept.
	if len(p.order) > maxLeaseHistory {
		drop := len(p.order) - maxLeaseHistory
		kept := p.order[:0]
		for _, id := range p.order {
			if drop > 0 && p.leases[id].State.Terminal() {
				delete(p.leases, id)
				drop--
				continue
			}
			kept = append(kept, id)
		}
		p.order = kept
	}
}

// HandleGossipedCall takes a call for bids heard on a provider topic: one
// that does not ask this provider as its unverified bytes say (terms.CallAsks)
// is dropped, counted not_sampled, before its signature is checked, so
// that a large market's providers spend nothing on others' samples; any
// other goes on to HandleCall.
func (p *Provider) HandleGossipedCall(from peer.ID, data []byte) error {
	if !terms.CallAsks(data, p.cfg.Signer.ID().String()) {
		p.notSampled()
		return nil
	}
	_, err := p.handleCall(from, data, false)
	return err
}

// HandleCall takes a call for bids sent to this provider (ProtoCall), or
// one heard on gossip that asks it (HandleGossipedCall), parsing it once.
// It verifies the job envelope (signed by the job's owner) and validates
// the job (both in DecodeCall), skips its own jobs and calls it already answered (same owner, job
// id and attempt), and evaluates the job. When eligible it queues a signed bid for the job's owner, to be sent
// by a bounded pool of send workers within SendTimeout; the addresses a
// call names for its owner (Job.OwnerAddrs) are never dialled, since
// anyone can fill them (Transport.SendBid). HandleCall never waits for the
// network: an owner over its call rate (CallRate, CallBurst) or with
// MaxOwnerInflight bids still in flight, and a bid that finds the send
// queue full, are dropped and counted. A refused
// call returns a *Rejection (counted by reason); an ineligible one returns
// the *Ineligible error (counted by kind). from is the peer that sent or
// relayed the call and is not trusted.
//
// A call sent directly by its job's owner (ProtoCall from the owner) is
// answered on its own stream: answer is the signed bid, or the decline,
// that would otherwise be queued for the owner (a terms.BidMessage; nil
// when there is none, e.g. a call parked on holds), which saves the
// owner's daemon and this one a stream per bid. A call answered has no
// error: a decline says why not itself.
func (p *Provider) HandleCall(from peer.ID, data []byte) (answer []byte, err error) {
	return p.handleCall(from, data, true)
}

// handleCall is HandleCall; direct says the call came on its own stream
// (ProtoCall), which can carry the answer back when from is its owner.
func (p *Provider) handleCall(from peer.ID, data []byte, direct bool) ([]byte, error) {
	c, err := terms.DecodeCall(data)
	if err != nil {
		return nil, p.reject(decodeReason(err), err)
	}
	job := c.Job // valid: DecodeCall validated it
	if job.Owner == p.cfg.Signer.ID().String() {
		return nil, nil
	}
	owner, err := peer.Decode(job.Owner)
	if err != nil {
		return nil, p.reject("malformed", fmt.Errorf("job owner: %w", err))
	}
	if !terms.SampledBidder(&job, p.cfg.Signer.ID().String()) {
		p.notSampled()
		return nil, nil
	}
	now := p.cfg.Now()
	key := callKey{owner: job.Owner, jobID: job.ID, attempt: job.Attempt}
	p.mu.Lock()
	p.prune(now)
	if _, dup := p.seen[key]; dup {
		p.stats.Duplicates++
		p.mu.Unlock()
		return nil, nil
	}
	if !p.takeToken(job.Owner, now) {
		err := p.rejectLocked("rate_limited", fmt.Errorf("owner %s is over %.3g calls/s", job.Owner, p.cfg.CallRate))
		p.mu.Unlock()
		return nil, err
	}
	p.seen[key] = now
	p.stats.Calls++
	p.mu.Unlock()
	var answer []byte
	reply := &answer
	if !direct || from != owner {
		reply = nil // the owner did not ask on this stream: SendBid
	}
	err = p.bidFor(job, owner, now, true, reply)
	if len(answer) > 0 {
		return answer, nil // a decline says why not itself
	}
	return nil, err
}

// notSampled counts a call that asked another share of the providers.
func (p *Provider) notSampled() {
	p.mu.Lock()
	p.stats.Ineligible["not_sampled"]++
	p.mu.Unlock()
}

// maxParked bounds the calls a provider keeps to evaluate again when a
// hold is released.
const maxParked = 64

// parkedCall is a call refused only because other bids hold the GPUs.
type parkedCall struct {
	job   terms.Job
	owner peer.ID
	until time.Time // the call's bid window ends
}

// retryParked evaluates the parked calls whose bid window is still open
// again: a hold was released, so one of them may fit now.
func (p *Provider) retryParked() {
	now := p.cfg.Now()
	p.mu.Lock()
	parked := p.parked
	p.parked = nil
	p.mu.Unlock()
	for _, pc := range parked {
		if now.Before(pc.until) {
			_ = p.bidFor(pc.job, pc.owner, now, false, nil)
		}
	}
	// A hold kept a lease from moving earlier, maybe.
	p.moveEarlier()
}

// state is what Evaluate judges this provider by now: its capability,
// calendar, sensor readings and own reliability.
func (p *Provider) state() ProviderState {
	capab := p.cfg.Self.Capability()
	ps := ProviderState{Cap: &capab, Cal: p.cfg.Calendar, Reliability: p.cfg.Self.Reliability()}
	if p.cfg.Sensors != nil {
		ps.TempC, ps.PowerW = p.cfg.Sensors.Reading()
	}
	return ps
}

// bidFor evaluates a job and, when eligible, queues a bid for it (see
// HandleCall), or puts it in *reply when reply is not nil (the owner's
// call waits for it on its stream), as it does a decline. A call refused
// only because of other bids' holds is parked (when park) and evaluated
// again when a hold is released.
func (p *Provider) bidFor(job terms.Job, owner peer.ID, now time.Time, park bool, reply *[]byte) error {
	if p.draining.Load() {
		p.mu.Lock()
		p.stats.Ineligible[KindDraining]++
		p.mu.Unlock()
		if park && job.WantDeclines {
			p.decline(job, owner, KindDraining, now, reply)
		}
		return &Ineligible{Kind: KindDraining, Reason: "the provider is draining: it takes no new work"}
	}
	ps := p.state()
	// Evaluation and the bid's hold are one step: a concurrent call sees
	// this bid's span as taken.
	p.evalMu.Lock()
	offer, err := Evaluate(ps, &job, now)
	nonce := terms.NewID("bid")
	held := false
	holding := false // this bid holds its span
	if p.cfg.HoldGrace > 0 && p.cfg.Calendar.Holds(now) > 0 {
		// Other bids hold GPUs. If the calendar without them could start
		// the job sooner (or at all), the call waits for a release
		// instead of bidding a later start.
		firm := ps
		firm.FirmOnly = true
		if fo, ferr := Evaluate(firm, &job, now); ferr == nil && (err != nil || fo.Start.Before(offer.Start)) {
			held = true
		}
	}
	// One owner's bids hold at most half the GPUs (at least one bid's
	// worth), so that calls nobody awards cannot hold a provider; beyond
	// that its bids go without holds.
	if err == nil && !held && p.cfg.HoldGrace > 0 &&
		p.cfg.Calendar.HeldBy(job.Owner, now)+job.BilledGPUs() <= max(float64(p.cfg.Calendar.Capacity()/2), job.BilledGPUs()) {
		// The hold covers the devices the award would take: the first of
		// the offer's devices (those free throughout come first).
		devs := offer.Devices[:min(len(offer.Devices), job.GPUCount)]
		p.cfg.Calendar.Hold(nonce, job.Owner, Booking{Start: offer.Start, End: offer.End, GPUs: job.GPUCount, Fraction: job.GPUFraction,
			Tier: job.Tier, Preemptible: job.Preemptible, Devices: devs}, now.Add(min(job.BidWindow, maxHold)+p.cfg.HoldGrace))
		holding = true
	}
	p.evalMu.Unlock()
	if held {
		p.mu.Lock()
		if park {
			if len(p.parked) >= maxParked {
				p.parked = p.parked[1:]
			}
			p.parked = append(p.parked, parkedCall{job: job, owner: owner, until: now.Add(job.BidWindow)})
		}
		p.stats.Ineligible["held"]++
		p.mu.Unlock()
		return &Ineligible{Kind: "held", Reason: "the GPUs are held for other bids"}
	}
	if err != nil {
		var in *Ineligible
		if errors.As(err, &in) {
			p.mu.Lock()
			p.stats.Ineligible[in.Kind]++
			if in.Kind == KindBusy && park {
				p.turnAwayLocked(job, owner, now)
			}
			p.mu.Unlock()
			p.log.Debug("not bidding", "job", job.ID, "reason", in.Reason)
			if park && job.WantDeclines {
				p.decline(job, owner, in.Kind, now, reply)
			}
			return err
		}
		return p.reject("evaluate", err)
	}
	bid := terms.Bid{
		JobID: job.ID, Attempt: job.Attempt, Provider: p.cfg.Signer.ID().String(), Region: ps.Cap.Region,
		Price: offer.Price, Start: offer.Start, End: offer.End, GPUModel: offer.GPUModel, VRAMGB: offer.VRAMGB,
		Datasets: offer.Datasets, Evicts: len(offer.Preempts), Nonce: nonce, IssuedAt: now, ExpiresAt: now.Add(job.BidWindow + p.cfg.BidGrace),
	}
	bid.MissingBytes, bid.Held = offer.MissingBytes, holding
	if job.GPUFraction == 0 {
		bid.Free = p.cfg.Calendar.FreeGPUs(offer.Start, offer.End)
	}
	msg, err := terms.EncodeBid(p.cfg.Signer, bid)
	if err != nil {
		p.cfg.Calendar.DropHold(nonce)
		return p.reject("encode", err)
	}
	p.mu.Lock()
	if reply != nil {
		p.bids[bid.Nonce] = &sentBid{bid: bid, job: job, offer: offer}
		p.stats.Bids++
		p.mu.Unlock()
		*reply = msg
		return nil
	}
	if p.inflight[owner] >= p.cfg.MaxOwnerInflight {
		err := p.rejectLocked("owner_inflight", fmt.Errorf("%d bids to %s still in flight", p.inflight[owner], owner))
		p.mu.Unlock()
		p.cfg.Calendar.DropHold(nonce)
		return err
	}
	p.inflight[owner]++
	p.bids[bid.Nonce] = &sentBid{bid: bid, job: job, offer: offer}
	p.stats.Bids++
	p.mu.Unlock()
	timeout := min(p.cfg.SendTimeout, job.BidWindow)
	if !p.enqueue(bidSend{owner: owner, jobID: job.ID, msg: msg, timeout: timeout}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.inflight[owner]--
		delete(p.bids, bid.Nonce)
		p.cfg.Calendar.DropHold(nonce)
		p.stats.Bids--
		return p.rejectLocked("send_queue_full", fmt.Errorf("bid for %s dropped", job.ID))
	}
	return nil
}

// decline sends the job's owner a signed Decline saying why we do not bid,
// through the bid send workers and under the same per-owner limit (at most
// one per call: calls are deduplicated before they are evaluated), or puts
// it in *reply when reply is not nil (see bidFor).
func (p *Provider) decline(job terms.Job, owner peer.ID, kind string, now time.Time, reply *[]byte) {
	msg, err := terms.EncodeDecline(p.cfg.Signer, terms.Decline{JobID: job.ID, Attempt: job.Attempt, Provider: p.cfg.Signer.ID().String(),
		Kind: kind, IssuedAt: now})
	if err != nil {
		return
	}
	if reply != nil {
		*reply = msg
		return
	}
	p.sendToOwner(owner, job.ID, msg, min(p.cfg.SendTimeout, job.BidWindow))
}

// sendToOwner queues a small signed message other than a bid (a decline,
// a capacity notice) for an owner on the bid stream, within the owner's
// in-flight bound.
func (p *Provider) sendToOwner(owner peer.ID, jobID string, msg []byte, timeout time.Duration) {
	p.mu.Lock()
	if p.inflight[owner] >= p.cfg.MaxOwnerInflight {
		p.stats.Rejected["owner_inflight"]++
		p.mu.Unlock()
		return
	}
	p.inflight[owner]++
	p.mu.Unlock()
	if !p.enqueue(bidSend{owner: owner, jobID: jobID, msg: msg, timeout: timeout}) {
		p.mu.Lock()
		p.inflight[owner]--
		p.stats.Rejected["send_queue_full"]++
		p.mu.Unlock()
	}
}

// takeToken spends one of owner's call tokens at now, if it has one. Called
// with p.mu held.
func (p *Provider) takeToken(owner string, now time.Time) bool {
	b, ok := p.buckets[owner]
	if !ok {
		b = &bucket{tokens: float64(p.cfg.CallBurst), last: now}
		p.buckets[owner] = b
	}
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(float64(p.cfg.CallBurst), b.tokens+dt.Seconds()*p.cfg.CallRate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// enqueue hands a bid to the send workers without blocking, starting a
// worker if fewer than SendWorkers run; false means the queue is full.
// Workers exit when the queue is empty, so an idle provider holds none.
func (p *Provider) enqueue(s bidSend) bool {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	select {
	case p.sendQ <- s:
	default:
		return false
	}
	if p.workers < p.cfg.SendWorkers {
		p.workers++
		go p.sendWorker()
	}
	return true
}

func (p *Provider) sendWorker() {
	for {
		p.sendMu.Lock()
		var s bidSend
		select {
		case s = <-p.sendQ:
		default:
			p.workers--
			p.sendMu.Unlock()
			return
		}
		p.sendMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		err := p.cfg.Transport.SendBid(ctx, s.owner, s.msg)
		cancel()
		p.mu.Lock()
		if err != nil {
			p.stats.Undelivered++
		}
		if p.inflight[s.owner]--; p.inflight[s.owner] <= 0 {
			delete(p.inflight, s.owner)
		}
		p.mu.Unlock()
		if err != nil {
			// Logged once counted: a reader of the log finds the count.
			p.log.Info("bid not delivered", "job", s.jobID, "err", err)
		}
	}
}

// HandleAward takes a message from a renter's direct stream, decoded once
// by its kind (DecodeAwardMessage): a bid release goes to its own handler
// and is answered by nothing, any other kind is refused. An award is
// answered by the signed Confirm. The award must be signed by the job's owner, who must be
// the sender, and name this provider; otherwise it is refused with a
// *Rejection and no confirm. An award that does not match a live bid this
// provider made (nonce, job, attempt, price, span, GPU count), or that the
// calendar can no longer hold, gets a signed declined Confirm. Otherwise
// the lease is reserved atomically (evicting the bid's planned bronze
// preemptions for a gold job) and confirmed: over the award's span, or, for
// an award that came too late for it (Lease.Late), from now on for as long
// (Lease.Retimed, said in the confirm) if the calendar has room then, else
// declined. Repeating an award with the
// same lease id returns the same confirm.
func (p *Provider) HandleAward(from peer.ID, data []byte) ([]byte, error) {
	msg, err := terms.DecodeAwardMessage(data)
	switch {
	case err != nil:
		return nil, p.reject(decodeReason(err), err)
	case msg.Release != nil:
		return nil, p.handleRelease(from, *msg.Release)
	case msg.Gang != nil:
		return p.handleGangDecision(from, *msg.Gang)
	}
	a := *msg.Award
	if a.Renter != from.String() {
		return nil, p.reject("not_job_owner", fmt.Errorf("award from %s signed by %s", from, a.Renter))
	}
	me := p.cfg.Signer.ID().String()
	if a.Provider != me {
		return nil, p.reject("wrong_provider", fmt.Errorf("award names %s", a.Provider))
	}
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.confirms[a.LeaseID]; ok && c.renter == a.Renter {
		return c.data, nil
	}
	if err := p.leaseIDFreeLocked(a); err != nil {
		p.log.Warn("award refused: lease id in use", "lease", a.LeaseID, "job", a.JobID, "renter", a.Renter, "err", err)
		return nil, p.rejectLocked("lease_id_in_use", err)
	}
	sb, ok := p.bids[a.BidNonce]
	decline := func(reason string) ([]byte, error) {
		p.stats.Declined++
		p.log.Info("award declined", "lease", a.LeaseID, "job", a.JobID, "reason", reason)
		c, err := terms.EncodeConfirm(p.cfg.Signer, terms.Confirm{LeaseID: a.LeaseID, Accepted: false, Reason: reason})
		if err == nil {
			p.confirms[a.LeaseID] = confirmRec{c, now, a.Renter}
		}
		return c, err
	}
	switch {
	case !ok:
		return decline("no such bid")
	case sb.job.Owner != a.Renter:
		return nil, p.rejectLocked("not_job_owner", fmt.Errorf("bid was for a job of %s", sb.job.Owner))
	case !now.Before(sb.bid.ExpiresAt):
		return decline("bid expired")
	case a.JobID != sb.bid.JobID || a.Attempt != sb.bid.Attempt:
		return decline("award does not match the bid's job")
	case a.Price != sb.bid.Price || !a.Start.Equal(sb.bid.Start) || !a.End.Equal(sb.bid.End) || a.GPUCount != sb.job.GPUCount ||
		a.GPUFraction != sb.job.GPUFraction:
		return decline("award does not match the bid's terms")
	case p.draining.Load():
		delete(p.bids, a.BidNonce)
		p.cfg.Calendar.DropHold(a.BidNonce)
		return decline("provider " + KindDraining)
	}
	if a.Gang != nil || sb.job.Nodes > 1 {
		if err := a.Gang.Check(a.LeaseID, me); err != nil || a.Gang.Size != sb.job.Nodes {
			return nil, p.rejectLocked("bad_gang", fmt.Errorf("award of lease %s: gang of job with %d nodes: %v", a.LeaseID, sb.job.Nodes, err))
		}
	}
	// The bid's award came: its tentative hold becomes a booking or goes.
	if p.cfg.Calendar.DropHold(a.BidNonce) {
		defer func() { go p.retryParked() }()
	}
	job := sb.job
	lease := terms.Lease{ID: a.LeaseID, JobID: a.JobID, Attempt: a.Attempt, Renter: a.Renter, Provider: me, Price: a.Price,
		Start: a.Start, End: a.End, GPUCount: a.GPUCount, GPUFraction: job.GPUFraction, Tier: job.Tier, Preemptible: job.Preemptible,
		State: terms.RunPending}
	retimed := lease.Late(now)
	if retimed && a.Gang != nil {
		// A gang's members start together, as awarded.
		return decline("too late: a gang member is booked as awarded or not at all")
	}
	if retimed {
		// Booked as awarded, it would start after its end or run too
		// short: it is booked from now on if the calendar has room.
		l, err := lease.Retimed(now, job.Deadline, now)
		if err != nil {
			return decline("too late: " + err.Error())
		}
		lease = l
	}
	b := Booking{LeaseID: a.LeaseID, Start: lease.Start, End: lease.End, GPUs: a.GPUCount, Fraction: job.GPUFraction, Tier: job.Tier,
		Preemptible: job.Preemptible, Devices: sb.offer.Devices}
	var evict []string
	// A gang member evicts nobody: it is only held until its gang commits.
	if job.Tier == terms.Gold && a.Gang == nil {
		evict = sb.offer.Preempts
	}
	// Evict only if the planned preemptions are still needed.
	evicted, err := p.cfg.Calendar.ReserveThenEvict(b, evict)
	if err != nil && retimed {
		return decline("too late: re-timed from now on, capacity: " + err.Error())
	}
	if err != nil {
		return decline(terms.DeclinedTaken + err.Error())
	}
	delete(p.bids, a.BidNonce)
	booked, _ := p.cfg.Calendar.Booking(a.LeaseID)
	var preempted []string
	for _, e := range evicted {
		preempted = append(preempted, e.LeaseID)
		end := lease.Start
		if end.Before(e.Start) {
			end = e.Start
		}
		p.endLocked(e.LeaseID, end, terms.RunPreempted)
	}
	conf := terms.Confirm{LeaseID: a.LeaseID, Accepted: true, Devices: booked.Devices}
	if retimed {
		conf.Start, conf.End = lease.Start, lease.End
		p.stats.Retimed++
	}
	c, err := terms.EncodeConfirm(p.cfg.Signer, conf)
	if err != nil {
		p.cfg.Calendar.Release(a.LeaseID)
		return nil, err
	}
	lease.Devices = booked.Devices
	p.confirms[a.LeaseID] = confirmRec{c, now, a.Renter}
	if a.Gang != nil {
		lease.Gang = a.Gang
		p.holdGangLocked(lease, sb)
		return c, nil
	}
	p.leases[lease.ID] = &lease
	p.jobs[lease.ID] = job
	p.order = append(p.order, lease.ID)
	p.stats.Won++
	p.stats.EarningsUSD += terms.LeaseCost(lease.Price, lease.GPUCount, lease.GPUFraction, lease.End.Sub(lease.Start))
	if p.cfg.Runtime != nil {
		// Called with p.mu held, so that lease callbacks arrive in order;
		// OnLease must not call back into the provider synchronously.
		p.cfg.Runtime.OnLease(lease, job, preempted)
	}
	if lease.Start.After(now) {
		// Booked behind a span its bid saw taken, which may have freed
		// since (a lease that ended early between the bid and the award).
		go p.moveEarlier()
	}
	return c, nil
}

// leaseIDFreeLocked refuses an award whose lease id this provider has
// answered or booked before (for anybody: a repeated award of the same
// renter is answered from confirms above while it is remembered, and a
// lease id is never booked twice), or whose job id belongs to a lease of
// another renter. Lease ids are chosen by renters and seen by everybody in
// gossiped receipts: reusing one must never make a new renter the owner of
// an old lease's records, logs or outputs. Called with p.mu held.
func (p *Provider) leaseIDFreeLocked(a terms.Award) error {
	if c, ok := p.confirms[a.LeaseID]; ok && c.renter != a.Renter {
		return fmt.Errorf("lease id %s was awarded by another renter", a.LeaseID)
	}
	if _, ok := p.leases[a.LeaseID]; ok {
		return fmt.Errorf("lease id %s is already booked", a.LeaseID)
	}
	if _, ok := p.gangHeld[a.LeaseID]; ok {
		return fmt.Errorf("lease id %s is already held", a.LeaseID)
	}
	for _, l := range p.leases {
		if l.JobID == a.JobID && l.Renter != a.Renter {
			return fmt.Errorf("job id %s belongs to another renter's lease", a.JobID)
		}
	}
	if p.cfg.Runtime != nil {
		return p.cfg.Runtime.Admit(a.LeaseID, a.JobID, a.Renter)
	}
	return nil
}

// handleRelease takes a renter's word that one of our bids to it will not
// be awarded (it comes on the award stream): the bid is forgotten and its
// tentative hold freed. Only the bid's own renter can release it.
func (p *Provider) handleRelease(from peer.ID, rel terms.BidRelease) error {
	if rel.Renter != from.String() {
		return p.reject("not_job_owner", fmt.Errorf("release from %s signed by %s", from, rel.Renter))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.bids[rel.BidNonce]
	if !ok || sb.job.Owner != rel.Renter || sb.bid.JobID != rel.JobID || sb.bid.Attempt != rel.Attempt ||
		rel.Provider != p.cfg.Signer.ID().String() {
		return p.rejectLocked("unknown_bid", fmt.Errorf("release of bid %q", rel.BidNonce))
	}
	delete(p.bids, rel.BidNonce)
	if p.cfg.Calendar.DropHold(rel.BidNonce) {
		go p.retryParked()
	}
	p.stats.Lost++
	return nil
}

func (p *Provider) rejectLocked(reason string, err error) error {
	p.stats.Rejected[reason]++
	return &Rejection{Reason: reason, Err: err}
}

// Slices is the slices of its device a slice lease holds on the calendar
// (Booking.Slices); nil for an unknown lease or a whole-device one.
func (p *Provider) Slices(leaseID string) []int {
	b, _ := p.cfg.Calendar.Booking(leaseID)
	return b.Slices
}

// LeaseEnded records that a lease ended at end in state (the job finished
// early, failed, was cancelled or preempted): the calendar frees the rest of
// its span and earnings only count the time up to end. It is idempotent for
// a lease already in a terminal state.
func (p *Provider) LeaseEnded(leaseID string, end time.Time, state terms.RunState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.leases[leaseID]; !ok {
		return fmt.Errorf("%w: %s", ErrUnknownLease, leaseID)
	}
	p.endLocked(leaseID, end, state)
	return nil
}

func (p *Provider) endLocked(leaseID string, end time.Time, state terms.RunState) {
	l, ok := p.leases[leaseID]
	if !ok {
		p.cfg.Calendar.Truncate(leaseID, end)
		return
	}
	if l.State.Terminal() {
		return
	}
	if end.Before(l.Start) {
		end = l.Start
	}
	if end.Before(l.End) {
		p.stats.EarningsUSD -= terms.LeaseCost(l.Price, l.GPUCount, l.GPUFraction, l.End.Sub(end))
		l.End = end
		if p.cfg.Calendar.Truncate(leaseID, end) {
			// GPUs freed ahead of their booked end: later leases may
			// move into them, and renters turned away may have room.
			go func() {
				p.moveEarlier()
				p.announceFreed()
			}()
		}
	}
	l.State = state
	delete(p.jobs, leaseID)
}

// moveEarlier moves confirmed leases that have not begun as early as the
// provider's own offer rule (Evaluate, their own bookings set aside) now
// allows, earliest first: when a lease ends before its booked end, the
// leases booked behind it start in its place instead of waiting out its
// declared span. A move never evicts anybody, never takes GPUs a bid
// holds, and keeps the lease's length and price (Lease.Moved); the runtime
// is told (OnMove) and tells the renter. A draining provider moves
// nothing: it hands its long leases back.
func (p *Provider) moveEarlier() {
	if p.cfg.Runtime == nil || p.draining.Load() {
		return
	}
	p.mu.Lock()
	none := len(p.waitingLocked(p.cfg.Now())) == 0
	p.mu.Unlock()
	if none {
		return
	}
	ps := p.state()
	// The evaluation lock first, as a call takes it: no bid's hold lands
	// between a move's evaluation and its booking.
	p.evalMu.Lock()
	defer p.evalMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	waiting := p.waitingLocked(now)
	for _, l := range waiting {
		job := p.jobs[l.ID]
		ps.Moving = l.ID
		offer, err := Evaluate(ps, &job, now)
		if err != nil || len(offer.Preempts) > 0 || !offer.Start.Before(l.Start) || offer.End.Sub(offer.Start) < l.End.Sub(l.Start) {
			continue
		}
		moved, err := l.Moved(offer.Start, nil, now)
		if err != nil {
			continue
		}
		old, _ := p.cfg.Calendar.Booking(l.ID)
		b, err := p.cfg.Calendar.Move(l.ID, moved.Start, moved.End, offer.Devices)
		if err != nil {
			continue
		}
		moved.Devices = b.Devices
		if !p.cfg.Runtime.OnMove(moved, job) {
			_, _ = p.cfg.Calendar.Move(l.ID, old.Start, old.End, old.Devices)
			continue
		}
		p.log.Info("lease moved earlier", "lease", l.ID, "job", l.JobID, "from", l.Start, "to", moved.Start)
		*l = moved
		p.stats.Moved++
	}
}

// waitingLocked is the confirmed leases that have not begun by now (those
// that may move earlier), earliest first. Called with p.mu held.
func (p *Provider) waitingLocked(now time.Time) []*terms.Lease {
	var waiting []*terms.Lease
	for id := range p.jobs {
		// A gang member starts with its gang, never earlier alone.
		if l := p.leases[id]; l != nil && l.Gang == nil && l.State == terms.RunPending && l.Start.After(now) {
			waiting = append(waiting, l)
		}
	}
	sort.Slice(waiting, func(i, j int) bool {
		if !waiting[i].Start.Equal(waiting[j].Start) {
			return waiting[i].Start.Before(waiting[j].Start)
		}
		return waiting[i].ID < waiting[j].ID
	})
	return waiting
}

// Stats returns a snapshot of the provider's market activity.
func (p *Provider) Stats() terms.ProviderStats {
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune(now)
	s := p.stats
	s.Rejected = make(map[string]int, len(p.stats.Rejected))
	for k, v := range p.stats.Rejected {
		s.Rejected[k] = v
	}
	s.Ineligible = make(map[string]int, len(p.stats.Ineligible))
	for k, v := range p.stats.Ineligible {
		s.Ineligible[k] = v
	}
	s.Occupancy = p.cfg.Calendar.Occupancy(now)
	s.Draining = p.draining.Load()
	s.GangHeld = len(p.gangHeld)
	s.Leases = make([]terms.Lease, 0, len(p.order))
	for _, id := range p.order {
		s.Leases = append(s.Leases, *p.leases[id])
	}
	return s
}
