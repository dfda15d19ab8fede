package node

import (
	"bytes"
	"context"
	"fmt"
	"github.com/libp2p/go-libp2p/core/peer"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestProviderDefersGossipedReceipts: a provider that has never rented
// keeps gossiped receipts unchecked (a bounded queue, the oldest dropped
// and counted) until its book is read for another peer; then it checks
// them in order: the genuine ones count, forgeries and junk are refused
// and counted as a renter's would be at once.
func TestProviderDefersGossipedReceipts(t *testing.T) {
	n := startNode(t, t.TempDir(), providerConfig("eu-west", 0.5, a100), nil)
	defer n.Close()
	prov, renter := signtest.Pair(t)
	now := time.Now()
	receipt := func(i int) []byte {
		rc := attest.Receipt{LeaseID: fmt.Sprintf("l%d", i), JobID: "j", Renter: renter.ID().String(), Provider: prov.ID().String(),
			Start: now.Add(-time.Hour), End: now, GPUCount: 1, GPUSeconds: 3600, Price: 1, Amount: 1, Outcome: "succeeded", IssuedAt: now}
		sr, err := attest.NewReceipt(prov, rc)
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.Countersign(renter); err != nil {
			t.Fatal(err)
		}
		b, _ := sr.Marshal()
		return b
	}
	// Junk first: more than the queue holds, so that the oldest go (in
	// batches of one and of several).
	const junk = 1030
	for i := 0; i < junk; i += 2 {
		n.market.receipts.HandleGossip(peer.ID(prov.ID()), gossipMsg([]byte(strconv.Quote(fmt.Sprintf("junk %d", i))),
			[]byte(strconv.Quote(fmt.Sprintf("junk %d", i+1)))))
	}
	forged := receipt(0)
	forged[len(forged)/2] ^= 0x01
	n.market.receipts.HandleGossip(peer.ID(prov.ID()), gossipMsg(forged))
	n.market.receipts.HandleGossip(peer.ID(prov.ID()), gossipMsg(receipt(1), receipt(2)))
	// A message that is no batch at all is refused as it comes, unqueued.
	n.market.receipts.HandleGossip(peer.ID(prov.ID()), []byte("junk"))
	p := prov.ID().String()
	if got := n.market.book.Stats(p).Receipts; got != 0 {
		t.Fatalf("a provider that never rented took %d gossiped receipts in at once", got)
	}
	c := n.market.allCounters()
	if c["reputation.deferred_dropped"] != junk+3-1024 || c["reputation.gossip_malformed"] != 1 {
		t.Fatalf("while deferred: %d dropped, %d malformed; want %d dropped, only the message that is no batch checked", c["reputation.deferred_dropped"], c["reputation.gossip_malformed"], junk+3-1024)
	}
	// A reputation query reads the book for another peer: the queue is
	// checked first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rv, err := api.NewClient(n.dir).Reputation(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Rep.Receipts != 2 {
		t.Fatalf("after the query: %d receipts, want the 2 genuine ones", rv.Rep.Receipts)
	}
	c = n.market.allCounters()
	if malformed := c["reputation.gossip_malformed"]; malformed != 1024-3+1 {
		t.Fatalf("%d junk messages refused, want %d (the queue's and the one that was no batch)", malformed, 1024-3+1)
	}
	if refused := c["reputation.tampered"] + c["reputation.bad_signature"] + c["reputation.invalid"] + c["reputation.gossip_malformed"]; refused < 1024-3+2 {
		t.Fatalf("the forged receipt was not refused: %v", c)
	}
	// From now on gossip is taken in at once.
	n.market.receipts.HandleGossip(peer.ID(prov.ID()), gossipMsg(receipt(3)))
	if got := n.market.book.Stats(p).Receipts; got != 3 {
		t.Fatalf("after activation: %d receipts, want 3", got)
	}
}

// gossipMsg is a wire.ReputationTopic message carrying receipts, written
// out by hand so that a test can send entries no honest node would.
func gossipMsg(receipts ...[]byte) []byte {
	return append(append([]byte(`{"receipts":[`), bytes.Join(receipts, []byte(","))...), "]}"...)
}
