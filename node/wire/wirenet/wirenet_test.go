package wirenet

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// recorder is a Carrier that records what it is asked to carry and answers
// each request with its protocol's answer.
type recorder struct {
	topic   string
	to      peer.ID
	proto   protocol.ID
	data    string
	answers map[protocol.ID][]byte
	err     error
}

func (r *recorder) Publish(_ context.Context, topic string, data []byte) error {
	r.topic, r.data = topic, string(data)
	return r.err
}

func (r *recorder) Request(_ context.Context, to peer.ID, proto protocol.ID, data []byte) ([]byte, error) {
	r.to, r.proto, r.data = to, proto, string(data)
	return r.answers[proto], r.err
}

// The binding is the engines' transport.
var _ auction.Transport = Transport{}

// TestAuctionTransport: calls go out as gossip on their topic, bids on
// wire.ProtoBid, awards on wire.ProtoAward whose answer (the confirm) comes back;
// a carrier's failure reaches the auction.
func TestAuctionTransport(t *testing.T) {
	ctx := context.Background()
	to := peer.ID(signtest.New(t).ID())
	r := &recorder{answers: map[protocol.ID][]byte{wire.ProtoAward: []byte("confirm"), wire.ProtoBid: []byte("ignored")}}
	tr := AuctionTransport(r)
	if err := tr.Publish(ctx, "gpumesh/jobs/2/eu", []byte("call")); err != nil || r.topic != "gpumesh/jobs/2/eu" || r.data != "call" {
		t.Fatalf("publish: %v, carried %q on %q", err, r.data, r.topic)
	}
	if err := tr.SendBid(ctx, to, []byte("bid")); err != nil || r.proto != wire.ProtoBid || r.to != to || r.data != "bid" {
		t.Fatalf("bid: %v, carried %q on %s to %s", err, r.data, r.proto, r.to)
	}
	c, err := tr.SendAward(ctx, to, []byte("award"))
	if err != nil || r.proto != wire.ProtoAward || r.to != to || r.data != "award" || string(c) != "confirm" {
		t.Fatalf("award: %v, carried %q on %s to %s, answered %q", err, r.data, r.proto, r.to, c)
	}
	r.err = errors.New("unreachable")
	if err := tr.SendBid(ctx, to, nil); !errors.Is(err, r.err) {
		t.Fatalf("bid over a failing carrier: %v", err)
	}
	if _, err := tr.SendAward(ctx, to, nil); !errors.Is(err, r.err) {
		t.Fatalf("award over a failing carrier: %v", err)
	}
	if err := tr.Publish(ctx, "t", nil); !errors.Is(err, r.err) {
		t.Fatalf("publish over a failing carrier: %v", err)
	}
}
