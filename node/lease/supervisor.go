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
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxOutputBytes caps the result files one lease may return.
const MaxOutputBytes = 256 << 20

// Sampler samples the node's GPUs for a lease's heartbeat: the devices
// it holds, and its job's process group when pgid > 0.
type Sampler interface {
	Telemetry(pgid int, devices []int) runtime.Telemetry
}

// Thermal is the host's GPU sensors and the policy's limits on them.
type Thermal interface {
	// Sensors reads the hottest device's temperature and all devices'
	// power draw.
	Sensors() (tempC, powerW int)
	// Limits are the policy's MaxTempC and MaxPowerW (0: no limit).
	Limits() (maxTempC, maxPowerW int)
}

// Bookings is the auction's lease book as the supervisor uses it
// (auction.Provider satisfies it).
type Bookings interface {
	// LeaseEnded frees a lease's GPUs once it ended.
	LeaseEnded(leaseID string, end time.Time, state terms.RunState) error
	// Rebook books a confirmed lease again at recovery (the book lives in
	// memory).
	Rebook(l terms.Lease, job terms.Job) error
	// Slices is the slices of its device a slice lease holds
	// (auction.Booking.Slices): on a device in MIG mode they name its MIG
	// instance (runtime.LeaseUUIDs).
	Slices(leaseID string) []int
}

// Scrubber clears the memory of the devices a lease was booked on as it
// ends, and returns what the lease's receipt says of it
// (attest.Receipt.Scrub).
type Scrubber interface {
	Scrub(leaseID string) string
}

// Artifacts stores and fetches the artifacts of the provider's jobs.
// keys, for a sealed job only, opens its sealed inputs and seals its
// outputs; nil otherwise.
type Artifacts interface {
	// Inputs fetches a job's input artifacts and lays them out read-only
	// in dir (dir/NAME), and makes its image artifact's image available;
	// release unpins and removes them once the job ended. image, when
	// not "", is what the job runs instead of job.Run.Image: the ID of
	// the image loaded from its image artifact, which no other tenant's
	// image can shadow.
	Inputs(ctx context.Context, job terms.Job, dir string, keys *wire.LeaseKeys) (release func(), image string, err error)
	// Outputs stores a lease's collected outputs dir as an artifact owned
	// by the renter and returns its id.
	Outputs(dir, renter string, keys *wire.LeaseKeys) (string, error)
	// Remove removes an artifact from our store: a sealed no-persist
	// lease's outputs artifact once the lease is settled.
	Remove(id string) error
}

// Checkpoints takes and restores the provider's jobs' checkpoints.
type Checkpoints interface {
	// Checkpoint stores a snapshot of a job's checkpoint dir as an
	// artifact owned by the renter (not announced: the renter fetches it
	// from us) and returns its id and size; drop removes our copy once
	// the renter holds it.
	Checkpoint(dir, renter string, keys *wire.LeaseKeys) (id string, bytes int64, drop func(), err error)
	// Restore fetches checkpoint artifact id of job from its owner (and
	// any other holder), verifying every chunk, and writes its files into
	// dir; release removes them.
	Restore(ctx context.Context, job terms.Job, id, dir string, keys *wire.LeaseKeys) (release func(), err error)
}

// Network is what a lease adds to its job's runtime.Spec (a gang member's
// private network): Hook is asked before the job starts; started is then
// given the started job and end is called once the job has ended (either
// may be nil).
type Network interface {
	Hook(l terms.Lease, job terms.Job, spec *runtime.Spec) (started func(runtime.Handle), end func(), err error)
}

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
	// kept after it ends, whatever its job asks (terms.Job.Retain);
	// default terms.DefaultRetain.
	JobFilesMaxRetain time.Duration
	// WorkRoot is the executor's scratch root (orphans there are wiped
	// and killed at recovery).
	WorkRoot string
	// GPUs are the node's devices, indexed as the calendar books them: a
	// lease's devices are run with their UUIDs where known.
	GPUs []terms.GPU
	// Telemetry samples a lease's devices (and the job's process group)
	// for a heartbeat; nil sends empty process telemetry.
	Telemetry Sampler
	// Thermal reads the host's sensors against the policy's limits. Set,
	// the supervisor samples it every heartbeat interval: over a limit it
	// preempts the running preemptible (bronze) leases, and Reading, which
	// the auction's bidding reads, reports it. Nil (declared GPUs) reads
	// as 0 °C and 0 W and is not polled.
	Thermal Thermal
	// Fingerprint is the node's signed hardware fingerprint (its hash is
	// in the capability): heartbeats carry it, so the renter can hold the
	// telemetry to it.
	Fingerprint *sign.Envelope
	// Bookings is the auction's lease book (the provider): leases that
	// end are freed on it, and confirmed leases booked on it again at
	// recovery. The provider is built after the supervisor (it hands the
	// supervisor its leases), so it may instead be set with SetBookings
	// before Recover. Nil: nothing is freed, and every pending lease is
	// reported failed at recovery.
	Bookings Bookings
	// Scrub clears the memory of the devices a lease was booked on as it
	// ends, before its booking is freed; nil says nothing.
	Scrub Scrubber
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

	// Artifacts stores and fetches the artifacts of the leases' jobs: their
	// inputs and images, and their collected outputs. Nil: jobs with
	// artifacts fail to start, and outputs are kept in JobsDir only.
	Artifacts Artifacts
	// Checkpoints takes and restores the jobs' checkpoints. Nil: no
	// checkpoints are taken and jobs start fresh.
	Checkpoints Checkpoints
	// Network, when set, is asked before each lease's job starts what the
	// lease adds to its runtime.Spec (a gang member's private network:
	// node/gangnet's Net). An error fails the lease before its job starts.
	Network Network
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
	changed broadcast.Signal
	wg      sync.WaitGroup
	// closing is set (under mu) once Close began: no lease starts a run
	// from then on, so no goroutine joins wg while Close waits for it.
	closing bool
	// pruned is when job files were last pruned (unix nanoseconds).
	pruned atomic.Int64
	// jobBytes is what the job files held at the last size prune plus
	// the leases' files since (-1: unknown, scan at the next lease end).
	jobBytes atomic.Int64
	// filesUntil is when each ended lease's job files go (its record's
	// FilesUntil), for those whose files may still be on disk.
	filesUntil map[string]time.Time
	// book is the auction's lease book (cfg.Bookings, or SetBookings').
	book atomic.Pointer[Bookings]
}

