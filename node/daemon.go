// Package node wires a gpumesh daemon together: configuration, the data
// directory, the libp2p node, capability advertisement, the auction roles,
// job execution, attestation and the ledger, and the local control API that
// the CLI talks to over a unix socket.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/artifact/jobs"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/node/discovery"
	"github.com/gpumesh/gpumesh/node/identity"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Version is the daemon's version, set at build time.
var Version = "0.1.0-dev"

// Options are what a daemon is started with.
type Options struct {
	// DataDir holds the key, the DB, the socket and job dirs.
	DataDir string
	// Config is the parsed configuration.
	Config config.Config
	// Log is the daemon's logger; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DropHeartbeats, when set, makes a provider skip sending the heartbeats
	// for which it returns true: fault injection for tests of flaky or
	// dishonest telemetry. Never set in production.
	DropHeartbeats func(seq uint64) bool
	// AbandonGrace overrides how long after a lease's end a renter waits
	// for the provider's final report (default 1m).
	AbandonGrace time.Duration
	// GPUDriver is where provider.gpu_source "nvml" or "auto" reads GPUs
	// and telemetry from; nil is the NVIDIA driver (runtime.NVML). Tests
	// inject a runtime.SimulatedGPUs host.
	GPUDriver runtime.Driver
	// Executor, when set, runs the provider's jobs instead of the one
	// provider.executor names: the load benchmark injects a no-op one to
	// measure the market alone (as Bacalhau's devstack no-op executor
	// does). Never set in production.
	Executor runtime.Executor
	// ChallengeBackend and ChallengePolicy, when set, answer and judge GPU
	// challenges instead of runtime.ChallengeBackend and gpuproof's
	// rules: tests stand in a fast device with a rate they choose. Never
	// set in production.
	ChallengeBackend gpuproof.Backend
	ChallengePolicy  *gpuproof.Policy
	// Scrubber, when set, clears GPU memory between leases instead of
	// runtime.NewScrubber (tests record what it is asked).
	Scrubber runtime.Scrubber
	// LearnEvery overrides how often the daemon discovers every
	// provider's record in the background (default
	// discovery.DefaultLearnEvery).
	LearnEvery time.Duration
	// RTTRefreshEvery overrides how often the daemon measures again the
	// round trips to the providers it knows (default
	// discovery.RTTRefreshEvery).
	RTTRefreshEvery time.Duration
	// AvailabilityGap overrides the least time between a provider's
	// records put only because its free GPUs changed (default
	// discovery.DefaultAvailabilityGap).
	AvailabilityGap time.Duration
	// VerdictRepublish overrides how often a node gossips its own recent
	// GPU verdicts again (default gpuverify.DefaultRepublish).
	VerdictRepublish time.Duration
	// SuccessionRepublish overrides how often a rotated node publishes its
	// identity succession again (default identity.DefaultRepublish).
	SuccessionRepublish time.Duration
}

