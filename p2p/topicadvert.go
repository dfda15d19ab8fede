package p2p

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/discovery"
)

// Jittered is d lengthened or shortened by up to frac of it, at random: the
// interval of a round every node runs (a DHT put, a lookup of every
// provider, an advertisement), drawn afresh each time, so that nodes
// started together (a testnet, a rack after a power cut) drift apart
// instead of running their rounds at once.
func Jittered(d time.Duration, frac float64) time.Duration {
	return d + time.Duration((2*rand.Float64()-1)*frac*float64(d))
}

// topicAdvertiser is what GossipSub advertises its topics through: provider
// records in the DHT under each topic (drouting's Advertise), found by
// FindPeers (the embedded discovery). GossipSub advertises a topic when it
// joins it, then again after the interval Advertise returns, or 2 min
// after a failure. drouting's interval is its record TTL, 3 h when not
// asked, against provider records that live validity (30 min in a daemon):
// topics went unadvertised most of the time. And a node joins its topics
// before its routing table has a peer, so its first advertisement failed;
// daemons started together then all advertised again 2 min later, at
// once (a testnet's 50 took both cores of the machine for 4 s).
// So it waits for a routing table (rt says its size) before advertising,
// renews the records at about half their validity, and retries a failure
// after about advertiseRetry.
type topicAdvertiser struct {
	discovery.Discovery
	rt       func() int
	validity time.Duration
	// poll is how often a wait for the routing table looks at it.
	poll time.Duration
}

// advertiseRetry is how long a failed topic advertisement waits for the
// next try (GossipSub's own is 2 min), jittered.
const advertiseRetry = 2 * time.Minute

func (a topicAdvertiser) Advertise(ctx context.Context, ns string, opts ...discovery.Option) (time.Duration, error) {
	if err := waitRoutingTable(ctx, a.rt, a.poll); err != nil {
		return 0, err
	}
	if _, err := a.Discovery.Advertise(ctx, ns, opts...); err != nil {
		return Jittered(advertiseRetry, 0.25), err
	}
	return Jittered(a.validity/2, 0.1), nil
}

// waitRoutingTable waits until size, a routing table's, is not 0, looking
// every poll; ctx's error at its end.
func waitRoutingTable(ctx context.Context, size func() int, poll time.Duration) error {
	for size() == 0 {
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// WaitRoutingTable waits until the node's DHT routing table has a peer,
// looking every 100 ms; ctx's error at its end.
func (n *Node) WaitRoutingTable(ctx context.Context) error {
	return waitRoutingTable(ctx, n.DHT.RoutingTable().Size, 100*time.Millisecond)
}