// SetBookings sets the auction's lease book the supervisor frees ended
// leases on and books recovered ones on again (SupervisorConfig.Bookings),
// for the provider built after it. Call it before Recover.
func (s *Supervisor) SetBookings(b Bookings) {
	if b == nil {
		s.book.Store(nil)
		return
	}
	s.book.Store(&b)
}

// bookings is the auction's lease book; nil when there is none.
func (s *Supervisor) bookings() Bookings {
	if b := s.book.Load(); b != nil {
		return *b
	}
	return nil
}

// providerRecord is what a provider persists per lease, so a restart never
// forgets a job.
type providerRecord struct {
	// Rec is the lease's state, its machine's (view is what the API shows
	// of it).
	Rec      lifecycle.Lease    `json:"rec"`
	Job      terms.Job          `json:"job"`
	Pgid     int                `json:"pgid,omitempty"`
	LastBeat time.Time          `json:"last_beat,omitempty"`
	Outputs  []terms.OutputFile `json:"outputs,omitempty"`
	// OldSettled is the settled flag of a record stored before the
	// lease's phase was (read by upgrade only).
	OldSettled bool `json:"settled,omitempty"`
	// OutputsArtifact is the artifact id of the collected outputs.
	OutputsArtifact string `json:"outputs_artifact,omitempty"`
	// Checkpoint is the last checkpoint the renter took; Restored the one
	// the job started from.
	Checkpoint *terms.Checkpoint `json:"checkpoint,omitempty"`
	Restored   *terms.Checkpoint `json:"restored,omitempty"`
	// LogDigest and LogBytes are the SHA-256 (hex) and length of the
	// job's whole log, kept as it is written (wire.LeaseEvent).
	LogDigest string `json:"log_digest,omitempty"`
	LogBytes  int64  `json:"log_bytes,omitempty"`
	// Scrub is what was done to the lease's devices' memory as it ended
	// (SupervisorConfig.Scrub, a Scrubber), for its receipt.
	Scrub string `json:"scrub,omitempty"`
	// FilesUntil is when the lease's job log and outputs are removed: its
	// end plus its job's retention, or for a no-persist job the end of
	// its settlement window (they go at its settlement, sooner).
	FilesUntil time.Time `json:"files_until,omitempty"`
}

// leaseRun drives one confirmed lease on the provider. Its state is its
// record's Rec, which only its machine changes (step); its goroutine (loop)
// carries out the machine's effects and feeds their results back.
type leaseRun struct {
	s      *Supervisor
	saveMu sync.Mutex
	mu     sync.Mutex
	pr     providerRecord
	// queue holds the effects stepped and not yet carried out; wake is
	// signalled when it grows.
	queue []lifecycle.Effect
	wake  chan struct{}
	h     runtime.Handle
	// logw writes the job's log, keeping its digest (nil until opened).
	logw *lockedWriter
	// logGrew is notified as the log is created and at each write to it.
	logGrew broadcast.Signal
	// stop is closed once the lease is told to stop: it ends the fetches
	// made before the job starts and its checkpoint loop.
	stop     chan struct{}
	stopOnce sync.Once
	// seal is a sealed job's keys and scratch tmpfs while it runs (nil
	// for other jobs, and before and after its run): in memory only.
	seal      *sealing
	done      chan struct{}
	doneOnce  sync.Once
	confirmed time.Time // when the lease was confirmed (for start latency)
	ck        ckptState

	// The loop's own: its timer, the job's spec and exit, what the run
	// holds until it is released, the renter's answer to the final
	// report.
	timer                *time.Timer
	spec                 runtime.Spec
	netStarted           func(runtime.Handle)
	releases             []func()
	exits                chan runtime.Result
	ckptDone             chan struct{}
	beatsStop, beatsDone chan struct{}
	sum                  *attest.HeartbeatSummary
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
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.JobsDir, 0o700); err != nil {
		return nil, fmt.Errorf("jobs dir: %w", err)
	}
	if cfg.JobFilesMaxRetain <= 0 {
		cfg.JobFilesMaxRetain = terms.DefaultRetain
	}
	s := &Supervisor{cfg: cfg, log: log, ctx: ctx, runs: map[string]*leaseRun{}, held: map[string]string{}, heldJobs: map[string]string{},
		filesUntil: map[string]time.Time{}}
	s.jobBytes.Store(-1) // unknown: the first prune scans
	s.SetBookings(cfg.Bookings)
	if err := s.loadHeld(); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.every(janitorEvery, s.expireJobFiles)
	if cfg.Thermal != nil {
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
	temp, power := s.cfg.Thermal.Sensors()
	maxT, maxP := s.cfg.Thermal.Limits()
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
			// A lease told to stop already (by the last reading: its job
			// may take a while to stop) is not preempted, nor counted, again.
			if l := r.lease(); l.Preemptible && !r.state().Terminal() && !r.stopAsked() {
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
		r.abort(terms.RunPreempted, detail)
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

// rules are the leases' machines' policy, from the configuration.
func (s *Supervisor) rules() lifecycle.Rules {
	return lifecycle.Rules{Grace: s.cfg.PreemptGrace, SettleRetry: s.cfg.SettleRetry, SettleRetryMax: s.cfg.SettleRetryMax,
		SettleWindow: s.cfg.SettleWindow, MaxRefusals: maxReceiptRefusals, RecoverDelay: s.cfg.RecoverDelay}
}

// inlineLog is lease leaseID's log for its final report, when it is still
// the size bytes reported (ok false otherwise: the renter fetches it).
func (s *Supervisor) inlineLog(leaseID string, size int64) (log []byte, ok bool) {
	f, err := os.Open(s.logPath(leaseID))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, wire.MaxInlineLog+1))
	if err != nil || int64(len(b)) != size {
		return nil, false
	}
	return b, true
}

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
	s.changed.Notify()
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
// (auction.Runtime.Admit): a lease id this provider ever held (a
// live run, a persisted record, a receipt in its ledger, or a log or
// outputs left on disk) is refused whoever awards it, and a job id is
// refused when it belongs to another renter's lease. Lease ids are chosen
// by renters and gossiped in receipts: without this a renter could award
// a lease id it saw after a restart and read the earlier renter's logs.
func (s *Supervisor) Admit(leaseID, jobID, renter string) error {
	if err := terms.ValidID(leaseID); err != nil {
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
func (s *Supervisor) OnLease(l terms.Lease, job terms.Job, preempts []string) {
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
			victim.abort(terms.RunPreempted, fmt.Sprintf("preempted by %s lease %s", job.Tier, l.ID))
		}
	}
	r := s.newRun(providerRecord{Job: job})
	// Its first save is the loop's, not this callback's: the auction
	// calls OnLease with its lock held, and a store write there stalled
	// every call, bid and award of a busy provider. A crash before this
	// write loses the lease like a crash during it would: the renter
	// hears no heartbeat and recovers the job elsewhere.
	if !r.step(lifecycle.Confirmed{Lease: l, Job: job}) {
		s.log.Error("lease not run: its span is empty", "lease", l.ID, "start", l.Start, "end", l.End)
		return
	}
	s.mu.Lock()
	if s.closing {
		// Confirmed while the daemon stops (an award still in flight):
		// not run, as if it crashed just after the confirm; its renter
		// hears no heartbeat and recovers the job elsewhere.
		s.mu.Unlock()
		s.log.Warn("lease confirmed while stopping: not run", "lease", l.ID, "job", l.JobID)
		return
	}
	s.runs[l.ID] = r
	s.bindLocked(l.ID, l.JobID, l.Renter)
	// Counted under mu, which Close takes to set closing before it waits.
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		r.runGuarded()
	}()
}

