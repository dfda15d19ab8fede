package wire

import (
	"context"

	"github.com/gpumesh/gpumesh/auction"
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
// are gossiped on their topics (a sampled call is sent on ProtoCall to each
// provider it asks), bids (and declines, capacity notices) go
// on ProtoBid, awards (and bid releases) on ProtoAward, whose answer is the
// provider's confirm.
func AuctionTransport(c Carrier) auction.Transport { return auctionTransport{c} }

type auctionTransport struct{ c Carrier }

func (t auctionTransport) Publish(ctx context.Context, topic string, data []byte) error {
	return t.c.Publish(ctx, topic, data)
}

func (t auctionTransport) SendCall(ctx context.Context, to peer.ID, data []byte) error {
	_, err := t.c.Request(ctx, to, ProtoCall, data)
	return err
}

func (t auctionTransport) SendBid(ctx context.Context, to peer.ID, data []byte) error {
	_, err := t.c.Request(ctx, to, ProtoBid, data)
	return err
}

func (t auctionTransport) SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	return t.c.Request(ctx, to, ProtoAward, data)
}
