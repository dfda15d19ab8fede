package transfer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/network"
)

// stallingOrigin is a peer that asks for warm fetches and then never
// serves them: its artifact streams are held open unanswered until the
// test ends. Each stream it is asked for is reported on opened.
type stallingOrigin struct {
	*testPeer
	opened chan struct{}
}

func newStallingOrigin(t *testing.T) *stallingOrigin {
	o := &stallingOrigin{testPeer: newTestPeer(t, 0), opened: make(chan struct{}, 16)}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	o.net.Host.SetStreamHandler(wire.ProtoArtifact, func(s network.Stream) {
		o.opened <- struct{}{}
		<-done
		_ = s.Reset()
	})
	return o
}

// warmRequest is o's signed request that prov warm artifact id.
func (o *stallingOrigin) warmRequest(t *testing.T, prov *testPeer, id string) []byte {
	t.Helper()
	env, err := sign.Seal(o.svc.cfg.Signer, sign.DomainArtifactWarm,
		wire.ArtifactWarm{ID: id, Provider: prov.net.ID().String(), Expires: time.Now().Add(WarmTTL)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startWarm sends o's request to prov and waits until prov's fetch is
// under way (its stream to o is open, and stalls); the handler's own
// wait for the manifest is then given up, as a requester's would be.
func (o *stallingOrigin) startWarm(t *testing.T, prov *testPeer, id string) {
	t.Helper()
	o.net.AddAddrs(prov.net.ID(), prov.addrs())
	prov.net.AddAddrs(o.net.ID(), o.addrs())
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := prov.svc.HandleWarm(ctx, o.net.ID(), o.warmRequest(t, prov, id))
		res <- err
	}()
	select {
	case <-o.opened:
	case err := <-res:
		cancel()
		t.Fatalf("warm request refused: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the warm fetch never reached its origin")
	}
	cancel()
	<-res
}

func fakeID(b byte) string { return strings.Repeat(string("0123456789abcdef"[b%16]), 64) }

// TestWarmSlotsPerPeer: one peer's slow warm requests hold at most one
// of the provider's warm slots (MaxWarmingPerPeer), so they cannot take
// all of them; other peers still get theirs.
func TestWarmSlotsPerPeer(t *testing.T) {
	t.Parallel()
	prov := newTestPeer(t, 0)
	prov.svc.cfg.WarmMax = 10 << 20
	slow := newStallingOrigin(t)
	slow.startWarm(t, prov, fakeID(1))

	res := make(chan error, 1)
	go func() {
		_, err := prov.svc.HandleWarm(context.Background(), slow.net.ID(), slow.warmRequest(t, prov, fakeID(2)))
		res <- err
	}()
	select {
	case err := <-res:
		if err == nil || !strings.Contains(err.Error(), "already") {
			t.Fatalf("a second warm request from the same peer: %v, want refused", err)
		}
	case <-slow.opened:
		t.Fatal("one peer's second warm request took a second slot")
	}
	if prov.svc.Counters()["artifact.warm_refused"] != 1 {
		t.Fatalf("counters %v", prov.svc.Counters())
	}
	// Another peer still gets a slot.
	other := newStallingOrigin(t)
	other.startWarm(t, prov, fakeID(3))
}

// TestWarmDeadline: a warm fetch that makes no progress is given up at
// its deadline, freeing its slot.
func TestWarmDeadline(t *testing.T) {
	t.Parallel()
	prov := newTestPeer(t, 0)
	prov.svc.cfg.WarmMax = 10 << 20
	prov.svc.cfg.WarmBaseTimeout = 300 * time.Millisecond
	slow := newStallingOrigin(t)
	slow.startWarm(t, prov, fakeID(1))
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		changed := prov.svc.Changed()
		prov.svc.mu.Lock()
		warming := len(prov.svc.warming)
		prov.svc.mu.Unlock()
		if prov.svc.Counters()["artifact.warm_failed"] > 0 && warming == 0 {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatal("a stalled warm fetch was never given up")
		}
	}
	// Its slot is free: the same peer may ask again.
	slow.startWarm(t, prov, fakeID(2))
}
