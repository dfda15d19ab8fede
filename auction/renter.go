package auction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// DefaultConfirmTimeout bounds how long a renter waits for a provider to
// confirm an award before failing over to the next bid.
const DefaultConfirmTimeout = time.Second

// Defaults of award hedging and of the memory of bidders that did not
// confirm (see RenterConfig).
const (
	DefaultMaxParallelAwards = 8
	DefaultNoConfirmPenalty  = 10 * time.Minute
	// DefaultQuietClose is how long after the last bid a bid window closes
	// early (see RenterConfig.QuietClose).
	DefaultQuietClose = 150 * time.Millisecond
	// DefaultMaxBidders is how many of the providers expected to answer a
	// call are asked to (RenterConfig.MaxBidders): the established ones
	// the renter would pick anyway (up to half) and a fresh random draw of
	// the others, enough for a price. Every further bidder costs the
	// market a call checked, a bid signed, sent, verified and ranked, and
	// a release: with 16, a job cost an 11-daemon network twice what
	// Bacalhau's orchestrator spends on one.
	DefaultMaxBidders = 4
	// DefaultHoldingsWait bounds how long ranking waits for the holdings
	// lookups of a job's bidders (see RenterConfig.Holdings).
	DefaultHoldingsWait = 2 * time.Second
)

// Renter errors.
var (
	ErrUnplaceable = errors.New("auction: job unplaceable")
	ErrCancelled   = errors.New("auction: job cancelled")
	ErrUnknownJob  = errors.New("auction: unknown job")
)

// Rejection is the error a handler returns for a message it refuses; Reason
// is a stable counter key ("malformed", "bad_signature", "replayed_nonce"...).
type Rejection struct {
	Reason string
	Err    error
}

func (r *Rejection) Error() string {
	if r.Err == nil {
		return "auction: rejected: " + r.Reason
	}
	return "auction: rejected: " + r.Reason + ": " + r.Err.Error()
}

func (r *Rejection) Unwrap() error { return r.Err }

// decodeReason classifies a decoding error as a counter key.
func decodeReason(err error) string {
	switch {
	case errors.Is(err, terms.ErrOversized), errors.Is(err, sign.ErrOversized):
		return "oversized"
	case errors.Is(err, terms.ErrSignerMismatch):
		return "signer_mismatch"
	case errors.Is(err, sign.ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, sign.ErrWrongDomain):
		return "wrong_domain"
	case errors.Is(err, terms.ErrBadID):
		return "bad_id"
	case errors.Is(err, terms.ErrInvalidJob):
		return "invalid_job"
	}
	return "malformed"
}

// Reputation is what a renter's book says of providers.
type Reputation interface {
	// Reliability is a provider's verified reliability score in [0,1].
	Reliability(provider string) float64
	// Verified reports whether the book holds provider verified for the
	// GPU model it bid with (Candidate.Verified).
	Verified(provider, gpuModel string) bool
}

// Directory is what a renter's host knows of the providers it learned of.
type Directory interface {
	// GPUs is a provider's GPU count as its verified capability record
	// says (0: unknown). With it the renter never awards one provider
	// more GPUs at once than it has across its own concurrent auctions
	// (see Renter.claim); 0 leaves every award to the provider's calendar.
	GPUs(provider string) int
	// ExpectedBidders names the providers expected to answer a job's
	// call, with a bid or a decline: those the renter knows whose
	// capability fits the job (StaticFit). Once every one of them has
	// answered, the window closes, whatever the tier: no later answer is
	// expected. An empty answer leaves the window to run as usual, and so
	// does a provider that stays silent (gone, or its decline sampled).
	ExpectedBidders(job *terms.Job) []string
}

// Holdings looks up the artifact ids a provider's signed capability record
// advertises (ok false when none was found).
type Holdings interface {
	Holdings(ctx context.Context, provider string) (held []string, ok bool)
}

// Latency is the round trips from a renter's host to providers.
type Latency interface {
	// RTT is the round trip to a provider as the host last measured it
	// (libp2p ping; ok false without a fresh sample).
	RTT(provider string) (time.Duration, bool)
	// MeasureRTT is that round trip, measured now unless a fresh sample
	// is at hand, within ctx.
	MeasureRTT(ctx context.Context, provider string) (time.Duration, bool)
}

// Listener is told of a renter's auctions' outcomes.
type Listener interface {
	// OnLease is called when a provider confirms a lease.
	OnLease(terms.Lease, terms.Job)
	// OnUnplaceable is called when an auction ends without a lease.
	OnUnplaceable(job terms.Job, reason string)
	// OnCapacity is told of a provider's verified capacity notice (it has
	// room now for jobs of ours it turned away): whoever queues jobs
	// offers them again.
	OnCapacity(terms.CapacityNotice)
}

// AwardListener is a Listener that is also told of each award as it is
// sent (the lease its provider books once it confirms): the provider may
// report on the lease before its confirmation is back.
type AwardListener interface {
	OnAward(terms.Lease)
}

// Releaser gives back a lease a provider confirmed that the renter does not
// use (RenterConfig.Release).
type Releaser interface {
	Release(terms.Lease)
}

