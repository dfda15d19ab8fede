package lease

import (
	"context"
	"fmt"
	"github.com/gpumesh/gpumesh/auction/terms"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// publishes is a Transport that hands every gossiped message to a channel
// (none, as a network would, once the publish's context ended).
type publishes chan []byte

func (p publishes) Publish(ctx context.Context, topic string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if topic != wire.ReputationTopic {
		return fmt.Errorf("published on %s", topic)
	}
	p <- data
	return nil
}

func (publishes) Request(context.Context, peer.ID, protocol.ID, []byte) ([]byte, error) {
	return nil, fmt.Errorf("no requests here")
}

// gossipReceipts returns Receipts that gossip into a channel, batching for
// every, and n signed two-party receipts.
func gossipReceipts(t *testing.T, every time.Duration, n int) (*Receipts, publishes, []*attest.SignedReceipt) {
	t.Helper()
	db, err := ledger.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	out := make(publishes, 100)
	r, err := NewReceipts(ctx, ReceiptsConfig{Ledger: db, Book: attest.NewBook(attest.BookOptions{}), Transport: out, GossipEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); r.Wait() })
	prov, renter := signtest.Pair(t)
	now := time.Now()
	var srs []*attest.SignedReceipt
	for i := range n {
		sr, err := attest.NewReceipt(prov, attest.Receipt{LeaseID: fmt.Sprintf("l%d", i), JobID: "j", Renter: renter.ID().String(),
			Provider: prov.ID().String(), Start: now.Add(-time.Hour), End: now, GPUCount: 1, GPUSeconds: 3600, Price: 1, Amount: 1,
			Outcome: "succeeded", IssuedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.Countersign(renter); err != nil {
			t.Fatal(err)
		}
		srs = append(srs, sr)
	}
	return r, out, srs
}

// leases decodes a gossiped message into its receipts' lease IDs.
func leases(t *testing.T, msg []byte) []string {
	t.Helper()
	bs, err := wire.DecodeReceiptBatch(msg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range bs {
		sr, err := attest.OpenReceipt(b)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sr.Receipt.LeaseID)
	}
	return ids
}

// TestGossipBatchesReceipts: receipts settled one after another go out as
// one message once a batch is full (wire.MaxBatchReceipts), in order, not
// one message each; the next batch starts empty.
func TestGossipBatchesReceipts(t *testing.T) {
	t.Parallel()
	r, out, srs := gossipReceipts(t, time.Hour, wire.MaxBatchReceipts+1)
	for _, sr := range srs {
		r.gossip(sr)
	}
	got := leases(t, <-out)
	if len(got) != wire.MaxBatchReceipts || got[0] != "l0" || got[len(got)-1] != fmt.Sprintf("l%d", wire.MaxBatchReceipts-1) {
		t.Fatalf("first message carries %d receipts (%v), want l0..l%d", len(got), got, wire.MaxBatchReceipts-1)
	}
	select {
	case msg := <-out:
		t.Fatalf("a second message before its batch was due: %v", leases(t, msg))
	default:
	}
	r.bmu.Lock()
	waiting := len(r.batch)
	r.bmu.Unlock()
	if waiting != 1 {
		t.Fatalf("%d receipts wait for the next message, want 1", waiting)
	}
}

// TestGossipSendsAReceiptThatWaitedGossipEvery: a receipt no other joins
// is gossiped on its own once GossipEvery has passed.
func TestGossipSendsAReceiptThatWaitedGossipEvery(t *testing.T) {
	t.Parallel()
	r, out, srs := gossipReceipts(t, 20*time.Millisecond, 1)
	r.gossip(srs[0])
	if got := leases(t, <-out); len(got) != 1 || got[0] != "l0" {
		t.Fatalf("gossiped %v, want [l0]", got)
	}
}

// TestFlushGossipsTheBatchWaiting: a node that stops gossips the receipts
// still waiting for their batch (it dropped them with its timer), even
// once its context was cancelled, and the timer sends nothing after.
func TestFlushGossipsTheBatchWaiting(t *testing.T) {
	t.Parallel()
	r, out, srs := gossipReceipts(t, time.Hour, 2)
	r.gossip(srs[0])
	r.gossip(srs[1])
	select {
	case msg := <-out:
		t.Fatalf("gossiped %v before its batch was due", leases(t, msg))
	default:
	}
	// The daemon cancels the market's context before it closes the market.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	r.ctx = stopped
	r.Flush()
	select {
	case msg := <-out:
		if got := leases(t, msg); len(got) != 2 || got[0] != "l0" || got[1] != "l1" {
			t.Fatalf("flushed %v, want [l0 l1]", got)
		}
	default:
		t.Fatal("Flush sent nothing")
	}
	r.bmu.Lock()
	waiting, timer := len(r.batch), r.flush
	r.bmu.Unlock()
	if waiting != 0 || timer != nil {
		t.Fatalf("after Flush: %d receipts wait, timer %v", waiting, timer)
	}
	r.Flush() // nothing waits: nothing sent
	select {
	case msg := <-out:
		t.Fatalf("an empty Flush gossiped %v", leases(t, msg))
	default:
	}
}

// TestGossipBatchStaysUnderItsSize: receipts that would take a batch past
// wire.MaxBatchBytes start the next one.
func TestGossipBatchStaysUnderItsSize(t *testing.T) {
	t.Parallel()
	r, out, _ := gossipReceipts(t, time.Hour, 0)
	big := func(c string) []byte { return []byte(strconv.Quote(strings.Repeat(c, 100<<10))) } // two fit, three do not
	for _, c := range []string{"a", "b", "c"} {
		r.enqueue(big(c))
	}
	msg := <-out
	got, err := wire.DecodeReceiptBatch(msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0][1] != 'a' || got[1][1] != 'b' || len(msg) > wire.MaxBatchBytes+1<<10 {
		t.Fatalf("first message: %d receipts in %d bytes, want a and b within %d", len(got), len(msg), wire.MaxBatchBytes)
	}
}

// TestProviderGossipsOnlyWhatItDoesNotHear: a receipt its provider waits
// to hear is not gossiped by it once its renter's gossip brings it; one
// not heard within HeardWait is (counted); and one still waiting when the
// node stops goes out with its Flush.
func TestProviderGossipsOnlyWhatItDoesNotHear(t *testing.T) {
	t.Parallel()
	r, out, srs := gossipReceipts(t, 10*time.Millisecond, 3)
	r.cfg.HeardWait = 50 * time.Millisecond
	r.gossipUnlessHeard(srs[0])
	r.gossipUnlessHeard(srs[1])
	r.gossipUnlessHeard(srs[1]) // twice: still one wait
	b0, err := srs[0].Marshal()
	if err != nil {
		t.Fatal(err)
	}
	heard, err := wire.EncodeReceiptBatch([][]byte{b0})
	if err != nil {
		t.Fatal(err)
	}
	r.HandleGossip("", heard) // the renter's gossip of l0
	if got := leases(t, <-out); len(got) != 1 || got[0] != "l1" {
		t.Fatalf("gossiped %v, want [l1] (l0 was heard)", got)
	}
	if n := r.cfg.Counters.Snapshot()["reputation.receipt_unheard"]; n != 1 {
		t.Fatalf("receipt_unheard = %d, want 1", n)
	}
	r.umu.Lock()
	waiting := len(r.unheard)
	r.umu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d receipts still wait to be heard", waiting)
	}
	r.cfg.HeardWait = time.Hour
	r.gossipUnlessHeard(srs[2])
	r.Flush()
	if got := leases(t, <-out); len(got) != 1 || got[0] != "l2" {
		t.Fatalf("flushed %v, want [l2]", got)
	}
}

// TestReceiptGossipedOnceByItsRenter: a settled lease's receipt reaches a
// third node through its renter's gossip, and the provider, which heard
// it, gossips nothing; a renter that withholds the receipt keeps it from
// no one: the provider, not hearing it, gossips it.
func TestReceiptGossipedOnceByItsRenter(t *testing.T) {
	t.Parallel()
	for _, withhold := range []bool{false, true} {
		t.Run(fmt.Sprintf("withhold=%v", withhold), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			r, p, observer := h.renter(), h.provider(provSpec{model: "A100", price: 1}), h.renter()
			r.crash.withholdGossip.Store(withhold)
			// The renter's gossip waits until its provider waits to hear it.
			hold := func() {
				h.waitFor(10*time.Second, "provider waits to hear the receipt", func() bool {
					p.receipts.umu.Lock()
					defer p.receipts.umu.Unlock()
					return len(p.receipts.unheard) == 1
				})
			}
			r.crash.holdGossip.Store(&hold)
			v := r.post(job(terms.Silver, 1, time.Minute, "gate", "done", "0"))
			if v.Winner != p.id() {
				t.Fatalf("leased to %s, want %s", v.Winner, p.id())
			}
			p.exec.open("done")
			r.waitJob(v.Job.ID, "settled", settled)
			h.waitFor(10*time.Second, "observer heard the receipt", func() bool { return observer.book.Stats(p.id()).Receipts == 1 })
			// The provider hears the renter's gossip in its own time.
			h.waitFor(10*time.Second, "provider waits to hear nothing", func() bool {
				p.receipts.umu.Lock()
				defer p.receipts.umu.Unlock()
				return len(p.receipts.unheard) == 0
			})
			unheard := p.counters.Snapshot()["reputation.receipt_unheard"]
			switch {
			case withhold && unheard != 1:
				t.Fatalf("withheld by the renter: the provider gossiped %d receipts, want 1", unheard)
			case !withhold && unheard != 0:
				t.Fatalf("gossiped by the renter: the provider gossiped %d receipts too, want 0", unheard)
			}
		})
	}
}
