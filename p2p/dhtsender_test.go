package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/p2p/dhttest"
	"github.com/libp2p/go-libp2p"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// anyValue is a validator that takes every value of its namespace.
type anyValue struct{}

func (anyValue) Validate(string, []byte) error        { return nil }
func (anyValue) Select(string, [][]byte) (int, error) { return 0, nil }

// TestHostileDHTAnswerToAPutDoesNotCrash: a DHT peer that answers a
// PUT_VALUE with an empty message (no record) makes the put fail; it
// does not crash the node (kad-dht v0.42.2 dereferenced the missing
// record in a goroutine of its own, taking the whole process down).
func TestHostileDHTAnswerToAPutDoesNotCrash(t *testing.T) {
	// (Without metrics, as New's hosts: TestHostFeedsNoUnservedMetrics
	// reads the default registry.)
	hostile, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostile.Close() })
	dhttest.Serve(hostile, ProtocolPrefix+"/kad/1.0.0", dhttest.Empty) // a lookup's answer: no peers, no record; a put's: no record
	n, _ := newNodeCfg(t, Config{Validators: map[string]record.Validator{"test": anyValue{}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Host.Connect(ctx, peer.AddrInfo{ID: hostile.ID(), Addrs: hostile.Addrs()}); err != nil {
		t.Fatal(err)
	}
	dhttest.AwaitInTable(ctx, t, n.DHT, hostile.ID())
	// kad-dht's put reports no error for one peer's failed copy: what
	// matters is that the process outlives the answer, and still serves.
	_ = n.DHT.PutValue(ctx, "/test/key", []byte("value"))
	if v, err := n.DHT.GetValue(ctx, "/test/key"); err != nil || string(v) != "value" {
		t.Fatalf("after the hostile answer, the node's own copy: %q, %v", v, err)
	}
}