// RenterConfig configures a Renter.
type RenterConfig struct {
	Signer    *sign.Signer
	Transport Transport
	// Reputation is what the renter's book (attest's reputation book)
	// says of providers; nil: every provider has NeutralReliability and
	// none is verified.
	Reputation Reputation
	// Directory is what the renter's host knows of the providers it
	// learned of (their verified capability records); nil knows none.
	Directory Directory
	// Successions is the renter's registry of identity successions: a bid
	// a retired identity's old key signed after its succession is refused
	// (retired_key). Nil retires no one.
	Successions *sign.Successions
	// Now is the clock for timestamps and expiry; nil means time.Now.
	Now func() time.Time
	// Log receives protocol events; nil discards them.
	Log *slog.Logger
	// ConfirmTimeout bounds each award's round trip; 0 means
	// DefaultConfirmTimeout.
	ConfirmTimeout time.Duration
	// Release gives back a lease a provider confirmed that the renter does
	// not use: a hedged award that confirmed after another one won (or
	// after the job was cancelled). The daemon asks the provider to cancel
	// it. Hedging needs it: with Release nil awards are strictly sequential.
	Release Releaser
	// HedgeAfter is how long awards may go unanswered before as many more
	// bids are awarded in parallel (up to MaxParallelAwards outstanding); 0
	// means half of ConfirmTimeout (a quarter hedged most awards of a busy
	// 50-node market, and each extra confirm costs a release).
	HedgeAfter        time.Duration
	MaxParallelAwards int // 0 means DefaultMaxParallelAwards
	// MaxAuctions is how many of this renter's auctions run at once, and
	// CallRate (calls a second) and CallBurst how fast they start; the
	// others wait their turn (their jobs stay bidding). A provider drops
	// the calls of an owner over its own bounds (ProviderConfig.CallRate,
	// CallBurst, MaxOwnerInflight), and a job whose call was dropped
	// everywhere finds no bids and waits out a requeue: a renter posting
	// hundreds of jobs at once stays inside the defaults of those bounds
	// instead. 0 means the defaults (DefaultMaxOwnerInflight; 90 % of
	// DefaultCallRate, half of DefaultCallBurst, for the calls' uneven
	// arrival); a negative MaxAuctions or CallRate removes that bound.
	MaxAuctions int
	CallRate    float64
	CallBurst   int
	// NoConfirmPenalty is how long a provider that did not confirm an award
	// (timed out, failed, declined) is ranked below every other bidder; 0
	// means DefaultNoConfirmPenalty.
	NoConfirmPenalty time.Duration
	// QuietClose closes a bid window early once this long has passed
	// since the last bid: providers answer a call within milliseconds, so
	// a quiet spell means everybody who could bid has, and the best price
	// is in. With a Directory set, a quiet spell counts only once at least
	// half the expected providers have answered: while most have not, the
	// rest are slower (a loaded host, a farther network), not absent, and
	// one of them may beat the best bid so far; nor, with Latency set,
	// before an expected provider whose round trip the renter knows has
	// had that round trip (from the window's opening) and a quiet spell
	// more to answer: a far provider is slower, not absent, and may be
	// the cheapest. A gold job's window closes at its first acceptable
	// bid. A window in which no bid came is
	// extended once by BidWindow. 0 means DefaultQuietClose; negative
	// disables early closing (every window runs its full BidWindow, still
	// extended once when empty).
	QuietClose time.Duration
	// Holdings looks up the artifacts providers advertise. With it set,
	// the renter checks the MissingBytes of bids for jobs that name
	// artifacts against them (Candidate.HeldChecked): each bidder is
	// looked up as its bid comes in, and ranking waits up to HoldingsWait
	// for lookups under way; one that has not answered by then counts as
	// no record.
	Holdings Holdings
	// HoldingsWait bounds that wait; 0 means DefaultHoldingsWait.
	HoldingsWait time.Duration
	// Latency is the round trips from the renter's host to providers:
	// every job's ranking breaks ties by the last one measured (RTT), and
	// a latency-sensitive job's bidders (Job.LatencySensitive) are
	// measured as their bids come in (MeasureRTT), each within the job's
	// BidWindow, and ranking waits for the measurements under way (each
	// bounded so): a bidder still unmeasured then has no RTT (its bid is
	// rejected under MaxRTT, charged RTTChargeCap under Near). nil knows
	// and measures none.
	Latency Latency
	// MaxBidders caps the bids a call asks for: when more providers are
	// expected to answer, the call invites the established ones by name
	// (Job.BidInvited, up to half) and asks a random share of the others
	// (Job.BidSample, a fresh seed per call) for the rest, and waits only
	// for those. 0 means DefaultMaxBidders; negative asks every provider.
	MaxBidders int
	// Listener is told of the auctions' outcomes; nil: nobody is.
	Listener Listener
}

// renterJob is a job's current call (and what its earlier calls left):
// its auction status as the API shows it, and the call's machine
// (callmachine: bids, declines, who answered, the window), which every
// bid, decline, timer and end steps (stepLocked) under r.mu.
type renterJob struct {
	status terms.JobStatus
	call   callmachine.State
	cancel chan struct{}
	// loop are the effects of steps that the call's own goroutine
	// carries out (its timers, CheckBest, Close), queued by whichever
	// goroutine stepped; kick is signalled (never blocking) when some
	// are.
	loop []callmachine.Effect
	kick chan struct{}
	// held is each bidder's holdings lookup (RenterConfig.Holdings).
	held map[string]*holdingsLookup
	// rtts is each bidder's RTT measurement (RenterConfig.Latency).
	rtts map[string]*rttLookup
}

// holdingsLookup is one bidder's advertised artifacts, once done is closed.
type holdingsLookup struct {
	done chan struct{}
	held []string
	ok   bool
}

// rttLookup is one bidder's measured round trip, once done is closed.
type rttLookup struct {
	done chan struct{}
	rtt  time.Duration
	ok   bool
}

// Renter runs auctions for its own jobs: Post gossips a signed call for bids
// on JobTopics, collects bids through HandleBid until the window closes
// (BidWindow at most, earlier after a quiet spell; see QuietClose), ranks them with RankAt and awards them best first, providers that recently
// failed to confirm last, skipping bids that have expired by then. An award
// is a lease only once the provider's signed Confirm (matching lease id,
// accepted) comes back within ConfirmTimeout; if it errors, times out or
// declines, the next bid is awarded. With Release set, awards are hedged:
// every HedgeAfter without a confirm, as many more bids are awarded in
// parallel as are outstanding (up to MaxParallelAwards), the first confirm
// wins, and every other confirm is released. A provider that
// confirms after ConfirmTimeout holds a reservation the renter no longer
// counts on; the provider's runtime expires a reserved lease that no job
// claims. It is safe for concurrent use.
type Renter struct {
	cfg   RenterConfig
	log   *slog.Logger
	rules callmachine.Rules // its calls' (from cfg)

	mu          sync.Mutex
	jobs        map[string]*renterJob
	counters    map[string]int
	unconfirmed map[string]time.Time // provider -> until when it ranks last
	claims      map[string][]*claim  // provider -> this renter's awards in flight and recent leases
	declineTok  float64              // token bucket of declines taken
	// slots and calls bound the auctions at once and the calls a second
	// (admit); nil: unbounded.
	slots     chan struct{}
	calls     *rate.Limiter
	declineAt time.Time
	// wg counts the background waits for hedged awards outstanding once an
	// auction won its lease.
	wg sync.WaitGroup
}

// Wait waits for the awards still outstanding after their auctions ended
// (each is bounded by ConfirmTimeout).
func (r *Renter) Wait() { r.wg.Wait() }

