package transfer

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

func (tp *testPeer) addrs() []string {
	var out []string
	for _, a := range tp.net.Host.Addrs() {
		out = append(out, a.String())
	}
	return out
}

// TestWarmFetchesPrivateArtifactOnGrant: a provider asked to warm the
// owner's private artifact fetches it on the grant that came with the
// request (it holds no lease and no share), reports it held, and keeps
// the owner's access rules; a second request for it is answered at once.
func TestWarmFetchesPrivateArtifactOnGrant(t *testing.T) {
	t.Parallel()
	owner, prov := newTestPeer(t, 0), newTestPeer(t, 0)
	prov.svc.cfg.WarmMax = 10 << 20
	var held atomic.Int32
	prov.svc.cfg.Advertiser = heldCount{&held}
	src, data := writeRandom(t, 3<<20+5)
	id, err := owner.store.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ack, err := owner.svc.Warm(ctx, id, prov.net.ID(), prov.addrs())
	if err != nil {
		t.Fatal(err)
	}
	if ack.ID != id || ack.Size != int64(len(data)) || ack.Fetching != int64(len(data)) {
		t.Fatalf("ack %+v", ack)
	}
	if info := waitComplete(t, prov.store, id); !info.Private || info.Owner != owner.net.ID().String() {
		t.Fatalf("warmed copy held as %+v", info)
	}
	if got := exported(t, prov.store, id); !bytes.Equal(got, data) {
		t.Fatal("warmed copy differs")
	}
	// The store holds the copy before the warm fetch has ended (and
	// counted itself): wait for its end.
	warmEnded(t, prov.svc, "artifact.warmed")
	if held.Load() != 1 || prov.svc.Counters()["artifact.warmed"] != 1 {
		t.Fatalf("OnHeld called %d times, counters %v", held.Load(), prov.svc.Counters())
	}
	ack, err = owner.svc.Warm(ctx, id, prov.net.ID(), nil)
	if err != nil || ack.Fetching != 0 || ack.Size != int64(len(data)) {
		t.Fatalf("warming a held artifact again: %+v %v", ack, err)
	}
}

// TestWarmRefusals: a node refuses warm requests it does not accept
// (none at all, or larger than its limit, leaving nothing in its store),
// requests meant for another node, and requests relayed by a peer other
// than their signer; nobody but the owner can warm a private artifact it
// holds for someone else.
func TestWarmRefusals(t *testing.T) {
	t.Parallel()
	owner, prov, small, other := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	prov.svc.cfg.WarmMax = 10 << 20
	small.svc.cfg.WarmMax = 1 << 20
	src, _ := writeRandom(t, 2<<20)
	id, err := owner.store.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := owner.svc.Warm(ctx, id, other.net.ID(), other.addrs()); err == nil || !strings.Contains(err.Error(), "does not accept warm requests") {
		t.Fatalf("warm a node that accepts none: %v", err)
	}
	if _, err := owner.svc.Warm(ctx, id, small.net.ID(), small.addrs()); err == nil || !strings.Contains(err.Error(), "larger than this node warms") {
		t.Fatalf("warm beyond the limit: %v", err)
	}
	if _, err := small.store.Info(id); err == nil {
		t.Fatal("a refused warm left a record")
	}
	seal := func(req wire.ArtifactWarm) []byte {
		env, err := sign.Seal(owner.svc.cfg.Signer, sign.DomainArtifactWarm, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := env.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// request sends a raw warm request from one peer to prov and returns
	// prov's answer. A dial that fails in the handshake (two peers dialling
	// each other at once) is tried again: the refusal is what is tested.
	request := func(from *testPeer, body []byte) error {
		var err error
		for try := 0; try < 3; try++ {
			if _, err = from.net.Request(ctx, prov.net.ID(), prov.addrs(), wire.ProtoWarm, body); err == nil ||
				!strings.Contains(err.Error(), "failed to dial") {
				return err
			}
			if sw, ok := from.net.Host.Network().(*swarm.Swarm); ok {
				sw.Backoff().Clear(prov.net.ID()) // or the next dial fails at once
			}
		}
		return err
	}
	forSmall := seal(wire.ArtifactWarm{ID: id, Provider: small.net.ID().String(), Expires: time.Now().Add(time.Minute)})
	if err := request(owner, forSmall); err == nil || !strings.Contains(err.Error(), "not this node") {
		t.Fatalf("a request for another node: %v", err)
	}
	forProv := seal(wire.ArtifactWarm{ID: id, Provider: prov.net.ID().String(), Expires: time.Now().Add(time.Minute)})
	if err := request(other, forProv); err == nil || !strings.Contains(err.Error(), "sent by") {
		t.Fatalf("a relayed request: %v", err)
	}
	expired := seal(wire.ArtifactWarm{ID: id, Provider: prov.net.ID().String(), Expires: time.Now().Add(-time.Second)})
	if err := request(owner, expired); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired request: %v", err)
	}
	if _, err := prov.store.Info(id); err == nil {
		t.Fatal("a refused request left a record")
	}
	// prov holds the owner's artifact after a warm; it cannot warm others with it.
	if _, err := owner.svc.Warm(ctx, id, prov.net.ID(), prov.addrs()); err != nil {
		t.Fatal(err)
	}
	waitComplete(t, prov.store, id)
	if _, err := prov.svc.Warm(ctx, id, small.net.ID(), small.addrs()); err == nil || !strings.Contains(err.Error(), "only the owner") {
		t.Fatalf("a holder warming the owner's private artifact: %v", err)
	}
}

// heldCount counts the readvertisements of what a peer holds.
type heldCount struct{ n *atomic.Int32 }

func (h heldCount) Readvertise() { h.n.Add(1) }

// waitComplete waits until st holds artifact id complete, and returns its
// info: the warm fetch runs on its own, and the store announces the
// completion (Store.Changed).
func waitComplete(t *testing.T, st *artifact.Store, id string) artifact.Info {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		next := st.Changed()
		if info, err := st.Info(id); err == nil && info.Complete {
			return info
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatal("the warm fetch never completed")
		}
	}
}

// warmEnded waits, on the service's change signal, until counter (the
// warm fetch's end: artifact.warmed or artifact.warm_failed) is counted.
func warmEnded(t *testing.T, svc *Service, counter string) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		next := svc.Changed()
		if svc.Counters()[counter] > 0 {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("%s never counted: %v", counter, svc.Counters())
		}
	}
}
