package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/gangnet"
	"github.com/gpumesh/gpumesh/node/history"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// market wires the daemon's market roles: the auction (renter and
// provider state machines) and the post-award lease lifecycle (package
// lease), over libp2p.
type market struct {
	d        *Daemon
	counters *lease.Counters
	book     *attest.Book
	receipts *lease.Receipts
	tracker  *lease.Tracker
	sup      *lease.Supervisor // nil on a renter-only node
	provider *auction.Provider // nil on a renter-only node
	cal      *auction.Calendar
	exec     runtime.Executor
	svc      *service.Manager
	// gangs carries the gangs' private networks this provider runs
	// members of (nil on a renter-only node).
	gangs    *gangnet.Net
	metrics  *metrics
	scrubber runtime.Scrubber
	verdicts ownVerdicts

	// provHistory is the provider's earnings and occupancy a minute
	// (sampleProvider; nil on a renter-only node).
	provHistory *history.Ring[api.ProviderSample]

	ctx    context.Context
	cancel context.CancelFunc
}

func newMarket(d *Daemon) (*market, error) {
	m := &market{d: d, counters: lease.NewCounters(),
		book:    attest.NewBook(attest.BookOptions{Now: d.now, Self: d.ID().String(), Successions: d.succ}),
		metrics: newMetrics()}
	m.ctx, m.cancel = context.WithCancel(d.ctx)
	lt := p2p.Direct{N: d.net}
	// This node's own successions first: the receipts replayed next that
	// its old identities signed count for it.
	own, err := m.learnOwnSuccessions()
	if err != nil {
		return nil, err
	}
	if m.receipts, err = lease.NewReceipts(m.ctx, lease.ReceiptsConfig{Ledger: d.db, Book: m.book, Transport: lt,
		Counters: m.counters, Log: d.log}); err != nil {
		return nil, err
	}
	tr := wire.AuctionTransport(lt)
	if m.tracker, err = lease.NewTracker(m.ctx, lease.TrackerConfig{
		Signer: d.signer, Transport: lt, Auction: tr, Store: d.db.State("renter-jobs"), Receipts: m.receipts,
		HeartbeatInterval: d.cfg.Provider.HeartbeatInterval, AbandonGrace: d.opts.AbandonGrace,
		AdvertisedFingerprint: d.advertisedFingerprint, Holdings: d.advertisedArtifacts, ExpectedBidders: d.expectedBidders,
		RTT: d.providerRTT, MeasureRTT: d.measureRTT,
		ProviderGPUs: d.providerGPUs,
		OnSave:       d.inputPins.update,
		Now:          d.now, Log: d.log, Counters: m.counters, Observe: m.metrics.observer(),
		FetchCheckpoint: d.fetchCheckpoint, PinCheckpoint: d.artifacts.Store().Pin, FetchLog: d.fetchLog,
		FetchOutputs: d.fetchOutputs, KeptDir: d.paths.Kept(),
		CheckpointBytesPerHour: int64(d.cfg.CheckpointQuotaGBPerHour * (1 << 30)),
	}); err != nil {
		return nil, err
	}
	for _, v := range m.tracker.List() {
		d.inputPins.update(v) // live jobs restored after a restart
	}
	if err := m.newServices(); err != nil {
		return nil, err
	}
	if d.cfg.Provider.Enabled {
		if err := m.startProvider(tr, lt); err != nil {
			return nil, err
		}
	}
	n := d.net
	n.HandleCounted(wire.ProtoBid, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		// Learn the bidder even from a late or refused bid: the stream's
		// peer is authenticated, and only its verified record is cached.
		d.learnBidder(from)
		return nil, m.tracker.Auction().HandleBid(from, req)
	}, m.badFrame("renter"))
	n.HandleCounted(wire.ProtoHeartbeat, p2p.Handler(m.tracker.HandleHeartbeat), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoLeaseEvent, p2p.Handler(m.tracker.HandleLeaseEvent), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoReceipt, p2p.Handler(m.tracker.HandleReceipt), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoCheckpoint, p2p.Handler(m.tracker.HandleCheckpoint), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoLeaseKeys, m.handleLeaseKeys, m.badFrame("renter"))
	if err := n.Subscribe(m.ctx, wire.ReputationTopic, m.receipts.HandleGossip); err != nil {
		return nil, err
	}
	if err := n.Subscribe(m.ctx, wire.GPUVerdictTopic, m.handleVerdict); err != nil {
		return nil, err
	}
	if err := n.Subscribe(m.ctx, wire.SuccessionTopic, m.handleSuccession); err != nil {
		return nil, err
	}
	go m.republishVerdicts()
	if own != nil {
		go m.publishSuccessionLoop(own)
	}
	if err := m.svc.Restore(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *market) startProvider(tr auction.Transport, lt lease.Transport) error {
	d := m.d
	m.cal = auction.NewCalendar(len(d.inv.GPUs))
	m.provHistory = history.New[api.ProviderSample](history.Keep)
	if err := m.cal.SetSlices(d.cfg.Provider.Policy.SliceMap()); err != nil {
		return fmt.Errorf("provider.policy.slices: %w", err)
	}
	// A sliced device says how its slices are enforced: what the runtime
	// can do with it, not what the config says.
	for i := range d.inv.GPUs {
		if m.cal.Slices(i) > 0 {
			d.inv.GPUs[i].Isolation = runtime.SliceIsolation(d.inv.GPUs[i])
		}
	}
	work, err := prepareWorkRoot(d.cfg.Provider.WorkDir, d.paths, d.log)
	if err != nil {
		return err
	}
	po, do := executorOptions(d.cfg.Provider, work, d.log)
	// Declared GPUs have no device to pass through: containers run GPU
	// jobs as process jobs do, with the leased indices in the environment.
	do.DeclaredGPUs = d.inv.Source == runtime.SourceDeclared
	switch {
	case d.opts.Executor != nil:
		m.exec = d.opts.Executor
	case d.cfg.Provider.Executor == "process":
		m.exec, err = runtime.NewProcessExecutor(work, po)
	case d.cfg.Provider.Executor == "docker":
		m.exec, err = runtime.NewDockerExecutor(runtime.DefaultDockerSocket, do)
	default:
		m.exec, err = runtime.AutoWith(work, po, do)
	}
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	d.containers = runtime.ContainersOf(m.exec)
	d.canSeal = runtime.CanSeal(work)
	if m.scrubber = d.opts.Scrubber; m.scrubber == nil {
		m.scrubber = runtime.NewScrubber(d.inv)
	}
	fpEnv, err := attest.SignFingerprint(d.signer, d.fp)
	if err != nil {
		return fmt.Errorf("fingerprint: %w", err)
	}
	m.gangs = gangnet.New(d.ID(), func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return d.net.Host.NewStream(ctx, p, wire.ProtoGang)
	}, d.log, m.counters.Add)
	if m.sup, err = lease.NewSupervisor(m.ctx, lease.SupervisorConfig{
		Signer: d.signer, Transport: lt, Store: d.db.State("provider-leases"), Receipts: m.receipts, Exec: m.exec,
		JobsDir: d.paths.Jobs(), JobFilesMaxBytes: int64(d.cfg.Provider.JobFilesMaxGB * (1 << 30)),
		JobFilesMaxRetain: d.cfg.Provider.JobFilesMaxRetain, WorkRoot: work, GPUs: d.inv.GPUs,
		Telemetry: func(pgid int, devices []int) runtime.Telemetry {
			if pgid > 0 {
				return runtime.SampleDevices(d.inv, devices, pgid)
			}
			return runtime.SampleDevices(d.inv, devices)
		},
		Fingerprint: fpEnv,
		Sensors:     m.sensors(),
		Limits: func() (int, int) {
			p := d.cfg.Provider.Policy
			return p.MaxTempC, p.MaxPowerW
		},
		LeaseEnded:        func(id string, end time.Time, st auction.RunState) error { return m.provider.LeaseEnded(id, end, st) },
		Scrub:             m.scrubLease,
		Rebook:            func(l auction.Lease, job auction.Job) error { return m.provider.Rebook(l, job) },
		HeartbeatInterval: d.cfg.Provider.HeartbeatInterval, PreemptGrace: d.cfg.Provider.PreemptGrace,
		DropHeartbeat: d.opts.DropHeartbeats, Now: d.now, Log: d.log, Counters: m.counters,
		Inputs: d.prepareInputs, OutputsArtifact: d.outputsArtifact, RemoveArtifact: d.removeHeld, Observe: m.metrics.observer(),
		CheckpointArtifact: d.checkpointArtifact, Restore: d.restoreCheckpoint,
		Network: m.gangs.Hook,
	}); err != nil {
		return err
	}
	m.provider, err = auction.NewProvider(auction.ProviderConfig{
		Signer: d.signer, Transport: tr, Calendar: m.cal, Now: d.now, Log: d.log,
		Capability: func() auction.Capability {
			if c := d.Advertised(); c != nil {
				cc := *c
				// What the store holds now, not at the last advertisement.
				cc.Artifacts = d.artifacts.Store().Held(auction.MaxAdvertisedArtifacts)
				return cc
			}
			return d.capability(d.advertiseTTL())
		},
		Sensors:     m.sup.Reading,
		HoldGrace:   bidHoldGrace(d.cfg.Provider.BidHolds),
		Reliability: func() float64 { return m.book.Score(d.ID().String()) },
		OnLease:     m.sup.OnLease,
		OnMove:      m.sup.OnMove,
		Admit:       m.sup.Admit,
	})
	if err != nil {
		return err
	}
	if err := m.sup.Recover(); err != nil {
		return err
	}
	d.net.HandleCounted(wire.ProtoAward, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return m.provider.HandleAward(from, req)
	}, m.badFrame("provider"))
	d.net.HandleCounted(wire.ProtoCancel, p2p.Handler(m.sup.HandleCancel), m.badFrame("provider"))
	d.net.Host.SetStreamHandler(wire.ProtoLogs, d.net.Guard(wire.ProtoLogs, m.serveLogs))
	d.net.Host.SetStreamHandler(wire.ProtoOutputs, d.net.Guard(wire.ProtoOutputs, m.serveOutputs))
	d.net.Host.SetStreamHandler(wire.ProtoService, d.net.Guard(wire.ProtoService, m.serveService))
	d.net.Host.SetStreamHandler(wire.ProtoExec, d.net.Guard(wire.ProtoExec, m.serveExec))
	d.net.Host.SetStreamHandler(wire.ProtoPortForward, d.net.Guard(wire.ProtoPortForward, m.servePortForward))
	d.net.Host.SetStreamHandler(wire.ProtoGang, d.net.Guard(wire.ProtoGang, func(s network.Stream) { _ = m.gangs.Serve(m.ctx, s) }))
	m.serveChallenges()
	d.wg.Add(1) // ends before the ledger closes
	go func() {
		defer d.wg.Done()
		m.sampleProvider()
	}()
	for _, t := range auction.ProviderTopics(ptr(d.capability(time.Minute))) {
		if err := d.net.Subscribe(m.ctx, t, func(from peer.ID, data []byte) {
			if err := m.provider.HandleCall(from, data); err != nil {
				d.log.Debug("call not bid on", "err", err)
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// executorOptions are the executors' options from the provider's config:
// jobs get no network (an isolated network namespace, or Docker's "none")
// unless the provider allows it.
func executorOptions(p ProviderConfig, work string, log *slog.Logger) (runtime.ProcessOptions, runtime.DockerOptions) {
	po := runtime.ProcessOptions{Log: log, AllowNetwork: p.AllowJobNetwork, UIDBase: p.JobUIDBase}
	do := runtime.DockerOptions{Root: work, Log: log, UIDBase: p.JobUIDBase}
	if p.AllowJobNetwork {
		do.Network = "bridge"
	}
	return po, do
}

func ptr[T any](v T) *T { return &v }

// bidHoldGrace is the provider's auction.ProviderConfig.HoldGrace: holds on
// (provider.bid_holds) or off.
func bidHoldGrace(on bool) time.Duration {
	if on {
		return auction.DefaultHoldGrace
	}
	return 0
}

func (m *market) close() {
	m.cancel()
	if m.svc != nil {
		m.svc.Close()
	}
	if m.sup != nil {
		m.sup.Close()
	}
	m.tracker.Wait()
	m.receipts.Wait()
}

// apiPostJob runs an auction for the posted job and returns its view once
// the auction ended.
func (m *market) apiPostJob(r *http.Request) (any, error) {
	var req api.PostJobRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("job spec: %v", err)
	}
	job := req.Job
	if req.Task != "" {
		if !reflect.ValueOf(req.Job).IsZero() {
			return nil, badRequest("give a job or a task, not both")
		}
		var err error
		if job, err = m.d.convertTask(req.Task, req.TaskName); err != nil {
			return nil, err
		}
	}
	job.OwnerAddrs = m.d.Addrs()
	if err := m.d.inputSizes(&job); err != nil {
		return nil, err
	}
	if req.Queue {
		return m.tracker.Post(job)
	}
	return m.tracker.PostChecked(job, m.d.noneCanFit)
}

func (m *market) executorName() string {
	if m.exec == nil {
		return ""
	}
	if a, ok := m.exec.(*runtime.AutoExecutor); ok {
		if a.Docker() != nil {
			return "auto (docker for images, sandboxed process otherwise; " + a.Process().Limits() + ")"
		}
		return "auto (sandboxed process; " + a.Process().Limits() + ")"
	}
	if p, ok := m.exec.(*runtime.ProcessExecutor); ok {
		return "process (" + p.Limits() + ")"
	}
	return m.exec.Name()
}

// sensors reads the host's GPUs (hottest temperature, total power draw),
// which the Supervisor samples every heartbeat interval. Declared GPUs
// have no sensors (nil): there is nothing to sample, so nothing polls, and
// a reading is never over a limit.
func (m *market) sensors() func() (int, int) {
	if m.d.inv.Source != runtime.SourceNVML {
		return nil
	}
	return func() (int, int) {
		t := runtime.Sample(m.d.inv)
		return t.TempC, t.PowerW
	}
}

// badFrame counts a request on one of this node's protocols whose frame
// could not even be read (see p2p.Node.HandleCounted), under the role that
// serves the protocol.
func (m *market) badFrame(role string) func() {
	return func() { m.counters.Add(role + ".malformed_frame") }
}

// routes registers the market's endpoints that act or that the console
// does not show; its read-only views are viewRoutes'.
func (m *market) routes(mux *http.ServeMux) {
	d := m.d
	t := m.tracker
	d.route(mux, "POST /v1/jobs", m.apiPostJob)
	d.route(mux, "POST /v1/jobs/{id}/cancel", func(r *http.Request) (any, error) { return t.Cancel(r.PathValue("id")) })
	mux.HandleFunc("GET /v1/jobs/{id}/outputs", m.apiOutputs)
	mux.HandleFunc("POST /v1/jobs/{id}/exec", m.apiExec)
	mux.HandleFunc("POST /v1/jobs/{id}/port-forward", m.apiPortForward)
	d.route(mux, "GET /v1/reputation/{peer}", func(r *http.Request) (any, error) {
		p := r.PathValue("peer")
		if _, err := peer.Decode(p); err != nil {
			return nil, badRequest("not a peer id: %q", p)
		}
		return api.ReputationView{Peer: p, Rep: m.book.Stats(p), GPU: m.book.GPUStandings(p)}, nil
	})
	d.route(mux, "POST /v1/verify", m.apiVerify)
	d.route(mux, "GET /v1/counters", func(*http.Request) (any, error) { return m.allCounters(), nil })
	m.ledgerRoutes(mux)
	m.serviceRoutes(mux)
	m.drainRoutes(mux)
}

// allCounters merges every rejection counter of the node's roles.
func (m *market) allCounters() map[string]int {
	out := map[string]int{}
	for k, v := range m.tracker.Auction().Counters() {
		out["renter."+k] += v
	}
	if m.provider != nil {
		st := m.provider.Stats()
		for k, v := range st.Rejected {
			out["provider."+k] += v
		}
	}
	for k, v := range m.book.Counters() {
		out["reputation."+k] += v
	}
	for k, v := range m.counters.Snapshot() {
		out[k] += v
	}
	for k, v := range m.d.artifacts.Counters() {
		out[k] += v
	}
	if n := m.d.fpChanges.Load(); n > 0 {
		out["discovery.fingerprint_changed"] = int(n)
	}
	return out
}

var errNoProvider = errors.New("this node is not a provider (set provider.enabled in its config)")

// prepareWorkRoot returns the jobs' scratch root: the configured one, or a
// directory under the system temp dir named after the data dir. Job uids
// must be able to traverse to it (0711), and it must be ours: a directory
// planted there by another user is refused. A planted default root does not
// stop the provider: it falls back to a fresh, unpredictable root under the
// temp dir, recorded in the data dir (Paths.WorkRootRecord) so that restarts
// reuse it, and logs where.
func prepareWorkRoot(configured string, paths Paths, log *slog.Logger) (string, error) {
	if configured != "" {
		if err := ownWorkRoot(configured, true); err != nil {
			return "", err
		}
		return filepath.Join(configured, "work"), nil
	}
	// A fallback chosen by an earlier start.
	if b, err := os.ReadFile(paths.WorkRootRecord()); err == nil {
		root := strings.TrimSpace(string(b))
		if filepath.IsAbs(root) && ownWorkRoot(root, false) == nil {
			return filepath.Join(root, "work"), nil
		}
		log.Warn("recorded work root is unusable; choosing another", "root", root)
	}
	abs, err := filepath.Abs(paths.Dir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	root := filepath.Join(os.TempDir(), "gpumesh-"+hex.EncodeToString(sum[:6]))
	err = ownWorkRoot(root, true)
	if err == nil {
		return filepath.Join(root, "work"), nil
	}
	fresh, ferr := os.MkdirTemp("", "gpumesh-work-")
	if ferr != nil {
		return "", fmt.Errorf("%v; and no fallback: %w", err, ferr)
	}
	if ferr = ownWorkRoot(fresh, false); ferr == nil {
		ferr = os.WriteFile(paths.WorkRootRecord(), []byte(fresh+"\n"), 0o600)
	}
	if ferr != nil {
		_ = os.RemoveAll(fresh)
		return "", fmt.Errorf("%v; and no fallback: %w", err, ferr)
	}
	log.Warn("default work root refused; using a fresh one", "refused", root, "reason", err, "work_root", fresh)
	return filepath.Join(fresh, "work"), nil
}

// ownWorkRoot makes sure root is a directory owned by this user, mode 0711
// (creating it when create is set).
func ownWorkRoot(root string, create bool) error {
	if create {
		if err := os.MkdirAll(root, 0o711); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || (ok && int(st.Uid) != os.Geteuid()) {
		return fmt.Errorf("work dir %s is not a directory owned by this user; refusing to run jobs there", root)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	return nil
}

// scrubLease clears the memory of the GPUs lease id was booked on
// (runtime.Scrubber), logging and counting what it did, and returns what
// the lease's receipt says of it (runtime.ScrubReport.Statement; "" for a
// lease no longer booked). A failed scrub is logged as an error and
// counted (provider.gpu_scrub_failed); the devices are still freed.
func (m *market) scrubLease(id string) string {
	b, ok := m.cal.Booking(id)
	if !ok || len(b.Devices) == 0 {
		return ""
	}
	if others := m.cal.Sharers(id, m.d.now()); len(others) > 0 {
		// Its device's other slices still run: clearing the device's free
		// memory would take it from under them.
		if m.d.inv.Source == runtime.SourceDeclared {
			return attest.ScrubNoneDeclared
		}
		m.counters.Add("provider.gpu_scrub_shared")
		return attest.ScrubFailure(fmt.Sprintf("device shared with %d running slice lease(s): not cleared under them", len(others)))
	}
	names := make([]string, len(b.Devices))
	for i, dev := range b.Devices {
		names[i] = runtime.ChallengeDevice(m.d.inv, dev)
	}
	rep := m.scrubber.Scrub(m.ctx, names)
	switch {
	case !rep.OK():
		m.counters.Add("provider.gpu_scrub_failed")
		m.d.log.Error("GPU memory scrub failed", "lease", id, "devices", names, "err", rep.Err, "report", rep.Devices)
	case rep.Method == "none":
	default:
		m.counters.Add("provider.gpu_scrubbed")
		var zeroed uint64
		for _, d := range rep.Devices {
			zeroed += d.Zeroed
		}
		m.d.log.Info("GPU memory scrubbed", "lease", id, "devices", names, "zeroed_mib", zeroed>>20, "took", rep.Took)
	}
	return rep.Statement()
}
