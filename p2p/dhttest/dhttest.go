// Package dhttest makes a libp2p host a scripted peer of gpumesh's DHT,
// for tests of what a hostile or silent DHT peer can do.
package dhttest

import (
	"context"
	"testing"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"
)

// Serve answers every message h receives on the DHT protocol kad (gpumesh's:
// p2p.ProtocolPrefix + "/kad/1.0.0") with answer's reply to it; a nil
// reply answers nothing (the stream is read on, as a peer that holds its
// connection open and never answers does).
func Serve(h host.Host, kad protocol.ID, answer func(*pb.Message) *pb.Message) {
	h.SetStreamHandler(kad, func(s network.Stream) {
		r := msgio.NewVarintReaderSize(s, network.MessageSizeMax)
		w := pbio.NewDelimitedWriter(s)
		for {
			b, err := r.ReadMsg()
			if err != nil {
				return
			}
			var m pb.Message
			err = proto.Unmarshal(b, &m)
			r.ReleaseMsg(b)
			if err != nil {
				return
			}
			if reply := answer(&m); reply != nil {
				if err := w.WriteMsg(reply); err != nil {
					return
				}
			}
		}
	})
}

// Empty is an answer naming no peer and no record (a put's answer
// should carry the record it stored).
func Empty(m *pb.Message) *pb.Message { return &pb.Message{Type: m.Type, Key: m.Key} }

// AwaitInTable waits until d's routing table holds every one of ids, and
// fails t if ctx ends first. It polls: kad-dht takes a peer into its table
// from its own identify handler, once the peer answered its check, and
// announces nothing a test can wait on.
func AwaitInTable(ctx context.Context, t testing.TB, d *dht.IpfsDHT, ids ...peer.ID) {
	t.Helper()
	in := func() bool {
		for _, id := range ids {
			if d.RoutingTable().Find(id) == "" {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !in() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the routing table never held %v", ids)
		}
	}
}
