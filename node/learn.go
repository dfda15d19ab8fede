package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Background RTT refresh: every RTTRefreshEvery the daemon measures
// again up to RTTRefreshLimit of the providers it knows whose sample is
// due (p2p.RTTs.Refresh), so that a latency-sensitive job's bidders are
// mostly measured before they bid, at a bounded rate of pings.
const (
	RTTRefreshEvery = time.Minute
	RTTRefreshLimit = 30
)

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
		d.net.RTTs().Refresh(d.ctx, d.disc.Known(), RTTRefreshLimit)
	}
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
