package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/node/identity"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/testnet/adversary"
	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	p2precord "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// hostilePeer joins the network through boot with a fresh key; dht speaks
// the DHT's wire protocol to one peer at a time, with no validation of its
// own: what a peer stores is its own validators' doing.
func hostilePeer(t *testing.T, boot *testNode) (*adversary.Peer, *dhtpb.ProtocolMessenger) {
	t.Helper()
	p, err := adversary.NewPeer(context.Background(), adversary.PeerConfig{Bootstrap: boot.Addrs(), Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pm, err := dhtpb.NewProtocolMessenger(p.Node.DHT.MessageSender())
	if err != nil {
		t.Fatal(err)
	}
	return p, pm
}

// storedSuccession is the succession record n's DHT store holds under
// old's key, as n answers a GET_VALUE (nil for none).
func storedSuccession(t *testing.T, pm *dhtpb.ProtocolMessenger, n *testNode, old peer.ID) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := pm.GetValue(ctx, n.ID(), attest.SuccessionKey(sign.ID(old)))
	if err != nil {
		t.Fatalf("GET_VALUE from %s: %v", n.ID(), err)
	}
	return rec.GetValue()
}

// putSuccession sends n a PUT_VALUE of value under old's key and returns
// n's answer.
func putSuccession(pm *dhtpb.ProtocolMessenger, n *testNode, old peer.ID, value []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pm.PutValue(ctx, n.ID(), p2precord.MakePutRecord(attest.SuccessionKey(sign.ID(old)), value))
}

// TestRotatedProviderKeepsReputation is the rotation end to end: a
// provider earns a receipt from a renter, is stopped and rotated offline,
// and restarts under its new key. The renter (the observer) learns the
// succession, from the DHT put and by gossip, and its book scores the new
// identity as it scored the old one; the succession is in the renter's DHT
// store under the old identity's key; the
// provider's ledger verifies across the rotation. Then hostile peers: a
// receipt signed with the old key after the rotation is refused; a forged
// succession (one key only) is refused by the DHT and by the book, while
// a genuine one from the same peer is stored (the path is open); a second
// succession of the old identity, made with its stolen key, marks it
// compromised and the new identity loses what it inherited.
func TestRotatedProviderKeepsReputation(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	boot := startWith(t, filepath.Join(root, "boot"), renterConfig(), nil, Options{})
	provDir := filepath.Join(root, "prov")
	pcfg := fastConfig(providerConfig("eu-west", 1.0, a100))
	prov := startWith(t, provDir, pcfg, boot.Daemon, Options{})
	waitAdvertised(t, boot, prov)
	oldID := prov.ID()

	v := post(t, boot, shJob(terms.Silver, 2, "echo hi"))
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	waitChange(t, 10*time.Second, "the provider records the receipt", func() bool {
		es, _ := prov.db.List(record.Filter{Kind: record.KindReceipt, LeaseID: v.Receipt.LeaseID})
		return len(es) == 1
	}, prov.market.receipts.Changed)
	book := boot.market.book
	before := book.Stats(oldID.String())
	if before.Receipts != 1 || before.Score <= attest.Prior+0.01 {
		t.Fatalf("the renter's view of the provider before the rotation: %+v", before)
	}
	if err := prov.Close(); err != nil {
		t.Fatal(err)
	}

	rec, err := identity.Rotate(provDir, time.Now())
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if rec.Old != oldID.String() || rec.New == rec.Old {
		t.Fatalf("succession %+v of %s", rec, oldID)
	}
	retired := config.Paths{Dir: provDir}.KeyRetired(rec.Issued)
	for _, f := range []string{retired, config.Paths{Dir: provDir}.Key()} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want a 0600 key file", f, fi, err)
		}
	}
	oldKey, err := p2p.LoadKey(retired)
	if err != nil {
		t.Fatal(err)
	}
	oldSigner, err := p2p.Signer(oldKey)
	if err != nil || peer.ID(oldSigner.ID()) != oldID {
		t.Fatalf("the retired key is %v (%v), want the old identity %s", oldSigner, err, oldID)
	}
	if got := book.Stats(rec.New); got.Receipts != 0 || got.Score != attest.Prior {
		t.Fatalf("the new identity before the renter learned of it: %+v", got)
	}

	prov2 := startWith(t, provDir, pcfg, boot.Daemon, Options{SuccessionRepublish: 100 * time.Millisecond})
	if prov2.ID().String() != rec.New {
		t.Fatalf("restarted as %s, want the new identity %s", prov2.ID(), rec.New)
	}
	if rep, err := prov2.db.Verify(); err != nil || rep.Entries < 3 {
		t.Fatalf("the provider's ledger across the rotation: %+v, %v", rep, err)
	}
	if owner, _, _ := prov2.db.Owner(); owner != rec.New {
		t.Fatalf("ledger owner %q, want %s", owner, rec.New)
	}

	// (a) The observer scores the new identity as it scored the old one.
	waitFor(t, 30*time.Second, "the renter learns the succession", func() bool { return book.Stats(rec.New).Receipts == 1 })
	waitFor(t, 30*time.Second, "the succession's gossip reaches the renter's book", func() bool {
		c := boot.market.allCounters()
		return c["reputation."+attest.CountSuccession]+c["reputation."+attest.CountSuccessionDuplicate] >= 1
	})
	after := book.Stats(rec.New)
	if after.Completed != 1 || math.Abs(after.Score-before.Score) > 1e-4 {
		t.Fatalf("the new identity in the renter's book: %+v, want the old one's %+v", after, before)
	}
	hostile, pm := hostilePeer(t, boot)
	ledgerRec, _ := prov2.db.List(record.Filter{Kind: record.KindSuccession})
	waitFor(t, 30*time.Second, "the succession in the renter's DHT store", func() bool {
		return len(ledgerRec) == 1 && bytes.Equal(storedSuccession(t, pm, boot, oldID), ledgerRec[0].Data)
	})

	// (b) A receipt the old key signed after the rotation, gossiped by a
	// hostile peer, is refused by the renter's book.
	renter := signtest.New(t)
	i := 0
	waitFor(t, 30*time.Second, "the renter refuses the old key's receipt", func() bool {
		i++
		end := time.Now()
		r := attest.Receipt{LeaseID: fmt.Sprintf("stale-%d", i), JobID: "j", Renter: renter.ID().String(), Provider: oldID.String(),
			Start: end.Add(-time.Minute), End: end, GPUCount: 1, GPUSeconds: 60, Price: 1, Outcome: terms.RunSucceeded, IssuedAt: end}
		sr, err := attest.NewReceipt(oldSigner, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.Countersign(renter); err != nil {
			t.Fatal(err)
		}
		b, _ := sr.Marshal()
		msg, err := wire.EncodeReceiptBatch([][]byte{b})
		if err != nil {
			t.Fatal(err)
		}
		_ = hostile.Node.Publish(context.Background(), wire.ReputationTopic, msg)
		return boot.market.allCounters()["reputation.retired_key"] >= 1
	})
	if st := book.Stats(rec.New); st.Receipts != 1 {
		t.Fatalf("a refused receipt counted: %+v", st)
	}

	// (c) Forged successions: the provider's new identity claimed by a
	// thief, signed by the thief alone.
	thief := signtest.New(t)
	newID, _ := peer.Decode(rec.New)
	claim, _ := json.Marshal(sign.Succession{Old: rec.New, New: thief.ID().String(), Issued: time.Now().UTC()})
	thiefSig, _ := thief.Sign(sign.DomainSuccession, claim)
	forged := &sign.SignedSuccession{Payload: claim, OldSig: thiefSig, NewSig: thiefSig}
	fb, _ := forged.Marshal()
	if err := putSuccession(pm, boot, newID, fb); err == nil {
		t.Fatal("the renter's DHT took a forged succession")
	}
	if got := storedSuccession(t, pm, boot, newID); got != nil {
		t.Fatalf("the renter's DHT stored a forged succession: %s", got)
	}
	// The same peer's genuine succession of identities of its own is
	// stored: the path is open.
	mine, mine2 := signtest.Pair(t)
	genuine, _ := sign.SealSuccession(mine, mine2, time.Now())
	gb, _ := genuine.Marshal()
	if err := putSuccession(pm, boot, peer.ID(mine.ID()), gb); err != nil {
		t.Fatalf("the renter's DHT refused a genuine succession: %v", err)
	}
	if !bytes.Equal(storedSuccession(t, pm, boot, peer.ID(mine.ID())), gb) {
		t.Fatal("a genuine succession put by the same peer is not in the renter's DHT")
	}
	j := 0
	waitFor(t, 30*time.Second, "the renter's book refuses the forged succession", func() bool {
		j++
		b, _ := json.Marshal(wire.SuccessionGossip{Succession: forged, Sent: time.Now().Add(time.Duration(j))})
		_ = hostile.Node.Publish(context.Background(), wire.SuccessionTopic, b)
		return boot.market.allCounters()["reputation.succession_rejected"] >= 1
	})
	if st := book.Stats(thief.ID().String()); st.Receipts != 0 || st.Score != attest.Prior {
		t.Fatalf("the thief inherited: %+v", st)
	}
	if st := book.Stats(rec.New); st.Receipts != 1 {
		t.Fatalf("a forged succession disturbed the provider: %+v", st)
	}

	// A second succession of the old identity, made with its stolen key:
	// compromised, and neither successor is followed.
	stolen, _ := sign.SealSuccession(oldSigner, thief, time.Now())
	k := 0
	waitFor(t, 30*time.Second, "the renter learns the conflicting succession", func() bool {
		k++
		b, _ := json.Marshal(wire.SuccessionGossip{Succession: stolen, Sent: time.Now().Add(time.Duration(k))})
		_ = hostile.Node.Publish(context.Background(), wire.SuccessionTopic, b)
		return boot.market.allCounters()["reputation.succession_conflict"] >= 1
	})
	if !boot.succ.Compromised(oldID.String()) {
		t.Fatal("the old identity is not held compromised")
	}
	for _, id := range []string{rec.New, thief.ID().String()} {
		if st := book.Stats(id); st.Receipts != 0 {
			t.Fatalf("successor %s of a compromised identity keeps its reputation: %+v", id, st)
		}
	}
}

