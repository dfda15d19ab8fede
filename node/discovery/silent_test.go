package discovery

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/dhttest"
	"github.com/libp2p/go-libp2p"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestLookupDoesNotWaitForASilentPeer: a hostile (or partitioned) DHT
// server that takes every query and never answers does not hide a
// provider whose own node answers: the renter's lookup takes the first
// valid record. (A lookup that waited for a second answer, kad-dht's
// GetValue with Quorum(1), waited on the silent peer until its deadline
// and found nothing: the renter held no copy of its own.)
func TestLookupDoesNotWaitForASilentPeer(t *testing.T) {
	silent, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	// It answers as a DHT server with no peers and no records until it
	// falls silent: kad-dht takes into its table only peers that answer.
	var silenced atomic.Bool
	dhttest.Serve(silent, p2p.ProtocolPrefix+"/kad/1.0.0", func(m *pb.Message) *pb.Message {
		if silenced.Load() {
			return nil // reads every query, answers none
		}
		return dhttest.Empty(m)
	})
	silentInfo := peer.AddrInfo{ID: silent.ID(), Addrs: silent.Addrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The provider's node knows only the silent peer when it stores its
	// record: the record is its own and nobody else's.
	prov := start(t)
	if err := prov.net.Host.Connect(ctx, silentInfo); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec, err := terms.SealCapability(prov.signer, terms.Capability{Peer: prov.net.ID().String(), Addrs: prov.net.Addrs(),
		Region: "eu-west", GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}}, Policy: terms.Policy{PriceFloor: 1},
		Seq: uint64(now.UnixNano()), IssuedAt: now, ExpiresAt: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	_ = prov.net.DHT.PutValue(pctx, terms.CapabilityKey(sign.ID(prov.net.ID())), rec) // stored locally; the silent peer's copy never acks
	pcancel()

	// The renter knows both: its lookup asks the provider and the silent
	// peer.
	renter := start(t)
	for _, ai := range []peer.AddrInfo{silentInfo, {ID: prov.net.ID(), Addrs: prov.net.Host.Addrs()}} {
		if err := renter.net.Host.Connect(ctx, ai); err != nil {
			t.Fatal(err)
		}
	}
	dhttest.AwaitInTable(ctx, t, renter.net.DHT, silent.ID(), prov.net.ID())

	silenced.Store(true)
	c, err := renter.disc.Lookup(ctx, prov.net.ID())
	if err != nil {
		t.Fatalf("lookup with a silent peer in the table: %v", err)
	}
	if c.Peer != prov.net.ID().String() || len(c.GPUs) != 1 {
		t.Fatalf("lookup found %+v", c)
	}
}
