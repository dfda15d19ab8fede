// Package wirenet binds the market's wire (package wire) to a network
// that carries it: the one binding of auction.Transport to the daemons'
// protocols, used by the daemon and every harness. It names peers and
// protocols as libp2p does, which the wire's own nouns (and the control
// API's client that links them) do not.
package wirenet

import (
	"context"

	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Carrier is what the auction's messages travel on between daemons:
// gossip on a topic, and one request and its answer on a protocol, to a
// peer the carrier reaches by itself (p2p.Direct on a daemon's node).
type Carrier interface {
	Publish(ctx context.Context, topic string, data []byte) error
	Request(ctx context.Context, to peer.ID, proto protocol.ID, data []byte) ([]byte, error)
}

// AuctionTransport is the one binding of auction.Transport to the
// daemons' protocols, used by the daemon and every harness: calls for bids
// are gossiped on their topics (a sampled call is sent on wire.ProtoCall to each
// provider it asks), bids (and declines, capacity notices) go
// on wire.ProtoBid, awards (and bid releases) on wire.ProtoAward, whose answer is the
// provider's confirm. It returns the binding's own type, which satisfies
// auction.Transport (checked in its test), so that this package needs
// only the market's nouns (auction/terms), not its engines.
func AuctionTransport(c Carrier) Transport { return Transport{c} }

// Transport is AuctionTransport's binding: the auction's messages on a
// Carrier.
type Transport struct{ c Carrier }

func (t Transport) Publish(ctx context.Context, topic string, data []byte) error {
	return t.c.Publish(ctx, topic, data)
}

func (t Transport) SendCall(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	return t.c.Request(ctx, to, wire.ProtoCall, data)
}

func (t Transport) SendBid(ctx context.Context, to peer.ID, data []byte) error {
	_, err := t.c.Request(ctx, to, wire.ProtoBid, data)
	return err
}

func (t Transport) SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	return t.c.Request(ctx, to, wire.ProtoAward, data)
}
