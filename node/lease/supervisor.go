package lease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxOutputBytes caps the result files one lease may return.
const MaxOutputBytes = 256 << 20

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	Signer    *sign.Signer
	Transport Transport
	// Store persists one record per lease, so a restart never forgets one.
	Store    Store
	Receipts *Receipts
	Exec     runtime.Executor
	// JobsDir holds the leases' logs and collected outputs.
	JobsDir string
	// JobFilesMaxBytes caps the job logs and outputs kept in JobsDir in
	// total (the oldest leases' go first; beside their retention);
	// default DefaultJobFilesMaxBytes.
	JobFilesMaxBytes int64
	// JobFilesMaxRetain is the longest a lease's job log and outputs are
	// kept after it ends, whatever its job asks (auction.Job.Retain);
	// default auction.DefaultRetain.
	JobFilesMaxRetain time.Duration
	// WorkRoot is the executor's scratch root (orphans there are wiped
	// and killed at recovery).
	WorkRoot string
	// GPUs are the node's devices, indexed as the calendar books them: a
	// lease's devices are run with their UUIDs where known.
	GPUs []auction.GPU
	// Telemetry samples a lease's devices (and the job's process group
	// when pgid > 0) for a heartbeat; nil sends empty process telemetry.
	Telemetry func(pgid int, devices []int) runtime.Telemetry
	// Sensors reads the host's GPU temperature (hottest device) and power
	// draw (all devices); Limits are the policy's MaxTempC and MaxPowerW
	// (0 = no limit). With both set the supervisor samples every heartbeat
	// interval: over a limit it preempts the running preemptible (bronze)
	// leases, and Reading, which the auction's bidding reads, reports it.
	// Nil Sensors (declared GPUs) read as 0 °C and 0 W and are not polled.
	Sensors func() (tempC, powerW int)
	Limits  func() (maxTempC, maxPowerW int)
	// Fingerprint is the node's signed hardware fingerprint (its hash is
	// in the capability): heartbeats carry it, so the renter can hold the
	// telemetry to it.
	Fingerprint *sign.Envelope
	// LeaseEnded tells the auction's calendar a lease ended (it frees the
	// GPUs); nil when there is none.
	LeaseEnded func(leaseID string, end time.Time, state auction.RunState) error
	// Scrub clears the memory of the devices a lease was booked on as it
	// ends, before LeaseEnded frees them, and returns what the lease's
	// receipt says of it (attest.Receipt.Scrub); nil says nothing.
	Scrub func(leaseID string) string
	// Rebook books a confirmed lease on the auction's calendar again at
	// recovery (the calendar lives in memory): Recover schedules a pending
	// lease whose start is still ahead only once it is booked again; nil
	// reports every pending lease failed at recovery.
	Rebook func(auction.Lease, auction.Job) error
	// HeartbeatInterval defaults to DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// PreemptGrace is how long a stopped job has to checkpoint.
	PreemptGrace time.Duration
	// DropHeartbeat is a fault-injection hook for tests: heartbeats for
	// which it returns true are not sent.
	DropHeartbeat func(seq uint64) bool
	// RecoverDelay is how long recovered leases wait for the network
	// before they are settled; default 2s.
	RecoverDelay time.Duration
	// SettleRetry is the first wait before a failed settlement (final
	// report and receipt exchange) is tried again; the wait doubles up to
	// SettleRetryMax. Defaults 5s and 10m.
	SettleRetry    time.Duration
	SettleRetryMax time.Duration
	// SettleWindow is how long after a lease's end its settlement is
	// retried before the provider gives up on it; default DefaultSettleWindow.
	SettleWindow time.Duration
	Now          Clock
	Log          *slog.Logger
	Counters     *Counters

	// Inputs fetches a job's input artifacts and lays them out read-only
	// in dir (dir/NAME), and makes its image artifact's image available;
	// release unpins and removes them once the job ended. image, when not
	// "", is what the job runs instead of job.Run.Image: the ID of the
	// image loaded from its image artifact, which no other tenant's image
	// can shadow. nil: jobs with artifacts fail to start. keys, for a
	// sealed job only, opens its sealed inputs (and seals, in the hooks
	// below, its checkpoints and outputs); nil otherwise.
	Inputs func(ctx context.Context, job auction.Job, dir string, keys *wire.LeaseKeys) (release func(), image string, err error)
	// OutputsArtifact stores a lease's collected outputs dir as an
	// artifact owned by the renter and returns its id; nil: none.
	// RemoveArtifact removes one from our store: a sealed no-persist
	// lease's outputs artifact once the lease is settled.
	OutputsArtifact func(dir, renter string, keys *wire.LeaseKeys) (string, error)
	RemoveArtifact  func(id string) error
	// CheckpointArtifact stores a snapshot of a job's checkpoint dir as an
	// artifact owned by the renter (not announced: the renter fetches it
	// from us) and returns its id and size; drop removes our copy once
	// the renter holds it. nil: no checkpoints are taken.
	CheckpointArtifact func(dir, renter string, keys *wire.LeaseKeys) (id string, bytes int64, drop func(), err error)
	// Restore fetches checkpoint artifact id of job from its owner (and
	// any other holder), verifying every chunk, and writes its files into
	// dir; release removes them. nil: jobs start fresh.
	Restore func(ctx context.Context, job auction.Job, id, dir string, keys *wire.LeaseKeys) (release func(), err error)
	// Network, when set, is asked before each lease's job starts what the
	// lease adds to its runtime.Spec (a gang member's private network:
	// node/gangnet's Net.Hook); started is then given the started job and
	// end is called once the job has ended (either may be nil). An error
	// fails the lease before its job starts.
	Network func(l auction.Lease, job auction.Job, spec *runtime.Spec) (started func(runtime.Handle), end func(), err error)
	// Observe, when set, is told of heartbeats sent and leases ended.
	Observe *Observer
}

// Supervisor runs a provider's confirmed leases.
type Supervisor struct {
	cfg SupervisorConfig
	log *slog.Logger
	ctx context.Context

	mu   sync.Mutex
	runs map[string]*leaseRun
	// held binds every lease id this provider ever confirmed to its
	// renter, and heldJobs every job id it ran to its renter: loaded from
	// the persisted lease records and the ledger's receipts at start, kept
	// up to date by OnLease. A lease id is never reused (Admit).
	held     map[string]string
	heldJobs map[string]string
	limits   api.LimitsView
	drain    *drainState // the last drain, until Undrain
	// changed is at each save of a lease's record and each change of the
	// drain (what DrainWait waits on).
	changed broadcast
	wg      sync.WaitGroup
	// pruned is when job files were last pruned (unix nanoseconds).
	pruned atomic.Int64
	// jobBytes is what the job files held at the last size prune plus
	// the leases' files since (-1: unknown, scan at the next lease end).
	jobBytes atomic.Int64
	// filesUntil is when each ended lease's job files go (its record's
	// FilesUntil), for those whose files may still be on disk.
	filesUntil map[string]time.Time
}

// providerRecord is what a provider persists per lease, so a restart never
// forgets a job.
type providerRecord struct {
	Rec      api.ProviderLease    `json:"rec"`
	Job      auction.Job          `json:"job"`
	Pgid     int                  `json:"pgid,omitempty"`
	LastBeat time.Time            `json:"last_beat,omitempty"`
	Settled  bool                 `json:"settled"`
	Outputs  []auction.OutputFile `json:"outputs,omitempty"`
	// OutputsArtifact is the artifact id of the collected outputs.
	OutputsArtifact string `json:"outputs_artifact,omitempty"`
	// Checkpoint is the last checkpoint the renter took; Restored the one
	// the job started from.
	Checkpoint *auction.Checkpoint `json:"checkpoint,omitempty"`
	Restored   *auction.Checkpoint `json:"restored,omitempty"`
	// LogDigest and LogBytes are the SHA-256 (hex) and length of the
	// job's whole log, kept as it is written (wire.LeaseEvent).
	LogDigest string `json:"log_digest,omitempty"`
	LogBytes  int64  `json:"log_bytes,omitempty"`
	// Scrub is what was done to the lease's devices' memory as it ended
	// (SupervisorConfig.Scrub), for its receipt.
	Scrub string `json:"scrub,omitempty"`
	// FilesUntil is when the lease's job log and outputs are removed: its
	// end plus its job's retention, or for a no-persist job the end of
	// its settlement window (they go at its settlement, sooner).
	FilesUntil time.Time `json:"files_until,omitempty"`
}