// Declines a renter takes, all jobs together: a token bucket, so that
// declines cannot flood it.
const (
	declineRate  = 200.0 // per second
	declineBurst = 400
)

// NewRenter returns a renter. Signer and Transport are required.
func NewRenter(cfg RenterConfig) (*Renter, error) {
	if cfg.Signer == nil || cfg.Transport == nil {
		return nil, errors.New("auction: renter needs a signer and a transport")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = DefaultConfirmTimeout
	}
	if cfg.HedgeAfter <= 0 {
		cfg.HedgeAfter = cfg.ConfirmTimeout / 2
	}
	if cfg.MaxParallelAwards <= 0 {
		cfg.MaxParallelAwards = DefaultMaxParallelAwards
	}
	if cfg.Release == nil {
		cfg.MaxParallelAwards = 1
	}
	if cfg.NoConfirmPenalty <= 0 {
		cfg.NoConfirmPenalty = DefaultNoConfirmPenalty
	}
	if cfg.QuietClose == 0 {
		cfg.QuietClose = DefaultQuietClose
	}
	if cfg.HoldingsWait <= 0 {
		cfg.HoldingsWait = DefaultHoldingsWait
	}
	if cfg.MaxBidders == 0 {
		cfg.MaxBidders = DefaultMaxBidders
	}
	if cfg.MaxAuctions == 0 {
		cfg.MaxAuctions = DefaultMaxOwnerInflight
	}
	if cfg.CallRate == 0 {
		cfg.CallRate = 0.9 * DefaultCallRate
	}
	if cfg.CallBurst <= 0 {
		cfg.CallBurst = DefaultCallBurst / 2
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rules := callmachine.Rules{QuietClose: cfg.QuietClose, MaxParallelAwards: cfg.MaxParallelAwards, Release: cfg.Release != nil}
	r := &Renter{cfg: cfg, log: log.With("role", "renter"), rules: rules,
		jobs: map[string]*renterJob{}, counters: map[string]int{}, unconfirmed: map[string]time.Time{}}
	if cfg.MaxAuctions > 0 {
		r.slots = make(chan struct{}, cfg.MaxAuctions)
	}
	if cfg.CallRate > 0 {
		r.calls = rate.NewLimiter(rate.Limit(cfg.CallRate), cfg.CallBurst)
	}
	return r, nil
}

// admit waits until one more of the renter's auctions may start
// (RenterConfig.MaxAuctions, CallRate): it returns the function that
// frees the auction's slot, or an error once ctx ends or the job is
// cancelled first.
func (r *Renter) admit(ctx context.Context, rj *renterJob) (func(), error) {
	done := func() {}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			done = func() { <-r.slots }
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-rj.cancel:
			return nil, ErrCancelled
		}
	}
	if r.calls != nil {
		res := r.calls.Reserve()
		if d := res.Delay(); d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				res.Cancel()
				done()
				return nil, ctx.Err()
			case <-rj.cancel:
				res.Cancel()
				done()
				return nil, ErrCancelled
			}
		}
	}
	return done, nil
}

// Post runs an auction for job: it fills ID (if empty), Owner and CreatedAt
// (if zero), publishes the call and returns when the auction ends. The
// error is nil once leased, wraps ErrUnplaceable (with the reason) when no
// bid could be turned into a lease, ErrCancelled after Cancel, or reports
// a failed publish.
//
// job must be valid (Job.Validate): a job is validated once, where it
// enters the daemon (the control API's post, node/lease.Tracker), and the
// engine trusts it. Requeue, which builds a new attempt of a job itself,
// validates that attempt before posting it.
func (r *Renter) Post(ctx context.Context, job terms.Job) (terms.Job, error) {
	job.Owner = r.cfg.Signer.ID().String()
	if job.ID == "" {
		job.ID = terms.NewID("job")
	}
	if job.CreatedAt.IsZero() {
		job.CreatedAt = r.cfg.Now()
	}
	var expected []string
	sampled := false
	job.BidSample, job.BidSeed, job.BidInvited = 0, "", nil
	if r.cfg.Directory != nil {
		expected = r.cfg.Directory.ExpectedBidders(&job)
		if n := len(expected); r.cfg.MaxBidders > 0 && n > r.bidders(&job) {
			expected, sampled = r.sample(&job, expected), true
		}
	}
	rj := &renterJob{
		status: terms.JobStatus{Job: job, State: terms.JobBidding, PostedAt: r.cfg.Now()},
		cancel: make(chan struct{}),
		kick:   make(chan struct{}, 1),
		held:   map[string]*holdingsLookup{},
		rtts:   map[string]*rttLookup{},
	}
	r.mu.Lock()
	if old, ok := r.jobs[job.ID]; ok && (old.status.State == terms.JobBidding || old.status.State == terms.JobAwarding) {
		r.mu.Unlock()
		return job, fmt.Errorf("auction: job %s is already being auctioned", job.ID)
	}
	var history []terms.AwardAttempt
	var reasons []string
	var busy map[string]bool
	offers := 0
	if old, ok := r.jobs[job.ID]; ok {
		history, reasons, offers, busy = old.status.Attempts, old.status.Reasons, old.status.Offers, old.call.Busy
	}
	rj.status.Attempts, rj.status.Reasons, rj.status.Offers = history, reasons, offers+1
	r.jobs[job.ID] = rj
	err := r.stepLocked(rj, callmachine.Opened{Job: job, Expected: expected, Busy: busy, Reach: r.reach(expected)})
	r.mu.Unlock()
	if err != nil {
		return job, err
	}

	free, err := r.admit(ctx, rj)
	if err != nil {
		if errors.Is(err, ErrCancelled) {
			return job, err
		}
		return job, r.end(rj, callmachine.Failed{Reason: "auction not started: " + err.Error()}, err)
	}
	defer free()

	var sends sync.WaitGroup
	defer sends.Wait()
	if !sampled || !r.sendCalls(ctx, rj, &job, expected, &sends) {
		published := 0
		var pubErr error
		for _, topic := range JobTopics(&job) {
			data, err := terms.EncodeCall(r.cfg.Signer, job, topic)
			if err != nil {
				return job, r.end(rj, callmachine.Failed{Reason: "encode call: " + err.Error()}, err)
			}
			if err := r.cfg.Transport.Publish(ctx, topic, data); err != nil {
				pubErr = errors.Join(pubErr, fmt.Errorf("publish %s: %w", topic, err))
				continue
			}
			published++
		}
		if published == 0 {
			return job, r.end(rj, callmachine.Failed{Reason: "publish failed"}, fmt.Errorf("auction: post %s: %w", job.ID, pubErr))
		}
		r.log.Debug("call published", "job", job.ID, "attempt", job.Attempt, "window", job.BidWindow)
	}

	return job, r.drive(ctx, rj, &job)
}

