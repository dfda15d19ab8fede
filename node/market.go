package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
	"github.com/gpumesh/gpumesh/node/drainapi"
	"github.com/gpumesh/gpumesh/node/gangnet"
	"github.com/gpumesh/gpumesh/node/gpuverify"
	"github.com/gpumesh/gpumesh/node/identity"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/leasestream"
	"github.com/gpumesh/gpumesh/node/ledgerapi"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/gpumesh/gpumesh/node/providerstats"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/node/wire/wirenet"
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
	drainer  *drainapi.Drainer // nil on a renter-only node
	cal      *auction.Calendar
	exec     runtime.Executor
	svc      *service.Manager
	// gangs carries the gangs' private networks this provider runs
	// members of (nil on a renter-only node).
	gangs    *gangnet.Net
	metrics  *metrics.Metrics
	scrubber runtime.Scrubber
	verify   *gpuverify.Service
	// successions spreads this node's identity successions.
	successions *identity.Successions

	// stats are the provider's figures (nil on a renter-only node).
	stats *providerstats.Stats

	ctx    context.Context
	cancel context.CancelFunc
}

func newMarket(d *Daemon) (*market, error) {
	m := &market{d: d, counters: lease.NewCounters(),
		book:    attest.NewBook(attest.BookOptions{Now: d.now, Self: d.ID().String(), Successions: d.succ}),
		metrics: metrics.New()}
	m.ctx, m.cancel = context.WithCancel(d.ctx)
	m.verify = gpuverify.New(m.ctx, gpuverify.Config{Net: d.net, Signer: d.signer, Book: m.book, Directory: d.disc,
		Policy: d.opts.ChallengePolicy, Republish: d.opts.VerdictRepublish, Counters: m.counters, Now: d.now, Log: d.log})
	lt := p2p.Direct{N: d.net}
	// This node's own successions first: the receipts replayed next that
	// its old identities signed count for it.
	m.successions = identity.NewSuccessions(m.ctx, identity.SuccessionsConfig{Net: d.net, Book: m.book, Ledger: d.db,
		Republish: d.opts.SuccessionRepublish, Counters: m.counters, Now: d.now, Log: d.log})
	own, err := m.successions.LearnOwn()
	if err != nil {
		return nil, err
	}
	if m.receipts, err = lease.NewReceipts(m.ctx, lease.ReceiptsConfig{Ledger: d.db, Book: m.book, Transport: lt,
		Counters: m.counters, Log: d.log, Deferred: d.cfg.Provider.Enabled}); err != nil {
		return nil, err
	}
	tr := wirenet.AuctionTransport(lt)
	if m.tracker, err = lease.NewTracker(m.ctx, lease.TrackerConfig{
		Signer: d.signer, Transport: lt, Auction: tr, Store: d.db.State("renter-jobs"), Receipts: m.receipts,
		HeartbeatInterval: d.cfg.Provider.HeartbeatInterval, AbandonGrace: d.opts.AbandonGrace,
		Directory: d.disc, Holdings: d.disc, Latency: d.disc, Pins: d.jobArts, MaxBidders: d.cfg.MaxBidders, QuietClose: d.cfg.BidQuietClose,
		Now: d.now, Log: d.log, Counters: m.counters, Observe: m.metrics.Observer(),
		Checkpoints: d.jobArts, Evidence: evidence{d}, KeptDir: d.paths.Kept(),
		CheckpointBytesPerHour: int64(d.cfg.CheckpointQuotaGBPerHour * (1 << 30)),
	}); err != nil {
		return nil, err
	}
	for _, v := range m.tracker.List() {
		d.jobArts.PinLive(v) // live jobs restored after a restart
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
		d.disc.LearnBidder(from)
		return nil, m.tracker.Auction().HandleBid(from, req)
	}, m.badFrame("renter"))
	n.HandleCounted(wire.ProtoHeartbeat, p2p.Handler(m.tracker.HandleHeartbeat), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoLeaseEvent, p2p.Handler(m.tracker.HandleLeaseEvent), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoReceipt, p2p.Handler(m.tracker.HandleReceipt), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoCheckpoint, p2p.Handler(m.tracker.HandleCheckpoint), m.badFrame("renter"))
	n.HandleCounted(wire.ProtoLeaseKeys, d.jobArts.LeaseKeysHandler(m.tracker.LeaseJob), m.badFrame("renter"))
	if err := n.Subscribe(m.ctx, wire.ReputationTopic, m.receipts.HandleGossip); err != nil {
		return nil, err
	}
	if err := n.Subscribe(m.ctx, wire.GPUVerdictTopic, m.verify.HandleVerdict); err != nil {
		return nil, err
	}
	if err := n.Subscribe(m.ctx, wire.SuccessionTopic, m.successions.Handle); err != nil {
		return nil, err
	}
	go m.verify.Republish()
	if own != nil {
		go m.successions.Publish(own)
	}
	if err := m.svc.Restore(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *market) startProvider(tr auction.Transport, lt lease.Transport) error {
	d := m.d
	m.cal = auction.NewCalendar(len(d.inv.GPUs))
	// A device in MIG mode is sold as its MIG instances, whatever the
	// config says of it.
	d.cfg.Provider.Policy.Slices = runtime.SliceRules(d.inv.GPUs, d.cfg.Provider.Policy.Slices, d.log)
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
	work, err := d.paths.WorkRoot(d.cfg.Provider.WorkDir, d.log)
	if err != nil {
		return err
	}
	po, do := d.cfg.Provider.ExecutorOptions(work, d.log)
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
		Telemetry: host{d}, Fingerprint: fpEnv, Thermal: m.thermal(), Scrub: m,
		HeartbeatInterval: d.cfg.Provider.HeartbeatInterval, PreemptGrace: d.cfg.Provider.PreemptGrace,
		DropHeartbeat: d.opts.DropHeartbeats, Now: d.now, Log: d.log, Counters: m.counters,
		Artifacts: d.jobArts, Checkpoints: d.jobArts, Network: m.gangs, Observe: m.metrics.Observer(),
	}); err != nil {
		return err
	}
	m.provider, err = auction.NewProvider(auction.ProviderConfig{
		Signer: d.signer, Transport: tr, Calendar: m.cal, Now: d.now, Log: d.log,
		Self: providerSelf{m}, Sensors: m.sup, Runtime: m.sup, HoldGrace: d.cfg.Provider.HoldGrace(),
	})
	if err != nil {
		return err
	}
	m.drainer = drainapi.New(drainReadvertiser{m.provider, d}, m.sup)
	m.sup.SetBookings(m.provider)
	if err := m.sup.Recover(); err != nil {
		return err
	}
	d.net.HandleCounted(wire.ProtoCall, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		// The bid or decline goes back on the call's stream; without
		// one, the renter hears why not.
		return m.provider.HandleCall(from, req)
	}, m.badFrame("provider"))
	d.net.HandleCounted(wire.ProtoAward, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return m.provider.HandleAward(from, req)
	}, m.badFrame("provider"))
	d.net.HandleCounted(wire.ProtoCancel, p2p.Handler(m.sup.HandleCancel), m.badFrame("provider"))
	// A lease's streams, for its renter alone.
	streams := leasestream.New(m.ctx, leasestream.Config{Leases: m.sup, Counters: m.counters, Log: d.log})
	d.net.Host.SetStreamHandler(wire.ProtoLogs, d.net.Guard(wire.ProtoLogs, streams.Logs))
	d.net.Host.SetStreamHandler(wire.ProtoOutputs, d.net.Guard(wire.ProtoOutputs, streams.Outputs))
	d.net.Host.SetStreamHandler(wire.ProtoService, d.net.Guard(wire.ProtoService, streams.Service))
	d.net.Host.SetStreamHandler(wire.ProtoExec, d.net.Guard(wire.ProtoExec, streams.Exec))
	d.net.Host.SetStreamHandler(wire.ProtoPortForward, d.net.Guard(wire.ProtoPortForward, streams.PortForward))
	d.net.Host.SetStreamHandler(wire.ProtoGang, d.net.Guard(wire.ProtoGang, func(s network.Stream) { _ = m.gangs.Serve(m.ctx, s) }))
	m.serveChallenges()
	m.stats = providerstats.New(providerstats.Config{Provider: m.provider, Supervisor: m.sup, Book: m.book,
		Self: d.ID().String(), Inventory: d.inv, Ledger: d.db, Now: d.now, Log: d.log})
	d.wg.Add(1) // ends before the ledger closes
	go func() {
		defer d.wg.Done()
		m.stats.Sample(m.ctx)
	}()
	for _, t := range auction.ProviderTopics(ptr(d.capability(time.Minute))) {
		if err := d.net.Subscribe(m.ctx, t, func(from peer.ID, data []byte) {
			if err := m.provider.HandleGossipedCall(from, data); err != nil {
				d.log.Debug("call not bid on", "err", err)
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// reputation is the market's reputation book, for reading other peers'
// standing: the receipts gossip brought while it waited (a provider's,
// lease.ReceiptsConfig.Deferred) are taken in first.
func (m *market) reputation() *attest.Book {
	m.receipts.Activate()
	return m.book
}

func ptr[T any](v T) *T { return &v }

func (m *market) close() {
	m.receipts.Flush()
	m.cancel()
	if m.svc != nil {
		m.svc.Close()
	}
	if m.sup != nil {
		m.sup.Close()
	}
	if c, ok := m.exec.(io.Closer); ok {
		_ = c.Close() // what the executor keeps for its next jobs
	}
	if m.exec != nil {
		m.d.paths.DropWorkRoot(m.d.cfg.Provider.WorkDir)
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
		return nil, api.BadRequest("job spec: %v", err)
	}
	job := req.Job
	var task *taskfile.File
	if req.Task != "" {
		if !reflect.ValueOf(req.Job).IsZero() {
			return nil, api.BadRequest("give a job or a task, not both")
		}
		var err error
		if task, err = taskfile.ReadRequest(req.Task, req.TaskName, m.d.now()); err != nil {
			return nil, err
		}
		job = task.Job
	}
	job.OwnerAddrs = m.d.Addrs()
	if err := m.d.jobArts.InputSizes(&job); err != nil {
		return nil, err
	}
	// The tracker validates the job, once: a task's problems are then
	// explained by its lines.
	var v api.JobView
	var err error
	if req.Queue {
		v, err = m.tracker.Post(job)
	} else {
		v, err = m.tracker.PostChecked(job, m.d.noneCanFit)
	}
	if err != nil && task != nil {
		return nil, task.ExplainPost(err)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
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
// providerSelf is what the auction's provider knows of itself.
type providerSelf struct{ m *market }

// Capability is the node's advertised capability record, with what the
// store holds now, not at the last advertisement.
func (p providerSelf) Capability() terms.Capability {
	d := p.m.d
	if c := d.Advertised(); c != nil {
		cc := *c
		cc.Artifacts = d.artifacts.Store().Held(terms.MaxAdvertisedArtifacts)
		return cc
	}
	return d.capability(d.advertiseTTL())
}

// Reliability is the node's own reputation score.
func (p providerSelf) Reliability() float64 { return p.m.book.Score(p.m.d.ID().String()) }

// host is the node's GPUs as the lease supervisor samples them.
type host struct{ d *Daemon }

// Telemetry samples a lease's devices, and its job's process group when
// pgid > 0.
func (h host) Telemetry(pgid int, devices []int) runtime.Telemetry {
	if pgid > 0 {
		return runtime.SampleDevices(h.d.inv, devices, pgid)
	}
	return runtime.SampleDevices(h.d.inv, devices)
}

// Sensors reads the hottest device's temperature and all devices' power.
func (h host) Sensors() (tempC, powerW int) {
	t := runtime.Sample(h.d.inv)
	return t.TempC, t.PowerW
}

// Limits are the policy's MaxTempC and MaxPowerW.
func (h host) Limits() (maxTempC, maxPowerW int) {
	p := h.d.cfg.Provider.Policy
	return p.MaxTempC, p.MaxPowerW
}

// thermal is the host's sensors, when it has any to read (NVML).
func (m *market) thermal() lease.Thermal {
	if m.d.inv.Source != runtime.SourceNVML {
		return nil
	}
	return host{m.d}
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
	t := m.tracker
	api.Handle(mux, "POST /v1/jobs", m.apiPostJob)
	api.Handle(mux, "POST /v1/jobs/{id}/cancel", func(r *http.Request) (any, error) { return t.Cancel(r.PathValue("id")) })
	relay := m.relay()
	mux.HandleFunc("GET /v1/jobs/{id}/outputs", relay.Outputs)
	mux.HandleFunc("POST /v1/jobs/{id}/exec", relay.Exec)
	mux.HandleFunc("POST /v1/jobs/{id}/port-forward", relay.PortForward)
	api.Handle(mux, "GET /v1/reputation/{peer}", func(r *http.Request) (any, error) {
		p := r.PathValue("peer")
		if _, err := peer.Decode(p); err != nil {
			return nil, api.BadRequest("not a peer id: %q", p)
		}
		book := m.reputation()
		return api.ReputationView{Peer: p, Rep: book.Stats(p), GPU: book.GPUStandings(p)}, nil
	})
	api.Handle(mux, "POST /v1/verify", m.verify.HandleVerify)
	api.Handle(mux, "GET /v1/counters", func(*http.Request) (any, error) { return m.allCounters(), nil })
	ledgerapi.Routes(mux, m.d.db, m.d.log)
	m.svc.Routes(mux)
	drainapi.Routes(mux, m.drainer)
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
	if n := m.d.disc.FingerprintChanges(); n > 0 {
		out["discovery.fingerprint_changed"] = int(n)
	}
	return out
}

// Scrub clears the memory of the GPUs lease id was booked on
// (runtime.Scrubber), logging and counting what it did, and returns what
// the lease's receipt says of it (runtime.ScrubReport.Statement; "" for a
// lease no longer booked). A failed scrub is logged as an error and
// counted (provider.gpu_scrub_failed); the devices are still freed.
func (m *market) Scrub(id string) string {
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

// drainReadvertiser is the provider's bidder for its drain: a drain that
// starts or ends renews the capability record at once (a draining provider
// advertises no free GPUs).
type drainReadvertiser struct {
	drainapi.Bidder
	d *Daemon
}

func (r drainReadvertiser) SetDraining(on bool) bool {
	changed := r.Bidder.SetDraining(on)
	if changed {
		r.d.disc.Readvertise()
	}
	return changed
}