// newRun returns the run of a lease whose record is pr; step starts it.
func (s *Supervisor) newRun(pr providerRecord) *leaseRun {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &leaseRun{s: s, pr: pr, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		confirmed: s.now(), timer: t}
}

// runGuarded is loop, with a failure inside it (a panic in the lease's own
// path: its executor, its inputs, a bug) ending this lease, never the
// daemon: the stack is logged and the lease reported failed, the
// provider's fault (it was the provider's software); a settlement attempt
// that failed so is tried again.
func (r *leaseRun) runGuarded() {
	for !r.loopGuarded() {
	}
}

func (r *leaseRun) loopGuarded() (over bool) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		s := r.s
		l := r.lease()
		s.cfg.Counters.Add("provider.lease_panic")
		s.log.Error("lease failed: internal error", "lease", l.ID, "job", l.JobID, "panic", p, "stack", string(debug.Stack()))
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("lease could not be reported failed", "lease", l.ID, "panic", p, "stack", string(debug.Stack()))
				over = true
			}
		}()
		// The effects queued after the one that failed still follow.
		now, err := s.now(), fmt.Sprintf("provider internal error: %v", p)
		switch r.phase() {
		case lifecycle.Reporting:
			r.step(lifecycle.ReportFailed{Err: err})
		case lifecycle.Receipting:
			r.step(lifecycle.ReceiptFailed{Err: err})
		default:
			r.step(lifecycle.Failed{Exit: lifecycle.Exit{Code: -1, Started: now, Ended: now, Err: err}})
		}
	}()
	r.loop()
	return true
}

// OnMove is the auction provider's callback for a confirmed lease it moved
// earlier: the run waits for the new start instead, and tells the renter
// before it begins. It reports false when the run already began (or is
// unknown): the provider then keeps the lease where it was.
func (s *Supervisor) OnMove(moved terms.Lease, _ terms.Job) bool {
	r := s.run(moved.ID)
	return r != nil && r.step(lifecycle.Moved{Lease: moved})
}

// Close stops every job (the daemon is stopping: they are reported failed),
// except confirmed leases that have not started yet, which stay pending in
// the store for the next start (Recover books them again), and waits for
// the supervisor's goroutines. A lease confirmed once Close began is not
// run (OnLease). Cancel ctx first.
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closing = true
	runs := make([]*leaseRun, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.keepPending()
	}
	for _, r := range runs {
		r.shutdown()
	}
	s.wg.Wait()
}

// abort stops a pending or running job, recording why (the first stop
// counts).
func (r *leaseRun) abort(as terms.RunState, detail string) {
	r.step(lifecycle.StopRequested{As: as, Detail: detail})
}

// shutdown stops the job because the daemon is stopping and waits for it.
func (r *leaseRun) shutdown() {
	r.abort(terms.RunFailed, lifecycle.ShutdownDetail)
	<-r.done
}

func (r *leaseRun) lease() terms.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Lease
}

func (r *leaseRun) state() terms.RunState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Run
}

// stopAsked reports whether the lease was told to stop already (the first
// stop counts).
func (r *leaseRun) stopAsked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Stop != nil
}

func (r *leaseRun) phase() lifecycle.Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Phase
}

func (r *leaseRun) handle() runtime.Handle {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h
}

// step applies ev to the lease's machine (lifecycle.Rules.Step) and queues
// its effects for the lease's loop; it reports whether ev changed
// anything. The effects that only signal are done at once: a count, and
// the stop of what the lease waits on (a fetch, the checkpoint loop),
// which the loop, blocked in it, could not do.
func (r *leaseRun) step(ev lifecycle.Event) bool {
	s := r.s
	prev, st, effs := r.apply(ev)
	switch {
	case st.Phase == prev.Phase:
	case st.Phase == lifecycle.Abandoned:
		s.log.Error("lease could not be settled within the settlement window; giving up", "lease", st.Lease.ID, "window", s.cfg.SettleWindow)
	case st.Phase == lifecycle.Disputed && prev.Phase != "":
		s.log.Error("lease settlement given up as a dispute", "lease", st.Lease.ID, "renter", st.Lease.Renter, "reason", st.Dispute)
	case st.Phase == lifecycle.Retrying && prev.Phase != "":
		s.log.Info("lease not settled yet; retrying", "lease", st.Lease.ID, "retry_in", st.Due.Sub(s.now()).Round(time.Millisecond))
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return len(effs) > 0
}

// apply is step's change of the lease's state, under its lock.
func (r *leaseRun) apply(ev lifecycle.Event) (prev, st lifecycle.Lease, effs []lifecycle.Effect) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev = r.pr.Rec
	st, effs = r.s.rules().Step(prev, ev, r.s.now())
	r.pr.Rec = st
	for _, e := range effs {
		switch e := e.(type) {
		case lifecycle.Count:
			r.s.cfg.Counters.Add(e.Name)
			continue
		case lifecycle.CancelPrepare:
			r.closeStop()
			continue
		case lifecycle.StopExecutor:
			r.closeStop()
		}
		r.queue = append(r.queue, e)
	}
	return prev, st, effs
}

