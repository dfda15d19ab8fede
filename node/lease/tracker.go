package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/auction/gpumodel"
	"github.com/gpumesh/gpumesh/auction/terms"
	"hash/fnv"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultAbandonGrace is how long after a lease's end the renter waits for
// its provider's final report before it calls the lease abandoned.
const DefaultAbandonGrace = time.Minute

// Directory is what a renter's node knows of the providers it learned of.
type Directory interface {
	auction.Directory
	// Fingerprint is the fingerprint hash a provider's capability
	// advertises ("" when unknown): the signed fingerprint its heartbeats
	// carry must have that hash.
	Fingerprint(provider string) string
}

// JobPins keeps the inputs of a renter's live jobs from eviction.
type JobPins interface {
	// PinLive sees each job's record as it is persisted.
	PinLive(v api.JobView)
}

// CheckpointStore keeps the checkpoints of a renter's jobs in its own
// artifact store.
type CheckpointStore interface {
	// FetchCheckpoint fetches a checkpoint artifact from the provider
	// that took it into the store (refusing one over max bytes) and
	// returns its size. leaseID is the lease that took it; sealed says
	// its job is sealed, so the checkpoint must be too, sealed with that
	// lease's key (a provider handing back plaintext is refused).
	FetchCheckpoint(ctx context.Context, id string, from peer.ID, leaseID string, sealed bool, max int64) (int64, error)
	// PinCheckpoint keeps it from eviction until unpin.
	PinCheckpoint(id string) (unpin func())
}

// Evidence fetches what a lease's provider kept of it.
type Evidence interface {
	// FetchLog opens the log of lease leaseID from its provider (the
	// logs stream, not following).
	FetchLog(ctx context.Context, provider peer.ID, leaseID string) (io.ReadCloser, error)
	// FetchOutputs opens the outputs of lease leaseID on its provider:
	// their whole manifest and the bundle of their files
	// (wire.WriteBundle), from the outputs stream, or, for a sealed job
	// (sealed: the outputs artifact its final report named), from that
	// artifact, fetched and opened here.
	FetchOutputs(ctx context.Context, provider peer.ID, leaseID, sealed string) ([]terms.OutputFile, io.ReadCloser, error)
}

// TrackerConfig configures a Tracker.
type TrackerConfig struct {
	// MaxBidders is auction.RenterConfig.MaxBidders (0: the default).
	MaxBidders int
	// QuietClose is auction.RenterConfig.QuietClose (0: the default).
	QuietClose time.Duration
	Signer     *sign.Signer
	// Transport carries the post-award protocol (cancel requests).
	Transport Transport
	// Auction carries the auction's calls, bids and awards.
	Auction auction.Transport
	// Store persists one record per job.
	Store    Store
	Receipts *Receipts
	// HeartbeatInterval is the interval the heartbeat monitors expect;
	// default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// AbandonGrace defaults to DefaultAbandonGrace.
	AbandonGrace time.Duration
	// LossAfter is how long the provider of a running lease may stay
	// silent (no verified heartbeat) before the renter calls it lost and
	// requeues the job elsewhere; default DefaultLossAfter of the
	// heartbeat interval.
	LossAfter time.Duration
	// SettleWait bounds how long a requeue waits for the preempted lease's
	// receipt (so history shows its settled cost); default 10s.
	SettleWait time.Duration
	// Directory is what the node knows of the providers it learned of:
	// the auction's (auction.RenterConfig.Directory), and the fingerprint
	// their capabilities advertise. Nil knows none.
	Directory Directory
	// Holdings is the auction's check of bids' missing-bytes claims
	// (auction.RenterConfig.Holdings: discovery); nil trusts the claims.
	Holdings auction.Holdings
	// Latency is the round trips the renter's host measured to providers
	// (auction.RenterConfig.Latency); nil: none.
	Latency auction.Latency
	// Pins, when set, sees each job's record as it is persisted (every
	// change of state; a gang member's record aside): the daemon pins the
	// inputs of live jobs.
	Pins JobPins
	// QueueBackoff is how long a queued job (no acceptable bid yet) first
	// waits before it is offered again, doubling up to QueueBackoffMax;
	// a capacity notice offers it at once. Defaults 1s and 30s.
	QueueBackoff, QueueBackoffMax time.Duration
	// ReofferRate bounds the renter's re-offers of queued jobs per second,
	// all jobs together (providers drop an owner's calls beyond
	// auction.DefaultCallRate); default half of auction.DefaultCallRate.
	ReofferRate float64
	// RebookAhead: when one of the renter's leases ends, its pending
	// lease that starts latest, more than RebookAhead from now, is
	// offered again for a start RebookAhead/2 sooner elsewhere (late
	// binding: rebook.go). 0: DefaultRebookAhead; negative: never.
	RebookAhead time.Duration
	Now         Clock
	Log         *slog.Logger
	Counters    *Counters
	// Observe, when set, is told of auctions, heartbeats and job ends.
	Observe *Observer
	// CheckpointBytesPerHour is each job's quota of checkpoint bytes
	// fetched into this node's store (a token bucket holding an hour's
	// worth, at least terms.MaxCheckpointBytes; each checkpoint costs at
	// least MinCheckpointCharge): a provider flooding checkpoints cannot
	// evict the renter's own artifacts. Default
	// DefaultCheckpointBytesPerHour.
	CheckpointBytesPerHour int64
	// Checkpoints keeps the checkpoints the providers of this renter's
	// jobs take. Nil: checkpoints are refused.
	Checkpoints CheckpointStore
	// Evidence fetches what a lease's provider kept of it: the log a
	// succeeded run is paid on (evidence.go), and a no-persist lease's
	// outputs. KeptDir holds the log and outputs of this renter's
	// no-persist leases, taken from their providers before they settle
	// (nopersist.go). Evidence nil: no succeeded run is countersigned;
	// either unset: no no-persist lease is countersigned.
	Evidence Evidence
	KeptDir  string
}

// Tracker is a renter's one record of each of its jobs, and the driver of
// each job's machine (jobmachine): where a job is (in auction, queued,
// leased, requeued, over) is the machine's record, changed only by
// jobmachine.Rules.Step (its settlement disputes, released leases and
// leases archived before they settled too); the tracker feeds it the
// auction's results, its timers and the providers' reports, and carries
// out what a step asks (auctions, stops, releases, requeues, saves) in one
// loop (driver.go: stepLocked, advance, do). Beside it the tracker records
// its own facts (the auction's call state, telemetry, outputs, evidence,
// checkpoints, history, what it saw of each archived lease), and the API's
// view is built from both.
// It verifies heartbeats, takes lease events, checks and countersigns
// receipts, watches for lost and abandoned leases and persists every
// record.
type Tracker struct {
	cfg    TrackerConfig
	log    *slog.Logger
	ctx    context.Context
	renter *auction.Renter

	mu sync.Mutex
	// jobs holds each job's state (its machine's record and the
	// tracker's facts): the one owner of where a job is.
	jobs    map[string]*jobState
	rules   jobmachine.Rules
	mons    map[string]*attest.HeartbeatMonitor
	byLease map[string]string        // lease id → job id
	changed broadcast.Signal         // at each change of a job's record (save)
	wake    map[string]chan struct{} // queued job id → offer it now
	// posted holds, by job id, what a post's auction ended in when it
	// took no lease (nil until then): the post's answer. A lost race is
	// offered again at once, and read after the retry had begun, the
	// answer said "bidding" for a job the post had seen queued.
	posted  map[string]*api.JobView
	reoffer time.Time // when the next re-offer may go out
	wg      sync.WaitGroup
	// saveMu orders the saves of one job (striped by job id: saves of
	// different jobs, each a store write, go in parallel).
	saveMu [32]sync.Mutex

	// archived holds what the tracker saw of the leases its jobs' records
	// keep as archived (jobmachine.Record.Archived), by lease id: their
	// providers may still report and settle them (see recover.go).
	archived map[string]*archived
	// released indexes the leases the jobs' records remember as
	// released: lease id → record key (see released.go).
	released map[string]string
	ckPins   map[string]func()      // checkpoint artifact → its pin
	ckQuota  map[string]*byteBucket // job → its checkpoint bytes quota
	// checking holds the evidence checks started, by lease id (closed
	// when done).
	checking map[string]chan struct{}
	// keeping holds the takings of no-persist leases' files under way or
	// done, by lease id (closed when done; a failed one is dropped, its
	// error in keepErr).
	keeping map[string]chan struct{}
	keepErr map[string]error
	// gangBusy holds the gang jobs being stopped and requeued whole (see
	// gang.go).
	gangBusy map[string]bool
	// guarded holds the leases whose provider's silence is watched
	// (guard).
	guarded map[string]bool
	// rebooking holds the jobs whose rebook auction runs (rebook.go).
	rebooking map[string]bool
}