// leaseRun executes one confirmed lease on the provider.
type leaseRun struct {
	s      *Supervisor
	saveMu sync.Mutex
	mu     sync.Mutex
	pr     providerRecord
	h      runtime.Handle
	// logw writes the job's log, keeping its digest (nil until opened).
	logw *lockedWriter
	stop chan struct{} // closed to abort a pending or running job
	// seal is a sealed job's keys and scratch tmpfs while it runs (nil
	// for other jobs, and before and after its run): in memory only.
	seal *sealing
	// stopAs is the run state recorded when the job is stopped on purpose.
	stopAs     auction.RunState
	stopDetail string
	done       chan struct{}
	confirmed  time.Time // when the lease was confirmed (for start latency)
	// moved is signalled when the lease moved earlier (OnMove); began is
	// set once the run stopped waiting for its start (it moves no more).
	moved chan struct{}
	began bool

	// kept is set when the daemon stops before the lease's start: the
	// lease stays pending in the store, for the next start (keepPending).
	kept bool
	ck   ckptState
}

// NewSupervisor returns a Supervisor; ctx bounds its jobs and messages.
// Call Recover once the auction's provider is set up, and Close at the end.
func NewSupervisor(ctx context.Context, cfg SupervisorConfig) (*Supervisor, error) {
	if cfg.Signer == nil || cfg.Transport == nil || cfg.Store == nil || cfg.Receipts == nil || cfg.Exec == nil {
		return nil, errors.New("lease: supervisor needs a signer, a transport, a store, receipts and an executor")
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
	if cfg.RecoverDelay <= 0 {
		cfg.RecoverDelay = 2 * time.Second
	}
	if cfg.SettleRetry <= 0 {
		cfg.SettleRetry = 5 * time.Second
	}
	if cfg.SettleRetryMax < cfg.SettleRetry {
		cfg.SettleRetryMax = max(10*time.Minute, cfg.SettleRetry)
	}
	if cfg.SettleWindow <= 0 {
		cfg.SettleWindow = DefaultSettleWindow
	}
	if cfg.Telemetry == nil {
		cfg.Telemetry = func(int, []int) runtime.Telemetry { return runtime.Telemetry{} }
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.JobsDir, 0o700); err != nil {
		return nil, fmt.Errorf("jobs dir: %w", err)
	}
	if cfg.JobFilesMaxRetain <= 0 {
		cfg.JobFilesMaxRetain = auction.DefaultRetain
	}
	s := &Supervisor{cfg: cfg, log: log, ctx: ctx, runs: map[string]*leaseRun{}, held: map[string]string{}, heldJobs: map[string]string{},
		filesUntil: map[string]time.Time{}}
	s.jobBytes.Store(-1) // unknown: the first prune scans
	if err := s.loadHeld(); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.every(janitorEvery, s.expireJobFiles)
	if cfg.Sensors != nil && cfg.Limits != nil {
		s.checkLimits()
		s.wg.Add(1)
		go s.every(s.cfg.HeartbeatInterval, s.checkLimits)
	}
	return s, nil
}

// every runs f every period until the supervisor stops: its background
// chores (the sensor check each heartbeat interval, the job-files janitor
// each janitorEvery).
func (s *Supervisor) every(period time.Duration, f func()) {
	defer s.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// checkLimits takes one sensor reading; over a limit it preempts the
// preemptible leases not yet ended. Non-preemptible work keeps running:
// the provider only stops taking more.
func (s *Supervisor) checkLimits() {
	temp, power := s.cfg.Sensors()
	maxT, maxP := s.cfg.Limits()
	over, detail := "", ""
	switch {
	case maxT > 0 && temp > maxT:
		over, detail = "thermal", fmt.Sprintf("gpu temperature %dC above limit %dC", temp, maxT)
	case maxP > 0 && power > maxP:
		over, detail = "power", fmt.Sprintf("power draw %dW above limit %dW", power, maxP)
	}
	var victims []*leaseRun
	s.mu.Lock()
	s.limits.TempC, s.limits.PowerW, s.limits.MaxTempC, s.limits.MaxPowerW, s.limits.Over = temp, power, maxT, maxP, over
	if over != "" {
		s.limits.Breaches++
		for _, r := range s.runs {
			if l := r.lease(); l.Preemptible && !r.state().Terminal() {
				victims = append(victims, r)
			}
		}
		s.limits.Preempted += len(victims)
	}
	s.mu.Unlock()
	if over == "" {
		return
	}
	s.cfg.Counters.Add("provider.limit_" + over)
	s.log.Warn("gpu limit exceeded: not bidding, preempting preemptible leases", "reason", detail, "leases", len(victims))
	for _, r := range victims {
		s.cfg.Counters.Add("provider.limit_preempted")
		r.abort(auction.RunPreempted, detail)
	}
}

// Reading is the last sensor reading (the auction's Sensors): a provider
// over its limits is ineligible for every call until a reading is back
// under them.
func (s *Supervisor) Reading() (tempC, powerW int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits.TempC, s.limits.PowerW
}

func (s *Supervisor) now() time.Time { return s.cfg.Now() }

func (s *Supervisor) logPath(leaseID string) string {
	return filepath.Join(s.cfg.JobsDir, "logs", leaseID+".log")
}
func (s *Supervisor) outDir(leaseID string) string {
	return filepath.Join(s.cfg.JobsDir, "outputs", leaseID)
}

// saveRun persists a lease's record. Saves of one lease are serialised,
// each reading the record as it writes it, so a slow save (a heartbeat's)
// never overwrites a newer one (the end's). Its waiters (DrainWait) are
// woken once it is written: a drain is done only when what it waited for
// is in the store, for a daemon that stops next.
func (s *Supervisor) saveRun(r *leaseRun) {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	pr := r.pr
	r.mu.Unlock()
	if err := s.cfg.Store.Put(pr.Rec.Lease.ID, pr); err != nil {
		s.log.Error("persist lease", "lease", pr.Rec.Lease.ID, "err", err)
	}
	s.changed.notify()
}

func (s *Supervisor) run(id string) *leaseRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

// loadHeld fills the lease and job id bindings from every persisted lease
// record (settled ones too) and every receipt this node signed as a
// provider in the ledger.
func (s *Supervisor) loadHeld() error {
	err := s.cfg.Store.List(func(_ string, raw []byte) error {
		var pr providerRecord
		if json.Unmarshal(raw, &pr) == nil && pr.Rec.Lease.ID != "" {
			s.bindLocked(pr.Rec.Lease.ID, pr.Rec.Lease.JobID, pr.Rec.Lease.Renter)
			if !pr.FilesUntil.IsZero() && s.hasJobFiles(pr.Rec.Lease.ID) {
				s.filesUntil[pr.Rec.Lease.ID] = pr.FilesUntil
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lease records: %w", err)
	}
	entries, err := s.cfg.Receipts.cfg.Ledger.List(record.Filter{Kind: record.KindReceipt})
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	me := s.cfg.Signer.ID().String()
	for _, e := range entries {
		if sr, err := attest.UnmarshalReceipt(e.Data); err == nil && sr.Receipt.Provider == me {
			s.bindLocked(sr.Receipt.LeaseID, sr.Receipt.JobID, sr.Receipt.Renter)
		}
	}
	return nil
}

// bindLocked records that a lease id (and its job id) belongs to renter.
// Called with s.mu held, or before the supervisor is shared.
func (s *Supervisor) bindLocked(leaseID, jobID, renter string) {
	if _, ok := s.held[leaseID]; !ok {
		s.held[leaseID] = renter
	}
	if jobID != "" {
		if _, ok := s.heldJobs[jobID]; !ok {
			s.heldJobs[jobID] = renter
		}
	}
}

// ErrLeaseIDInUse is Admit's refusal of a lease or job id this provider
// already holds.
var ErrLeaseIDInUse = errors.New("lease id in use")

// Admit is the auction provider's check of an award's ids
// (auction.ProviderConfig.Admit): a lease id this provider ever held (a
// live run, a persisted record, a receipt in its ledger, or a log or
// outputs left on disk) is refused whoever awards it, and a job id is
// refused when it belongs to another renter's lease. Lease ids are chosen
// by renters and gossiped in receipts: without this a renter could award
// a lease id it saw after a restart and read the earlier renter's logs.
func (s *Supervisor) Admit(leaseID, jobID, renter string) error {
	if err := auction.ValidID(leaseID); err != nil {
		return fmt.Errorf("%w: %v", ErrLeaseIDInUse, err)
	}
	s.mu.Lock()
	_, running := s.runs[leaseID]
	_, held := s.held[leaseID]
	owner, jobHeld := s.heldJobs[jobID]
	s.mu.Unlock()
	switch {
	case running || held:
		s.cfg.Counters.Add("provider.lease_id_reused")
		return fmt.Errorf("%w: lease %s was awarded before", ErrLeaseIDInUse, leaseID)
	case jobHeld && owner != renter:
		s.cfg.Counters.Add("provider.lease_id_reused")
		return fmt.Errorf("%w: job %s belongs to another renter", ErrLeaseIDInUse, jobID)
	}
	for _, p := range []string{s.logPath(leaseID), s.outDir(leaseID)} {
		if _, err := os.Lstat(p); err == nil {
			s.cfg.Counters.Add("provider.lease_id_reused")
			return fmt.Errorf("%w: lease %s has files from an earlier run", ErrLeaseIDInUse, leaseID)
		}
	}
	return nil
}

// OnLease is the auction provider's callback for a confirmed lease: it
// stops the bronze leases this one evicts and schedules the job. It never
// replaces a lease it holds already (Admit refuses such an award first).
func (s *Supervisor) OnLease(l auction.Lease, job auction.Job, preempts []string) {
	s.mu.Lock()
	if _, ok := s.runs[l.ID]; ok {
		s.mu.Unlock()
		s.cfg.Counters.Add("provider.lease_id_reused")
		s.log.Error("lease id already held: the new lease is not run", "lease", l.ID, "renter", l.Renter)
		return
	}
	s.mu.Unlock()
	for _, id := range preempts {
		if victim := s.run(id); victim != nil {
			victim.abort(auction.RunPreempted, fmt.Sprintf("preempted by %s lease %s", job.Tier, l.ID))
		}
	}
	r := &leaseRun{s: s, stop: make(chan struct{}), done: make(chan struct{}), moved: make(chan struct{}, 1), confirmed: s.now(),
		pr: providerRecord{Rec: api.ProviderLease{Lease: l, Run: auction.RunPending}, Job: job}}
	s.mu.Lock()
	s.runs[l.ID] = r
	s.bindLocked(l.ID, l.JobID, l.Renter)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Persisted here, not in the callback: the auction calls OnLease
		// with its lock held, and a store write there stalled every call,
		// bid and award of a busy provider. A crash before this write
		// loses the lease like a crash during it would: the renter hears
		// no heartbeat and recovers the job elsewhere.
		s.saveRun(r)
		r.runGuarded()
	}()
}

// runGuarded is run, with a failure inside it (a panic in the lease's own
// path: its executor, its inputs, a bug) ending this lease, never the
// daemon: the stack is logged and the lease reported failed, the
// provider's fault (it was the provider's software).
func (r *leaseRun) runGuarded() {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		s := r.s
		l := r.lease()
		s.cfg.Counters.Add("provider.lease_panic")
		s.log.Error("lease failed: internal error", "lease", l.ID, "job", l.JobID, "panic", p, "stack", string(debug.Stack()))
		if r.state().Terminal() {
			return // it had ended already (the panic came after its report)
		}
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("lease could not be reported failed", "lease", l.ID, "panic", p, "stack", string(debug.Stack()))
			}
		}()
		now := s.now()
		r.finish(runtime.Result{ExitCode: -1, Started: now, Ended: now, Err: fmt.Errorf("provider internal error: %v", p)}, nil)
	}()
	r.run()
}

// OnMove is the auction provider's callback for a confirmed lease it moved
// earlier: the run waits for the new start instead, and tells the renter
// before it begins. It reports false when the run already began (or is
// unknown): the provider then keeps the lease where it was.
func (s *Supervisor) OnMove(moved auction.Lease, _ auction.Job) bool {
	r := s.run(moved.ID)
	if r == nil {
		return false
	}
	r.mu.Lock()
	if r.began || r.pr.Rec.Run != auction.RunPending {
		r.mu.Unlock()
		return false
	}
	r.pr.Rec.Lease = moved
	r.mu.Unlock()
	select {
	case r.moved <- struct{}{}:
	default:
	}
	return true
}

// Close stops every job (the daemon is stopping: they are reported failed),
// except confirmed leases that have not started yet, which stay pending in
// the store for the next start (Recover books them again), and waits for
// the supervisor's goroutines. Cancel ctx first.
func (s *Supervisor) Close() {
	s.mu.Lock()
	runs := make([]*leaseRun, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.keepPending(s.now())
	}
	for _, r := range runs {
		r.shutdown()
	}
	s.wg.Wait()
}

// abort stops a pending or running job, recording why.
func (r *leaseRun) abort(as auction.RunState, detail string) {
	r.mu.Lock()
	if r.stopAs == "" {
		r.stopAs, r.stopDetail = as, detail
		close(r.stop)
	}
	r.mu.Unlock()
}

// shutdown stops the job because the daemon is stopping and waits for it.
func (r *leaseRun) shutdown() {
	r.abort(auction.RunFailed, "provider daemon shut down during the lease")
	<-r.done
}

func (r *leaseRun) lease() auction.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Lease
}