func (r *leaseRun) closeStop() { r.stopOnce.Do(func() { close(r.stop) }) }

func (r *leaseRun) closeDone() { r.doneOnce.Do(func() { close(r.done) }) }

// next takes the next effect queued (false: none).
func (r *leaseRun) next() (lifecycle.Effect, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return nil, false
	}
	e := r.queue[0]
	r.queue = r.queue[1:]
	return e, true
}

// effects carries out the queued effects, in order, with those their
// results queue; it reports false once the lease is parked.
func (r *leaseRun) effects() bool {
	for e, ok := r.next(); ok; e, ok = r.next() {
		if !r.do(e) {
			return false
		}
	}
	return true
}

// loop is the lease's goroutine: it carries out the lease's effects and
// waits for what comes next (a step from a caller, its timer, its job's
// exit), until the lease is done here: settled or given up, parked for
// the next start, or, its run over, the supervisor stopping (Recover takes
// its settlement up again at the next start). done is closed once the
// run ended and its first settlement attempt was made.
func (r *leaseRun) loop() {
	defer r.closeDone()
	for {
		if !r.effects() {
			return
		}
		r.mu.Lock()
		st := r.pr.Rec
		r.mu.Unlock()
		if st.Phase.Final() {
			return
		}
		var stopping <-chan struct{}
		if st.Run.Terminal() {
			r.closeDone()
			stopping = r.s.ctx.Done()
		}
		select {
		case <-r.wake:
		case <-r.timer.C:
			r.step(lifecycle.TimerDue{})
		case res := <-r.exits:
			r.exits = nil
			<-r.ckptDone
			r.step(lifecycle.Exited{Exit: exitOf(res)})
		case <-stopping:
			return
		}
	}
}

// do carries out one effect, feeding its result back (step); it reports
// false when the lease is parked.
func (r *leaseRun) do(e lifecycle.Effect) bool {
	s := r.s
	switch e := e.(type) {
	case lifecycle.Persist:
		s.saveRun(r)
	case lifecycle.ArmTimer:
		r.timer.Reset(e.At.Sub(s.now()))
	case lifecycle.AnnounceMove:
		r.announceMove(e.Lease)
	case lifecycle.StartHeartbeats:
		stop, done := make(chan struct{}), make(chan struct{})
		r.beatsStop, r.beatsDone = stop, done
		go func() {
			defer close(done)
			r.heartbeats(stop)
		}()
	case lifecycle.Prepare:
		if err := r.prepare(); err != nil {
			now := s.now()
			r.step(lifecycle.Failed{Exit: lifecycle.Exit{Code: -1, Started: now, Ended: now, Err: err.Error(), SpecFault: runtime.JobFault(err)}})
			break
		}
		r.step(lifecycle.Prepared{})
	case lifecycle.StartExecutor:
		r.startExec()
	case lifecycle.Notify:
		pr := r.record() // the state as it is now, however late the report goes
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_, _ = s.sendEvent(pr, 5)
		}()
	case lifecycle.StopExecutor:
		if h := r.handle(); h != nil {
			_ = h.Stop(e.Grace)
		}
	case lifecycle.Snapshot:
		r.mu.Lock()
		h, started, ended := r.h, r.pr.Rec.Started, r.pr.Rec.Exit.Ended
		r.mu.Unlock()
		r.snapshot(h, terms.CheckpointStopped, started, maxTime(ended, started), r.logw)
	case lifecycle.CollectOutputs:
		r.collect()
		r.step(lifecycle.OutputsCollected{})
	case lifecycle.Release:
		r.release()
	case lifecycle.Free:
		r.mu.Lock()
		st := r.pr.Rec
		r.mu.Unlock()
		s.cfg.Observe.leaseEnded(st.Lease, st.Run, st.Started, st.Ended)
		if b := s.bookings(); b != nil {
			_ = b.LeaseEnded(st.Lease.ID, st.Ended, st.Run)
		}
		s.log.Info("job ended", "lease", st.Lease.ID, "run", st.Run, "detail", st.Detail)
	case lifecycle.SendReport:
		r.sendReport()
	case lifecycle.SendReceipt:
		r.sendReceipt(e.Start, e.End)
	case lifecycle.RecordDispute:
		l := r.lease()
		if err := s.cfg.Receipts.dispute(l.ID, l.JobID, l.Renter, e.Reason); err != nil {
			s.log.Error("ledger: dispute not recorded", "lease", l.ID, "err", err)
		}
	case lifecycle.Purge:
		s.purgeNoPersist(r)
	case lifecycle.Park:
		s.log.Info("reservation kept for the next start", "lease", r.lease().ID)
		return false
	case lifecycle.Rebook:
		r.rebook()
	case lifecycle.KillOrphan:
		r.mu.Lock()
		pgid, id, detail := r.pr.Pgid, r.pr.Rec.Lease.ID, r.pr.Rec.Detail
		r.mu.Unlock()
		killOrphan(pgid, s.cfg.WorkRoot)
		s.log.Warn("lease interrupted by a daemon restart", "lease", id, "detail", detail)
	}
	return true
}

