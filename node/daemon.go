package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/event"
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
	Config Config
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
	// provider's record in the background (default DefaultLearnEvery).
	LearnEvery time.Duration
	// RTTRefreshEvery overrides how often the daemon measures again the
	// round trips to the providers it knows (default RTTRefreshEvery).
	RTTRefreshEvery time.Duration
	// VerdictRepublish overrides how often a node gossips its own recent
	// GPU verdicts again (default DefaultVerdictRepublish).
	VerdictRepublish time.Duration
	// SuccessionRepublish overrides how often a rotated node publishes its
	// identity succession again (default DefaultSuccessionRepublish).
	SuccessionRepublish time.Duration
}

// ErrAlreadyRunning is returned when another daemon owns the data dir.
var ErrAlreadyRunning = errors.New("another gpumesh daemon is already running on this data dir")

// Daemon is a running gpumesh node.
type Daemon struct {
	opts   Options
	cfg    Config
	paths  Paths
	log    *slog.Logger
	now    func() time.Time
	signer *sign.Signer
	// containers is what the provider's executor can do with image jobs
	// (set once the executor exists; advertised in the capability).
	containers auction.ContainerSupport
	// canSeal says the provider runs sealed jobs (auction.Policy.Sealed).
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
	// inputPins pins the artifacts of this renter's live jobs.
	inputPins *inputPins

	api     *http.Server
	apiLn   net.Listener
	started time.Time

	advMu  sync.Mutex
	advert *auction.Capability
	// readvertise asks the advertise loop for a fresh capability record
	// now (the artifacts the store holds changed).
	readvertise chan struct{}
	// capCache holds the last verified capability record of each provider
	// (peer.ID → auction.Capability).
	capCache sync.Map
	// learning holds the providers whose record learnBidder is looking up.
	learning sync.Map
	// fpChanges counts fingerprint changes seen in providers' records.
	fpChanges atomic.Int64
	seq       atomic.Uint64
	// providing is set while a round of provider announcements runs.
	providing atomic.Bool
	// provMu guards the record of the last complete round of provider
	// announcements: the keys announced, when, and the routing table's
	// size then (see provideDue).
	provMu     sync.Mutex
	provKeys   string
	provAt     time.Time
	provRTSize int

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
	d := &Daemon{opts: opts, cfg: opts.Config, paths: Paths{opts.DataDir}, log: opts.Log, now: opts.Now, started: opts.Now(),
		readvertise: make(chan struct{}, 1)}
	d.inputPins = &inputPins{d: d, byJob: map[string]func(){}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.paths.Tighten(); err != nil {
		return nil, err
	}
	if socketAlive(d.paths.Socket()) {
		return nil, fmt.Errorf("%w (%s)", ErrAlreadyRunning, d.paths.Dir)
	}
	if err := unfinishedRotation(d.paths); err != nil {
		return nil, err
	}
	key, err := p2p.LoadOrCreateKey(d.paths.Key())
	if err != nil {
		return nil, err
	}
	if d.signer, err = sign.NewSigner(key); err != nil {
		return nil, err
	}
	d.db, err = ledger.Open(d.paths.DB(), ledger.WithLogger(d.log))
	if errors.Is(err, ledger.ErrInUse) {
		return nil, fmt.Errorf("%w (%s)", ErrAlreadyRunning, d.paths.Dir)
	}
	if err != nil {
		return nil, err
	}
	if err := checkOwner(d.paths, d.signer, d.db); err != nil {
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
		d.fp.GPUs = append(d.fp.GPUs, auction.GPU{Model: g.Model, VRAMGB: g.VRAMGB, UUID: g.UUID, Detected: g.Detected})
	}
	d.fpHash = d.fp.Hash()

	ttl := d.advertiseTTL()
	d.net, err = p2p.New(ctx, p2p.Config{
		Key:         key,
		ListenAddrs: d.cfg.Listen,
		Bootstrap:   d.cfg.Bootstrap,
		Validators: map[string]record.Validator{
			auction.CapabilityNamespace: auction.CapabilityValidator{Now: d.now, Successions: d.succ},
			attest.SuccessionNamespace:  attest.SuccessionValidator{Now: d.now, Successions: d.succ},
		},
		ProvideValidity: provideValidity(ttl),
		MDNS:            d.cfg.MDNS,
		Reachability:    d.cfg.Reachability,
		Relays:          d.cfg.Relays,
		RelayService:    d.cfg.relayService(),
		Protocols:       protocolLimits(),
		Log:             d.log,
	})
	if err != nil {
		return nil, err
	}
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
			d.net.KeepConnected(d.ctx, 5*time.Second)
		}()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.announceLoop(10 * time.Minute)
		}()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.learnLoop(d.opts.LearnEvery)
		}()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.rttLoop(d.opts.RTTRefreshEvery)
		}()
		if d.cfg.Provider.Enabled {
			d.advertiseLoop(ttl)
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

// provideValidity is how long this node's provider records live in the
// DHT; they are announced again every third of it (reprovideEvery).
func provideValidity(ttl time.Duration) time.Duration { return max(3*ttl, 30*time.Minute) }

func reprovideEvery(ttl time.Duration) time.Duration { return provideValidity(ttl) / 3 }

func (d *Daemon) advertiseTTL() time.Duration {
	if d.cfg.Provider.AdvertiseTTL > 0 {
		return d.cfg.Provider.AdvertiseTTL
	}
	return 10 * time.Minute
}

// capability builds the node's current capability record.
func (d *Daemon) capability(ttl time.Duration) auction.Capability {
	now := d.now()
	seq := uint64(now.UnixNano())
	if last := d.seq.Load(); seq <= last {
		seq = last + 1
	}
	d.seq.Store(seq)
	free := d.freeGPUs(now)
	pol := d.cfg.Provider.Policy
	pol.Sealed = d.canSeal
	return auction.Capability{
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
		Artifacts:   d.artifacts.Store().Held(auction.MaxAdvertisedArtifacts),
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

// availabilityCheck is how often a provider compares its free GPUs with
// what its capability record says and, when they differ, renews the
// record: at most every 30 s (a tenth of the record's TTL when shorter),
// so a change reaches renters listing providers that late, with a DHT put
// only when something changed.
func availabilityCheck(ttl time.Duration) time.Duration {
	return min(30*time.Second, max(ttl/10, 100*time.Millisecond))
}

// availabilityChanged reports whether the provider's free GPUs differ
// from its last advertised record's.
func (d *Daemon) availabilityChanged() bool {
	adv := d.Advertised()
	return adv != nil && adv.FreeGPUs != nil && *adv.FreeGPUs != d.freeGPUs(d.now())
}

// Advertised returns the last capability record this node put in the DHT.
func (d *Daemon) Advertised() *auction.Capability {
	d.advMu.Lock()
	defer d.advMu.Unlock()
	return d.advert
}

func (d *Daemon) advertiseLoop(ttl time.Duration) {
	// Give the routing table a moment to fill after bootstrap, so the first
	// record is not put into an empty table.
	for i := 0; i < 50 && d.net.DHT.RoutingTable().Size() == 0 && len(d.cfg.Bootstrap) > 0; i++ {
		select {
		case <-d.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	// A change of our addresses (new interface, new IP after a partition)
	// is re-advertised at once, so renters never dial stale addresses.
	addrs, err := d.net.Host.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		d.log.Warn("address updates", "err", err)
	} else {
		defer addrs.Close()
	}
	var addrCh <-chan any
	if addrs != nil {
		addrCh = addrs.Out()
	}
	check := time.NewTicker(availabilityCheck(ttl))
	defer check.Stop()
	for {
		// Renewal is scheduled from when the record was issued, not from
		// when a (possibly slow) put finished, so records never lapse
		// while a peer is unresponsive.
		issued := d.now()
		if err := d.advertise(ttl); err != nil && d.ctx.Err() == nil {
			d.log.Warn("advertise", "err", err)
		}
		next := ttl / 3
		if d.Advertised() == nil {
			next = min(next, 2*time.Second)
		}
		renew := time.NewTimer(time.Until(issued.Add(next)))
		if !d.waitToAdvertise(renew.C, addrCh, check.C) {
			renew.Stop()
			return
		}
		renew.Stop()
	}
}

// waitToAdvertise waits until the record is due again (renew), the node's
// addresses changed, the artifacts it holds changed (readvertise) or its
// free GPUs did (checked at each tick of check); false once the daemon
// stops.
func (d *Daemon) waitToAdvertise(renew <-chan time.Time, addrCh <-chan any, check <-chan time.Time) bool {
	for {
		select {
		case <-d.ctx.Done():
			return false
		case <-renew:
			return true
		case <-addrCh:
			d.log.Debug("local addresses changed; re-advertising")
			return true
		case <-d.readvertise:
			d.log.Debug("artifacts held changed; re-advertising")
			return true
		case <-check:
			if d.availabilityChanged() {
				d.log.Debug("free GPUs changed; re-advertising")
				return true
			}
		}
	}
}

// advertise puts a fresh signed capability record in the DHT, bounded by a
// third of the TTL so one unresponsive peer cannot stall renewal, and
// (re-)announces this node under each of its discovery keys in the
// background. Provider records are only an index and outlive the TTL;
// liveness is the capability record's expiry.
func (d *Daemon) advertise(ttl time.Duration) error {
	c := d.capability(ttl)
	b, err := auction.SealCapability(d.signer, c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, max(ttl/3, 3*time.Second))
	defer cancel()
	put := d.net.DHT.PutValue(ctx, auction.CapabilityKey(d.ID()), b)
	if put != nil && d.Advertised() == nil {
		return fmt.Errorf("put capability: %w", put)
	}
	// A put that timed out waiting on a silent peer has still reached the
	// responsive ones; the record counts as advertised.
	d.advMu.Lock()
	d.advert = &c
	d.advMu.Unlock()
	if keys := auction.DiscoveryKeys(c); d.provideDue(keys, ttl) && d.providing.CompareAndSwap(false, true) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.providing.Store(false)
			d.provideKeys(keys)
		}()
	}
	if put != nil {
		return fmt.Errorf("put capability (partial): %w", put)
	}
	return nil
}

// provideDue says whether this node's provider records need announcing
// again. The capability record is renewed every third of its TTL (it is
// what says a provider is alive), but provider records are only an index
// that lives provideValidity, so they are announced again only when the
// discovery keys changed, the last round did not complete, a third of
// their validity has passed, or the routing table has more than doubled
// since (a node that announced into a small, still-growing network
// announces again to reach the peers closest to its keys).
func (d *Daemon) provideDue(keys []string, ttl time.Duration) bool {
	d.provMu.Lock()
	defer d.provMu.Unlock()
	return d.provKeys != strings.Join(keys, "\n") || d.now().Sub(d.provAt) >= reprovideEvery(ttl) ||
		d.net.DHT.RoutingTable().Size() > 2*d.provRTSize
}

// provideKeys announces this node under its discovery keys, concurrently,
// and records a complete round for provideDue.
func (d *Daemon) provideKeys(keys []string) {
	ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
	defer cancel()
	rt, started := d.net.DHT.RoutingTable().Size(), d.now()
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, k := range keys {
		wg.Add(1)
		go func(k string) {
			defer wg.Done()
			if err := d.net.Provide(ctx, k); err != nil {
				failed.Store(true)
				if d.ctx.Err() == nil {
					d.log.Debug("provide", "key", k, "err", err)
				}
			}
		}(k)
	}
	wg.Wait()
	if failed.Load() {
		return
	}
	d.provMu.Lock()
	d.provKeys, d.provAt, d.provRTSize = strings.Join(keys, "\n"), started, rt
	d.provMu.Unlock()
}

// FindProviders discovers, through the DHT only, providers whose signed
// capability records match q. Expired or forged records are dropped by the
// validator.
func (d *Daemon) FindProviders(ctx context.Context, q auction.Query) ([]auction.Capability, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	// The provider-record search and each record lookup have their own
	// deadlines, and lookups start as provider records stream in: a silent
	// peer slows discovery down but cannot blank it.
	findCtx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  []auction.Capability
		seen = map[peer.ID]bool{}
	)
	sem := make(chan struct{}, 16)
	for ai := range d.net.DHT.FindProvidersAsync(findCtx, p2p.KeyCID(auction.QueryKey(q)), 1000) {
		if seen[ai.ID] {
			continue
		}
		seen[ai.ID] = true
		if len(ai.Addrs) > 0 {
			d.net.Host.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Minute)
		}
		wg.Add(1)
		go func(id peer.ID) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := d.lookupCapability(ctx, id)
			if err != nil {
				d.log.Debug("capability lookup", "peer", id, "err", err)
				return
			}
			if c.Matches(q) {
				mu.Lock()
				out = append(out, c)
				mu.Unlock()
			}
		}(ai.ID)
	}
	wg.Wait()
	sortCapabilities(out)
	return out, nil
}