// NewTracker returns a Tracker with its auction.Renter and reloads the jobs
// in its store. ctx bounds its auctions and background work.
func NewTracker(ctx context.Context, cfg TrackerConfig) (*Tracker, error) {
	if cfg.Signer == nil || cfg.Transport == nil || cfg.Auction == nil || cfg.Store == nil || cfg.Receipts == nil {
		return nil, errors.New("lease: tracker needs a signer, transports, a store and receipts")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Counters == nil {
		cfg.Counters = NewCounters()
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.AbandonGrace <= 0 {
		cfg.AbandonGrace = DefaultAbandonGrace
	}
	if cfg.LossAfter <= 0 {
		cfg.LossAfter = DefaultLossAfter(cfg.HeartbeatInterval)
	}
	if cfg.SettleWait <= 0 {
		cfg.SettleWait = 10 * time.Second
	}
	if cfg.QueueBackoff <= 0 {
		cfg.QueueBackoff = time.Second
	}
	if cfg.RebookAhead == 0 {
		cfg.RebookAhead = DefaultRebookAhead
	}
	if cfg.ReofferRate <= 0 {
		cfg.ReofferRate = auction.DefaultCallRate / 2
	}
	if cfg.QueueBackoffMax < cfg.QueueBackoff {
		cfg.QueueBackoffMax = max(30*time.Second, cfg.QueueBackoff)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{cfg: cfg, log: log, ctx: ctx, jobs: map[string]*jobState{}, posted: map[string]*api.JobView{},
		rules: jobmachine.Rules{QueueBackoff: cfg.QueueBackoff, QueueBackoffMax: cfg.QueueBackoffMax, MaxRefusals: maxReceiptRefusals,
			SettleWindow: DefaultSettleWindow, MaxReleased: maxReleased},
		mons: map[string]*attest.HeartbeatMonitor{}, byLease: map[string]string{}, wake: map[string]chan struct{}{},
		archived: map[string]*archived{}, released: map[string]string{}, checking: map[string]chan struct{}{}, keeping: map[string]chan struct{}{}, keepErr: map[string]error{},
		gangBusy: map[string]bool{}, guarded: map[string]bool{}, rebooking: map[string]bool{}}
	var err error
	rc := auction.RenterConfig{
		Signer: cfg.Signer, Transport: cfg.Auction, Reputation: reputation{cfg.Receipts},
		Successions: cfg.Receipts.cfg.Book.Successions(),
		Now:         cfg.Now, Log: log,
		Listener: auctionListener{t}, Release: auctionListener{t}, Directory: cfg.Directory, Holdings: cfg.Holdings,
		Latency: cfg.Latency, MaxBidders: cfg.MaxBidders, QuietClose: cfg.QuietClose,
	}
	t.renter, err = auction.NewRenter(rc)
	if err != nil {
		return nil, err
	}
	rds, err := t.load()
	if err != nil {
		return nil, err
	}
	// The jobs' machines take up where they were: queued jobs wait for
	// their next offer, running leases are watched again.
	for _, rd := range rds {
		_ = t.advance(rd)
	}
	return t, nil
}

// reputation is the renter's book as its auction reads it: a bid's GPU
// model is verified when its family is.
// reputation is the book as the auction ranks providers by it: the
// receipts gossip brought while they waited are taken in first (its
// first ranking, see ReceiptsConfig.Deferred).
type reputation struct{ r *Receipts }

func (r reputation) Reliability(provider string) float64 {
	r.r.Activate()
	return r.r.cfg.Book.Score(provider)
}
func (r reputation) Verified(provider, model string) bool {
	return r.r.cfg.Book.Verified(provider, gpumodel.FamilyOf(model))
}

// auctionListener is the tracker as its auction tells it of outcomes and
// asks it to give back leases it does not use.
type auctionListener struct{ t *Tracker }

func (l auctionListener) OnLease(le terms.Lease, job terms.Job) { l.t.onLease(le, job) }
func (l auctionListener) OnUnplaceable(job terms.Job, reason string) {
	l.t.onUnplaceable(job, reason)
}
func (l auctionListener) OnCapacity(n terms.CapacityNotice) { l.t.onCapacity(n) }
func (l auctionListener) OnAward(le terms.Lease)            { l.t.onAward(le) }
func (l auctionListener) Release(le terms.Lease)            { l.t.unused(le) }

// Auction is the renter's auction state machine (bid handling, counters).
func (t *Tracker) Auction() *auction.Renter { return t.renter }

// Wait waits for the tracker's background work (cancel ctx first). Its
// handlers may still be called meanwhile (the daemon closes its network
// after its market): they start no more work (spawnLocked).
func (t *Tracker) Wait() {
	t.mu.Lock()
	t.mu.Unlock() //nolint:staticcheck // orders spawnLocked's Add before Wait
	t.wg.Wait()
	t.renter.Wait()
}

// spawn runs f on a goroutine of the tracker's background work (Wait waits
// for it), unless the tracker's context is done: then it runs nothing and
// returns false. The check and the count are made under t.mu, so no work
// starts once Wait began (a WaitGroup may not grow from zero while it is
// waited for).
func (t *Tracker) spawn(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.spawnLocked(f)
}

// spawnLocked is spawn with t.mu held.
func (t *Tracker) spawnLocked(f func()) bool {
	if t.ctx.Err() != nil {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

func (t *Tracker) now() time.Time { return t.cfg.Now() }

func (t *Tracker) monitor(l terms.Lease) *attest.HeartbeatMonitor {
	return t.monitorFrom(l, l.Start)
}

// monitorFrom watches l's heartbeats from since: a renter that restarted
// mid-lease watches from its restart, so its own outage is never counted
// as the provider's silence.
func (t *Tracker) monitorFrom(l terms.Lease, since time.Time) *attest.HeartbeatMonitor {
	prov, _ := peer.Decode(l.Provider)
	if since.Before(l.Start) {
		since = l.Start
	}
	return attest.NewHeartbeatMonitor(l.ID, sign.ID(prov), since, t.cfg.HeartbeatInterval)
}

// Post runs an auction for job (its Owner is this node; OwnerAddrs are the
// caller's to fill) and returns the job's view once the auction ended.
func (t *Tracker) Post(job terms.Job) (api.JobView, error) {
	return t.PostChecked(job, nil)
}

// PostChecked is Post with a last check of the complete, valid job before
// it is recorded or offered: an error from check (when not nil) is
// returned as it is, and nothing is posted.
func (t *Tracker) PostChecked(job terms.Job, check func(*terms.Job) error) (api.JobView, error) {
	job.Owner = t.cfg.Signer.ID().String()
	if job.CreatedAt.IsZero() {
		job.CreatedAt = t.now()
	}
	if job.ID == "" {
		job.ID = terms.NewID("job")
	}
	if job.Deadline.IsZero() {
		job.Deadline = job.CreatedAt.Add(defaultStartWindow(job.Tier))
	}
	// Providers that will not bid say why: job status and bids show it.
	job.WantDeclines = true
	// Where a job enters the daemon (the control API's post, a service's
	// replica): validated here once, and trusted from here on (the renter's
	// auction engine does not validate it again).
	if err := job.Validate(); err != nil {
		return api.JobView{}, invalidRequest(err)
	}
	if check != nil {
		if err := check(&job); err != nil {
			return api.JobView{}, err
		}
	}
	t.mu.Lock()
	if _, dup := t.jobs[job.ID]; dup {
		t.mu.Unlock()
		return api.JobView{}, badRequest("job id %s already used", job.ID)
	}
	s := &jobState{}
	t.jobs[job.ID] = s
	t.posted[job.ID] = nil
	rd := t.stepLocked(job.ID, s, jobmachine.Posted{Job: job})
	t.mu.Unlock()
	_ = t.advance(rd) // its auction runs here; a job no bid took now is queued
	t.mu.Lock()
	ended := t.posted[job.ID]
	delete(t.posted, job.ID)
	t.mu.Unlock()
	if ended != nil {
		return *ended, nil
	}
	return t.View(job.ID)
}

// offer runs one auction for job (the machine's StartAuction, which
// follows its Persist: a renter that restarts mid-auction queues the job
// again) and feeds an end without a lease back to the machine (a lease
// comes back through onLease).
func (t *Tracker) offer(job terms.Job) {
	ctx, cancel := context.WithTimeout(t.ctx, 2*job.BidWindow+2*time.Minute)
	defer cancel()
	if _, err := t.renter.Post(ctx, job); err != nil {
		t.log.Debug("auction ended without a lease", "job", job.ID, "err", err)
		t.noLease(job.ID, err)
	}
}

// noLease feeds an auction that ended without a lease (err) to the job's
// machine: a job no acceptable bid took now is queued (its reasons say so)
// and offered again, unless the machine gives it up.
func (t *Tracker) noLease(id string, err error) {
	ev := jobmachine.NoLease{Reason: err.Error(), Raced: errors.Is(err, auction.ErrRaced), Lost: errors.Is(err, auction.ErrLostRace)}
	st, known := t.renter.Status(id)
	switch {
	case !known:
		ev.As = jobmachine.Failed // refused before its auction began (e.g. an invalid job)
	case errors.Is(err, auction.ErrUnplaceable) && t.ctx.Err() == nil:
		ev.Reason = "no lease"
		if len(st.Reasons) > 0 {
			ev.Reason = st.Reasons[len(st.Reasons)-1]
		}
		ev.Retry, ev.Offers = true, st.Offers
	default:
		ev.As = finalPhase(st.State)
		ev.Reason = ""
	}
	t.fold(id)
	t.mu.Lock()
	rd := ready{key: id}
	if s := t.jobs[id]; s != nil {
		rd = t.stepLocked(id, s, ev)
		if v, waiting := t.posted[id]; waiting && v == nil {
			if ended, err := t.viewLocked(id, true); err == nil {
				t.posted[id] = &ended
			}
		}
	}
	t.mu.Unlock()
	_ = t.advanceWithFacts(rd) // the auction's facts were folded in
}

// finalPhase is the phase of a job whose auction ended in st without a
// lease, not to be offered again.
func finalPhase(st terms.JobState) jobmachine.Phase {
	switch st {
	case terms.JobCancelled:
		return jobmachine.Cancelled
	case terms.JobFailed:
		return jobmachine.Failed
	case terms.JobLeased, terms.JobFinished:
		// The auction did not run again (nothing left to run): the
		// lease before was the job's last.
		return jobmachine.Finished
	}
	return jobmachine.Unplaceable
}

func (t *Tracker) beforeDeadline(job terms.Job) bool {
	return job.Deadline.IsZero() || t.now().Before(job.Deadline)
}

// queueLocked begins job id's wait in the queue (the machine's ArmTimer,
// through arm): a goroutine that sleeps until the machine's timer (the
// next offer, QueueBackoff doubling to QueueBackoffMax, at once after a
// lost race or a capacity notice, or the start deadline) and feeds it
// TimerDue, while the job is queued; arm wakes it to look at the timer
// again. Offers take their turn at ReofferRate. t.mu is held.
func (t *Tracker) queueLocked(id string) {
	wake := make(chan struct{}, 1)
	started := t.spawnLocked(func() {
		for {
			t.mu.Lock()
			s := t.jobs[id]
			if s == nil || s.Phase != jobmachine.Queued || t.ctx.Err() != nil {
				// Leased meanwhile, cancelled or given up (or stopping):
				// an ArmTimer from now on begins a wait of its own.
				if t.wake[id] == wake {
					delete(t.wake, id)
				}
				t.mu.Unlock()
				return
			}
			at := s.Due
			if d := s.Job.Deadline; !d.IsZero() && d.Before(at) {
				at = d
			}
			t.mu.Unlock()
			timer := time.NewTimer(max(at.Sub(t.now()), 0))
			select {
			case <-t.ctx.Done():
				timer.Stop()
				continue
			case <-wake:
				timer.Stop()
				continue // woken: look at the timer again
			case <-timer.C:
			}
			if !t.reofferTurn() {
				continue
			}
			_ = t.apply(id, jobmachine.TimerDue{}) // an offer runs here, or the job is given up
		}
	})
	if started {
		t.wake[id] = wake
		t.cfg.Counters.Add("renter.job_queued")
	}
}

// reofferTurn waits for the re-offer rate (ReofferRate) to allow one more
// call; false when the tracker stops first.
func (t *Tracker) reofferTurn() bool {
	t.mu.Lock()
	now := time.Now()
	at := t.reoffer
	if at.Before(now) {
		at = now
	}
	t.reoffer = at.Add(time.Duration(float64(time.Second) / t.cfg.ReofferRate))
	t.mu.Unlock()
	if wait := time.Until(at); wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-t.ctx.Done():
			return false
		case <-timer.C:
		}
	}
	return true
}

// onCapacity offers again at once the queued jobs a provider's capacity
// notice names (it turned them away for busy GPUs and has room now), as
// many as fit in the GPUs it has free, unless a job excludes it.
func (t *Tracker) onCapacity(n terms.CapacityNotice) {
	free, woken := n.Free(), 0
	var rds []ready
	t.mu.Lock()
	for _, id := range n.Jobs {
		w, v := t.wake[id], t.jobs[id]
		if w == nil || v == nil || v.Phase != jobmachine.Queued || v.Job.BilledGPUs() > free || v.Job.Excludes(n.Provider) {
			continue
		}
		rds = append(rds, t.stepLocked(id, v, jobmachine.Wake{}))
		free -= v.Job.BilledGPUs()
		woken++
	}
	t.mu.Unlock()
	for _, rd := range rds {
		_ = t.advance(rd)
	}
	t.cfg.Counters.Add("renter.capacity_notice")
	t.cfg.Counters.AddN("renter.queued_woken", woken)
}

// defaultStartWindow is how soon a job must start when its poster gave no
// deadline: gold and silver are on-demand tiers (a provider that can only
// start hours later does not bid), bronze waits for spare capacity.
func defaultStartWindow(tier terms.Tier) time.Duration {
	switch tier {
	case terms.Gold:
		return 10 * time.Minute
	case terms.Silver:
		return 30 * time.Minute
	}
	return 24 * time.Hour
}

// fold copies the auction's call state of a job into its record
// (jobState.fold).
func (t *Tracker) fold(id string) {
	st, ok := t.renter.Status(id)
	if !ok {
		return
	}
	t.mu.Lock()
	rd := ready{key: id}
	if v := t.jobs[id]; v != nil {
		rd = t.foldLocked(id, v, st)
	}
	t.mu.Unlock()
	_ = t.advance(rd)
}

// onAward takes an award the job's auction is sending: the lease is the
// job's from now on (indexLocked), so that its provider, which runs it as
// soon as it confirms, is never told it is unknown (a heartbeat answered
// Unknown three times cancels it) while the confirmation makes its way
// back.
func (t *Tracker) onAward(l terms.Lease) {
	key := leaseKey(l)
	t.mu.Lock()
	rd := ready{key: key}
	if v := t.jobs[key]; v != nil {
		rd = t.stepLocked(key, v, jobmachine.Awarded{LeaseID: l.ID})
	}
	t.changed.Notify()
	t.mu.Unlock()
	_ = t.advance(rd)
}

// onLease records a confirmed lease for one of our jobs (a gang's member
// of rank above 0 in its own record: gang.go).
func (t *Tracker) onLease(l terms.Lease, job terms.Job) {
	key := leaseKey(l)
	t.mu.Lock()
	v := t.jobs[key]
	if v == nil {
		v = &jobState{}
		t.jobs[key] = v
	}
	had := v.Lease != nil && v.Lease.ID == l.ID
	var ev jobmachine.Event = jobmachine.Confirmed{Lease: l, Job: job}
	rebooked := t.rebooking[key] && v.Phase == jobmachine.Leased
	if rebooked {
		ev = jobmachine.Rebooked{Lease: l, Job: job} // late binding (rebook.go)
	}
	rd := t.stepLocked(key, v, ev)
	if had || v.Lease == nil || v.Lease.ID != l.ID {
		// Not taken (the job ended, or holds another lease: the machine
		// releases it), or taken already.
		phase := v.Phase
		t.mu.Unlock()
		if !had {
			t.log.Info("lease confirmed that its job does not take", "job", job.ID, "lease", l.ID, "phase", phase)
		}
		_ = t.advance(rd)
		return
	}
	// The current-lease facts describe this lease from now on.
	v.Winner = l.Provider
	v.Heartbeats, v.LastTelemetry, v.Outputs = nil, nil, nil
	v.OutputCount, v.OutputsHash = 0, ""
	v.LogDigest, v.LogBytes, v.Evidence, v.Kept, v.inlineLog = "", 0, "", "", nil
	v.ObservedStart, v.ObservedEnd = time.Time{}, time.Time{}
	v.ProviderClock = attest.ClockOffset{}
	v.Restored = nil
	if rebooked {
		// Counted as the job takes the lease, before anyone can read the
		// job on it.
		t.cfg.Counters.Add("renter.rebooked")
	}
	t.changed.Notify()
	t.mu.Unlock()
	if key == job.ID && !rebooked {
		t.fold(job.ID)
		t.observeAuction(job.ID, OutcomeLeased)
	}
	t.log.Info("job leased", "job", job.ID, "lease", l.ID, "provider", l.Provider, "price", l.Price, "attempt", job.Attempt, "record", key)
	_ = t.advance(rd)
}

// onUnplaceable only logs: whoever posted the job folds the outcome once
// it decided whether the job is queued.
func (t *Tracker) onUnplaceable(job terms.Job, reason string) {
	t.mu.Lock()
	rebook := t.rebooking[job.ID]
	t.mu.Unlock()
	if rebook {
		return // its lease stands (rebook.go)
	}
	t.log.Info("auction without a lease", "job", job.ID, "attempt", job.Attempt, "reason", reason)
}

// watch marks a lease abandoned, and slashes its provider, when the
// provider never reports its end: the renter's evidence is the signed award
// and confirm it holds, plus the silence after the lease's end. A renter
// that was down (since is its restart) gives the provider the whole grace
// from its return: its own outage is not the provider's silence, and the
// provider keeps retrying its final report.
func (t *Tracker) watch(jobID string, l terms.Lease, since time.Time) {
	t.spawn(func() {
		wait := maxTime(l.End, since).Add(t.cfg.AbandonGrace).Sub(t.now())
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(wait):
		}
		// Counted once the check is done, whatever it found: what a
		// waiter for the check (a test) waits on.
		defer t.cfg.Counters.Add("renter.abandon_checked")
		// The current lease: it is lost, and the job requeued elsewhere.
		// A lease lost earlier (its provider went silent) whose provider
		// never reported since: only the slash, the job has moved on.
		switch {
		case t.lose(jobID, l, "provider abandoned the lease: no final report by the lease end", true):
		case t.lostUnreported(l.ID):
			t.slashAbandoned(l)
		default:
			return
		}
		t.log.Warn("lease abandoned by its provider", "job", jobID, "lease", l.ID, "provider", l.Provider)
	})
}

// waitChange waits until done holds, checking it again at each change of
// a job's record (every path that changes one saves it, and a save
// notifies), until timeout or the tracker's end; it reports whether done
// held.
func (t *Tracker) waitChange(timeout time.Duration, done func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := t.changed.Wait()
		if done() {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-t.ctx.Done():
			return false
		}
	}
}

// WaitView is job id's view as soon as it is not the one the waiter has,
// or after d, or at ctx's end: a long poll, so that a waiter hears of a
// change at once without polling, one that came before it asked
// included. has reports whether the view now is the waiter's (nil: it
// is); it is asked once, and each change after is told from that view
// (every change wakes every waiter: a comparison is cheaper than has).
func (t *Tracker) WaitView(ctx context.Context, id string, d time.Duration, has func(api.JobView) bool) (api.JobView, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	next := t.changed.Wait()
	first, err := t.View(id)
	if err != nil {
		return first, err
	}
	if has != nil && !has(first) {
		return first, nil
	}
	for {
		select {
		case <-next:
		case <-deadline.C:
			return t.View(id)
		case <-ctx.Done():
			return api.JobView{}, ctx.Err()
		}
		next = t.changed.Wait()
		if v, err := t.View(id); err != nil || !reflect.DeepEqual(v, first) {
			return v, err
		}
	}
}

// Changed returns a channel closed at the next change of a job's record.
// Take it before reading a view, then wait on it: no change is missed.
func (t *Tracker) Changed() <-chan struct{} { return t.changed.Wait() }

// save persists the record of a job. The saves of one job are serialised
// (those of different jobs go in parallel), each reading the record as it
// writes it, so a slow save never overwrites a newer one. Its waiters
// (waitChange) are woken first: the record has changed already.
func (t *Tracker) save(id string) {
	if over := t.saveOne(id); over && !isMemberKey(id) {
		// Its gang's members end with it (they are saved on their own
		// stripes, after this one's).
		t.endMembers(id)
	}
}

// saveOne is save of one record; it reports whether the record is over
// for good (not Live).
func (t *Tracker) saveOne(id string) bool {
	t.changed.Notify()
	mu := &t.saveMu[stripe(id, len(t.saveMu))]
	mu.Lock()
	defer mu.Unlock()
	t.mu.Lock()
	s := t.jobs[id]
	if s == nil {
		t.mu.Unlock()
		return false
	}
	v := s.view()
	rec := jobRecord{jobState: s.snapshot(), State: v.State, Unsettled: t.unsettledLocked(id)}
	t.mu.Unlock()
	if err := t.cfg.Store.Put(id, rec); err != nil {
		t.log.Error("persist job", "job", id, "err", err)
	}
	if t.cfg.Pins != nil && !isMemberKey(id) {
		// A gang member's record is not its job's: the job's own says
		// whether the job is live.
		t.cfg.Pins.PinLive(v)
	}
	if !v.State.Live() {
		// Over for good: every path there saves the record.
		t.releaseCheckpoints(id)
		return true
	}
	return false
}

// stripe maps an id to one of n lock stripes.
func stripe(id string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// load restores the jobs after a restart: each record's machine takes it
// up (jobmachine.Restarted), and what the steps ask for (a queued job's
// next offer, a running lease's watch) is returned, to be carried out once
// every record is in: the goroutines it starts read the maps this fills.
func (t *Tracker) load() ([]ready, error) {
	var rds []ready
	err := t.cfg.Store.List(func(id string, raw []byte) error {
		var rec jobRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.log.Warn("unreadable job record", "job", id, "err", err)
			return nil
		}
		v := rec.jobState
		old := t.reloadUnsettled(id, rec.Unsettled)
		leases := len(v.History)
		if v.Lease != nil {
			leases++
		}
		t.jobs[id] = &v
		rds = append(rds, t.stepLocked(id, &v, jobmachine.Restarted{State: rec.State, Leases: leases,
			Unverified: !strings.HasPrefix(v.Evidence, evidenceVerified), Archived: old}))
		t.repinCheckpoints(&v)
		if v.Lease != nil && (!v.Run.Terminal() || v.Receipt == nil) {
			// Running, or ended but not settled: take its events and
			// receipt again.
			t.mons[v.Lease.ID] = t.monitorFrom(*v.Lease, t.now())
			t.byLease[v.Lease.ID] = id
		}
		return nil
	})
	return rds, err
}

// View returns a job's record; a gang job's shows its members (Gang),
// and its cost theirs too.
func (t *Tracker) View(id string) (api.JobView, error) { return t.view(id, true) }

// view is a record as View shows it (gang: with its members) or as it is
// kept.
func (t *Tracker) view(id string, gang bool) (api.JobView, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.viewLocked(id, gang)
}

// viewLocked is view with t.mu held.
func (t *Tracker) viewLocked(id string, gang bool) (api.JobView, error) {
	v, ok := t.jobs[id]
	if !ok {
		return api.JobView{}, notFound("no job %s on this node", id)
	}
	out := v.view()
	if gang && out.Job.Nodes > 1 && !isMemberKey(id) {
		var cost float64
		out.Gang, cost = t.gangViewLocked(id, out.Job.Nodes)
		out.CostUSD += cost
	}
	if out.Lease != nil {
		if mon := t.mons[out.Lease.ID]; mon != nil && out.Receipt == nil && !out.Run.Terminal() {
			end := out.ProviderClock.OnProvider(t.now())
			if !out.Ended.IsZero() {
				end = out.Ended
			}
			sum := mon.Summary(end)
			out.Heartbeats = &sum
		}
	}
	return out, nil
}

// List returns every job, oldest first.
func (t *Tracker) List() []api.JobView {
	t.mu.Lock()
	ids := make([]string, 0, len(t.jobs))
	for id := range t.jobs {
		if !isMemberKey(id) { // shown in their gang's view
			ids = append(ids, id)
		}
	}
	t.mu.Unlock()
	out := make([]api.JobView, 0, len(ids))
	for _, id := range ids {
		if v, err := t.View(id); err == nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PostedAt.Before(out[j].PostedAt) })
	return out
}