func (r *leaseRun) state() auction.RunState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Run
}

func (r *leaseRun) run() {
	defer close(r.done)
	s := r.s
	l, job := r.lease(), r.pr.Job
	log := s.log.With("lease", l.ID, "job", l.JobID)
	stoppedAhead := func() {
		if r.isKept() {
			log.Info("reservation kept for the next start")
			return
		}
		// Stopped ahead of its start (evicted for gold, released, its
		// move untold): it never ran, and its report carries no start.
		r.finish(runtime.Result{Ended: s.now(), ExitCode: -1}, nil)
	}
	for {
		wait := l.Start.Sub(s.now())
		if wait <= 0 {
			r.mu.Lock()
			r.began = true
			r.mu.Unlock()
			select {
			case <-r.moved: // moved (earlier still) as the wait ended
				l = r.movedTo(l)
			default:
			}
			select {
			case <-r.stop:
				stoppedAhead()
				return
			default:
			}
			break
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-r.moved:
			timer.Stop()
			l = r.movedTo(l)
		case <-r.stop:
			timer.Stop()
			stoppedAhead()
			return
		}
	}
	if now := s.now(); !now.Before(l.End) {
		// Taken up after its end (a slow host or store; the auction
		// confirms no lease that late, auction.Lease.Late): started now,
		// the job would run on devices the calendar has given to the next
		// lease. It is not run; the lateness is the provider's, and its
		// renter requeues the job.
		s.cfg.Counters.Add("provider.lease_begun_late")
		log.Warn("lease not run: its span was over when it could begin", "start", l.Start, "end", l.End)
		r.finish(runtime.Result{ExitCode: -1, Ended: now, Err: fmt.Errorf("lease was over (its end %s passed by %s) before the provider started it",
			l.End.Format(time.RFC3339Nano), now.Sub(l.End).Round(time.Millisecond))}, nil)
		return
	}
	// Heartbeats go from the lease's start (Preparing until the job
	// starts: inputs and a checkpoint may take a while to fetch) until the
	// final report is ready (outputs collected): a renter hears the
	// provider all along, or calls it lost.
	beatsStop, beatsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beatsDone)
		r.heartbeats(beatsStop)
	}()
	stopBeats := sync.OnceFunc(func() { close(beatsStop); <-beatsDone })
	defer stopBeats()
	fail := func(res runtime.Result) {
		stopBeats()
		r.closeSeal() // as at a run's end (below)
		r.finish(res, nil)
	}
	if err := os.MkdirAll(filepath.Dir(s.logPath(l.ID)), 0o700); err != nil {
		fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: err})
		return
	}
	logf, err := os.OpenFile(s.logPath(l.ID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: err})
		return
	}
	defer logf.Close()
	lw := &lockedWriter{w: logf, sum: sha256.New()}
	if err := lw.seed(logf); err != nil {
		fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: err})
		return
	}
	// Whatever ends the run from here, its report names the log as
	// written (finish takes its digest).
	r.mu.Lock()
	r.logw = lw
	r.mu.Unlock()
	if job.Sealed {
		if err := r.openSeal(job); err != nil {
			fmt.Fprintf(lw, "gpumesh: sealed job: %v\n", err)
			fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: fmt.Errorf("sealed job: %w", err)})
			return
		}
		defer r.closeSeal()
	}
	gpus, uuids := s.leaseDevices(l)
	spec := runtime.Spec{ID: l.ID, JobID: job.ID, Command: job.Run.Command, Image: job.Run.Image, Env: job.Run.Env,
		GPUs: gpus, UUIDs: uuids, Deadline: l.End, MemoryMB: job.Run.MemoryMB, Outputs: job.Run.Outputs, NoSwap: job.NoPersist, Sealed: job.Sealed}
	if l.GPUFraction > 0 && len(gpus) == 1 && gpus[0] < len(s.cfg.GPUs) {
		// A slice of a device: confined to it where the runtime enforces
		// slices (the capability record says how: GPU.Isolation).
		spec.MPS = runtime.SliceMPS(s.cfg.GPUs[gpus[0]], l.GPUFraction)
	}
	releaseInputs := func() {}
	if len(job.Run.Artifacts()) > 0 {
		release, dir, image, err := r.prepareInputs(job)
		if err != nil {
			fmt.Fprintf(lw, "gpumesh: job inputs: %v\n", err)
			fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: fmt.Errorf("inputs: %w", err)})
			return
		}
		releaseInputs = sync.OnceFunc(release)
		defer releaseInputs()
		if len(job.Run.Inputs) > 0 {
			spec.Inputs = dir
		}
		if image != "" {
			spec.Image = image
		}
		log.Info("job inputs ready", "inputs", len(job.Run.Inputs), "image_artifact", job.Run.ImageArtifact != "", "image", spec.Image)
	}
	restoreDir, releaseRestore, err := r.restoreCheckpoint(job, lw)
	if err != nil {
		fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: err})
		return
	}
	releaseRestore = sync.OnceFunc(releaseRestore)
	defer releaseRestore()
	spec.Restore = restoreDir
	var netStarted func(runtime.Handle)
	if s.cfg.Network != nil {
		st, end, err := s.cfg.Network(l, job, &spec)
		if err != nil {
			fmt.Fprintf(lw, "gpumesh: job network: %v\n", err)
			fail(runtime.Result{ExitCode: -1, Started: s.now(), Ended: s.now(), Err: fmt.Errorf("network: %w", err)})
			return
		}
		if end != nil {
			defer end()
		}
		netStarted = st
	}
	started := s.now()
	h, err := s.cfg.Exec.Start(s.ctx, spec, lw, lw)
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: job failed to start: %v\n", err)
		fail(runtime.Result{ExitCode: -1, Started: started, Ended: s.now(), Err: err})
		return
	}
	if netStarted != nil {
		netStarted(h)
	}
	r.mu.Lock()
	r.h = h
	r.pr.Rec.Run = auction.RunRunning
	// The run (and its bill) starts once the executor started it: what
	// Start took (an image pulled, files laid out) was preparation, as
	// the heartbeats said, and is not billed.
	r.pr.Rec.Started = s.now()
	r.pr.Rec.Backend = backendName(s.cfg.Exec, spec)
	if p, ok := h.(interface{ Pid() int }); ok {
		r.pr.Pgid = p.Pid()
	}
	r.mu.Unlock()
	s.saveRun(r)
	log.Info("job started", "backend", r.pr.Rec.Backend, "start_latency", started.Sub(maxTime(l.Start, r.confirmed)).Round(time.Microsecond))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_, _ = s.sendEvent(r, 5)
	}()

	ckptDone := make(chan struct{})
	go func() {
		defer close(ckptDone)
		if job.CheckpointEvery > 0 {
			r.checkpointLoop(h, job.CheckpointEvery, started, lw)
		}
	}()
	resultCh := make(chan runtime.Result, 1)
	go func() { resultCh <- h.Wait() }()
	var res runtime.Result
	select {
	case res = <-resultCh:
	case <-r.stop:
		_ = h.Stop(s.cfg.PreemptGrace)
		res = <-resultCh
	}
	<-ckptDone
	if r.stoppedEarly(res) {
		// The job had its grace period to save its state: the renter holds
		// it before it hears of the end (and requeues).
		r.snapshot(h, auction.CheckpointStopped, started, maxTime(res.Ended, started), lw)
	}
	outDir := s.outDir(l.ID)
	seal := r.sealed()
	if seal != nil {
		outDir = filepath.Join(seal.dir, "outputs")
	}
	outs, err := runtime.CollectOutputs(h.WorkDir(), job.Run.Outputs, outDir, MaxOutputBytes)
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: collecting outputs: %v\n", err)
	}
	if err := h.Cleanup(); err != nil {
		log.Warn("wipe work dir", "err", err)
	}
	// A no-persist job's outputs are not kept as an artifact: its renter
	// takes them over the outputs stream before it settles. A sealed
	// job's are, sealed: its renter takes them from there, and nothing
	// else of them is here (a no-persist one's artifact goes once the
	// lease is settled, purgeNoPersist).
	if len(outs) > 0 && s.cfg.OutputsArtifact != nil && (!job.NoPersist || seal != nil) {
		if id, err := s.cfg.OutputsArtifact(outDir, l.Renter, seal.leaseKeys()); err != nil {
			log.Warn("outputs not stored as an artifact", "err", err)
		} else {
			r.mu.Lock()
			r.pr.OutputsArtifact = id
			r.mu.Unlock()
		}
	}
	s.pruneJobFiles(l.ID)
	stopBeats()
	// A sealed job's plaintext goes before its end is reported: once
	// its renter hears of it, none is left here.
	r.closeSeal()
	// So are its inputs and restored checkpoint unpinned: once its renter
	// hears of the end, nothing here is held for the job any more.
	releaseInputs()
	releaseRestore()
	r.finish(res, outs)
}