func (d *Daemon) lookupCapability(ctx context.Context, id peer.ID) (auction.Capability, error) {
	if id == d.ID() {
		if c := d.Advertised(); c != nil && c.ExpiresAt.After(d.now()) {
			return *c, nil
		}
		return auction.Capability{}, errors.New("own record not advertised")
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The first valid answer is enough: any valid (signed, unexpired)
	// record is the provider's own word, and bids are evaluated live.
	b, err := d.net.DHT.GetValue(cctx, auction.CapabilityKey(id), dht.Quorum(1))
	if err == nil {
		var c auction.Capability
		if c, err = auction.OpenCapability(b, d.now()); err == nil {
			if prev, ok := d.capCache.Swap(id, c); ok && prev.(auction.Capability).Fingerprint != c.Fingerprint {
				// Renters see hardware changes: the record's fingerprint
				// hash covers GPU UUIDs, models, VRAM, driver and CUDA.
				d.log.Warn("provider hardware fingerprint changed", "peer", id,
					"was", prev.(auction.Capability).Fingerprint, "now", c.Fingerprint)
				d.fpChanges.Add(1)
			}
			return c, nil
		}
	}
	// A lookup stalled by an unresponsive peer falls back to the last
	// verified record, while it has not expired.
	if v, ok := d.capCache.Load(id); ok {
		if c := v.(auction.Capability); c.ExpiresAt.After(d.now()) {
			return c, nil
		}
		d.capCache.Delete(id)
	}
	return auction.Capability{}, err
}

// expectedBidders is the providers this node knows (their verified,
// unexpired capability records; never itself: a provider does not bid on
// its own jobs) whose capability fits job and that the job does not
// exclude: those that hear its call and answer it, with a bid or a
// decline. A bid window closes once all have.
func (d *Daemon) expectedBidders(job *auction.Job) []string {
	now, self := d.now(), d.ID().String()
	var out []string
	d.capCache.Range(func(_, v any) bool {
		c := v.(auction.Capability)
		if c.Peer != self && c.ExpiresAt.After(now) && !job.Excludes(c.Peer) && auction.StaticFit(&c, job) == nil {
			out = append(out, c.Peer)
		}
		return true
	})
	return out
}

// providerGPUs is a provider's GPU count in its last verified, unexpired
// capability record this node holds (0 when it holds none).
func (d *Daemon) providerGPUs(provider string) int {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0
	}
	if v, ok := d.capCache.Load(id); ok {
		if c := v.(auction.Capability); c.ExpiresAt.After(d.now()) {
			return len(c.GPUs)
		}
	}
	return 0
}

// advertisedFingerprint is the fingerprint hash of a provider's last
// verified capability record this node saw ("" when it saw none).
func (d *Daemon) advertisedFingerprint(provider string) string {
	id, err := peer.Decode(provider)
	if err != nil {
		return ""
	}
	if v, ok := d.capCache.Load(id); ok {
		return v.(auction.Capability).Fingerprint
	}
	return ""
}

func socketAlive(path string) bool {
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// protocolLimits are the stream and frame memory limits of the daemon's
// own protocols (libp2p's resource manager enforces them): no peer, and
// no crowd of peers, can hold more streams or frame memory than these.
func protocolLimits() map[protocol.ID]p2p.ProtocolLimit {
	m := map[protocol.ID]p2p.ProtocolLimit{}
	for _, p := range wire.RequestProtocols {
		m[p] = p2p.RequestLimit
	}
	for _, p := range wire.StreamProtocols {
		m[p] = p2p.BulkLimit
	}
	return m
}
