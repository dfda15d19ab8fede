package node

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultLearnEvery is how often a daemon discovers every provider's
// capability record in the background.
const DefaultLearnEvery = 5 * time.Minute

// Background RTT refresh: every RTTRefreshEvery the daemon measures
// again up to RTTRefreshLimit of the providers it knows whose sample is
// due (p2p.RTTs.Refresh), so that a latency-sensitive job's bidders are
// mostly measured before they bid, at a bounded rate of pings.
const (
	RTTRefreshEvery = time.Minute
	RTTRefreshLimit = 30
)

// learnLoop keeps the capability cache filled without anyone running
// `gpumesh providers`: the cache is who a renter expects to answer its calls
// (expectedBidders), so a bid window can close once all have answered, and
// bid sampling works, from a renter's first job. It discovers every
// provider after bootstrap and every interval; learnBidder adds a provider
// that bids in between. Only verified records are cached (lookupCapability).
func (d *Daemon) learnLoop(every time.Duration) {
	if every <= 0 {
		every = DefaultLearnEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(d.ctx, time.Minute)
		if _, err := d.FindProviders(ctx, auction.Query{}); err != nil && d.ctx.Err() == nil {
			d.log.Debug("learn providers", "err", err)
		}
		cancel()
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// learnBidder looks up, in the background, the record of a provider whose
// signed bid arrived while the cache holds no unexpired record of it (a
// provider that joined since the last discovery, or whose record expired),
// so that it is expected to answer this renter's next calls. One lookup
// per provider at a time.
func (d *Daemon) learnBidder(id peer.ID) {
	if v, ok := d.capCache.Load(id); ok && v.(auction.Capability).ExpiresAt.After(d.now()) {
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
		if _, err := d.lookupCapability(ctx, id); err != nil && d.ctx.Err() == nil {
			d.log.Debug("learn bidder", "peer", id, "err", err)
		}
	}()
}

// rttLoop keeps the round trips to the providers this node knows fresh
// (see RTTRefreshEvery), until the daemon stops.
func (d *Daemon) rttLoop(every time.Duration) {
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
		d.net.RTTs().Refresh(d.ctx, d.knownProviders(), RTTRefreshLimit)
	}
}

// knownProviders are the providers whose verified, unexpired capability
// record this node holds (never itself).
func (d *Daemon) knownProviders() []peer.ID {
	now, self := d.now(), d.ID()
	var out []peer.ID
	d.capCache.Range(func(k, v any) bool {
		if id := k.(peer.ID); id != self && v.(auction.Capability).ExpiresAt.After(now) {
			out = append(out, id)
		}
		return true
	})
	return out
}

// providerRTT is the fresh round trip this node measured to provider
// (auction.RenterConfig.RTT).
func (d *Daemon) providerRTT(provider string) (time.Duration, bool) {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0, false
	}
	return d.net.RTTs().Fresh(id)
}

// measureRTT is the round trip to provider, measured now unless fresh
// (auction.RenterConfig.MeasureRTT). The bid stream it came on is the
// connection the ping takes: no address from a call is dialled.
func (d *Daemon) measureRTT(ctx context.Context, provider string) (time.Duration, bool) {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0, false
	}
	return d.net.RTTs().Measure(ctx, id)
}