// Daemon is a running gpumesh node.
type Daemon struct {
	opts   Options
	cfg    config.Config
	paths  config.Paths
	log    *slog.Logger
	now    func() time.Time
	signer *sign.Signer
	// containers is what the provider's executor can do with image jobs
	// (set once the executor exists; advertised in the capability).
	containers terms.ContainerSupport
	// canSeal says the provider runs sealed jobs (terms.Policy.Sealed).
	canSeal bool
	// imageIDs maps an owner and its image artifact (owner \x00 id) to
	// the ID of the image loaded from it, so that owner's next job whose
	// image is still on the engine does not fetch the artifact again.
	imageIDs sync.Map
	db       *ledger.DB
	// succ is what this node knows of identity successions, its own
	// included: the one registry every path that opens signed messages
	// asks (the book's, the DHT validators').
	succ   *sign.Successions
	net    *p2p.Node
	inv    runtime.Inventory
	fp     attest.Fingerprint
	fpHash string

	market *market
	// marketRef is market for the network handlers that may run before
	// it is set.
	marketRef atomic.Pointer[market]
	artifacts *transfer.Service
	// jobArts are the artifacts jobs read and leave.
	jobArts *jobs.Artifacts

	api     *http.Server
	apiLn   net.Listener
	started time.Time

	// disc advertises this node and knows the providers it learned of.
	disc *discovery.Discovery
	// seq is the sequence number of the last capability record built.
	seq atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

// Start opens the data dir and brings the node up: identity, DB, GPU
// inventory, libp2p host, DHT, GossipSub, the market roles and the control
// API. On error everything opened so far is closed again.
func Start(ctx context.Context, opts Options) (_ *Daemon, err error) {
	if opts.DataDir == "" {
		return nil, errors.New("data dir is required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	d := &Daemon{opts: opts, cfg: opts.Config, paths: config.Paths{Dir: opts.DataDir}, log: opts.Log, now: opts.Now, started: opts.Now()}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.paths.Tighten(); err != nil {
		return nil, err
	}
	if d.paths.Running() {
		return nil, fmt.Errorf("%w (%s)", config.ErrAlreadyRunning, d.paths.Dir)
	}
	if err := identity.Unfinished(d.paths); err != nil {
		return nil, err
	}
	key, err := p2p.LoadOrCreateKey(d.paths.Key())
	if err != nil {
		return nil, err
	}
	if d.signer, err = p2p.Signer(key); err != nil {
		return nil, err
	}
	d.db, err = ledger.Open(d.paths.DB(), ledger.WithLogger(d.log))
	if errors.Is(err, ledger.ErrInUse) {
		return nil, fmt.Errorf("%w (%s)", config.ErrAlreadyRunning, d.paths.Dir)
	}
	if err != nil {
		return nil, err
	}
	if err := identity.CheckOwner(d.paths, d.signer, d.db); err != nil {
		return nil, err
	}
	d.succ = sign.NewSuccessions()
	if d.cfg.Provider.Enabled || len(d.cfg.Provider.GPUs) > 0 {
		d.inv, err = runtime.DetectGPUsFrom(opts.GPUDriver, d.cfg.Provider.GPUSource, d.cfg.Provider.GPUs, d.log)
		if err != nil {
			return nil, fmt.Errorf("gpu inventory: %w", err)
		}
		if err := runtime.CheckProviderInventory(d.cfg.Provider.Enabled, d.inv); err != nil {
			return nil, err
		}
	}
	d.fp = attest.Fingerprint{Peer: d.signer.ID().String(), Driver: d.inv.Driver, CUDA: d.inv.CUDA, Source: d.inv.Source, IssuedAt: d.now()}
	for _, g := range d.inv.GPUs {
		d.fp.GPUs = append(d.fp.GPUs, terms.GPU{Model: g.Model, VRAMGB: g.VRAMGB, UUID: g.UUID, Detected: g.Detected})
	}
	d.fpHash = d.fp.Hash()

	ttl := d.advertiseTTL()
	d.net, err = p2p.New(ctx, p2p.Config{
		Key:         key,
		ListenAddrs: d.cfg.Listen,
		Bootstrap:   d.cfg.Bootstrap,
		Validators: map[string]record.Validator{
			terms.CapabilityNamespace:  terms.CapabilityValidator{Now: d.now, Successions: d.succ},
			attest.SuccessionNamespace: attest.SuccessionValidator{Now: d.now, Successions: d.succ},
		},
		ProvideValidity: discovery.ProvideValidity(ttl),
		MDNS:            d.cfg.MDNS,
		Reachability:    d.cfg.Reachability,
		Relays:          d.cfg.Relays,
		RelayService:    d.cfg.RelayServiceLimits(),
		Protocols:       protocolLimits(),
		Log:             d.log,
	})
	if err != nil {
		return nil, err
	}
	d.disc = discovery.New(d.ctx, discovery.Config{Net: d.net, Signer: d.signer, Now: d.now, Log: d.log,
		Bootstrap: len(d.cfg.Bootstrap) > 0, AvailabilityGap: d.opts.AvailabilityGap})
	if err := d.startArtifacts(); err != nil {
		return nil, err
	}
	if d.market, err = newMarket(d); err != nil {
		return nil, err
	}
	d.marketRef.Store(d.market)
	if err := d.serveAPI(); err != nil {
		return nil, err
	}
	if err := d.serveMetrics(); err != nil {
		return nil, err
	}
	d.log.Info("gpumesh daemon started", "peer", d.net.ID(), "addrs", d.net.Addrs(), "data_dir", d.paths.Dir,
		"gpus", len(d.inv.GPUs), "gpu_source", d.inv.Source, "provider", d.cfg.Provider.Enabled)

	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.net.Bootstrap(d.ctx); err != nil && d.ctx.Err() == nil {
			d.log.Warn("bootstrap", "err", err)
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.net.KeepConnected(d.ctx, 5*time.Second) // re-dials at once, and every 5 s while none answers
		}()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.announceLoop(10 * time.Minute)
		}()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.disc.Learn(d.opts.LearnEvery)
		}()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.disc.RefreshRTTs(d.opts.RTTRefreshEvery)
		}()
		if d.cfg.Provider.Enabled {
			d.disc.Advertise(ttl, d.capability, discovery.Availability{Free: d.freeGPUs, Changed: d.freeChanged})
		}
	}()
	return d, nil
}