// pruneEvery is how often, at most, a lease's end prunes job files by
// age: a prune reads both directories, which hold a file per recent lease.
const pruneEvery = time.Hour

// janitorEvery is how often the job files past their lease's retention
// are removed (expireJobFiles).
const janitorEvery = time.Minute

// retention is how long a lease of job keeps its job files after it ends:
// the job's Retain (auction.DefaultRetain when it sets none), at most the
// provider's JobFilesMaxRetain.
func (s *Supervisor) retention(job auction.Job) time.Duration {
	keep := job.Retain
	if keep <= 0 {
		keep = auction.DefaultRetain
	}
	return min(keep, s.cfg.JobFilesMaxRetain)
}

// filesDue is when an ended lease's job files are removed: its end plus
// its retention, or for a no-persist lease the end of its settlement
// window (its settlement removes them sooner).
func (s *Supervisor) filesDue(pr *providerRecord) time.Time {
	if pr.Job.NoPersist {
		return pr.Rec.Lease.End.Add(s.cfg.SettleWindow)
	}
	return pr.Rec.Ended.Add(s.retention(pr.Job))
}

// expireJobFiles removes the job log and outputs of each ended lease whose
// FilesUntil has come (by the supervisor's clock): the janitor's work, and
// the first step of every prune.
func (s *Supervisor) expireJobFiles() {
	now := s.now()
	var due []string
	s.mu.Lock()
	for id, until := range s.filesUntil {
		if r := s.runs[id]; now.Before(until) || (r != nil && !r.state().Terminal()) {
			continue
		}
		due = append(due, id)
	}
	s.mu.Unlock()
	n := 0
	for _, id := range due {
		if err := s.removeJobFiles(id); err != nil {
			s.log.Warn("remove expired job files", "lease", id, "err", err)
			continue
		}
		n++
	}
	if n > 0 {
		s.log.Info("removed job files past their retention", "leases", n)
	}
}