// sendCalls sends a sampled call to each provider it asks (asked: the
// providers this renter knows, see sample) directly, instead of gossiping
// it to every provider of its topics, most of which would only drop it.
// A provider the call cannot reach stops being awaited. It reports
// whether any call went out; when none did, the call is gossiped.
func (r *Renter) sendCalls(ctx context.Context, rj *renterJob, job *terms.Job, asked []string, sends *sync.WaitGroup) bool {
	topics := JobTopics(job)
	if len(topics) == 0 || len(asked) == 0 {
		return false
	}
	data, err := terms.EncodeCall(r.cfg.Signer, *job, topics[0])
	if err != nil {
		return false
	}
	// The sends outlive this call, not the auction (sends: a slow
	// provider must not hold the window back): the first delivery, or the
	// last failure, decides.
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), job.BidWindow)
	first := make(chan bool, 1)
	var mu sync.Mutex
	left, sent := len(asked), 0
	done := func(ok bool) {
		mu.Lock()
		defer mu.Unlock()
		left--
		if ok {
			sent++
		}
		switch {
		case ok && sent == 1:
			first <- true
		case left == 0 && sent == 0:
			first <- false
		}
		if left == 0 {
			cancel()
		}
	}
	for _, p := range asked {
		to, err := peer.Decode(p)
		if err != nil {
			r.step(rj, callmachine.Unreached{Provider: p})
			done(false)
			continue
		}
		sends.Add(1)
		go func() {
			defer sends.Done()
			answer, err := r.cfg.Transport.SendCall(sendCtx, to, data)
			if err != nil {
				r.log.Debug("call not delivered", "job", job.ID, "provider", p, "err", err)
				r.step(rj, callmachine.Unreached{Provider: p})
			}
			if len(answer) > 0 {
				// Its bid or decline, on the call's own stream.
				_ = r.HandleBid(to, answer)
			}
			done(err == nil)
		}()
	}
	return <-first
}

// bestStartsNow reports whether the bid that would be awarded now (a
// gang's: the Job.Nodes best) is acceptable and starts at once: only then
// may a window close early (a busy provider's later start must not win
// just by answering first, nor a gang's first bid close a window its
// other members have not bid in yet).
func (r *Renter) bestStartsNow(rj *renterJob, job *terms.Job) bool {
	r.mu.Lock()
	cands := append([]terms.Candidate(nil), rj.call.Bids...)
	r.mu.Unlock()
	for i := range cands {
		r.standing(&cands[i])
	}
	r.checkHoldings(context.Background(), rj, job, cands, time.Time{})
	r.fillRTTs(context.Background(), rj, cands, time.Time{})
	now := r.cfg.Now()
	ranked := RankAt(job, cands, now)
	k := max(job.Nodes, 1)
	return len(ranked) >= k && !slices.ContainsFunc(ranked[:k], func(c terms.Ranked) bool { return c.Rejected != "" || !callmachine.StartsNow(c.Bid, now) })
}

// lookupHoldingsLocked starts looking up a bidder's advertised artifacts for a
// job that names artifacts (r.mu held).
func (r *Renter) lookupHoldingsLocked(rj *renterJob, provider string) {
	if r.cfg.Holdings == nil || len(rj.status.Job.Run.Artifacts()) == 0 || rj.held[provider] != nil {
		return
	}
	l := &holdingsLookup{done: make(chan struct{})}
	rj.held[provider] = l
	go func() {
		defer close(l.done)
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.HoldingsWait)
		defer cancel()
		l.held, l.ok = r.cfg.Holdings.Holdings(ctx, provider)
	}()
}

// checkHoldings marks candidates for a job that names artifacts as
// checked against their providers' advertised holdings, waiting until
// deadline for lookups under way (a zero deadline waits for none): a
// lookup not done by then, or that found no record, leaves Held nil.
func (r *Renter) checkHoldings(ctx context.Context, rj *renterJob, job *terms.Job, cands []terms.Candidate, deadline time.Time) {
	if r.cfg.Holdings == nil || len(job.Run.Artifacts()) == 0 {
		return
	}
	w := newLookupWait(deadline)
	defer w.stop()
	for i := range cands {
		c := &cands[i]
		c.HeldChecked = true
		r.mu.Lock()
		l := rj.held[c.Bid.Provider]
		r.mu.Unlock()
		if l != nil && w.done(ctx, l.done) && l.ok {
			c.Held = l.held
		}
	}
}

// lookupWait waits for lookups under way (holdings, RTTs) until one
// deadline shared by all of them: once it has passed (or the context
// ended), the rest are taken as they are, without waiting.
type lookupWait struct {
	t       *time.Timer
	timeout <-chan time.Time
}

// newLookupWait waits until deadline; a zero deadline waits for none.
func newLookupWait(deadline time.Time) *lookupWait {
	w := &lookupWait{}
	if !deadline.IsZero() {
		w.t = time.NewTimer(time.Until(deadline))
		w.timeout = w.t.C
	}
	return w
}

func (w *lookupWait) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// done waits for a lookup's done channel while the deadline allows, and
// reports whether it has closed.
func (w *lookupWait) done(ctx context.Context, done <-chan struct{}) bool {
	if w.timeout != nil {
		select {
		case <-done:
		case <-w.timeout:
			w.timeout = nil
		case <-ctx.Done():
			w.timeout = nil
		}
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// measureRTTLocked starts measuring the round trip to a bidder of a
// latency-sensitive job or a gang's (r.mu held), once per bidder, within the job's
// BidWindow; a bid the ranking will reject anyway (an excluded provider,
// one outside the call's sample) is not measured. Its end steps the call
// (Measured), so that a window waiting for an acceptable bid looks again.
func (r *Renter) measureRTTLocked(rj *renterJob, provider string) {
	j := &rj.status.Job
	// A gang measures too: its members are chosen closest first (pickGang).
	if r.cfg.Latency == nil || (!j.LatencySensitive() && j.Nodes <= 1) || rj.rtts[provider] != nil ||
		j.Excludes(provider) || !terms.SampledBidder(j, provider) {
		return
	}
	l := &rttLookup{done: make(chan struct{})}
	rj.rtts[provider] = l
	window := j.BidWindow
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), window)
		l.rtt, l.ok = r.cfg.Latency.MeasureRTT(ctx, provider)
		cancel()
		close(l.done)
		r.step(rj, callmachine.Measured{})
	}()
}

