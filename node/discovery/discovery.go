// Package discovery is how a daemon finds providers and is found by
// renters, through the DHT only: it keeps this provider's signed
// capability record in the DHT (renewed before it lapses, at once when
// the provider's addresses, artifacts or free GPUs change) and announces
// it under its discovery keys; and it looks up other providers' records,
// keeping the last verified one of each, which is what the market's
// callers ask of the providers this node knows, and the round trips to
// them, kept fresh.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
)

// DefaultLearnEvery is how often a daemon discovers every provider's
// capability record in the background (Learn).
const DefaultLearnEvery = 5 * time.Minute

// Config is what a Discovery works with.
type Config struct {
	// Net is the node's libp2p host and DHT.
	Net *p2p.Node
	// Signer signs this provider's capability records.
	Signer *sign.Signer
	// Now is the clock.
	Now func() time.Time
	// Log receives what goes wrong in the background.
	Log *slog.Logger
	// Bootstrap says the node has bootstrap peers: its first record waits
	// (a little) for the routing table to fill.
	Bootstrap bool
	// AvailabilityGap is the least time between a record and the next one
	// put only because the free GPUs changed (default
	// DefaultAvailabilityGap): a busy provider's GPUs free and fill several
	// times a second, and each put costs every peer it reaches a signature
	// check, so the changes within it go out together.
	AvailabilityGap time.Duration
}

// Discovery advertises this node and holds what it learned of providers.
type Discovery struct {
	cfg Config
	ctx context.Context
	wg  sync.WaitGroup

	advMu  sync.Mutex
	advert *terms.Capability
	// advPut is notified at each record put.
	advPut broadcast.Signal
	// readvertise asks the advertise loop for a fresh record now.
	readvertise chan struct{}
	// providing is set while a round of provider announcements runs.
	providing atomic.Bool
	// provMu guards the record of the last complete round of provider
	// announcements: the keys announced, when, and the routing table's
	// size then (see provideDue).
	provMu     sync.Mutex
	provKeys   string
	provAt     time.Time
	provRTSize int

	// records holds the last verified capability record of each provider
	// (peer.ID → terms.Capability).
	records sync.Map
	// recChanged is notified at each record kept or forgotten.
	recChanged broadcast.Signal
	// learning holds the providers whose record Learn is looking up.
	learning sync.Map
	// fpChanges counts fingerprint changes seen in providers' records.
	fpChanges atomic.Int64
}

// New returns a Discovery whose work ends with ctx (Wait waits for it).
func New(ctx context.Context, cfg Config) *Discovery {
	if cfg.AvailabilityGap <= 0 {
		cfg.AvailabilityGap = DefaultAvailabilityGap
	}
	return &Discovery{cfg: cfg, ctx: ctx, readvertise: make(chan struct{}, 1)}
}

// Wait waits for the lookups and announcements still running in the
// background; they end with New's context.
func (d *Discovery) Wait() { d.wg.Wait() }

// ProvideValidity is how long this node's provider records live in the
// DHT (p2p.Config.ProvideValidity); they are announced again every third
// of it (reprovideEvery).
func ProvideValidity(ttl time.Duration) time.Duration { return max(3*ttl, 30*time.Minute) }

func reprovideEvery(ttl time.Duration) time.Duration { return ProvideValidity(ttl) / 3 }

// Availability is a provider's free GPUs, from the state that holds them
// (its calendar), which says when they change: the advertise loop renews
// the capability record at each change rather than looking on a timer.
type Availability struct {
	// Free is the number of GPUs free at an instant.
	Free func(at time.Time) int
	// Changed returns a channel closed at the next change of what Free
	// answers other than by time passing, and the first instant after at
	// when time passing may change it (a booking's start or end; the zero
	// time when none). Take it before asking Free, so that no change is
	// missed.
	Changed func(at time.Time) (<-chan struct{}, time.Time)
}

// Advertised returns the last capability record this node put in the DHT.
func (d *Discovery) Advertised() *terms.Capability {
	d.advMu.Lock()
	defer d.advMu.Unlock()
	return d.advert
}

// AdvertisedChanged returns a channel closed at the next record this node
// puts, and at the next complete round of its provider records
// (Provided): take it before reading Advertised, so that no put is
// missed.
func (d *Discovery) AdvertisedChanged() <-chan struct{} { return d.advPut.Wait() }