// hasJobFiles reports whether lease id's job log or outputs are on disk.
func (s *Supervisor) hasJobFiles(id string) bool {
	for _, p := range []string{s.logPath(id), s.outDir(id)} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

// removeJobFiles deletes lease id's job log and outputs and forgets when
// they were due.
func (s *Supervisor) removeJobFiles(id string) error {
	var errs []error
	for _, p := range []string{s.logPath(id), s.outDir(id)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.jobBytes.Store(-1) // rescanned at the next size prune
	s.mu.Lock()
	delete(s.filesUntil, id)
	s.mu.Unlock()
	return nil
}

// purgeNoPersist removes what a settled (or given up) no-persist lease
// left: its log and outputs (a sealed job's: its sealed outputs
// artifact), and its record's outputs manifest. What else it had (work
// dir, inputs, restored and staged checkpoints) went when its run ended.
func (s *Supervisor) purgeNoPersist(r *leaseRun) {
	r.mu.Lock()
	l, noPersist, art := r.pr.Rec.Lease, r.pr.Job.NoPersist, r.pr.OutputsArtifact
	if noPersist {
		r.pr.Outputs = nil
		r.pr.FilesUntil = s.now() // what a restart's janitor goes by
	}
	r.mu.Unlock()
	if !noPersist {
		return
	}
	if art != "" && s.cfg.RemoveArtifact != nil {
		if err := s.cfg.RemoveArtifact(art); err != nil {
			s.log.Error("no-persist lease: its sealed outputs artifact is still held", "lease", l.ID, "artifact", art, "err", err)
		}
	}
	s.saveRun(r)
	if err := s.removeJobFiles(l.ID); err != nil {
		s.log.Error("no-persist lease: job files not removed; the janitor retries", "lease", l.ID, "err", err)
		s.mu.Lock()
		s.filesUntil[l.ID] = s.now()
		s.mu.Unlock()
		return
	}
	s.cfg.Counters.Add("provider.no_persist_purged")
	s.log.Info("no-persist lease settled: its job files are removed", "lease", l.ID)
}

// DefaultJobFilesMaxBytes is SupervisorConfig.JobFilesMaxBytes's default.
const DefaultJobFilesMaxBytes int64 = 10 << 30

// pruneJobFiles removes the job files past their lease's retention
// (expireJobFiles), those older than JobFilesMaxRetain by age (leases
// from before retention was recorded) at most once per pruneEvery, and
// keeps them within JobFilesMaxBytes:
// past it, the oldest leases' files go first, never those of a running
// lease or of ended, the lease that just ended (its renter may still
// fetch them). A full scan runs only when the files may be over the cap.
func (s *Supervisor) pruneJobFiles(ended string) {
	s.expireJobFiles()
	dirs := []string{filepath.Join(s.cfg.JobsDir, "logs"), filepath.Join(s.cfg.JobsDir, "outputs")}
	now := s.now().UnixNano()
	if last := s.pruned.Load(); (last == 0 || now-last >= int64(pruneEvery)) && s.pruned.CompareAndSwap(last, now) {
		for _, dir := range dirs {
			if n, err := runtime.Prune(dir, s.cfg.JobFilesMaxRetain); err != nil {
				s.log.Warn("prune job files", "err", err)
			} else if n > 0 {
				s.log.Info("pruned job files", "dir", dir, "count", n)
				s.jobBytes.Store(-1)
			}
		}
	}
	limit := s.cfg.JobFilesMaxBytes
	if limit <= 0 {
		limit = DefaultJobFilesMaxBytes
	}
	if ended != "" && s.jobBytes.Load() >= 0 {
		if s.jobBytes.Add(treeSize(s.logPath(ended)) + treeSize(s.outDir(ended))); s.jobBytes.Load() <= limit {
			return
		}
	}
	keep := func(name string) bool {
		id := strings.TrimSuffix(name, ".log")
		if id == ended {
			return true
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.runs[id] != nil
	}
	n, total, err := runtime.PruneToSize(dirs, limit, keep)
	if err != nil {
		s.log.Warn("prune job files to size", "err", err)
		s.jobBytes.Store(-1)
		return
	}
	s.jobBytes.Store(total)
	if n > 0 {
		s.log.Info("pruned job files over the cap", "count", n, "max_bytes", limit, "left_bytes", total)
	}
}

// treeSize is the bytes of the regular files at or under path.
func treeSize(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// prepareInputs fetches the job's input artifacts before it starts (the
// fetch stops when the lease is aborted) into a directory the job's uid
// can read: under the work root, named so that a restart's orphan sweep
// removes it.
func (r *leaseRun) prepareInputs(job auction.Job) (release func(), dir, image string, err error) {
	s := r.s
	if s.cfg.Inputs == nil {
		return nil, "", "", errors.New("this provider cannot fetch input artifacts")
	}
	root := s.cfg.WorkRoot
	if root == "" {
		root = filepath.Join(s.cfg.JobsDir, "inputs")
	}
	dir = filepath.Join(root, "inputs-"+r.lease().ID)
	seal := r.sealed()
	if seal != nil {
		dir = filepath.Join(seal.dir, "inputs")
	}
	ctx, cancel := r.untilStopped()
	defer cancel()
	release, image, err = s.cfg.Inputs(ctx, job, dir, seal.leaseKeys())
	return release, dir, image, err
}

// untilStopped returns a context of the supervisor's that is also
// cancelled when the lease is stopped (aborted): fetches made before the
// job starts end with it.
func (r *leaseRun) untilStopped() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.s.ctx)
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func backendName(e runtime.Executor, spec runtime.Spec) string {
	if a, ok := e.(*runtime.AutoExecutor); ok {
		return a.Backend(spec)
	}
	return e.Name()
}

// finish records how the job ended, frees the calendar and settles.
func (r *leaseRun) finish(res runtime.Result, outs []auction.OutputFile) {
	s := r.s
	scrub := ""
	if s.cfg.Scrub != nil {
		// Before the calendar frees the devices (LeaseEnded), so that no
		// later lease gets them uncleared.
		scrub = s.cfg.Scrub(r.lease().ID)
	}
	r.mu.Lock()
	r.pr.Scrub = scrub
	state, detail, fault := classify(res, r.stopAs, r.stopDetail)
	rec := &r.pr.Rec
	if backfillGapEnded(r.pr.Job, rec.Lease, state) {
		// A bronze job took a backfill gap shorter than itself: reaching the
		// gap's end is a preemption, and its renter requeues the rest.
		state, detail, fault = auction.RunPreempted, "backfill gap ended before the job did", auction.FaultNone
	}
	rec.Run, rec.Detail, rec.Fault = state, detail, fault
	if r.logw != nil {
		r.pr.LogDigest, r.pr.LogBytes = r.logw.digest()
	}
	if rec.Started.IsZero() {
		rec.Started = res.Started
	}
	rec.Ended = res.Ended
	if rec.Ended.IsZero() {
		rec.Ended = s.now()
	}
	if rec.Ended.Before(rec.Started) {
		// It ended before the executor's Start returned (milliseconds of
		// work on a busy host): its run, and bill, is empty from the
		// recorded start. An end before the start would be refused.
		rec.Ended = rec.Started
	}
	if res.Started.IsZero() && rec.Run != auction.RunRunning && !endedAhead(*rec) {
		// never started: no time used.
		rec.Started = rec.Ended
	}
	if res.ExitCode >= 0 && (res.Reason != "" || res.Err == nil) && !res.Started.IsZero() {
		ec := res.ExitCode
		rec.ExitCode = &ec
	}
	r.pr.Outputs = outs
	lease := rec.Lease
	started, ended := rec.Started, rec.Ended
	r.pr.FilesUntil = s.filesDue(&r.pr)
	until := r.pr.FilesUntil
	r.mu.Unlock()
	s.mu.Lock()
	s.filesUntil[lease.ID] = until
	s.mu.Unlock()
	s.saveRun(r)
	s.cfg.Observe.leaseEnded(lease, state, started, ended)
	if s.cfg.LeaseEnded != nil {
		_ = s.cfg.LeaseEnded(lease.ID, ended, state)
	}
	s.log.Info("job ended", "lease", lease.ID, "run", state, "detail", detail)
	s.settle(r)
}

// endedAhead reports whether a lease was stopped before its start came
// (evicted by a gold award, released by its renter): it never ran, has no
// start, and there is nothing to bill, so it is reported but not settled
// with a receipt (none could span time inside the lease).
func endedAhead(rec api.ProviderLease) bool {
	return rec.Started.IsZero() && !rec.Ended.IsZero() && rec.Ended.Before(rec.Lease.Start)
}

// classify maps an executor result to a run state.
func classify(res runtime.Result, stopAs auction.RunState, stopDetail string) (auction.RunState, string, auction.Fault) {
	switch {
	case stopAs == auction.RunFailed:
		return stopAs, stopDetail, auction.FaultProvider // the provider stopped it (shut down)
	case stopAs != "":
		return stopAs, stopDetail, auction.FaultNone // preempted or cancelled as agreed
	case res.Err != nil && res.Reason == "" && runtime.JobFault(res.Err):
		// The runtime refused the job's own spec (its environment, a
		// command missing from its image or the host): every provider
		// would, so it is not requeued nor held against this one.
		return auction.RunFailed, res.Err.Error(), auction.FaultJob
	case res.Err != nil && res.Reason == "":
		return auction.RunFailed, res.Err.Error(), auction.FaultProvider
	case res.Reason == runtime.ReasonDeadline:
		return auction.RunExpired, "lease ended before the job did (stopped at the lease end)", auction.FaultJob
	case res.Reason == runtime.ReasonOOM:
		return auction.RunFailed, "killed: memory limit exceeded", auction.FaultJob
	case res.Reason == runtime.ReasonExited && res.ExitCode == 0:
		return auction.RunSucceeded, "", auction.FaultNone
	case res.Reason == runtime.ReasonExited:
		return auction.RunFailed, fmt.Sprintf("exit code %d", res.ExitCode), auction.FaultJob
	case res.Err != nil:
		return auction.RunFailed, res.Err.Error(), auction.FaultProvider
	}
	return auction.RunFailed, "job ended: " + res.Reason, auction.FaultProvider
}

// leaseDevices is the device indices a lease holds (0..GPUCount-1 for a
// lease booked without devices) and their UUIDs, when all are known.
func (s *Supervisor) leaseDevices(l auction.Lease) ([]int, []string) {
	gpus := append([]int(nil), l.Devices...)
	if len(gpus) == 0 {
		gpus = make([]int, l.GPUCount)
		for i := range gpus {
			gpus[i] = i
		}
	}
	uuids := make([]string, 0, len(gpus))
	for _, g := range gpus {
		if g >= len(s.cfg.GPUs) || s.cfg.GPUs[g].UUID == "" {
			return gpus, nil
		}
		uuids = append(uuids, s.cfg.GPUs[g].UUID)
	}
	return gpus, uuids
}

// heartbeats sends signed telemetry to the renter every interval until
// stop is closed (the job ended and its final report is ready); until the
// job starts they are marked Preparing.
func (r *leaseRun) heartbeats(stop <-chan struct{}) {
	s := r.s
	l := r.lease()
	every := s.cfg.HeartbeatInterval
	t := time.NewTicker(every)
	defer t.Stop()
	var seq uint64
	unknown := 0 // answers in a row from a renter that holds no such lease
	devices, uuids := s.leaseDevices(l)
	for first := true; ; first = false {
		// The first heartbeat goes out at the lease's start, then one per
		// interval, so coverage reflects the whole lease.
		if !first {
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
		seq++
		r.mu.Lock()
		pgid, preparing := r.pr.Pgid, r.pr.Rec.Run == auction.RunPending
		r.mu.Unlock()
		tel := s.cfg.Telemetry(pgid, devices)
		hb := attest.Heartbeat{LeaseID: l.ID, Provider: s.cfg.Signer.ID().String(), Seq: seq, Time: s.now(),
			GPUUtil: tel.GPUUtil, TempC: tel.TempC, PowerW: tel.PowerW, CPUSeconds: tel.CPUSeconds, Source: attest.SourceProcess,
			Fingerprint: s.cfg.Fingerprint, Preparing: preparing}
		if tel.Source == runtime.SourceNVML {
			hb.Source = attest.SourceNVML
			hb.MemUsedMB = tel.MemUsedMB
			hb.Devices, hb.GPUUUIDs = tel.Devices, uuids
		} else {
			hb.RSSMB = tel.MemUsedMB
		}
		env, err := attest.SignHeartbeat(s.cfg.Signer, hb)
		if err != nil {
			continue
		}
		s.cfg.Observe.heartbeatSent(hb, l)
		b, _ := env.Marshal()
		r.mu.Lock()
		r.pr.LastBeat = hb.Time
		r.mu.Unlock()
		s.saveRun(r) // so a crash knows how long the job ran
		if s.cfg.DropHeartbeat != nil && s.cfg.DropHeartbeat(seq) {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, every)
		renter, _ := peer.Decode(l.Renter)
		resp, err := s.cfg.Transport.Request(ctx, renter, wire.ProtoHeartbeat, b)
		cancel()
		var reply wire.HeartbeatReply
		switch {
		case err != nil:
			s.log.Debug("heartbeat not delivered", "lease", l.ID, "err", err)
		case len(resp) > 0 && json.Unmarshal(resp, &reply) == nil && reply.Unknown:
			unknown++
		default:
			unknown = 0
		}
		if unknown >= wire.UnknownLeaseBeats {
			s.cfg.Counters.Add("provider.lease_unknown_to_renter")
			s.log.Info("the renter holds no such lease; stopping it", "lease", l.ID, "renter", l.Renter)
			r.abort(auction.RunCancelled, "the renter holds no such lease (an award it gave up on)")
		}
	}
}

// sendEvent reports the run's state to the renter and returns the renter's
// heartbeat summary (for terminal states).
func (s *Supervisor) sendEvent(r *leaseRun, attempts int) (*attest.HeartbeatSummary, error) {
	r.mu.Lock()
	rec := r.pr.Rec
	ev := wire.LeaseEvent{LeaseID: rec.Lease.ID, JobID: rec.Lease.JobID, Provider: s.cfg.Signer.ID().String(), Run: rec.Run,
		Detail: rec.Detail, ExitCode: rec.ExitCode, Fault: rec.Fault, Started: rec.Started, Ended: rec.Ended, Time: s.now()}
	ev.SetOutputs(r.pr.Outputs)
	ev.OutputsArtifact = r.pr.OutputsArtifact
	if rec.Run.Terminal() {
		ev.LogDigest, ev.LogBytes = r.pr.LogDigest, r.pr.LogBytes
	}
	if r.pr.Restored != nil {
		ev.Restored = r.pr.Restored.Artifact
	}
	r.mu.Unlock()
	resp, err := s.deliverEvent(rec.Lease.Renter, ev, attempts)
	if err != nil {
		return nil, err
	}
	if !ev.Run.Terminal() {
		return nil, nil
	}
	sum, err := attest.DecodeHeartbeatSummary(resp)
	if err != nil {
		return nil, fmt.Errorf("renter's answer: %w", err)
	}
	return &sum, nil
}

// movedTo takes up the move of a pending lease that was at l: it is
// persisted, and the renter hears of it before the lease's first heartbeat
// (so it watches and bills the new span); a move the renter could not be
// told of stops the lease unstarted. It returns the lease as moved.
func (r *leaseRun) movedTo(l auction.Lease) auction.Lease {
	s := r.s
	moved := r.lease()
	s.log.Info("lease moved earlier", "lease", l.ID, "job", l.JobID, "from", l.Start, "to", moved.Start)
	s.cfg.Counters.Add("provider.lease_moved")
	s.saveRun(r)
	if err := s.announceMove(r); err != nil {
		// A renter that does not know of the move would refuse the
		// lease's heartbeats and report before its old start: the lease
		// is not run. Its record keeps the lease the renter knows, so its
		// report says it ended ahead of that start (no start), and the
		// job goes back to auction.
		s.log.Warn("renter not told of the lease's move: the lease is not run", "lease", l.ID, "err", err)
		s.cfg.Counters.Add("provider.move_untold")
		r.mu.Lock()
		r.pr.Rec.Lease = l
		r.mu.Unlock()
		r.abort(auction.RunFailed, "renter not told of the lease's move earlier: "+err.Error())
		return l
	}
	return moved
}

// announceMove tells the renter its pending lease moved earlier (a lease
// event carrying the new start and devices).
func (s *Supervisor) announceMove(r *leaseRun) error {
	l := r.lease()
	ev := wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: s.cfg.Signer.ID().String(), Run: auction.RunPending,
		Time: s.now(), Moved: &wire.LeaseMove{Start: l.Start, Devices: l.Devices}}
	_, err := s.deliverEvent(l.Renter, ev, 3)
	return err
}

// deliverEvent seals a lease event and sends it to the renter, trying up
// to attempts times, and returns the renter's answer.
func (s *Supervisor) deliverEvent(renterID string, ev wire.LeaseEvent, attempts int) ([]byte, error) {
	b, err := sealed(s.cfg.Signer, sign.DomainLeaseEvent, ev)
	if err != nil {
		return nil, err
	}
	renter, err := peer.Decode(renterID)
	if err != nil {
		return nil, err
	}
	var resp []byte
	for attempt := 0; attempt < attempts; attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		resp, err = s.cfg.Transport.Request(ctx, renter, wire.ProtoLeaseEvent, b)
		cancel()
		if err == nil || s.ctx.Err() != nil || attempt == attempts-1 {
			break
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		case <-s.ctx.Done():
		}
	}
	return resp, err
}

// DefaultSettleWindow is how long after a lease's end a provider keeps
// trying to settle it with an unreachable or refusing renter.
const DefaultSettleWindow = 24 * time.Hour

// settle reports the end to the renter, exchanges the two-party receipt and
// records it in the ledger and the reputation book. A failed attempt (the
// renter is unreachable, restarting, or its disk is full) is retried in
// the background with a doubling wait until the lease is settled, the
// supervisor stops (Recover takes it up again after a restart) or the
// lease ended more than SettleWindow ago. A receipt the renter refuses
// maxReceiptRefusals times disagrees with its view of the lease for good:
// the settlement is given up as a dispute (dispute).
func (s *Supervisor) settle(r *leaseRun) {
	refusals := 0
	// over reports whether the attempt that ended with err ends the
	// settlement.
	over := func(err error) bool {
		var ref *refusal
		switch {
		case err == nil || s.ctx.Err() != nil:
			return true
		case errors.As(err, &ref):
			s.cfg.Counters.Add("provider.settle_refused")
			if refusals++; refusals >= maxReceiptRefusals {
				s.dispute(r, refusals, ref.err)
				return true
			}
		}
		if s.settleExpired(r.lease()) {
			s.giveUpSettle(r, err)
			return true
		}
		return false
	}
	err := s.trySettle(r)
	if over(err) {
		return
	}
	log := s.log.With("lease", r.lease().ID)
	log.Warn("lease not settled yet; retrying", "err", err, "retry_in", s.cfg.SettleRetry)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wait := s.cfg.SettleRetry
		for {
			select {
			case <-time.After(wait):
			case <-s.ctx.Done():
				return
			}
			err := s.trySettle(r)
			if over(err) {
				return
			}
			s.cfg.Counters.Add("provider.settle_retry")
			wait = min(2*wait, s.cfg.SettleRetryMax)
			log.Info("lease not settled yet; retrying", "err", err, "retry_in", wait)
		}
	}()
}

// refusal is a settlement attempt whose receipt the renter, reached (it
// answered the final report), refused to countersign.
type refusal struct{ err error }

func (e *refusal) Error() string { return "receipt not countersigned: " + e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// dispute gives up settling a lease whose receipt its renter refused
// refusals times, last saying err: the ledger records the dispute, and the
// lease's record says so (its settlement is not taken up again).
func (s *Supervisor) dispute(r *leaseRun, refusals int, err error) {
	l := r.lease()
	reason := fmt.Sprintf("receipt refused %d times by the renter: %v", refusals, err)
	s.cfg.Counters.Add("provider.settle_disputed")
	s.log.Error("lease settlement given up: the renter refuses its receipt", "lease", l.ID, "renter", l.Renter, "err", err)
	if err := s.cfg.Receipts.dispute(l.ID, l.JobID, l.Renter, reason); err != nil {
		s.log.Error("ledger: dispute not recorded", "lease", l.ID, "err", err)
	}
	r.mu.Lock()
	r.pr.Rec.Dispute = reason
	r.mu.Unlock()
	s.saveRun(r)
	s.purgeNoPersist(r)
}

// settleExpired reports whether a lease ended too long ago to keep trying
// to settle it.
func (s *Supervisor) settleExpired(l auction.Lease) bool {
	return s.now().After(l.End.Add(s.cfg.SettleWindow))
}

func (s *Supervisor) giveUpSettle(r *leaseRun, err error) {
	s.cfg.Counters.Add("provider.settle_abandoned")
	s.log.Error("lease could not be settled within the settlement window; giving up", "lease", r.lease().ID,
		"window", s.cfg.SettleWindow, "err", err)
	s.purgeNoPersist(r)
}

// trySettle makes one attempt at the final report and receipt exchange.
func (s *Supervisor) trySettle(r *leaseRun) error {
	r.mu.Lock()
	done := r.pr.Settled || r.pr.Rec.Dispute != ""
	r.mu.Unlock()
	if done {
		return nil
	}
	log := s.log.With("lease", r.lease().ID)
	sum, err := s.sendEvent(r, 1)
	if err != nil {
		return fmt.Errorf("renter unreachable for the final report: %w", err)
	}
	r.mu.Lock()
	rec := r.pr.Rec
	outs := r.pr.Outputs
	ckpt := ""
	if endedAhead(rec) {
		// Reported: the renter requeues it; no time to settle.
		r.mu.Unlock()
		r.markSettled()
		s.purgeNoPersist(r)
		log.Info("lease ended before its start: reported, nothing to settle")
		return nil
	}
	if r.pr.Checkpoint != nil {
		ckpt = r.pr.Checkpoint.Artifact
	}
	logDigest, scrub, noPersist := r.pr.LogDigest, r.pr.Scrub, r.pr.Job.NoPersist
	r.mu.Unlock()
	rec.Started, rec.Ended = receiptSpan(rec.Lease, rec.Started, rec.Ended)
	// Bill what the renter can vouch for: the run's span less the gaps in
	// the heartbeat summary the renter answered with (the renter checks
	// the same bound, attest.BillableSeconds, before it countersigns).
	gpuSec := attest.BillableSeconds(rec.Lease, rec.Started, rec.Ended, rec.Ended, *sum) * rec.Lease.BilledGPUs()
	gpus, uuids := s.leaseDevices(rec.Lease)
	devices := uuids
	if devices == nil {
		for _, g := range gpus {
			devices = append(devices, strconv.Itoa(g))
		}
	}
	rc := attest.Receipt{
		LeaseID: rec.Lease.ID, JobID: rec.Lease.JobID, Renter: rec.Lease.Renter, Provider: rec.Lease.Provider,
		Start: rec.Started, End: rec.Ended, GPUCount: rec.Lease.GPUCount, GPUFraction: rec.Lease.GPUFraction, Devices: devices,
		GPUSeconds: gpuSec, Price: rec.Lease.Price,
		Amount: attest.AmountFor(gpuSec, rec.Lease.Price), Outcome: rec.Run, Fault: rec.Fault,
		ResultHash: auction.ManifestHash(outs), Checkpoint: ckpt, LogDigest: logDigest, Heartbeats: *sum, IssuedAt: s.now(),
		NoPersist: noPersist, Scrub: scrub,
	}
	sr, err := attest.NewReceipt(s.cfg.Signer, rc)
	if err != nil {
		return fmt.Errorf("make receipt: %w", err)
	}
	b, err := sr.Marshal()
	if err != nil {
		return err
	}
	renter, _ := peer.Decode(rec.Lease.Renter)
	ctx, cancel := context.WithTimeout(s.ctx, 15*time.Second)
	resp, err := s.cfg.Transport.Request(ctx, renter, wire.ProtoReceipt, b)
	cancel()
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return fmt.Errorf("receipt not countersigned: %w", err)
	}
	if err != nil {
		// It answered the final report a moment ago: it refused this one.
		return &refusal{err}
	}
	full, err := attest.OpenReceipt(resp)
	if err != nil || full.Receipt.LeaseID != rc.LeaseID || string(full.Payload) != string(sr.Payload) {
		s.cfg.Counters.Add("provider.bad_countersign")
		return &refusal{fmt.Errorf("renter returned an invalid receipt: %v", err)}
	}
	if err := s.cfg.Receipts.record(full, false); err != nil {
		if errors.Is(err, ledger.ErrAlreadySettled) {
			r.markSettled()
			s.purgeNoPersist(r)
			return nil
		}
		return fmt.Errorf("ledger: %w", err)
	}
	r.markSettled()
	// The renter countersigned once it held the log and outputs.
	s.purgeNoPersist(r)
	s.cfg.Receipts.gossip(full)
	log.Info("lease settled", "amount_usd", fmt.Sprintf("%.6f", rc.Amount), "gpu_seconds", fmt.Sprintf("%.1f", gpuSec))
	return nil
}

// receiptSpan is the span a receipt of lease l whose run went from started
// to ended states: the run clipped to the lease (a job stopped at the
// lease's end ends a moment after it; the renter refuses a receipt outside
// the lease, attest.CheckReceipt), and a positive interval: a lease that
// never ran (or died before its first heartbeat) is settled as a 1 ms span,
// inside the lease.
func receiptSpan(l auction.Lease, started, ended time.Time) (time.Time, time.Time) {
	started = maxTime(started, l.Start)
	if ended.After(l.End) {
		ended = l.End
	}
	if !ended.After(started) {
		if last := l.End.Add(-time.Millisecond); started.After(last) {
			started = last
		}
		ended = started.Add(time.Millisecond)
	}
	return started, ended
}

func (r *leaseRun) markSettled() {
	r.mu.Lock()
	r.pr.Settled = true
	r.mu.Unlock()
	r.s.saveRun(r)
}

// Recover runs at start: a confirmed lease still pending whose start is
// ahead is booked again and scheduled (restore); any other lease that was
// pending or running when the daemon stopped is reported failed (never
// silently forgotten), its leftover processes are killed and its scratch
// space wiped; unsettled leases (not given up as disputed) are settled
// once the network is up (after
// RecoverDelay).
func (s *Supervisor) Recover() error {
	var stale []providerRecord
	err := s.cfg.Store.List(func(_ string, raw []byte) error {
		var pr providerRecord
		if err := json.Unmarshal(raw, &pr); err != nil {
			return nil
		}
		if !pr.Rec.Run.Terminal() || (!pr.Settled && pr.Rec.Dispute == "") {
			stale = append(stale, pr)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, pr := range stale {
		if s.restore(pr) {
			continue
		}
		if !pr.Rec.Run.Terminal() {
			was := pr.Rec.Run
			killOrphan(pr.Pgid, s.cfg.WorkRoot)
			pr.Rec.Run, pr.Rec.Fault = auction.RunFailed, auction.FaultProvider
			pr.Rec.Detail = fmt.Sprintf("provider daemon restarted while the job was %s; the job was stopped", was)
			pr.Rec.Ended = pr.LastBeat
			// (its last heartbeat may precede the start: one sent while
			// the job's inputs were prepared)
			if pr.Rec.Ended.IsZero() || pr.Rec.Started.IsZero() || pr.Rec.Ended.Before(pr.Rec.Started) {
				pr.Rec.Ended = pr.Rec.Started
			}
			s.log.Warn("lease interrupted by a daemon restart", "lease", pr.Rec.Lease.ID, "was", was)
		}
		if pr.FilesUntil.IsZero() {
			pr.FilesUntil = s.filesDue(&pr)
		}
		if err := s.cfg.Store.Put(pr.Rec.Lease.ID, pr); err != nil {
			return err
		}
		r := &leaseRun{s: s, pr: pr, stop: make(chan struct{}), done: make(chan struct{})}
		close(r.done)
		s.mu.Lock()
		s.runs[pr.Rec.Lease.ID] = r
		s.filesUntil[pr.Rec.Lease.ID] = pr.FilesUntil
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			// Wait for the network before telling the renter.
			select {
			case <-time.After(s.cfg.RecoverDelay):
			case <-s.ctx.Done():
				return
			}
			s.settle(r)
		}()
	}
	s.pruneJobFiles("")
	if s.cfg.WorkRoot == "" {
		return nil
	}
	if n, err := runtime.WipeOrphans(s.cfg.WorkRoot, func(string) bool { return false }); err != nil {
		s.log.Warn("wipe orphaned work dirs", "err", err)
	} else if n > 0 {
		s.log.Info("wiped orphaned work dirs", "count", n)
	}
	return nil
}

// killOrphan kills a process group left behind by a previous daemon, if it
// still runs inside our work root.
func killOrphan(pgid int, root string) {
	if pgid <= 1 || root == "" {
		return
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pgid))
	if err != nil || !strings.HasPrefix(cwd, root+string(os.PathSeparator)) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// HandleCancel stops a lease at its renter's signed request
// (wire.ProtoCancel).
func (s *Supervisor) HandleCancel(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	req, err := openCancel(data, from)
	if err != nil {
		s.cfg.Counters.Add("provider.cancel_rejected")
		return nil, err
	}
	r := s.run(req.LeaseID)
	if r == nil || r.lease().Renter != from.String() {
		s.cfg.Counters.Add("provider.cancel_rejected")
		return nil, fmt.Errorf("no lease %s for %s", req.LeaseID, from)
	}
	if req.Gang && r.lease().Gang != nil {
		// Checkpointed on the way out, as a preemption is, and resumed
		// with its gang elsewhere.
		r.abort(auction.RunPreempted, "its gang lost a member: stopped with the gang, to resume together")
		return nil, nil
	}
	r.abort(auction.RunCancelled, "cancelled by the renter")
	return nil, nil
}

// openCancel decodes a cancel (or release) of a lease sent by from: signed
// by from, for a lease id that satisfies auction.ValidID.
func openCancel(data []byte, from peer.ID) (wire.CancelRequest, error) {
	var req wire.CancelRequest
	if err := sign.OpenFrom(data, sign.DomainLeaseCancel, from, &req); err != nil {
		return wire.CancelRequest{}, err
	}
	if err := auction.ValidID(req.LeaseID); err != nil {
		return wire.CancelRequest{}, fmt.Errorf("cancel: lease id: %w", err)
	}
	return req, nil
}

// FillStats adds the supervisor's leases to a provider stats view: running
// and recent leases, the p95 run time and the mean price.
func (s *Supervisor) FillStats(v *api.ProviderStatsView) {
	v.Running, v.Recent = []api.ProviderLease{}, []api.ProviderLease{}
	s.mu.Lock()
	v.Limits = s.limits
	var durations []float64
	var price, n float64
	for _, r := range s.runs {
		r.mu.Lock()
		rec := r.pr.Rec
		r.mu.Unlock()
		if rec.Run.Terminal() {
			v.Recent = append(v.Recent, rec)
			if !rec.Started.IsZero() && rec.Ended.After(rec.Started) {
				durations = append(durations, rec.Ended.Sub(rec.Started).Seconds())
			}
		} else {
			v.Running = append(v.Running, rec)
		}
		price += rec.Lease.Price
		n++
	}
	s.mu.Unlock()
	sort.Slice(v.Recent, func(i, j int) bool { return v.Recent[i].Ended.After(v.Recent[j].Ended) })
	if len(v.Recent) > 20 {
		v.Recent = v.Recent[:20]
	}
	if len(durations) > 0 {
		sort.Float64s(durations)
		v.P95JobSeconds = durations[(len(durations)*95+99)/100-1]
	}
	if n > 0 {
		v.USDPerGPUHour = price / n
	}
}

// Access is what a lease's renter may read of it: its log and, once it
// ended, its outputs. Only Authorize hands one out.
type Access struct {
	s *Supervisor
	r *leaseRun
}

// Authorize answers whether peer from may read lease leaseID's log and
// outputs (only its renter may); a refusal is counted.
func (s *Supervisor) Authorize(leaseID string, from peer.ID) (*Access, bool) {
	if auction.ValidID(leaseID) != nil {
		// Never a lease of ours, and never a path component.
		s.cfg.Counters.Add("provider.unauthorized_stream")
		return nil, false
	}
	r := s.run(leaseID)
	if r == nil || r.lease().Renter != from.String() {
		s.cfg.Counters.Add("provider.unauthorized_stream")
		return nil, false
	}
	return &Access{s: s, r: r}, true
}

// LogPath is where the lease's log is written.
func (a *Access) LogPath() string { return a.s.logPath(a.r.lease().ID) }

// OutputDir holds the lease's collected outputs.
func (a *Access) OutputDir() string { return a.s.outDir(a.r.lease().ID) }

// Ended reports whether the job has ended.
func (a *Access) Ended() bool { return a.r.state().Terminal() }

// Outputs returns the lease's output manifest, and whether the job has
// ended (before that there are none).
func (a *Access) Outputs() ([]auction.OutputFile, bool) {
	a.r.mu.Lock()
	defer a.r.mu.Unlock()
	return append([]auction.OutputFile(nil), a.r.pr.Outputs...), a.r.pr.Rec.Run.Terminal()
}

// ServicePort is the lease's service port (0: not a service job).
func (a *Access) ServicePort() int { return a.r.pr.Job.Run.ServicePort }

// DialService connects to the running service job's port inside its
// sandbox (runtime.Dialer).
func (a *Access) DialService(ctx context.Context) (net.Conn, error) {
	a.r.mu.Lock()
	h, run, port := a.r.h, a.r.pr.Rec.Run, a.r.pr.Job.Run.ServicePort
	a.r.mu.Unlock()
	switch {
	case port == 0:
		return nil, fmt.Errorf("lease %s is not a service", a.r.lease().ID)
	case run != auction.RunRunning || h == nil:
		return nil, fmt.Errorf("lease %s is not running (%s)", a.r.lease().ID, run)
	}
	d, ok := h.(runtime.Dialer)
	if !ok {
		return nil, fmt.Errorf("lease %s: the %s backend cannot reach a service port", a.r.lease().ID, a.r.pr.Rec.Backend)
	}
	return d.Dial(ctx, port)
}

// running is the lease's job while it runs.
func (a *Access) running() (runtime.Handle, error) {
	a.r.mu.Lock()
	h, run := a.r.h, a.r.pr.Rec.Run
	a.r.mu.Unlock()
	if run != auction.RunRunning || h == nil {
		if run == "" {
			run = "pending"
		}
		return nil, fmt.Errorf("lease %s is not running (%s)", a.r.lease().ID, run)
	}
	return h, nil
}

// Running reports why the lease's job is not running (nil: it is).
func (a *Access) Running() error {
	_, err := a.running()
	return err
}

// Exec runs a command inside the lease's running job, with the job's
// identity and confinement (runtime.Execer); it ends with the job.
func (a *Access) Exec(ctx context.Context, req runtime.ExecRequest) (int, error) {
	h, err := a.running()
	if err != nil {
		return -1, err
	}
	x, ok := h.(runtime.Execer)
	if !ok {
		return -1, fmt.Errorf("lease %s: the %s backend cannot run commands in a job", a.r.lease().ID, a.r.pr.Rec.Backend)
	}
	return x.Exec(ctx, req)
}

// DialPort connects to 127.0.0.1:port inside the running job's own
// network namespace (runtime.Forwarder): never the provider's loopback.
func (a *Access) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("invalid port %d: want 1-65535", port)
	}
	h, err := a.running()
	if err != nil {
		return nil, err
	}
	f, ok := h.(runtime.Forwarder)
	if !ok {
		return nil, fmt.Errorf("lease %s: the %s backend cannot forward a job's ports", a.r.lease().ID, a.r.pr.Rec.Backend)
	}
	return f.Forward(ctx, port)
}

// Done is closed once the lease's run has ended.
func (a *Access) Done() <-chan struct{} { return a.r.done }

// lockedWriter serialises a job's stdout and stderr into one log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
	// sum and n, when sum is set, are the running SHA-256 and length of
	// everything written.
	sum hash.Hash
	n   int64
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if l.sum != nil && n > 0 {
		l.sum.Write(p[:n])
		l.n += int64(n)
	}
	return n, err
}

// seed takes into the running digest what the log file f (opened for
// appending) already holds, so that the digest is the whole file's.
func (l *lockedWriter) seed(f *os.File) error {
	rf, err := os.Open(f.Name())
	if err != nil {
		return err
	}
	defer rf.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := io.Copy(l.sum, rf)
	l.n += n
	return err
}

// digest is the SHA-256 (hex) and length of the log so far.
func (l *lockedWriter) digest() (string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return hex.EncodeToString(l.sum.Sum(nil)), l.n
}

// sealed marshals a signed envelope of v.
func sealed(s *sign.Signer, domain string, v any) ([]byte, error) {
	env, err := sign.Seal(s, domain, v)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