// fillRTTs sets candidates' RTT: their bidder's measurement
// (measureRTTLocked), waiting until deadline for those under way (a zero
// deadline waits for none), or the fresh sample RenterConfig.Latency has of
// a bidder not being measured.
func (r *Renter) fillRTTs(ctx context.Context, rj *renterJob, cands []terms.Candidate, deadline time.Time) {
	w := newLookupWait(deadline)
	defer w.stop()
	for i := range cands {
		c := &cands[i]
		r.mu.Lock()
		l := rj.rtts[c.Bid.Provider]
		r.mu.Unlock()
		if l == nil {
			if r.cfg.Latency != nil {
				if d, ok := r.cfg.Latency.RTT(c.Bid.Provider); ok {
					c.RTT = d
				}
			}
			continue
		}
		if w.done(ctx, l.done) && l.ok {
			c.RTT = l.rtt
		}
	}
}

// reach is the round trips the renter's host last measured to the
// expected providers that it has a fresh sample of (Latency.RTT): a
// quiet spell waits for their answers (callmachine.Opened.Reach).
func (r *Renter) reach(expected []string) map[string]time.Duration {
	if r.cfg.Latency == nil || r.cfg.QuietClose < 0 {
		return nil
	}
	var out map[string]time.Duration
	for _, p := range expected {
		if d, ok := r.cfg.Latency.RTT(p); ok && d > 0 {
			if out == nil {
				out = make(map[string]time.Duration, len(expected))
			}
			out[p] = d
		}
	}
	return out
}

// sample makes job's call ask MaxBidders of the providers expected to
// answer it (more than that) and returns those it asks: the established
// ones by name (invitees), and the rest of MaxBidders drawn from the
// others (Job.BidSample of them, with a seed whose draw holds at least
// half the bidders wanted: an unlucky draw would ask too few, so a few
// seeds are tried at most). However many records fresh identities
// publish, they only dilute the draw, never the invitations.
func (r *Renter) sample(job *terms.Job, expected []string) []string {
	job.BidInvited = r.invitees(job, expected)
	rest := slices.DeleteFunc(slices.Clone(expected), func(p string) bool { return slices.Contains(job.BidInvited, p) })
	want := r.bidders(job) - len(job.BidInvited)
	job.BidSample = float64(want) / float64(len(rest))
	var drawn []string
	for range 16 {
		job.BidSeed = terms.NewID("seed")
		drawn = slices.DeleteFunc(slices.Clone(rest), func(p string) bool { return !terms.SampledBidder(job, p) })
		if 2*len(drawn) >= want {
			break
		}
	}
	return append(slices.Clone(job.BidInvited), drawn...)
}

// bidders is how many providers job's call asks (MaxBidders, positive):
// twice as many at each of its next two attempts, so that a job whose
// sample found no free GPU (queued, or raced by this renter's other
// auctions) widens its next calls instead of drawing from the same few;
// no further, so that retries in a market too loaded to answer in time
// do not load it more.
func (r *Renter) bidders(job *terms.Job) int {
	return r.cfg.MaxBidders << min(max(job.Attempt, 0), maxWiden)
}

// maxWiden is how many times a retried call doubles its bidders.
const maxWiden = 2

// invitees are the providers among expected that the renter holds
// established, best first, up to half of MaxBidders (and MaxBidInvited):
// those its reputation scores above NeutralReliability (evidence from its
// own leases or from renters with standing: fresh identities cannot lift
// a provider there, see attest.Book) or that it holds verified for a GPU
// model the job names.
func (r *Renter) invitees(job *terms.Job, expected []string) []string {
	type invitee struct {
		id    string
		score float64
	}
	var est []invitee
	seen := make(map[string]bool, len(expected))
	for _, p := range expected {
		if seen[p] {
			continue
		}
		seen[p] = true
		// (An id that is not a peer id would make the call invalid.)
		if s := r.reputation(p); (s > terms.NeutralReliability || r.verifiedFor(job, p)) && terms.ValidPeerID(p) == nil {
			est = append(est, invitee{p, s})
		}
	}
	sort.Slice(est, func(i, j int) bool {
		if est[i].score != est[j].score {
			return est[i].score > est[j].score
		}
		return est[i].id < est[j].id
	})
	out := make([]string, 0, min(len(est), r.bidders(job)/2, terms.MaxBidInvited))
	for _, e := range est[:cap(out)] {
		out = append(out, e.id)
	}
	return out
}

// verifiedFor reports whether the renter holds provider verified for a
// GPU model job names (none named: it cannot tell which it would bid).
func (r *Renter) verifiedFor(job *terms.Job, provider string) bool {
	if r.cfg.Reputation == nil {
		return false
	}
	return slices.ContainsFunc(job.GPUModels, func(m string) bool { return r.cfg.Reputation.Verified(provider, m) })
}

// standing fills what the renter's book says of a bid's provider: its
// reliability and whether it is verified for the bid's GPU model.
func (r *Renter) standing(c *terms.Candidate) {
	c.Reliability = r.reputation(c.Bid.Provider)
	c.Verified = r.cfg.Reputation != nil && r.cfg.Reputation.Verified(c.Bid.Provider, c.Bid.GPUModel)
}

func (r *Renter) reputation(provider string) float64 {
	if r.cfg.Reputation == nil {
		return terms.NeutralReliability
	}
	return r.cfg.Reputation.Reliability(provider)
}

// claim is GPUs of one provider this renter has awarded (in flight) or
// leased: its concurrent auctions must not award them again.
type claim struct {
	start, end time.Time
	gpus       float64 // BilledGPUs: a slice claims its fraction
	// confirmed is when the provider confirmed the award (zero while in
	// flight): bids issued after it were made against a calendar that
	// holds the lease, so the claim does not count against them.
	confirmed time.Time
}

// ErrRaced marks an auction that ended without a lease only because every
// bid's GPUs were claimed by others of this renter's auctions at that
// moment: a transient race among its own jobs, not a lack of providers,
// so the job is offered again at once (a new call finds bids for what
// those auctions left) rather than after a queue's backoff.
var ErrRaced = errors.New("auction: every bid's GPUs went to another of this renter's auctions")

