package p2p

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"
)

// dhtReadTimeout bounds a DHT request's answer, as kad-dht's own sender
// does, when the request's context sets no sooner deadline.
const dhtReadTimeout = 10 * time.Second

// errPutUnanswered is a PUT_VALUE answered without its record.
var errPutUnanswered = errors.New("p2p: dht: put answered without a record")

// dhtSender is the DHT's message sender (dht.WithCustomMessageSender): one
// stream a request, and an answer checked before kad-dht reads it. kad-dht
// v0.42.2 dereferences a PUT_VALUE answer's record without checking that
// it has one (pb.ProtocolMessenger.PutValue), in a goroutine of its own:
// any DHT peer that answered a put with an empty message took down the
// daemon that put to it (every provider puts its capability record to the
// peers closest to its key). Such an answer is an error here.
type dhtSender struct {
	h      host.Host
	protos []protocol.ID
}

func newDHTSender(h host.Host, protos []protocol.ID) pb.MessageSenderWithDisconnect {
	return &dhtSender{h: h, protos: protos}
}

// OnDisconnect: no stream outlives its request, so nothing is kept.
func (s *dhtSender) OnDisconnect(context.Context, peer.ID) {}

// open opens a stream to p bounded by ctx (and dhtReadTimeout), reset
// when ctx ends first.
func (s *dhtSender) open(ctx context.Context, p peer.ID) (network.Stream, func(), error) {
	st, err := s.h.NewStream(ctx, p, s.protos...)
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(dhtReadTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	return st, func() { stop(); _ = st.Close() }, nil
}

// SendMessage sends pmes to p and waits for no answer.
func (s *dhtSender) SendMessage(ctx context.Context, p peer.ID, pmes *pb.Message) error {
	st, done, err := s.open(ctx, p)
	if err != nil {
		return err
	}
	defer done()
	return pbio.NewDelimitedWriter(st).WriteMsg(pmes)
}

// SendRequest sends pmes to p and reads its answer, refusing a put's
// answer that carries no record.
func (s *dhtSender) SendRequest(ctx context.Context, p peer.ID, pmes *pb.Message) (*pb.Message, error) {
	st, done, err := s.open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer done()
	start := time.Now()
	if err := pbio.NewDelimitedWriter(st).WriteMsg(pmes); err != nil {
		return nil, err
	}
	r := msgio.NewVarintReaderSize(st, network.MessageSizeMax)
	b, err := r.ReadMsg()
	if err != nil {
		return nil, err
	}
	resp := new(pb.Message)
	err = proto.Unmarshal(b, resp)
	r.ReleaseMsg(b)
	if err != nil {
		return nil, fmt.Errorf("p2p: dht answer from %s: %w", p, err)
	}
	if pmes.GetType() == pb.Message_PUT_VALUE && resp.GetRecord() == nil {
		return nil, fmt.Errorf("%w (from %s)", errPutUnanswered, p)
	}
	s.h.Peerstore().RecordLatency(p, time.Since(start))
	return resp, nil
}