// exitOf is the machine's account of an executor's result.
func exitOf(res runtime.Result) lifecycle.Exit {
	e := lifecycle.Exit{Started: res.Started, Ended: res.Ended, Code: res.ExitCode, Reason: res.Reason, How: lifecycle.HowOther}
	switch res.Reason {
	case runtime.ReasonExited:
		e.How = lifecycle.HowExited
	case runtime.ReasonDeadline:
		e.How = lifecycle.HowDeadline
	case runtime.ReasonOOM:
		e.How = lifecycle.HowOOM
	}
	if res.Err != nil {
		e.Err, e.SpecFault = res.Err.Error(), runtime.JobFault(res.Err)
	}
	return e
}

// prepare lays out what the job needs before it starts: its log, its
// sealed scratch and keys, its inputs, the checkpoint it restores and its
// network. What it holds is freed at release.
func (r *leaseRun) prepare() error {
	s := r.s
	l, job := r.lease(), r.pr.Job
	log := s.log.With("lease", l.ID, "job", l.JobID)
	if err := os.MkdirAll(filepath.Dir(s.logPath(l.ID)), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(s.logPath(l.ID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.releases = append(r.releases, func() { _ = logf.Close() })
	r.logGrew.Notify()
	lw := &lockedWriter{w: logf, sum: sha256.New(), grew: &r.logGrew}
	if err := lw.seed(logf); err != nil {
		return err
	}
	// Whatever ends the run from here, its report names the log as
	// written (release takes its digest).
	r.mu.Lock()
	r.logw = lw
	r.mu.Unlock()
	if job.Sealed {
		if err := r.openSeal(job); err != nil {
			fmt.Fprintf(lw, "gpumesh: sealed job: %v\n", err)
			return fmt.Errorf("sealed job: %w", err)
		}
	}
	gpus, _ := s.leaseDevices(l)
	var held []int
	if b := s.bookings(); l.GPUFraction > 0 && b != nil {
		held = b.Slices(l.ID)
	}
	// The job sees the devices, or the MIG instances, it holds.
	uuids, err := runtime.LeaseUUIDs(s.cfg.GPUs, gpus, l.GPUFraction, held)
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: %v\n", err)
		return err
	}
	spec := runtime.Spec{ID: l.ID, JobID: job.ID, Command: job.Run.Command, Image: job.Run.Image, Env: job.Run.Env,
		GPUs: gpus, UUIDs: uuids, Deadline: l.End, MemoryMB: job.Run.MemoryMB, Outputs: job.Run.Outputs, NoSwap: job.NoPersist, Sealed: job.Sealed}
	if l.GPUFraction > 0 && len(gpus) == 1 && gpus[0] < len(s.cfg.GPUs) {
		// A slice of a device: confined to it where the runtime enforces
		// slices (the capability record says how: GPU.Isolation).
		spec.MPS = runtime.SliceMPS(s.cfg.GPUs[gpus[0]], l.GPUFraction)
	}
	if len(job.Run.Artifacts()) > 0 {
		release, dir, image, err := r.prepareInputs(job)
		if err != nil {
			fmt.Fprintf(lw, "gpumesh: job inputs: %v\n", err)
			return fmt.Errorf("inputs: %w", err)
		}
		r.releases = append(r.releases, release)
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
		return err
	}
	r.releases = append(r.releases, releaseRestore)
	spec.Restore = restoreDir
	if s.cfg.Network != nil {
		started, end, err := s.cfg.Network.Hook(l, job, &spec)
		if err != nil {
			fmt.Fprintf(lw, "gpumesh: job network: %v\n", err)
			return fmt.Errorf("network: %w", err)
		}
		if end != nil {
			r.releases = append(r.releases, end)
		}
		r.netStarted = started
	}
	r.spec = spec
	return nil
}

// startExec starts the prepared job, and the goroutines that wait for its
// exit and take its periodic checkpoints.
func (r *leaseRun) startExec() {
	s := r.s
	l, job, lw := r.lease(), r.pr.Job, r.logw
	started := s.now()
	h, err := s.cfg.Exec.Start(s.ctx, r.spec, lw, lw)
	running := s.now() // the job runs from here at the latest
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: job failed to start: %v\n", err)
		r.step(lifecycle.Failed{Exit: lifecycle.Exit{Code: -1, Started: started, Ended: s.now(), Err: err.Error(), SpecFault: runtime.JobFault(err)}})
		return
	}
	if r.netStarted != nil {
		r.netStarted(h)
	}
	r.mu.Lock()
	r.h = h
	if p, ok := h.(interface{ Pid() int }); ok {
		r.pr.Pgid = p.Pid()
	}
	r.mu.Unlock()
	exits, ckptDone := make(chan runtime.Result, 1), make(chan struct{})
	r.exits, r.ckptDone = exits, ckptDone
	go func() { exits <- h.Wait() }()
	go func() {
		defer close(ckptDone)
		if job.CheckpointEvery > 0 {
			r.checkpointLoop(h, job.CheckpointEvery, started, lw)
		}
	}()
	backend := backendName(s.cfg.Exec, r.spec)
	r.step(lifecycle.ExecStarted{Backend: backend, At: running})
	s.log.Info("job started", "lease", l.ID, "job", l.JobID, "backend", backend,
		"start_latency", started.Sub(maxTime(l.Start, r.confirmed)).Round(time.Microsecond))
}

// collect takes the exited job's outputs (into its outputs artifact, when
// kept as one) and wipes its work dir.
func (r *leaseRun) collect() {
	s := r.s
	l, job, h, lw := r.lease(), r.pr.Job, r.handle(), r.logw
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
		s.log.Warn("wipe work dir", "lease", l.ID, "err", err)
	}
	// A no-persist job's outputs are not kept as an artifact: its renter
	// takes them over the outputs stream before it settles. A sealed
	// job's are, sealed: its renter takes them from there, and nothing
	// else of them is here (a no-persist one's artifact goes once the
	// lease is settled, purgeNoPersist).
	art := ""
	if len(outs) > 0 && s.cfg.Artifacts != nil && (!job.NoPersist || seal != nil) {
		if id, err := s.cfg.Artifacts.Outputs(outDir, l.Renter, seal.leaseKeys()); err != nil {
			s.log.Warn("outputs not stored as an artifact", "lease", l.ID, "err", err)
		} else {
			art = id
		}
	}
	// Set while the run is not over yet: its renter reads the outputs
	// once it is.
	r.mu.Lock()
	r.pr.Outputs, r.pr.OutputsArtifact = outs, art
	r.mu.Unlock()
	s.pruneJobFiles(l.ID)
}