// Readvertise asks Advertise for a fresh record now (the artifacts the
// node holds changed, or its drain started or ended).
func (d *Discovery) Readvertise() {
	select {
	case d.readvertise <- struct{}{}:
	default:
	}
}

// Advertise keeps this provider's capability record, as record builds it
// for a TTL of ttl, in the DHT until New's context ends: renewed about
// every third of ttl (renewJitter), and at once when the node's addresses
// change, Readvertise is called or the free GPUs (avail) differ from the
// record's.
func (d *Discovery) Advertise(ttl time.Duration, record func(ttl time.Duration) terms.Capability, avail Availability) {
	// Give the routing table a moment (5 s at most) to fill after
	// bootstrap, so the first record is not put into an empty table.
	if d.cfg.Bootstrap {
		ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
		_ = d.cfg.Net.WaitRoutingTable(ctx) // an empty table after 5 s: put anyway
		cancel()
		if d.ctx.Err() != nil {
			return
		}
	}
	// A change of our addresses (new interface, new IP after a partition)
	// is re-advertised at once, so renters never dial stale addresses.
	addrs, err := d.cfg.Net.Host.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		d.cfg.Log.Warn("address updates", "err", err)
	} else {
		defer addrs.Close()
	}
	var addrCh <-chan any
	if addrs != nil {
		addrCh = addrs.Out()
	}
	for {
		// Renewal is scheduled from when the record was issued, not from
		// when a (possibly slow) put finished, so records never lapse
		// while a peer is unresponsive.
		issued := d.cfg.Now()
		if err := d.advertise(record(ttl), ttl); err != nil && d.ctx.Err() == nil {
			d.cfg.Log.Warn("advertise", "err", err)
		}
		next := p2p.Jittered(ttl/3, renewJitter)
		if d.Advertised() == nil {
			next = min(next, 2*time.Second)
		}
		renew := time.NewTimer(time.Until(issued.Add(next)))
		if !d.waitToAdvertise(renew.C, addrCh, avail, issued.Add(d.cfg.AvailabilityGap)) {
			renew.Stop()
			return
		}
		renew.Stop()
	}
}

// DefaultAvailabilityGap is Config.AvailabilityGap's default. A put is a
// DHT lookup and a signed record to each of the closest 20 peers, which
// check its signature: a busy provider's free GPUs change with every job,
// so the gap, not the jobs, sets how often each provider puts. In a
// 50-daemon market (45 providers, 5 renters, 500 jobs at 50 in flight, two
// cores) the puts at 2 s cost more than the jobs did (506 ms of CPU a
// job, on an earlier and slower VM); on one VM side by side, 5 s cost
// 96-111 ms a job and 30 s 80-86 ms. The free GPUs a record
// shows are what `gpumesh providers` lists (auctions ask the providers
// themselves), so they may be up to 30 s old; a drain's start and end are
// put at once (Readvertise).
const DefaultAvailabilityGap = 30 * time.Second