// ErrLostRace marks an auction that ended without a lease only because
// every award lost a race for its GPUs, one at least declined by its
// provider as taken by another award since its bid (terms.DeclinedTaken;
// another renter's, mostly): the market has moved, and a new call finds
// the bids that start now.
var ErrLostRace = errors.New("auction: every bid's GPUs were taken by other awards first")

// claim reserves job's GPUs of bid b's provider for an award, unless this
// renter's awards in flight to that provider, and its leases there
// confirmed after b was issued, already take as many of its GPUs over b's
// span as b said were free (Bid.Free; the provider's whole capacity,
// Directory.GPUs, when b does not say): then two of its own
// auctions would race for one GPU and one award would be declined as
// overbooked. Knowing neither, every award goes ahead.
func (r *Renter) claim(b terms.Bid, gpus float64) (*claim, bool) {
	c := &claim{start: b.Start, end: b.End, gpus: gpus}
	capacity := 0
	if r.cfg.Directory != nil {
		capacity = r.cfg.Directory.GPUs(b.Provider)
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claims == nil {
		r.claims = make(map[string][]*claim)
	}
	kept, used := r.claims[b.Provider][:0], 0.0
	for _, o := range r.claims[b.Provider] {
		if !o.end.After(now) {
			continue
		}
		kept = append(kept, o)
		if (o.confirmed.IsZero() || o.confirmed.After(b.IssuedAt)) && o.start.Before(b.End) && b.Start.Before(o.end) {
			used += o.gpus
		}
	}
	limit := float64(capacity)
	if b.Free > 0 {
		limit = float64(b.Free)
	}
	if limit > 0 && used+gpus > limit {
		r.claims[b.Provider] = kept
		return nil, false
	}
	r.claims[b.Provider] = append(kept, c)
	return c, true
}

// settleClaim keeps the claim of an award confirmed as lease (marked
// confirmed, over the lease's span: a late award is re-timed) and drops
// any other (lease nil).
func (r *Renter) settleClaim(provider string, c *claim, lease *terms.Lease) {
	if c == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if lease != nil {
		c.confirmed = r.cfg.Now()
		c.start, c.end = lease.Start, lease.End
		return
	}
	r.claims[provider] = slices.DeleteFunc(r.claims[provider], func(o *claim) bool { return o == c })
}

// releaseBids carries out ReleaseBids: it tells the provider of each of
// bids (each holds GPUs and was not awarded) that it will not be, in the
// background and best effort.
func (r *Renter) releaseBids(job *terms.Job, bids []terms.Bid) {
	for _, b := range bids {
		rel := terms.BidRelease{JobID: job.ID, Attempt: job.Attempt, Renter: job.Owner, Provider: b.Provider,
			BidNonce: b.Nonce, IssuedAt: r.cfg.Now()}
		to, err := peer.Decode(rel.Provider)
		if err != nil {
			continue
		}
		data, err := terms.EncodeBidRelease(r.cfg.Signer, rel)
		if err != nil {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ConfirmTimeout)
			defer cancel()
			if _, err := r.cfg.Transport.SendAward(ctx, to, data); err != nil {
				r.log.Debug("bid release not delivered", "job", rel.JobID, "provider", rel.Provider, "err", err)
			}
		}()
	}
}

// noConfirm ranks a provider that did not confirm an award last for
// NoConfirmPenalty.
func (r *Renter) noConfirm(provider string) {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.unconfirmed) >= maxUnconfirmed {
		// Identities are free: forget expired entries, then any.
		for p, until := range r.unconfirmed {
			if !now.Before(until) || len(r.unconfirmed) >= maxUnconfirmed {
				delete(r.unconfirmed, p)
			}
		}
	}
	r.unconfirmed[provider] = now.Add(r.cfg.NoConfirmPenalty)
}

// maxUnconfirmed bounds how many providers a renter remembers for not
// confirming.
const maxUnconfirmed = 4096

// award sends one award and checks the confirm; result is "confirmed" or
// why not.
// A gang member's award carries its gang's terms (Gang): its provider
// holds the confirmed lease until the gang's commit.
func (r *Renter) award(ctx context.Context, job *terms.Job, b terms.Bid, leaseID string, gang *terms.Gang) (terms.Lease, string) {
	now := r.cfg.Now()
	a := terms.Award{
		LeaseID: leaseID, JobID: job.ID, Attempt: job.Attempt,
		Renter: job.Owner, Provider: b.Provider, BidNonce: b.Nonce,
		Price: b.Price, Start: b.Start, End: b.End, GPUCount: job.GPUCount, GPUFraction: job.GPUFraction,
		Job: *job, IssuedAt: now, Gang: gang,
	}
	lease := terms.Lease{ID: a.LeaseID, JobID: job.ID, Attempt: job.Attempt, Renter: job.Owner, Provider: b.Provider,
		Price: b.Price, Start: b.Start, End: b.End, GPUCount: job.GPUCount, GPUFraction: job.GPUFraction, Tier: job.Tier,
		Preemptible: job.Preemptible, State: terms.RunPending, Gang: gang}
	to, err := peer.Decode(b.Provider)
	if err != nil {
		return lease, "bad provider id: " + err.Error()
	}
	data, err := terms.EncodeAward(r.cfg.Signer, a)
	if err != nil {
		return lease, "encode award: " + err.Error()
	}
	if al, ok := r.cfg.Listener.(AwardListener); ok {
		al.OnAward(lease)
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.ConfirmTimeout)
	defer cancel()
	reply, err := r.cfg.Transport.SendAward(actx, to, data)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return lease, callmachine.Timeout
		}
		return lease, callmachine.ErrorPrefix + err.Error()
	}
	c, signer, err := terms.DecodeConfirm(reply)
	switch {
	case err != nil:
		return lease, "bad confirm: " + err.Error()
	case signer != sign.ID(to):
		return lease, "confirm not signed by the provider"
	case c.LeaseID != a.LeaseID:
		return lease, "confirm for another lease"
	case !c.Accepted:
		return lease, callmachine.DeclinedPrefix + c.Reason
	}
	if !c.Start.IsZero() || !c.End.IsZero() {
		// Re-timed: the award came too late for its span. The provider has
		// booked it: a re-time that breaks the rule is released.
		rt, err := lease.Retimed(c.Start, job.Deadline, r.cfg.Now())
		if err == nil && !c.End.Equal(rt.End) {
			err = fmt.Errorf("%w: lease %s: end %s is not its start plus its length", terms.ErrBadRetime, lease.ID, c.End.Format(time.RFC3339Nano))
		}
		if err != nil {
			return lease, callmachine.ConfirmRefused + err.Error()
		}
		lease = rt
		r.mu.Lock()
		r.counters["award_retimed"]++
		r.mu.Unlock()
	}
	if len(c.Devices) == lease.GPUCount {
		lease.Devices = c.Devices
	}
	return lease, callmachine.Confirmed
}