// release ends what the run held once it is over: its heartbeats (its
// final report is ready), a sealed job's plaintext (none is left once its
// renter hears of the end), its inputs, restored checkpoint and network,
// and its log (whose digest the report names); the devices' memory is
// cleared before the calendar frees them (Free).
func (r *leaseRun) release() {
	s := r.s
	if r.beatsStop != nil {
		close(r.beatsStop)
		<-r.beatsDone
		r.beatsStop = nil
	}
	r.closeSeal()
	for i := len(r.releases) - 1; i >= 0; i-- {
		r.releases[i]() // last taken, first freed
	}
	r.releases = nil
	scrub := ""
	if s.cfg.Scrub != nil {
		scrub = s.cfg.Scrub.Scrub(r.lease().ID)
	}
	r.mu.Lock()
	r.pr.Scrub = scrub
	if r.logw != nil {
		r.pr.LogDigest, r.pr.LogBytes = r.logw.digest()
	}
	r.pr.FilesUntil = s.filesDue(&r.pr)
	id, until := r.pr.Rec.Lease.ID, r.pr.FilesUntil
	r.mu.Unlock()
	s.mu.Lock()
	s.filesUntil[id] = until
	s.mu.Unlock()
}

// pruneEvery is how often, at most, a lease's end prunes job files by
// age: a prune reads both directories, which hold a file per recent lease.
const pruneEvery = time.Hour

// janitorEvery is how often the job files past their lease's retention
// are removed (expireJobFiles).
const janitorEvery = time.Minute