// waitToAdvertise waits until the record is due again (renew), the node's
// addresses changed, the artifacts it holds changed (readvertise) or its
// free GPUs did (avail, looked at when it says they may have changed; not
// before notBefore, see Config.AvailabilityGap); false once New's context
// ends.
func (d *Discovery) waitToAdvertise(renew <-chan time.Time, addrCh <-chan any, avail Availability, notBefore time.Time) bool {
	var edge, gap *time.Timer
	defer func() {
		for _, t := range []*time.Timer{edge, gap} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	var gapC <-chan time.Time
	for {
		now := d.cfg.Now()
		changed, next := avail.Changed(now)
		if adv := d.Advertised(); adv != nil && adv.FreeGPUs != nil && *adv.FreeGPUs != avail.Free(now) {
			if !now.Before(notBefore) {
				d.cfg.Log.Debug("free GPUs changed; re-advertising")
				return true
			}
			if gap == nil {
				gap = time.NewTimer(notBefore.Sub(now))
				gapC = gap.C
			}
		}
		var edgeC <-chan time.Time
		if edge != nil {
			edge.Stop()
			edge = nil
		}
		if !next.IsZero() {
			edge = time.NewTimer(next.Sub(now))
			edgeC = edge.C
		}
		select {
		case <-d.ctx.Done():
			return false
		case <-renew:
			return true
		case <-addrCh:
			d.cfg.Log.Debug("local addresses changed; re-advertising")
			return true
		case <-d.readvertise:
			d.cfg.Log.Debug("asked to re-advertise")
			return true
		case <-changed:
		case <-edgeC:
		case <-gapC:
			gap, gapC = nil, nil
		}
	}
}

// advertise puts the signed capability record c in the DHT, bounded by a
// third of the TTL so one unresponsive peer cannot stall renewal, and
// (re-)announces this node under each of its discovery keys in the
// background. Provider records are only an index and outlive the TTL;
// liveness is the capability record's expiry.
func (d *Discovery) advertise(c terms.Capability, ttl time.Duration) error {
	b, err := terms.SealCapability(d.cfg.Signer, c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, max(ttl/3, 3*time.Second))
	defer cancel()
	put := d.cfg.Net.DHT.PutValue(ctx, terms.CapabilityKey(sign.ID(d.cfg.Net.ID())), b)
	if put != nil && d.Advertised() == nil {
		return fmt.Errorf("put capability: %w", put)
	}
	// A put that timed out waiting on a silent peer has still reached the
	// responsive ones; the record counts as advertised.
	d.advMu.Lock()
	d.advert = &c
	d.advMu.Unlock()
	d.advPut.Notify()
	if keys := terms.DiscoveryKeys(c); d.provideDue(keys, ttl) && d.providing.CompareAndSwap(false, true) {
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
// that lives ProvideValidity, so they are announced again only when the
// discovery keys changed, the last round did not complete, a third of
// their validity has passed, or the routing table has more than doubled
// since (a node that announced into a small, still-growing network
// announces again to reach the peers closest to its keys).
func (d *Discovery) provideDue(keys []string, ttl time.Duration) bool {
	d.provMu.Lock()
	defer d.provMu.Unlock()
	return d.provKeys != strings.Join(keys, "\n") || d.cfg.Now().Sub(d.provAt) >= reprovideEvery(ttl) ||
		d.cfg.Net.DHT.RoutingTable().Size() > 2*d.provRTSize
}

// provideKeys announces this node under its discovery keys, concurrently,
// and records a complete round for provideDue.
func (d *Discovery) provideKeys(keys []string) {
	ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
	defer cancel()
	rt, started := d.cfg.Net.DHT.RoutingTable().Size(), d.cfg.Now()
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, k := range keys {
		wg.Add(1)
		go func(k string) {
			defer wg.Done()
			if err := d.cfg.Net.Provide(ctx, k); err != nil {
				failed.Store(true)
				if d.ctx.Err() == nil {
					d.cfg.Log.Debug("provide", "key", k, "err", err)
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
	d.advPut.Notify()
}

// Provided says whether this node's provider records under the discovery
// keys of its last record were all announced (a complete round), so that
// a lookup by those keys finds it.
func (d *Discovery) Provided() bool {
	adv := d.Advertised()
	if adv == nil {
		return false
	}
	d.provMu.Lock()
	defer d.provMu.Unlock()
	return !d.provAt.IsZero() && d.provKeys == strings.Join(terms.DiscoveryKeys(*adv), "\n")
}

// FindProviders discovers, through the DHT only, providers whose signed
// capability records match q, sorted by peer. Expired or forged records
// are dropped by the validator.
func (d *Discovery) FindProviders(ctx context.Context, q terms.Query) ([]terms.Capability, error) {
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
		out  []terms.Capability
		seen = map[peer.ID]bool{}
	)
	sem := make(chan struct{}, 16)
	n := d.cfg.Net
	for ai := range n.DHT.FindProvidersAsync(findCtx, p2p.KeyCID(terms.QueryKey(q)), 1000) {
		if seen[ai.ID] {
			continue
		}
		seen[ai.ID] = true
		if len(ai.Addrs) > 0 {
			n.Host.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Minute)
		}
		wg.Add(1)
		go func(id peer.ID) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := d.Lookup(ctx, id)
			if err != nil {
				d.cfg.Log.Debug("capability lookup", "peer", id, "err", err)
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
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out, nil
}

// Lookup is provider id's verified, unexpired capability record (this
// node's own advertised one for its own id), which it keeps.
func (d *Discovery) Lookup(ctx context.Context, id peer.ID) (terms.Capability, error) {
	now := d.cfg.Now()
	if id == d.cfg.Net.ID() {
		if c := d.Advertised(); c != nil && c.ExpiresAt.After(now) {
			return *c, nil
		}
		return terms.Capability{}, errors.New("own record not advertised")
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The first valid answer is enough: any valid (signed, unexpired)
	// record is the provider's own word, and bids are evaluated live. So
	// the answers are read as they come (SearchValue), not once the whole
	// lookup ended (GetValue: with Quorum(1) it wants a second answer,
	// and one peer that holds the connection open and never answers, a
	// peer cut off by a partition, held every lookup to its timeout, when
	// the provider itself had answered at once).
	c, err := d.firstValid(cctx, terms.CapabilityKey(sign.ID(id)))
	if err == nil {
		if prev, ok := d.records.Swap(id, c); ok && prev.(terms.Capability).Fingerprint != c.Fingerprint {
			// Renters see hardware changes: the record's fingerprint
			// hash covers GPU UUIDs, models, VRAM, driver and CUDA.
			d.cfg.Log.Warn("provider hardware fingerprint changed", "peer", id,
				"was", prev.(terms.Capability).Fingerprint, "now", c.Fingerprint)
			d.fpChanges.Add(1)
		}
		d.recordsChanged()
		return c, nil
	}
	// A lookup stalled by an unresponsive peer falls back to the last
	// verified record, while it has not expired.
	if v, ok := d.records.Load(id); ok {
		if c := v.(terms.Capability); c.ExpiresAt.After(d.cfg.Now()) {
			return c, nil
		}
		d.Forget(id)
	}
	return terms.Capability{}, err
}

// firstValid is the first record for key a DHT search finds that opens as
// a valid capability record, opened (any other answer is read past).
func (d *Discovery) firstValid(ctx context.Context, key string) (terms.Capability, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the search stops with it
	ch, err := d.cfg.Net.DHT.SearchValue(ctx, key, dht.Quorum(1))
	if err != nil {
		return terms.Capability{}, err
	}
	var last error = routing.ErrNotFound
	for b := range ch {
		c, err := terms.OpenCapability(b, d.cfg.Now())
		if err == nil {
			return c, nil
		}
		last = err
	}
	if ctx.Err() != nil {
		return terms.Capability{}, ctx.Err()
	}
	return terms.Capability{}, last
}

// Holdings is the renter's holdings check (auction.Holdings):
// the artifacts a provider's signed capability record advertises, looked
// up afresh.
func (d *Discovery) Holdings(ctx context.Context, provider string) ([]string, bool) {
	id, err := peer.Decode(provider)
	if err != nil {
		return nil, false
	}
	c, err := d.Lookup(ctx, id)
	if err != nil {
		return nil, false
	}
	return c.Artifacts, true
}

// Forget drops the record of provider id this node keeps: until it is
// looked up again, the node does not know it.
func (d *Discovery) Forget(id peer.ID) {
	d.records.Delete(id)
	d.recordsChanged()
}

// RecordsChanged returns a channel closed at the next provider record this
// node keeps (a lookup's) or forgets: take it before reading the records,
// so that no change is missed. Records that expire announce nothing.
func (d *Discovery) RecordsChanged() <-chan struct{} { return d.recChanged.Wait() }

func (d *Discovery) recordsChanged() { d.recChanged.Notify() }

// FingerprintChanges is how many times a provider's record came with
// another hardware fingerprint than its last.
func (d *Discovery) FingerprintChanges() int64 { return d.fpChanges.Load() }

// Records are the verified, unexpired capability records this node keeps
// of other providers (never its own).
func (d *Discovery) Records() []terms.Capability {
	now, self := d.cfg.Now(), d.cfg.Net.ID().String()
	var out []terms.Capability
	d.records.Range(func(_, v any) bool {
		if c := v.(terms.Capability); c.Peer != self && c.ExpiresAt.After(now) {
			out = append(out, c)
		}
		return true
	})
	return out
}

// Known are the providers whose verified, unexpired capability record
// this node keeps (never itself).
func (d *Discovery) Known() []peer.ID {
	now, self := d.cfg.Now(), d.cfg.Net.ID()
	var out []peer.ID
	d.records.Range(func(k, v any) bool {
		if id := k.(peer.ID); id != self && v.(terms.Capability).ExpiresAt.After(now) {
			out = append(out, id)
		}
		return true
	})
	return out
}

// ExpectedBidders is the providers this node knows (their verified,
// unexpired capability records; never itself: a provider does not bid on
// its own jobs) whose capability fits job and that the job does not
// exclude: those that hear its call and answer it, with a bid or a
// decline. A bid window closes once all have.
func (d *Discovery) ExpectedBidders(job *terms.Job) []string {
	var out []string
	for _, c := range d.Records() {
		if !job.Excludes(c.Peer) && auction.StaticFit(&c, job) == nil {
			out = append(out, c.Peer)
		}
	}
	return out
}

// GPUs is a provider's GPU count in its last verified, unexpired
// capability record this node keeps (0 when it keeps none).
func (d *Discovery) GPUs(provider string) int {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0
	}
	if v, ok := d.records.Load(id); ok {
		if c := v.(terms.Capability); c.ExpiresAt.After(d.cfg.Now()) {
			return len(c.GPUs)
		}
	}
	return 0
}

// Fingerprint is the fingerprint hash of a provider's last verified
// capability record this node saw ("" when it saw none).
func (d *Discovery) Fingerprint(provider string) string {
	id, err := peer.Decode(provider)
	if err != nil {
		return ""
	}
	if v, ok := d.records.Load(id); ok {
		return v.(terms.Capability).Fingerprint
	}
	return ""
}

// Learn keeps the records filled without anyone running `gpumesh
// providers`: they are who a renter expects to answer its calls
// (ExpectedBidders), so a bid window can close once all have answered,
// and bid sampling works, from a renter's first job. It discovers every
// provider now and about every interval (DefaultLearnEvery when not
// positive; learnJitter) until New's context ends; LearnBidder adds a
// provider that bids in between. Only verified records are kept (Lookup).
func (d *Discovery) Learn(every time.Duration) {
	if every <= 0 {
		every = DefaultLearnEvery
	}
	for {
		ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
		if _, err := d.FindProviders(ctx, terms.Query{}); err != nil && d.ctx.Err() == nil {
			d.cfg.Log.Debug("learn providers", "err", err)
		}
		cancel()
		t := time.NewTimer(p2p.Jittered(every, learnJitter))
		select {
		case <-d.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Jitter of the background rounds (p2p.Jittered). A round is a DHT lookup
// per provider (Learn) or a put to the 20 closest peers (Advertise):
// daemons started together, as a testnet's are, ran them all at once, and
// 50 daemons' rounds of Learn took both cores of the machine for 4 s.
const (
	learnJitter = 0.25
	renewJitter = 0.1
)

// LearnBidder looks up, in the background, the record of a provider whose
// signed bid arrived while this node keeps no unexpired record of it (a
// provider that joined since the last discovery, or whose record expired),
// so that it is expected to answer this renter's next calls. One lookup
// per provider at a time.
func (d *Discovery) LearnBidder(id peer.ID) {
	if v, ok := d.records.Load(id); ok && v.(terms.Capability).ExpiresAt.After(d.cfg.Now()) {
		return
	}
	if _, busy := d.learning.LoadOrStore(id, true); busy {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer d.learning.Delete(id)
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		defer cancel()
		if _, err := d.Lookup(ctx, id); err != nil && d.ctx.Err() == nil {
			d.cfg.Log.Debug("learn bidder", "peer", id, "err", err)
		}
	}()
}

// Background RTT refresh: every RTTRefreshEvery a node measures up to
// RTTRefreshLimit of the providers it knows whose sample is due
// (p2p.RTTs.Refresh: never measured, or measured half p2p.RTTMaxAge ago),
// so that a provider learned is measured within seconds and each one
// again every few minutes, at a bounded rate of pings. A renter's bidders
// are then mostly measured before they bid: a latency-sensitive job ranks
// them by it, and every call's quiet spell waits for far ones' answers
// (auction.RenterConfig.QuietClose).
const (
	RTTRefreshEvery = 10 * time.Second
	RTTRefreshLimit = 30
)

// RefreshRTTs keeps the round trips to the providers this node knows
// fresh, every interval (RTTRefreshEvery when not positive), until New's
// context ends.
func (d *Discovery) RefreshRTTs(every time.Duration) {
	if every <= 0 {
		every = RTTRefreshEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
		d.cfg.Net.RTTs().Refresh(d.ctx, d.Known(), RTTRefreshLimit)
	}
}

// RTT is the fresh round trip this node measured to provider
// (auction.Latency.RTT).
func (d *Discovery) RTT(provider string) (time.Duration, bool) {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0, false
	}
	return d.cfg.Net.RTTs().Fresh(id)
}

// MeasureRTT is the round trip to provider, measured now unless fresh
// (auction.Latency.MeasureRTT). The bid stream it came on is the
// connection the ping takes: no address from a call is dialled.
func (d *Discovery) MeasureRTT(ctx context.Context, provider string) (time.Duration, bool) {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0, false
	}
	return d.cfg.Net.RTTs().Measure(ctx, id)
}