// HandleBid takes a message from a provider's direct stream, decoded once
// by its kind (DecodeBidMessage): a decline or a capacity notice goes to
// its own handler, any other kind is refused. For a bid it verifies the
// envelope and that its signer is both Bid.Provider and the sender, that
// the bid is for a known job's current attempt whose window is open, that
// its nonce is new, that it has not expired and that the provider has not
// bid already. A refused bid returns a *Rejection and is counted by reason.
func (r *Renter) HandleBid(from peer.ID, data []byte) error {
	msg, err := terms.DecodeBidMessage(data)
	switch {
	case err != nil:
		return r.reject(decodeReason(err), err)
	case msg.Decline != nil:
		return r.handleDecline(from, *msg.Decline)
	case msg.Notice != nil:
		return r.handleNotice(from, *msg.Notice)
	}
	b := *msg.Bid
	if b.Provider != from.String() {
		return r.reject("sender_mismatch", fmt.Errorf("bid from %s signed by %s", from, b.Provider))
	}
	if err := r.cfg.Successions.Check(b.Provider, b.IssuedAt); err != nil {
		return r.reject("retired_key", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rj, ok := r.jobs[b.JobID]
	if !ok {
		return r.rejectLocked("unknown_job", fmt.Errorf("job %q", b.JobID))
	}
	return r.stepLocked(rj, callmachine.BidArrived{Bid: b})
}

// handleNotice takes a provider's capacity notice (it comes on the bid
// stream): a fresh one from its own signer goes to OnCapacity, naming only
// the jobs that provider turned away as busy (a notice is the answer to
// such a decline; from anybody else it would defeat the queue's backoff).
// A notice that names none of those is refused (unsolicited_notice).
func (r *Renter) handleNotice(from peer.ID, n terms.CapacityNotice) error {
	if n.Provider != from.String() {
		return r.reject("sender_mismatch", fmt.Errorf("capacity notice from %s signed by %s", from, n.Provider))
	}
	if age := r.cfg.Now().Sub(n.IssuedAt); age > noticeMaxDelay || age < -noticeMaxDelay {
		return r.reject("stale_notice", fmt.Errorf("capacity notice issued %s", n.IssuedAt.Format(time.RFC3339)))
	}
	r.mu.Lock()
	jobs := make([]string, 0, len(n.Jobs))
	for _, id := range n.Jobs {
		if rj, ok := r.jobs[id]; ok && rj.call.BusyDecliner(n.Provider) {
			jobs = append(jobs, id)
		}
	}
	if len(jobs) == 0 {
		err := r.rejectLocked("unsolicited_notice", fmt.Errorf("capacity notice from %s names no job it declined as busy", n.Provider))
		r.mu.Unlock()
		return err
	}
	r.mu.Unlock()
	n.Jobs = jobs
	if r.cfg.Listener != nil {
		r.cfg.Listener.OnCapacity(n)
	}
	return nil
}

// handleDecline takes a provider's signed reason for not bidding (it comes
// on the bid stream): counted by kind for the job's current auction while
// its window is open, once per provider, within the renter's decline rate.
func (r *Renter) handleDecline(from peer.ID, d terms.Decline) error {
	if d.Provider != from.String() {
		return r.reject("sender_mismatch", fmt.Errorf("decline from %s signed by %s", from, d.Provider))
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rj, ok := r.jobs[d.JobID]
	if !ok {
		return r.rejectLocked("unknown_job", fmt.Errorf("job %q", d.JobID))
	}
	if reason, detail := callmachine.DeclineRefusal(&rj.call, d); reason != "" {
		return r.rejectLocked(reason, errors.New(detail))
	}
	if r.declineAt.IsZero() {
		r.declineTok = declineBurst
	} else if dt := now.Sub(r.declineAt); dt > 0 {
		r.declineTok = min(declineBurst, r.declineTok+dt.Seconds()*declineRate)
	}
	r.declineAt = now
	if r.declineTok < 1 {
		return r.rejectLocked("decline_rate_limited", fmt.Errorf("over %v declines/s", declineRate))
	}
	r.declineTok--
	return r.stepLocked(rj, callmachine.DeclineArrived{Decline: d, Busy: d.Kind == KindBusy})
}

func (r *Renter) reject(reason string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejectLocked(reason, err)
}

func (r *Renter) rejectLocked(reason string, err error) error {
	r.counters[reason]++
	return &Rejection{Reason: reason, Err: err}
}

// Status returns a job's auction status.
func (r *Renter) Status(id string) (terms.JobStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rj, ok := r.jobs[id]
	if !ok {
		return terms.JobStatus{}, false
	}
	return rj.snapshot(), true
}

func (rj *renterJob) snapshot() terms.JobStatus {
	s := rj.status
	s.Bids = append([]terms.Ranked(nil), s.Bids...)
	s.Reasons = append([]string(nil), s.Reasons...)
	s.Attempts = append([]terms.AwardAttempt(nil), s.Attempts...)
	s.Members = slices.Clone(s.Members)
	s.Declines = maps.Clone(rj.call.Declines)
	if s.Lease != nil {
		l := *s.Lease
		s.Lease = &l
	}
	return s
}

// List returns every job's status, newest first.
func (r *Renter) List() []terms.JobStatus {
	r.mu.Lock()
	out := make([]terms.JobStatus, 0, len(r.jobs))
	for _, rj := range r.jobs {
		out = append(out, rj.snapshot())
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].PostedAt.Equal(out[j].PostedAt) {
			return out[i].PostedAt.After(out[j].PostedAt)
		}
		return out[i].Job.ID < out[j].Job.ID
	})
	return out
}

// Cancel stops a job's auction while it is still bidding or awarding (Post
// then returns ErrCancelled). A leased job is the runtime's to cancel, a
// queued one its renter's (the auction keeps no queue: it runs one call
// at a time for a job, each ending leased or not).
func (r *Renter) Cancel(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rj, ok := r.jobs[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	if rj.status.State != terms.JobBidding && rj.status.State != terms.JobAwarding {
		return fmt.Errorf("auction: job %s is %s, not in auction", id, rj.status.State)
	}
	err := r.stepLocked(rj, callmachine.Cancelled{})
	close(rj.cancel)
	return err
}

// Bids returns a job's ranked bids (available once its window closed).
func (r *Renter) Bids(id string) ([]terms.Ranked, error) {
	s, ok := r.Status(id)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	return s.Bids, nil
}

// Counters returns how many bids were refused, by reason.
func (r *Renter) Counters() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.counters))
	for k, v := range r.counters {
		out[k] = v
	}
	return out
}