// retention is how long a lease of job keeps its job files after it ends:
// the job's Retain (terms.DefaultRetain when it sets none), at most the
// provider's JobFilesMaxRetain.
func (s *Supervisor) retention(job terms.Job) time.Duration {
	keep := job.Retain
	if keep <= 0 {
		keep = terms.DefaultRetain
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
	if art != "" && s.cfg.Artifacts != nil {
		if err := s.cfg.Artifacts.Remove(art); err != nil {
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
func (r *leaseRun) prepareInputs(job terms.Job) (release func(), dir, image string, err error) {
	s := r.s
	if s.cfg.Artifacts == nil {
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
	release, image, err = s.cfg.Artifacts.Inputs(ctx, job, dir, seal.leaseKeys())
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

// leaseDevices is the device indices a lease holds (0..GPUCount-1 for a
// lease booked without devices) and their UUIDs, when all are known.
func (s *Supervisor) leaseDevices(l terms.Lease) ([]int, []string) {
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

// firstHeartbeatAfter is how long after a lease's start its provider sends
// the first heartbeat, at heartbeat interval every: two fifths of it (see
// leaseRun.heartbeats).
func firstHeartbeatAfter(every time.Duration) time.Duration { return every * 2 / 5 }

// heartbeats sends signed telemetry to the renter every interval until
// stop is closed (the job ended and its final report is ready); until the
// job starts they are marked Preparing.
//
// The first one goes out two fifths of an interval after the lease's
// start, then one per interval: a heartbeat vouches for the half interval
// either side of it (attest.HeartbeatMonitor.Summary), so the lease is
// covered from its start (with a tenth of an interval to spare for the
// beat's delay), as it was by a first heartbeat at the start, with no
// half interval spent before it; and a job that ends sooner, of which no
// heartbeat is expected (HeartbeatSummary.Expected 0), costs none: one
// signed message and stream each way fewer for every short job.
func (r *leaseRun) heartbeats(stop <-chan struct{}) {
	s := r.s
	l := r.lease()
	every := s.cfg.HeartbeatInterval
	t := time.NewTimer(min(every, max(0, l.Start.Add(firstHeartbeatAfter(every)).Sub(s.now()))))
	defer t.Stop()
	var seq uint64
	unknown := 0 // answers in a row from a renter that holds no such lease
	devices, uuids := s.leaseDevices(l)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			t.Reset(every)
		}
		seq++
		r.mu.Lock()
		pgid, preparing := r.pr.Pgid, r.pr.Rec.Run == terms.RunPending
		r.mu.Unlock()
		var tel runtime.Telemetry
		if s.cfg.Telemetry != nil {
			tel = s.cfg.Telemetry.Telemetry(pgid, devices)
		}
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
			r.abort(terms.RunCancelled, "the renter holds no such lease (an award it gave up on)")
			// Nothing more to tell a renter that holds no such lease. The
			// job's stop takes its time (a busy host runs it after more
			// than one interval): beating on meanwhile would hear
			// "unknown" again and stop the lease, and count it, once per
			// beat.
			return
		}
	}
}

// record is a copy of the lease's record.
func (r *leaseRun) record() providerRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr
}

// errReleased is sendEvent's error when the renter answered a final
// report with its signed release of the lease.
var errReleased = errors.New("the renter released the lease")

// sendEvent reports the run's state in its record pr to the renter and
// returns the renter's heartbeat summary (for terminal states), or
// errReleased if the renter answered with its release of the lease.
func (s *Supervisor) sendEvent(pr providerRecord, attempts int) (*attest.HeartbeatSummary, error) {
	rec := pr.Rec
	ev := wire.LeaseEvent{LeaseID: rec.Lease.ID, JobID: rec.Lease.JobID, Provider: s.cfg.Signer.ID().String(), Run: rec.Run,
		Detail: rec.Detail, ExitCode: rec.ExitCode, Fault: rec.Fault, Started: rec.Started, Ended: rec.Ended, Time: s.now()}
	if rec.Run.Terminal() {
		// (a report of the run under way names no outputs yet: they are
		// collected just before it ends)
		ev.SetOutputs(pr.Outputs)
		ev.OutputsArtifact = pr.OutputsArtifact
		ev.LogDigest, ev.LogBytes = pr.LogDigest, pr.LogBytes
		if pr.LogDigest != "" && pr.LogBytes <= wire.MaxInlineLog {
			ev.Log, ev.LogInline = s.inlineLog(rec.Lease.ID, pr.LogBytes)
		}
	}
	if pr.Restored != nil {
		ev.Restored = pr.Restored.Artifact
	}
	resp, err := s.deliverEvent(rec.Lease.Renter, ev, attempts)
	if err != nil {
		return nil, err
	}
	if !ev.Run.Terminal() {
		return nil, nil
	}
	var ans wire.LeaseEventAnswer
	if err := json.Unmarshal(resp, &ans); err != nil {
		return nil, fmt.Errorf("renter's answer: %w", err)
	}
	if ans.Released != nil {
		renter, err := peer.Decode(rec.Lease.Renter)
		if err != nil {
			return nil, err
		}
		if err := ans.CheckReleased(sign.ID(renter), rec.Lease.ID, rec.Lease.JobID); err != nil {
			return nil, fmt.Errorf("renter's answer: %w", err)
		}
		return nil, errReleased
	}
	sum, err := attest.DecodeHeartbeatSummary(resp)
	if err != nil {
		return nil, fmt.Errorf("renter's answer: %w", err)
	}
	return &sum, nil
}

// announceMove tells the renter its pending lease moved earlier to l (a
// lease event carrying the new start and devices), before the lease's
// first heartbeat, so that it watches and bills the new span.
func (r *leaseRun) announceMove(l terms.Lease) {
	s := r.s
	s.log.Info("lease moved earlier", "lease", l.ID, "job", l.JobID, "to", l.Start)
	ev := wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: s.cfg.Signer.ID().String(), Run: terms.RunPending,
		Time: s.now(), Moved: &wire.LeaseMove{Start: l.Start, Devices: l.Devices}}
	if _, err := s.deliverEvent(l.Renter, ev, 3); err != nil {
		s.log.Warn("renter not told of the lease's move: the lease is not run", "lease", l.ID, "err", err)
		r.step(lifecycle.MoveUntold{Err: err.Error()})
		return
	}
	r.step(lifecycle.MoveTold{Lease: l})
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

// sendReport sends the final report of the lease's run, the first half of
// its settlement; the renter answers with its heartbeat summary, which the
// receipt bills by. When and how often a failed settlement is tried again,
// and when it is given up, is the lease's machine's to say.
func (r *leaseRun) sendReport() {
	s := r.s
	sum, err := s.sendEvent(r.record(), 1)
	if errors.Is(err, errReleased) {
		s.log.Info("lease released by its renter: its settlement ends", "lease", r.lease().ID)
		r.step(lifecycle.ReportReleased{})
		return
	}
	if err != nil {
		s.log.Warn("lease not settled: renter unreachable for the final report", "lease", r.lease().ID, "err", err)
		r.step(lifecycle.ReportFailed{Err: err.Error()})
		return
	}
	r.sum = sum
	r.step(lifecycle.ReportDelivered{})
	if r.phase() == lifecycle.Settled {
		s.log.Info("lease ended before its start: reported, nothing to settle", "lease", r.lease().ID)
	}
}

// sendReceipt makes the lease's receipt billing start to end, has its
// renter countersign it and records it in the ledger and the reputation
// book.
func (r *leaseRun) sendReceipt(start, end time.Time) {
	s := r.s
	switch err := r.exchangeReceipt(start, end); {
	case err == nil:
		r.step(lifecycle.ReceiptCountersigned{})
	case errors.As(err, new(*refusal)):
		s.log.Warn("lease not settled: receipt refused", "lease", r.lease().ID, "err", err)
		r.step(lifecycle.ReceiptRefused{Err: errors.Unwrap(err).Error()})
	default:
		s.log.Warn("lease not settled", "lease", r.lease().ID, "err", err)
		r.step(lifecycle.ReceiptFailed{Err: err.Error()})
	}
}

// refusal is a settlement attempt whose receipt the renter, reached (it
// answered the final report), refused to countersign.
type refusal struct{ err error }

func (e *refusal) Error() string { return "receipt not countersigned: " + e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// exchangeReceipt is one receipt exchange (sendReceipt).
func (r *leaseRun) exchangeReceipt(start, end time.Time) error {
	s := r.s
	r.mu.Lock()
	rec, sum := r.pr.Rec, r.sum
	outs := r.pr.Outputs
	ckpt := ""
	if r.pr.Checkpoint != nil {
		ckpt = r.pr.Checkpoint.Artifact
	}
	logDigest, scrub, noPersist := r.pr.LogDigest, r.pr.Scrub, r.pr.Job.NoPersist
	r.mu.Unlock()
	if sum == nil {
		return errors.New("no heartbeat summary from the renter to bill by")
	}
	// Bill what the renter can vouch for: the run's span less the gaps in
	// the heartbeat summary the renter answered with (the renter checks
	// the same bound, attest.BillableSeconds, before it countersigns).
	gpuSec := attest.BillableSeconds(rec.Lease, start, end, end, *sum) * rec.Lease.BilledGPUs()
	gpus, uuids := s.leaseDevices(rec.Lease)
	devices := uuids
	if devices == nil {
		for _, g := range gpus {
			devices = append(devices, strconv.Itoa(g))
		}
	}
	rc := attest.Receipt{
		LeaseID: rec.Lease.ID, JobID: rec.Lease.JobID, Renter: rec.Lease.Renter, Provider: rec.Lease.Provider,
		Start: start, End: end, GPUCount: rec.Lease.GPUCount, GPUFraction: rec.Lease.GPUFraction, Devices: devices,
		GPUSeconds: gpuSec, Price: rec.Lease.Price,
		Amount: attest.AmountFor(gpuSec, rec.Lease.Price), Outcome: rec.Run, Fault: rec.Fault,
		ResultHash: terms.ManifestHash(outs), Checkpoint: ckpt, LogDigest: logDigest, Heartbeats: *sum, IssuedAt: end,
		NoPersist: noPersist, Scrub: scrub,
	}
	// Issued as of the run's end, not now: every attempt sends the same
	// receipt, so that a renter which countersigned an earlier one whose
	// answer was lost answers the retry with it, where it refuses any
	// other receipt for a settled lease (a second settlement).
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
			return nil
		}
		return fmt.Errorf("ledger: %w", err)
	}
	s.cfg.Receipts.gossipUnlessHeard(full)
	s.log.Info("lease settled", "lease", rec.Lease.ID, "amount_usd", fmt.Sprintf("%.6f", rc.Amount), "gpu_seconds", fmt.Sprintf("%.1f", gpuSec))
	return nil
}

// Recover runs at start and takes up every lease the store holds that is
// not done (lifecycle.Restarted): a confirmed lease still pending whose
// start is ahead is booked again and scheduled; any other lease that was
// pending or running when the daemon stopped is reported failed (never
// silently forgotten), its leftover processes are killed and its scratch
// space wiped; unsettled leases are settled once the network is up (after
// RecoverDelay).
func (s *Supervisor) Recover() error {
	var stale []providerRecord
	err := s.cfg.Store.List(func(_ string, raw []byte) error {
		var pr providerRecord
		if err := json.Unmarshal(raw, &pr); err != nil || pr.Rec.Lease.ID == "" {
			return nil
		}
		pr.upgrade()
		if !pr.Rec.Phase.Final() {
			stale = append(stale, pr)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, pr := range stale {
		r := s.newRun(pr)
		r.step(lifecycle.Restarted{LastBeat: pr.LastBeat})
		r.mu.Lock()
		ended := r.pr.Rec.Run.Terminal()
		if ended && r.pr.FilesUntil.IsZero() {
			r.pr.FilesUntil = s.filesDue(&r.pr)
		}
		id, until := r.pr.Rec.Lease.ID, r.pr.FilesUntil
		r.mu.Unlock()
		// Carried out now, before the auction takes calls: the booking
		// again, the orphan's kill, the record's save.
		r.effects()
		s.mu.Lock()
		s.runs[id] = r
		if ended {
			s.filesUntil[id] = until
		}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			r.runGuarded()
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

// upgrade reads a record stored before the lease's machine was: its phase
// from the old settled flag and dispute, its job's terms from its job.
func (pr *providerRecord) upgrade() {
	if pr.Rec.Phase != "" {
		return
	}
	pr.Rec.Terms = lifecycle.TermsOf(pr.Job)
	switch {
	case pr.OldSettled:
		pr.Rec.Phase = lifecycle.Settled
	case pr.Rec.Dispute != "" && pr.Rec.Run.Terminal():
		pr.Rec.Phase = lifecycle.Disputed
	}
}

// rebook books a lease taken up at recovery on the auction's calendar
// again (it lives in memory).
func (r *leaseRun) rebook() {
	s := r.s
	l, job := r.lease(), r.pr.Job
	l.State = terms.RunPending
	err := errors.New("no calendar to book it on")
	if b := s.bookings(); b != nil {
		err = b.Rebook(l, job)
	}
	if err != nil {
		s.log.Warn("reservation not restored", "lease", l.ID, "err", err)
		r.step(lifecycle.RebookFailed{Err: err.Error()})
		return
	}
	s.log.Info("reservation restored", "lease", l.ID, "job", l.JobID, "start", l.Start)
	r.step(lifecycle.Rebooked{})
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
		r.abort(terms.RunPreempted, "its gang lost a member: stopped with the gang, to resume together")
		return nil, nil
	}
	r.abort(terms.RunCancelled, "cancelled by the renter")
	return nil, nil
}

// openCancel decodes a cancel (or release) of a lease sent by from: signed
// by from, for a lease id that satisfies terms.ValidID.
func openCancel(data []byte, from peer.ID) (wire.CancelRequest, error) {
	var req wire.CancelRequest
	if err := sign.OpenFrom(data, sign.DomainLeaseCancel, sign.ID(from), &req); err != nil {
		return wire.CancelRequest{}, err
	}
	if err := terms.ValidID(req.LeaseID); err != nil {
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
			v.Recent = append(v.Recent, view(rec))
			if !rec.Started.IsZero() && rec.Ended.After(rec.Started) {
				durations = append(durations, rec.Ended.Sub(rec.Started).Seconds())
			}
		} else {
			v.Running = append(v.Running, view(rec))
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

// view is what the API shows of a lease.
func view(st lifecycle.Lease) api.ProviderLease {
	return api.ProviderLease{Lease: st.Lease, Run: st.Run, Backend: st.Backend, Started: st.Started, Ended: st.Ended,
		ExitCode: st.ExitCode, Detail: st.Detail, Fault: st.Fault, Dispute: st.Dispute}
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
	if terms.ValidID(leaseID) != nil {
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

// LogGrew returns a channel closed when the lease's log is created or
// next written to: take it before reading the log, so that no line is
// missed.
func (a *Access) LogGrew() <-chan struct{} { return a.r.logGrew.Wait() }

// LogGrew is Access.LogGrew for a lease running here, and while there is
// none by that id the channel closed at the next change of any lease
// (its run may be next).
func (s *Supervisor) LogGrew(leaseID string) <-chan struct{} {
	changed := s.changed.Wait()
	if r := s.run(leaseID); r != nil {
		return r.logGrew.Wait()
	}
	return changed
}

// OutputDir holds the lease's collected outputs.
func (a *Access) OutputDir() string { return a.s.outDir(a.r.lease().ID) }

// Ended reports whether the job has ended.
func (a *Access) Ended() bool { return a.r.state().Terminal() }

// Outputs returns the lease's output manifest, and whether the job has
// ended (before that there are none).
func (a *Access) Outputs() ([]terms.OutputFile, bool) {
	a.r.mu.Lock()
	defer a.r.mu.Unlock()
	return append([]terms.OutputFile(nil), a.r.pr.Outputs...), a.r.pr.Rec.Run.Terminal()
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
	case run != terms.RunRunning || h == nil:
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
	if run != terms.RunRunning || h == nil {
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
	// grew, when set, is notified at each write.
	grew *broadcast.Signal
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if l.sum != nil && n > 0 {
		l.sum.Write(p[:n])
		l.n += int64(n)
	}
	if l.grew != nil && n > 0 {
		l.grew.Notify()
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