// Close shuts the node down: it stops accepting API calls, withdraws from
// the market, leaves the DHT and closes the DB. Safe to call twice.
func (d *Daemon) Close() error {
	var errs []error
	d.closed.Do(func() {
		d.cancel()
		if d.api != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_ = d.api.Shutdown(sctx)
			cancel()
			_ = os.Remove(d.paths.Socket())
		}
		if d.market != nil {
			d.market.close()
		}
		d.wg.Wait()
		if d.disc != nil {
			d.disc.Wait()
		}
		if d.net != nil {
			errs = append(errs, d.net.Close())
		}
		if d.db != nil {
			errs = append(errs, d.db.Close())
		}
		if d.apiLn != nil {
			d.log.Info("gpumesh daemon stopped")
		}
	})
	return errors.Join(errs...)
}

// ID is the node's peer ID.
func (d *Daemon) ID() peer.ID { return d.net.ID() }

// Addrs are the node's dialable multiaddrs with /p2p/ID.
func (d *Daemon) Addrs() []string { return d.net.Addrs() }

// SocketPath is where the control API listens.
func (d *Daemon) SocketPath() string { return d.paths.Socket() }

func (d *Daemon) advertiseTTL() time.Duration {
	if d.cfg.Provider.AdvertiseTTL > 0 {
		return d.cfg.Provider.AdvertiseTTL
	}
	return 10 * time.Minute
}

// capability builds the node's current capability record.
func (d *Daemon) capability(ttl time.Duration) terms.Capability {
	now := d.now()
	seq := uint64(now.UnixNano())
	if last := d.seq.Load(); seq <= last {
		seq = last + 1
	}
	d.seq.Store(seq)
	free := d.freeGPUs(now)
	pol := d.cfg.Provider.Policy
	pol.Sealed = d.canSeal
	return terms.Capability{
		Peer:        d.ID().String(),
		Addrs:       d.Addrs(),
		Region:      d.cfg.Region,
		GPUs:        d.inv.GPUs,
		Policy:      pol,
		Datasets:    d.cfg.Provider.Datasets,
		Fingerprint: d.fpHash,
		Driver:      d.inv.Driver,
		CUDA:        d.inv.CUDA,
		Containers:  d.containers,
		FreeGPUs:    &free,
		Seq:         seq,
		IssuedAt:    now,
		ExpiresAt:   now.Add(ttl),
		Artifacts:   d.artifacts.Store().Held(terms.MaxAdvertisedArtifacts),
	}
}

// freeGPUs is how many GPUs no lease holds at now (none while the provider
// drains: it takes no work).
func (d *Daemon) freeGPUs(now time.Time) int {
	if m := d.market; m == nil || m.cal == nil || (m.provider != nil && m.provider.Draining()) {
		return 0
	}
	return d.market.cal.FreeGPUs(now, now)
}

// freeChanged says when freeGPUs may change: at the calendar's next change
// or its next booking edge after now. A drain's start or end asks for a
// fresh record by itself (drainReadvertiser).
func (d *Daemon) freeChanged(now time.Time) (<-chan struct{}, time.Time) {
	if m := d.market; m != nil && m.cal != nil {
		return m.cal.Changed(), m.cal.NextEdge(now)
	}
	return nil, time.Time{}
}

// Advertised returns the last capability record this node put in the DHT.
func (d *Daemon) Advertised() *terms.Capability { return d.disc.Advertised() }

// protocolLimits are the stream and frame memory limits of the daemon's
// own protocols (libp2p's resource manager enforces them): no peer, and
// no crowd of peers, can hold more streams or frame memory than these.
func protocolLimits() map[protocol.ID]p2p.ProtocolLimit {
	m := map[protocol.ID]p2p.ProtocolLimit{}
	for _, p := range wire.RequestProtocols {
		m[protocol.ID(p)] = p2p.RequestLimit
	}
	for _, p := range wire.StreamProtocols {
		m[protocol.ID(p)] = p2p.BulkLimit
	}
	return m
}