// Rebook offers a leased job whose lease has not begun to the market
// again (late binding: a burst books jobs deep into a few providers'
// calendars at post time, before their real run times are known), for a
// lease that starts by before on a provider other than the current
// lease's: one auction for the job's next attempt, its start deadline
// before and that provider excluded. Its lease reaches the Listener as any
// other (OnLease); the caller takes it in place of the current one and
// releases that. Without a lease, the job's auction state is as it was
// (leased), and the error says why. A gang's member is not rebooked.
func (r *Renter) Rebook(ctx context.Context, jobID string, before time.Time) (terms.Lease, error) {
	r.mu.Lock()
	old, ok := r.jobs[jobID]
	if !ok {
		r.mu.Unlock()
		return terms.Lease{}, fmt.Errorf("%w: %s", ErrUnknownJob, jobID)
	}
	if old.status.State != terms.JobLeased || old.status.Lease == nil || old.status.Lease.Gang != nil || old.status.Job.Nodes > 1 {
		st := old.status.State
		r.mu.Unlock()
		return terms.Lease{}, fmt.Errorf("auction: rebook %s: job is %s, not leased alone", jobID, st)
	}
	job, cur := old.status.Job, *old.status.Lease
	r.mu.Unlock()
	if !before.After(r.cfg.Now()) || !before.Before(cur.Start) {
		return terms.Lease{}, fmt.Errorf("auction: rebook %s: nothing to gain (lease starts %s)", jobID, cur.Start.Format(time.RFC3339Nano))
	}
	deadline, exclude := job.Deadline, job.Exclude
	job.Attempt++
	job.Deadline = before
	job.Exclude = append(slices.Clone(job.Exclude), cur.Provider)
	_, err := r.Post(ctx, job)
	r.mu.Lock()
	defer r.mu.Unlock()
	rj := r.jobs[jobID]
	if err != nil || rj == nil || rj.status.State != terms.JobLeased || rj.status.Lease == nil {
		if rj != old && (rj == nil || (rj.status.State != terms.JobBidding && rj.status.State != terms.JobAwarding)) {
			r.jobs[jobID] = old // still leased where it was
		}
		if err == nil {
			err = fmt.Errorf("auction: rebook %s: no lease", jobID)
		}
		return terms.Lease{}, err
	}
	// The call's bounds were the rebook's, not the job's.
	rj.status.Job.Deadline, rj.status.Job.Exclude = deadline, exclude
	return *rj.status.Lease, nil
}

// RequeueOptions say why and how a leased job goes back to auction.
type RequeueOptions struct {
	// Reason is why its lease ended early (kept in the job's reasons).
	Reason string
	// Exclude names providers that may not bid for the new attempt (they
	// lost one of the job's attempts); it is added to Job.Exclude.
	Exclude []string
	// Restore is the job's good checkpoints, newest first (at most
	// MaxRestore; per member of a gang, each with its Rank): the next
	// attempt starts from the first that verifies and runs for what the
	// newest one leaves of the job's duration (Job.SavedWork).
	Restore []terms.Checkpoint
}

// Requeue posts a leased job again after its lease ended early (a bronze
// job preempted or at the end of its gap, a lease handed back by a
// draining provider, or a lost provider): with Attempt+1, the providers
// opt.Exclude names excluded, the checkpoints to restore, Duration what is
// left of the job after the newest checkpoint's work, and its start window
// opened again from now (a Deadline at least as far from now as it was
// from CreatedAt). Work no checkpoint saved is lost: without one the job
// starts over and needs its whole duration. It returns like Post.
func (r *Renter) Requeue(ctx context.Context, jobID string, opt RequeueOptions) (terms.Job, error) {
	r.mu.Lock()
	rj, ok := r.jobs[jobID]
	if !ok {
		r.mu.Unlock()
		return terms.Job{}, fmt.Errorf("%w: %s", ErrUnknownJob, jobID)
	}
	if rj.status.State != terms.JobLeased || rj.status.Lease == nil {
		st := rj.status.State
		r.mu.Unlock()
		return rj.status.Job, fmt.Errorf("auction: requeue %s: job is %s, not leased", jobID, st)
	}
	job := rj.status.Job
	rj.status.Reasons = append(rj.status.Reasons, fmt.Sprintf("requeued after attempt %d: %s", job.Attempt, opt.Reason))
	r.mu.Unlock()

	if n := terms.MaxRestore * max(job.Nodes, 1); len(opt.Restore) > n {
		opt.Restore = opt.Restore[:n]
	}
	total := job.TotalDuration()
	next := job
	next.Restore = opt.Restore
	remaining := total - next.SavedWork()
	if remaining <= 0 {
		return job, fmt.Errorf("auction: requeue %s: nothing left to run (checkpoint saved %v of %v)", jobID, next.SavedWork(), total)
	}
	job.Exclude = slices.Clone(job.Exclude)
	for _, p := range opt.Exclude {
		if p != "" && !slices.Contains(job.Exclude, p) {
			job.Exclude = append(job.Exclude, p)
		}
	}
	now := r.cfg.Now()
	if !job.Deadline.IsZero() && !job.CreatedAt.IsZero() {
		if renewed := now.Add(job.Deadline.Sub(job.CreatedAt)); renewed.After(job.Deadline) {
			job.Deadline = renewed
		}
	}
	job.Attempt++
	job.Duration = remaining
	job.Restore = append([]terms.Checkpoint(nil), opt.Restore...)
	// The new attempt is a job this renter made, from checkpoints and
	// excluded providers its leases reported: it enters the market here.
	if err := job.Validate(); err != nil {
		return job, fmt.Errorf("auction: requeue %s: %w", jobID, err)
	}
	return r.Post(ctx, job)
}