// Bids returns a job's ranked bids and why the winner won.
func (t *Tracker) Bids(id string) (api.BidsView, error) {
	ranked, err := t.renter.Bids(id)
	if err != nil {
		if errors.Is(err, auction.ErrUnknownJob) {
			return api.BidsView{}, notFound("no job %s on this node", id)
		}
		return api.BidsView{}, badRequest("%v", err)
	}
	if ranked == nil {
		ranked = []terms.Ranked{}
	}
	st, _ := t.renter.Status(id)
	return api.BidsView{JobID: id, Bids: ranked, Explain: auction.Explain(ranked, st.Winner, st.Attempts), Declines: st.Declines}, nil
}

// Cancel cancels a job in auction, or asks its provider to stop its
// running lease.
func (t *Tracker) Cancel(id string) (api.JobView, error) {
	t.mu.Lock()
	s := t.jobs[id]
	if s == nil {
		t.mu.Unlock()
		return api.JobView{}, notFound("no job %s on this node", id)
	}
	rd := t.stepLocked(id, s, jobmachine.Cancel{})
	state, run := s.Phase.State(), s.Run
	t.mu.Unlock()
	if rd.empty() {
		v, _ := t.View(id)
		return v, badRequest("job %s is %s (run %s): nothing to cancel", id, state, orNone(string(run)))
	}
	if err := t.advance(rd); err != nil {
		v, _ := t.View(id)
		return v, err
	}
	return t.View(id)
}