// TestRotateIdentityRefusesRunningAndMismatch: rotation refuses a running
// daemon's data dir and one without a key; a daemon refuses to start under
// a key that is not its ledger's owner (the retired key put back), and
// while a rotation is unfinished, which a second rotate then finishes.
func TestRotateIdentityRefusesRunningAndMismatch(t *testing.T) {
	dir := t.TempDir()
	if _, err := identity.Rotate(dir, time.Now()); err == nil {
		t.Fatal("rotated a data dir without a key")
	}
	n := startWith(t, dir, renterConfig(), nil, Options{})
	if _, err := identity.Rotate(dir, time.Now()); !errors.Is(err, config.ErrAlreadyRunning) {
		t.Fatalf("rotate under a running daemon: %v, want config.ErrAlreadyRunning", err)
	}
	old := n.ID()
	n.Close()
	rec, err := identity.Rotate(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	paths := config.Paths{Dir: dir}
	// The retired key put back in place: not the ledger's owner.
	cur, _ := os.ReadFile(paths.Key())
	retired, _ := os.ReadFile(paths.KeyRetired(rec.Issued))
	if err := os.WriteFile(paths.Key(), retired, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(context.Background(), Options{DataDir: dir, Config: renterConfig()}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not this ledger's key")) {
		t.Fatalf("start under the retired key %s: %v", old, err)
	}
	if err := os.WriteFile(paths.Key(), cur, 0o600); err != nil {
		t.Fatal(err)
	}
	// A rotation stopped after the ledger recorded it, before the keys
	// moved: the daemon refuses to start, a second rotate finishes it.
	if err := os.Rename(paths.Key(), paths.KeyNext()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths.Key(), retired, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(context.Background(), Options{DataDir: dir, Config: renterConfig()}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("did not finish")) {
		t.Fatalf("start during an unfinished rotation: %v", err)
	}
	again, err := identity.Rotate(dir, time.Now())
	if err != nil || again != rec {
		t.Fatalf("finishing the rotation: %+v, %v; want %+v", again, err, rec)
	}
	n2 := startWith(t, dir, renterConfig(), nil, Options{})
	if n2.ID().String() != rec.New {
		t.Fatalf("after finishing: %s, want %s", n2.ID(), rec.New)
	}
}

// waitFor polls cond until it holds, failing the test after within: for
// what the real network brings about and nothing here announces, gossip
// resent until GossipSub's mesh carries it and what it then changes in the
// renter's book and DHT store; a change a daemon announces is waited for
// with waitChange.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond) // a real GossipSub mesh forming over real sockets: see above
	}
}