// release carries out the machine's Release: it asks the provider of lease
// l, which job key's record remembers as released, to cancel it (a lease
// confirmed that the job does not use, or one given up as lost).
func (t *Tracker) release(key string, l terms.Lease) {
	t.cfg.Counters.Add("renter.lease_released")
	b, err := sealed(t.cfg.Signer, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: l.ID, JobID: l.JobID})
	if err != nil {
		t.log.Warn("release lease", "lease", l.ID, "err", err)
		return
	}
	prov, err := peer.Decode(l.Provider)
	if err != nil {
		return
	}
	t.spawn(func() {
		ctx, cancel := context.WithTimeout(t.ctx, 15*time.Second)
		defer cancel()
		if _, err := t.cfg.Transport.Request(ctx, prov, wire.ProtoCancel, b); err != nil {
			t.cfg.Counters.Add("renter.release_failed")
			t.log.Info("release lease", "lease", l.ID, "provider", l.Provider, "err", err)
		}
		t.save(key) // with the release remembered
	})
}

// unused takes a lease the auction confirmed and does not use (a hedged
// award that confirmed after another won): the job's machine releases it.
func (t *Tracker) unused(l terms.Lease) {
	key := leaseKey(l)
	t.mu.Lock()
	if t.jobs[key] == nil {
		key = l.JobID // a gang member with no record of its own yet: its gang's
	}
	known := t.jobs[key] != nil
	t.mu.Unlock()
	if !known {
		t.release(key, l) // no record to remember it: released all the same
		return
	}
	_ = t.apply(key, jobmachine.Unused{Lease: l})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// HandleHeartbeat verifies a provider's telemetry for one of our leases
// (wire.ProtoHeartbeat).
func (t *Tracker) HandleHeartbeat(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	count := t.cfg.Counters.Add
	env, err := sign.UnmarshalEnvelope(data)
	if err != nil {
		count("renter.heartbeat_malformed")
		return nil, err
	}
	hb, err := attest.OpenHeartbeat(env)
	if err != nil {
		count("renter.heartbeat_bad_signature")
		return nil, err
	}
	if err := t.cfg.Receipts.cfg.Book.Successions().Check(hb.Provider, hb.Time); err != nil {
		count("renter.heartbeat_retired_key")
		return nil, err
	}
	if err := terms.ValidID(hb.LeaseID); err != nil {
		count("renter.heartbeat_malformed")
		return nil, fmt.Errorf("heartbeat: lease id: %w", err)
	}
	if hb.Provider != from.String() {
		count("renter.heartbeat_relayed")
		return nil, errors.New("heartbeat not sent by its provider")
	}
	mon, jobID, awarded := t.leaseMonitor(hb.LeaseID)
	if mon == nil && awarded {
		// Awarded, its confirmation not taken yet: the lease is ours.
		key, _, _ := strings.Cut(jobID, gangSep)
		t.awaitLease(hb.LeaseID, key)
		if mon, jobID, awarded = t.leaseMonitor(hb.LeaseID); mon == nil && awarded {
			count("renter.heartbeat_before_lease")
			return nil, fmt.Errorf("lease %s is being awarded: its confirmation is not taken yet", hb.LeaseID)
		}
	}
	if mon == nil {
		// Not ours: an award this renter gave up on (its confirm came too
		// late) that the provider booked anyway. Saying so lets the
		// provider free the GPUs.
		count("renter.heartbeat_unknown_lease")
		return json.Marshal(wire.HeartbeatReply{Unknown: true})
	}
	if err := t.refuseArchivedHeartbeat(hb.LeaseID); err != nil {
		return nil, err
	}
	if err := t.holdToFingerprint(mon, hb); err != nil {
		count("renter.heartbeat_rejected")
		return nil, err
	}
	if err := mon.Accept(env, t.now()); err != nil {
		count("renter.heartbeat_rejected")
		if errors.Is(err, attest.ErrContradiction) {
			t.fraud(hb, env, mon.Fingerprint(), err)
		}
		return nil, err
	}
	t.mu.Lock()
	if v := t.jobs[jobID]; v != nil && v.Lease != nil && v.Lease.ID == hb.LeaseID {
		v.LastTelemetry = &hb
		v.ProviderClock.Note(hb.Time, t.now())
		if v.ObservedStart.IsZero() && !hb.Preparing {
			v.ObservedStart = t.now()
		}
	}
	t.mu.Unlock()
	// The job's view changed (its heartbeats and telemetry): whoever waits
	// on a change of it (a long poll, a test) looks again.
	t.changed.Notify()
	t.cfg.Observe.heartbeatReceived(hb, t.now())
	return nil, nil
}

// leaseMonitor is the heartbeat monitor of lease id, and the record key of
// its job; awarded reports that the job's auction awarded the lease and
// has not heard its confirmation (no monitor yet).
func (t *Tracker) leaseMonitor(id string) (mon *attest.HeartbeatMonitor, key string, awarded bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mon, key = t.mons[id], t.byLease[id]
	if v := t.jobs[key]; mon == nil && v != nil && v.Knows(id) {
		awarded = true
	}
	return mon, key, awarded
}

// holdToFingerprint gives a lease's monitor the provider's signed
// fingerprint the first time a heartbeat carries one whose hash is the one
// the provider's capability advertises.
func (t *Tracker) holdToFingerprint(mon *attest.HeartbeatMonitor, hb attest.Heartbeat) error {
	if hb.Fingerprint == nil || mon.Fingerprint() != nil {
		return nil
	}
	fp, err := attest.OpenFingerprint(hb.Fingerprint)
	if err != nil {
		t.cfg.Counters.Add("renter.fingerprint_invalid")
		return err
	}
	if t.cfg.Directory != nil {
		if want := t.cfg.Directory.Fingerprint(hb.Provider); want != "" && fp.Hash() != want {
			t.cfg.Counters.Add("renter.fingerprint_mismatch")
			return fmt.Errorf("provider %s sent a fingerprint with hash %s, its capability advertises %s", hb.Provider, fp.Hash(), want)
		}
	}
	return mon.SetFingerprint(hb.Fingerprint)
}

// fraud counts a heartbeat contradicting the provider's own signed
// fingerprint and slashes the provider with both as evidence.
func (t *Tracker) fraud(hb attest.Heartbeat, env, fp *sign.Envelope, why error) {
	t.log.Warn("heartbeat contradicts the provider's fingerprint", "lease", hb.LeaseID, "provider", hb.Provider, "err", why)
	ev := attest.Evidence{Kind: attest.SlashHeartbeatContradictsFingerprint, LeaseID: hb.LeaseID, Detail: why.Error(),
		Reporter: t.cfg.Signer.ID().String(), Time: t.now(), Heartbeat: env, Fingerprint: fp}
	if err := t.cfg.Receipts.cfg.Book.Slash(hb.Provider, ev); err != nil {
		t.log.Warn("slash refused", "provider", hb.Provider, "err", err)
	}
	t.cfg.Counters.Add("renter.heartbeat_fraud")
}

// awaitLeaseFor bounds how long a provider's report on a lease this renter
// awarded but has not recorded yet waits for the record (awaitLease).
const awaitLeaseFor = 2 * time.Second

// awaitLease waits, up to awaitLeaseFor, until the lease leaseID of job
// jobID is recorded (onLease), if this renter's auction of the job sent
// that award and is awarding or has just leased it. A provider runs a job
// as soon as it confirms the award, so a short job can end, and be
// reported, before the confirmation has made its way back into the
// tracker: refused as an unknown lease, the report waited for the
// provider's next try (seconds later), and the renter, hearing nothing,
// could call a provider that had finished lost.
func (t *Tracker) awaitLease(leaseID, jobID string) {
	recorded := func() bool {
		t.mu.Lock()
		known := t.mons[leaseID] != nil
		t.mu.Unlock()
		return known || !t.awarding(leaseID, jobID)
	}
	if recorded() {
		return
	}
	t.cfg.Counters.Add("renter.event_before_lease")
	t.waitChange(awaitLeaseFor, recorded)
}

// awarding says whether this renter's auction of job jobID sent the award
// of lease leaseID and has not moved on from it.
func (t *Tracker) awarding(leaseID, jobID string) bool {
	st, ok := t.renter.Status(jobID)
	if !ok || (st.State != terms.JobAwarding && st.State != terms.JobLeased) {
		return false
	}
	for _, a := range st.Attempts {
		if a.LeaseID == leaseID {
			return true
		}
	}
	return false
}

// HandleLeaseEvent takes a provider's signed report on a lease of ours
// (wire.ProtoLeaseEvent). For a terminal state it answers with our
// heartbeat summary, which goes into the receipt. A job whose lease ended
// for good is finished; a preempted one (requeues) is requeued.
func (t *Tracker) HandleLeaseEvent(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	var ev wire.LeaseEvent
	if err := sign.OpenFrom(data, sign.DomainLeaseEvent, sign.ID(from), &ev); err != nil {
		t.cfg.Counters.Add("renter.event_rejected")
		return nil, err
	}
	if a := t.archivedLease(ev.LeaseID); a != nil {
		return t.lostEvent(from, ev, a)
	}
	if b, ok, err := t.releasedAnswer(from.String(), ev.LeaseID); ok {
		// Released, never the job's lease: no need to wait for it.
		return b, err
	}
	t.awaitLease(ev.LeaseID, ev.JobID)
	t.mu.Lock()
	jobID := t.byLease[ev.LeaseID]
	v := t.jobs[jobID]
	mon := t.mons[ev.LeaseID]
	if v == nil || v.Lease == nil || v.Lease.ID != ev.LeaseID || v.Lease.Provider != from.String() {
		t.mu.Unlock()
		t.cfg.Counters.Add("renter.event_unknown_lease")
		return nil, fmt.Errorf("no lease %s from %s", ev.LeaseID, from)
	}
	prevRun := v.Run
	now := t.now()
	if ev.Moved != nil {
		return t.moveLocked(jobID, v, mon, ev)
	}
	if ev.Run == prevRun && ev.Run.Terminal() {
		// The provider re-sent its final report (its first answer was
		// lost): answer it again with the same summary, change nothing.
		sum := v.Heartbeats
		if sum == nil {
			s := mon.Summary(v.ProviderClock.OnProvider(v.ObservedEnd))
			sum = &s
		}
		t.mu.Unlock()
		return json.Marshal(sum)
	}
	if !ev.Run.Follows(prevRun) {
		// A late or duplicated report (e.g. "running" after "succeeded"):
		// a run state never moves back.
		t.mu.Unlock()
		t.cfg.Counters.Add("renter.event_stale")
		return nil, nil
	}
	if err := EventTimesValid(ev, *v.Lease, now); err != nil {
		t.mu.Unlock()
		t.cfg.Counters.Add("renter.event_bad_time")
		return nil, err
	}
	if err := ev.CheckOutputs(); err != nil {
		t.mu.Unlock()
		t.cfg.Counters.Add("renter.event_bad_outputs")
		return nil, err
	}
	rd := t.stepLocked(jobID, v, jobmachine.Reported{LeaseID: ev.LeaseID, Run: ev.Run, Fault: ev.Fault, Detail: ev.Detail,
		ExitCode: ev.ExitCode, Started: ev.Started, Ended: ev.Ended})
	v.Outputs, v.OutputCount, v.OutputsHash = ev.Outputs, ev.OutputCount, ev.OutputsHash
	if ev.Run.Terminal() {
		v.LogDigest, v.LogBytes = ev.LogDigest, ev.LogBytes
		v.inlineLog = nil
		if ev.LogInline && len(ev.Log) <= wire.MaxInlineLog {
			v.inlineLog = bytes.Clone(ev.Log)
			if v.inlineLog == nil {
				v.inlineLog = []byte{}
			}
		}
	}
	v.ProviderClock.Note(ev.Time, now)
	if v.ObservedStart.IsZero() && ev.Run != terms.RunPending && !ev.NeverRan() {
		v.ObservedStart = now
	}
	if ev.Run.Terminal() {
		v.ObservedEnd = now
	}
	v.OutputsArtifact = ev.OutputsArtifact
	if ck := restoredOf(v.Job, ev.Restored); ck != nil {
		v.Restored = ck
	}
	lease, clock := *v.Lease, v.ProviderClock
	started, ended := v.Started, v.Ended
	var keep *keepWant
	if ev.Run.Terminal() && v.Job.NoPersist && !ev.NeverRan() {
		w := keepWantOf(v.view())
		keep = &w
	}
	// The summary answered to a final report is what the provider's
	// receipt must carry: it is kept with the job, set with the terminal
	// run (a view never shows the one without the other), so the receipt
	// is checked against it even after this renter restarts. Heartbeats
	// carry the provider's clock: so does the summary's end.
	var sum attest.HeartbeatSummary
	if ev.Run.Terminal() {
		end := ev.Ended
		if pnow := clock.OnProvider(now); end.IsZero() || end.After(pnow) {
			end = pnow
		}
		sum = mon.Summary(end)
		v.Heartbeats = &sum
	}
	t.mu.Unlock()
	t.log.Info("lease event", "job", jobID, "lease", ev.LeaseID, "run", ev.Run, "detail", ev.Detail)
	if ev.Run.Terminal() && !prevRun.Terminal() {
		t.cfg.Observe.jobEnded(lease, ev.Run, started, ended)
		t.rebookLater() // a GPU freed: a lease booked far ahead may start sooner elsewhere
	}
	if keep != nil {
		// Taken before the receipt comes: the provider deletes them once
		// the lease is settled (a succeeded run's evidence check waits
		// for them).
		t.keepFiles(*keep)
	}
	// The machine's effects: a requeue, the check of a succeeded run's
	// evidence (payment needs it, before the receipt comes), a gang stop.
	_ = t.advanceWithFacts(rd)
	if !ev.Run.Terminal() {
		return nil, nil
	}
	return json.Marshal(sum)
}

// moveLocked takes a provider's word that it moved our pending lease
// earlier (its GPUs freed before the lease's start): the lease is checked
// by terms.Lease.Moved, and watched and billed over its new span. A lease
// that began, or whose provider was already heard from, does not move.
// Called with t.mu held; it unlocks it.
func (t *Tracker) moveLocked(jobID string, v *jobState, mon *attest.HeartbeatMonitor, ev wire.LeaseEvent) ([]byte, error) {
	refuse := func(err error) ([]byte, error) {
		t.mu.Unlock()
		t.cfg.Counters.Add("renter.move_refused")
		return nil, err
	}
	moved, err := leaseMove(*v.Lease, v.Run, mon.LastAccepted(), ev, t.now())
	if err != nil {
		return refuse(err)
	}
	from := v.Lease.Start
	rd := t.stepLocked(jobID, v, jobmachine.Moved{Lease: moved})
	if rd.empty() {
		return refuse(fmt.Errorf("lease %q does not move", ev.LeaseID))
	}
	t.mons[moved.ID] = t.monitor(moved)
	t.mu.Unlock()
	t.cfg.Counters.Add("renter.lease_moved")
	t.log.Info("lease moved earlier", "job", jobID, "lease", moved.ID, "from", from, "to", moved.Start)
	// Persisted, and watched to its new end (the watch armed for the old
	// end finds the lease settled by then).
	_ = t.advance(rd)
	return nil, nil
}

// leaseMove is lease l (whose run is run, whose provider was last heard
// at heard) as a provider's event ev moves it: only a lease that has not
// begun, and only by terms.Lease.Moved's rule.
func leaseMove(l terms.Lease, run terms.RunState, heard time.Time, ev wire.LeaseEvent, now time.Time) (terms.Lease, error) {
	if ev.Run != terms.RunPending || run != terms.RunPending || !heard.IsZero() {
		return terms.Lease{}, fmt.Errorf("lease %q already began: it does not move", ev.LeaseID)
	}
	return l.Moved(ev.Moved.Start, ev.Moved.Devices, now)
}

// EventTimesValid checks a lease event's claimed times, the rule a renter
// applies before it takes them: a start and an end within the lease (an end may not precede the start) and neither in the
// future beyond the clock skew heartbeats are allowed. A final report
// without a start is a lease that never ran (evicted or released ahead of
// its start): its end may precede the lease's start.
func EventTimesValid(ev wire.LeaseEvent, l terms.Lease, now time.Time) error {
	latest := now.Add(attest.HeartbeatSkew)
	for _, c := range []struct {
		what string
		at   time.Time
	}{{"start", ev.Started}, {"end", ev.Ended}} {
		switch {
		case c.at.IsZero():
		case ev.NeverRan() && c.at.Before(l.Start) && !c.at.After(latest):
		case c.at.Before(l.Start.Add(-attest.HeartbeatSkew)):
			return fmt.Errorf("lease event %s %s is before the lease start %s", c.what, c.at.Format(time.RFC3339Nano), l.Start.Format(time.RFC3339Nano))
		case c.at.After(l.End.Add(attest.HeartbeatSkew)):
			return fmt.Errorf("lease event %s %s is after the lease end %s", c.what, c.at.Format(time.RFC3339Nano), l.End.Format(time.RFC3339Nano))
		case c.at.After(latest):
			return fmt.Errorf("lease event %s %s is in the future", c.what, c.at.Format(time.RFC3339Nano))
		}
	}
	if !ev.Started.IsZero() && !ev.Ended.IsZero() && ev.Ended.Before(ev.Started) {
		return fmt.Errorf("lease event ends (%s) before it starts (%s)", ev.Ended.Format(time.RFC3339Nano), ev.Started.Format(time.RFC3339Nano))
	}
	return nil
}

// requeue puts a job whose lease ended early back into the auction (opts
// say how), once that lease has been settled: at once for a lost lease,
// whose provider may never settle.
func (t *Tracker) requeue(jobID string, lease terms.Lease, opts auction.RequeueOptions) {
	t.mu.Lock()
	gangID, size, gang := t.gangOfLocked(jobID)
	t.mu.Unlock()
	if gang {
		t.requeueGang(gangID, jobID, size, lease, opts)
		return
	}
	// Give the receipt exchange a moment so history shows the settled cost.
	t.waitChange(t.cfg.SettleWait, func() bool {
		v, _ := t.View(jobID)
		return v.Receipt != nil || t.lostUnreported(lease.ID) || neverRan(v.Lease, v.Run, v.Started, lease.ID)
	})
	t.archive(jobID, lease.ID)
	t.repost(jobID, t.restoreFor(jobID), opts)
}

// repost runs a requeued job's auction again (restoring restore), queueing
// it when no provider takes it now.
func (t *Tracker) repost(jobID string, restore []terms.Checkpoint, opts auction.RequeueOptions) {
	ctx, cancel := context.WithTimeout(t.ctx, 3*time.Minute)
	defer cancel()
	opts.Restore = restore
	if _, err := t.renter.Requeue(ctx, jobID, opts); err != nil {
		t.log.Warn("requeue", "job", jobID, "err", err)
		t.noLease(jobID, err) // queued, unless given up
		return
	}
	t.save(jobID)
}

// neverRan reports whether lease id, the job's current one (l, whose run
// is run, started at started), ended without ever starting (its final
// report has no start): no receipt follows.
func neverRan(l *terms.Lease, run terms.RunState, started time.Time, id string) bool {
	return l != nil && l.ID == id && run.Terminal() && started.IsZero()
}

// archive moves the current lease of a job into its history; the job goes
// back to auction (the machine's Reauctioned).
func (t *Tracker) archive(jobID, leaseID string) {
	t.mu.Lock()
	v := t.jobs[jobID]
	if v == nil || v.Lease == nil || v.Lease.ID != leaseID {
		t.mu.Unlock()
		return
	}
	cost := 0.0
	if v.Receipt != nil {
		cost = v.Receipt.Amount
	}
	snap := v.view()
	snap.History = nil
	rec := api.LeaseRecord{Lease: *v.Lease, Run: v.Run, Detail: v.Detail, CostUSD: cost,
		Started: v.Started, Ended: v.Ended, Attempt: v.Lease.Attempt, Receipt: v.Receipt != nil, ExitCode: v.ExitCode, Fault: v.Fault,
		Checkpoint: leaseCheckpoint(v.Checkpoints, v.Lease.ID), Restored: v.Restored, Dispute: v.Dispute}
	var ev jobmachine.Event = jobmachine.Reauctioned{Job: v.Job}
	if _, _, gang := t.gangOfLocked(jobID); gang {
		ev = jobmachine.GangRequeued{Job: v.Job}
	}
	rd := t.stepLocked(jobID, v, ev)
	if v.Lease != nil {
		// Still running (or not requeued): the machine keeps it.
		phase := v.Phase
		t.mu.Unlock()
		t.log.Warn("lease not archived: its job is not going back to auction", "job", jobID, "lease", leaseID, "phase", phase)
		_ = t.advance(rd)
		return
	}
	t.keepArchivedLocked(jobID, snap)
	v.History = append(v.History, rec)
	v.Restored = nil
	// The current-lease facts describe the next lease from now on.
	v.LastTelemetry, v.Heartbeats, v.Outputs = nil, nil, nil
	v.OutputCount, v.OutputsHash = 0, ""
	v.LogDigest, v.LogBytes, v.Evidence, v.Kept, v.inlineLog = "", 0, "", "", nil
	v.ObservedStart, v.ObservedEnd = time.Time{}, time.Time{}
	v.ProviderClock = attest.ClockOffset{}
	t.mu.Unlock()
	_ = t.advance(rd)
}

// HandleReceipt checks a provider-signed receipt against our own view of
// the lease and our heartbeat record, countersigns it, records it and
// gossips it (wire.ProtoReceipt). It answers with the countersigned
// receipt.
func (t *Tracker) HandleReceipt(ctx context.Context, from peer.ID, data []byte) (_ []byte, err error) {
	count := t.cfg.Counters.Add
	sr, err := attest.UnmarshalReceipt(data)
	if err != nil {
		count("renter.receipt_malformed")
		return nil, err
	}
	r := sr.Receipt
	t.mu.Lock()
	jobID := t.byLease[r.LeaseID]
	var v *api.JobView // a snapshot: the record may change while we check
	a := t.archived[r.LeaseID]
	if a != nil {
		// No longer the job's current attempt (lost, or requeued before
		// it settled): checked against the record of its own.
		snap := a.view
		v = &snap
	} else if cur := t.jobs[jobID]; cur != nil {
		snap := cur.view()
		v = &snap
	}
	mon := t.mons[r.LeaseID]
	var lease terms.Lease
	if v != nil && v.Lease != nil {
		lease = *v.Lease
	}
	t.mu.Unlock()
	if (v == nil || lease.ID != r.LeaseID) && r.Provider == from.String() {
		// Settled already after it was archived: a retry gets the same
		// countersigned receipt again.
		if prev, err := t.cfg.Receipts.settled(r.LeaseID); err == nil && prev != nil && bytes.Equal(prev.Payload, sr.Payload) {
			return prev.Marshal()
		}
	}
	if v == nil || mon == nil || lease.ID != r.LeaseID || r.Provider != from.String() {
		count("renter.receipt_unknown_lease")
		return nil, fmt.Errorf("no lease %s from %s", r.LeaseID, from)
	}
	if v.Receipt != nil {
		// Settled already: a retry of the same receipt (the provider lost
		// our answer) gets the countersigned one again; anything else is
		// a second settlement, refused.
		if prev, err := t.cfg.Receipts.settled(r.LeaseID); err == nil && prev != nil && bytes.Equal(prev.Payload, sr.Payload) {
			return prev.Marshal()
		}
		count("renter.receipt_duplicate")
		return nil, fmt.Errorf("lease %s is already settled", r.LeaseID)
	}
	defer func() {
		if err != nil && ctx.Err() == nil {
			t.refused(jobID, lease, err)
		}
	}()
	now := t.now()
	if err := attest.CheckReceipt(r, lease, now); err != nil {
		count("renter.receipt_mismatch")
		return nil, err
	}
	if v.Run.Terminal() && (r.Outcome != v.Run || r.Fault != v.Fault) {
		count("renter.receipt_mismatch")
		return nil, fmt.Errorf("receipt says %s (fault %q); the provider's final report said %s (fault %q)", r.Outcome, r.Fault, v.Run, v.Fault)
	}
	var mine attest.HeartbeatSummary
	if v.Heartbeats != nil && v.Run.Terminal() {
		mine = *v.Heartbeats // what this renter answered the final report with
	} else {
		mine = mon.Summary(r.End)
	}
	if mine.Count != r.Heartbeats.Count || mine.Rejected != r.Heartbeats.Rejected || mine.Expected != r.Heartbeats.Expected ||
		mine.Coverage != r.Heartbeats.Coverage || len(mine.Gaps) != len(r.Heartbeats.Gaps) {
		count("renter.receipt_telemetry_mismatch")
		return nil, fmt.Errorf("receipt's heartbeat summary (%d heartbeats, coverage %.3f) differs from the renter's (%d, %.3f)",
			r.Heartbeats.Count, r.Heartbeats.Coverage, mine.Count, mine.Coverage)
	}
	if !v.Run.Terminal() {
		count("renter.receipt_early")
		return nil, fmt.Errorf("lease %s has not reported its end (run %s): no receipt before the final report", r.LeaseID, orNone(string(v.Run)))
	}
	if err := checkReceiptCheckpoint(v, r); err != nil {
		count("renter.receipt_checkpoint_mismatch")
		return nil, err
	}
	if v.Job.NoPersist && !r.NoPersist {
		count("renter.receipt_no_persist_unstated")
		return nil, fmt.Errorf("job %s is no-persist: the receipt does not state that the policy held (no_persist)", r.JobID)
	}
	if r.ResultHash != v.OutputsHash {
		count("renter.receipt_result_mismatch")
		return nil, fmt.Errorf("receipt's result hash %q does not name the %d output files the provider reported (%q)",
			r.ResultHash, v.OutputCount, v.OutputsHash)
	}
	// Bill only what this renter saw: from its observed start to its
	// observed end (or now), inside the lease, less heartbeat gaps.
	if err := attest.CheckBilled(r, lease, v.ObservedStart, v.ObservedEnd, now, v.ProviderClock, mine); err != nil {
		count("renter.receipt_overbilled")
		return nil, err
	}
	// Last, as they may fetch the log: a no-persist lease's files must be
	// kept here before its provider deletes them, and a succeeded run is
	// paid on evidence.
	if v.Job.NoPersist && (r.Outcome != terms.RunSucceeded || a != nil) {
		if err := t.kept(ctx, keepWantOf(*v)); err != nil {
			count("renter.receipt_no_persist_not_kept")
			return nil, err
		}
	}
	if r.Outcome == terms.RunSucceeded && a == nil {
		if err := t.awaitEvidence(ctx, jobID, lease); err != nil {
			count("renter.receipt_no_evidence")
			return nil, err
		}
		t.mu.Lock()
		digest := ""
		if cur := t.jobs[jobID]; cur != nil {
			digest = cur.LogDigest
		}
		t.mu.Unlock()
		if r.LogDigest != digest {
			count("renter.receipt_no_evidence")
			return nil, fmt.Errorf("receipt's log digest %q is not the one checked (%q)", r.LogDigest, digest)
		}
	}
	if err := sr.Countersign(t.cfg.Signer); err != nil {
		count("renter.receipt_bad_signature")
		return nil, err
	}
	if err := t.cfg.Receipts.record(sr, true); err != nil {
		return nil, err
	}
	if a != nil {
		if ok, rd := t.settledArchived(r); ok {
			_ = t.advanceWithFacts(rd)
			t.cfg.Receipts.gossip(sr)
			return sr.Marshal()
		}
	}
	t.mu.Lock()
	rd := ready{key: jobID}
	if v := t.jobs[jobID]; v != nil && v.Lease != nil && v.Lease.ID == r.LeaseID {
		rd = t.stepLocked(jobID, v, jobmachine.ReceiptRecorded{Receipt: r})
		v.CostUSD += r.Amount
		sum := r.Heartbeats
		v.Heartbeats = &sum
	}
	t.mu.Unlock()
	_ = t.advanceWithFacts(rd)
	t.cfg.Receipts.gossip(sr)
	return sr.Marshal()
}

// LeaseJob is the job of leaseID when it is the current, live lease of
// a job of ours held by provider: whom a sealed job's keys go to.
func (t *Tracker) LeaseJob(provider peer.ID, leaseID string) (terms.Job, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.jobs[t.byLease[leaseID]]
	if v == nil || v.Lease == nil || v.Lease.ID != leaseID || v.Lease.Provider != provider.String() || v.Run.Terminal() {
		return terms.Job{}, false
	}
	return v.Job, true
}

// refused feeds a refusal of lease l's receipt (job jobID), saying err, to
// the job's machine: at the maxReceiptRefusals-th the lease's settlement
// is given up as a dispute (RecordDispute), shown in the job's record;
// its provider gives up by the same count. A receipt that settles it
// later is still taken.
func (t *Tracker) refused(jobID string, l terms.Lease, err error) {
	_ = t.apply(jobID, jobmachine.ReceiptRefused{Lease: l, Why: err.Error()})
}

// LeaseNamesInput reports whether provider holds a current lease (not yet
// ended) for one of our jobs whose inputs (or image artifact, or
// checkpoints to restore) name artifact id: who may fetch our private artifacts.
func (t *Tracker) LeaseNamesInput(provider peer.ID, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range t.jobs {
		if v.Lease == nil || v.Lease.Provider != provider.String() || v.Run.Terminal() {
			continue
		}
		if slices.Contains(v.Job.Run.Artifacts(), id) || restoredOf(v.Job, id) != nil {
			return true
		}
	}
	return false
}
