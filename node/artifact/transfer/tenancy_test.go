package transfer

import (
	"bytes"
	"context"
	"github.com/gpumesh/gpumesh/attest/sign"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/libp2p/go-libp2p/core/peer"
)

// holdFor has prov fetch owner's private artifact id for a job of owner's
// (a lease naming it), as a provider does.
func holdFor(t *testing.T, prov, owner *testPeer, id string) {
	t.Helper()
	owner.lease(prov)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unpin, err := prov.svc.FetchForJob(ctx, id, owner.net.ID(), owner.addrs())
	if err != nil {
		t.Fatal(err)
	}
	unpin()
}

// TestRenterCannotReadAnotherRentersArtifact: a provider holds renter X's
// private artifact; renter Y's job naming it does not get its bytes from
// the provider's store (Y serves none of it, so the input fails), nor does
// the provider's capability record list it. A renter that holds the same
// bytes itself gets them, by serving every byte.
func TestRenterCannotReadAnotherRentersArtifact(t *testing.T) {
	t.Parallel()
	x, y, prov := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	src, data := writeRandom(t, 3*artifact.ChunkSize+9)
	id, err := x.store.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	holdFor(t, prov, x, id)
	pub, err := prov.store.Add(filepath.Join(t.TempDir(), "nothing"), artifact.Meta{})
	if err == nil {
		t.Fatal("added a missing file")
	}
	pubSrc, _ := writeRandom(t, 10)
	if pub, err = prov.store.Add(pubSrc, artifact.Meta{}); err != nil {
		t.Fatal(err)
	}
	if held := prov.store.Held(64); slices.Contains(held, id) || !slices.Contains(held, pub) {
		t.Fatalf("advertised %v: want the public %s and not the private %s", held, pub, id)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "inputs")
	if rel, err := prov.svc.PrepareInputs(ctx, map[string]string{"data": id}, y.net.ID(), y.addrs(), dir, nil); err == nil {
		b, _ := os.ReadFile(filepath.Join(dir, "data"))
		rel()
		t.Fatalf("renter Y's job read renter X's private artifact (%d bytes, same: %v)", len(b), bytes.Equal(b, data))
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("inputs dir left: %v", err)
	}

	// Y holds the same bytes (the same id): it serves all of them.
	if idY, err := y.store.Add(src, artifact.Meta{Private: true}); err != nil || idY != id {
		t.Fatalf("Y's copy: %s %v", idY, err)
	}
	y.lease(prov)
	rel, err := prov.svc.PrepareInputs(ctx, map[string]string{"data": id}, y.net.ID(), y.addrs(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	if b, err := os.ReadFile(filepath.Join(dir, "data")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("Y's input: %v", err)
	}
	if got := prov.svc.Counters()["artifact.fetched_bytes"]; got != 2*len(data) {
		t.Fatalf("fetched %d bytes in all, want %d: Y's job must be served by Y", got, 2*len(data))
	}
}

// TestPublicManifestCannotClaimPrivateChunk: a hostile renter publishes a
// manifest naming a chunk of another renter's private artifact (it knows
// the hash, not the bytes). A provider neither confirms that it holds the
// chunk (a warm request's answer counts it as missing) nor lets the
// hostile artifact be made of it.
func TestPublicManifestCannotClaimPrivateChunk(t *testing.T) {
	t.Parallel()
	x, y, prov := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	prov.svc.cfg.WarmMax = 1 << 30
	src, _ := writeRandom(t, 2*artifact.ChunkSize)
	id, err := x.store.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	holdFor(t, prov, x, id)
	mx, _, _ := x.store.Manifest(id)
	secret := mx.Entries[0].Chunks[0]

	// Y's public artifact naming X's chunk, which Y cannot serve.
	my := artifact.Manifest{Name: "probe", Size: artifact.ChunkSize, Entries: []artifact.Entry{{Path: "probe", Size: artifact.ChunkSize, Chunks: []string{secret}}}}
	idY, _, err := y.store.Begin(my, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	y.claimComplete(t, idY) // a hostile store claims it

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := y.svc.Warm(ctx, idY, prov.net.ID(), prov.addrs())
	if err == nil && ack.Fetching != artifact.ChunkSize {
		t.Fatalf("warm answer confirms the private chunk is held: fetching %d of %d", ack.Fetching, ack.Size)
	}
	if _, err := prov.svc.FetchForJob(ctx, idY, y.net.ID(), y.addrs()); err == nil {
		t.Fatal("a manifest naming another owner's private chunk was filled from the store")
	}
	if in, err := prov.store.Info(idY); err == nil && in.Complete {
		t.Fatal("the hostile artifact is complete on the provider")
	}
}

// TestIncompleteRecordTakesCompletersTerms: a hostile renter that knows
// another renter's manifest (not its bytes) gets a provider to begin it as
// public; when the real owner's job completes it, the artifact is held on
// the owner's terms (private), not the hostile renter's.
func TestIncompleteRecordTakesCompletersTerms(t *testing.T) {
	t.Parallel()
	x, y, prov := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	src, _ := writeRandom(t, 2*artifact.ChunkSize+1)
	id, err := x.store.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	mx, _, _ := x.store.Manifest(id)
	if _, _, err := y.store.Begin(mx, artifact.Meta{}); err != nil { // public, and no bytes
		t.Fatal(err)
	}
	y.claimComplete(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := prov.svc.Fetch(ctx, id, FetchOptions{Origin: &peer.AddrInfo{ID: y.net.ID(), Addrs: y.net.Host.Addrs()}, NoDiscovery: true, For: artifact.For(sign.ID(y.net.ID()))}); err == nil {
		t.Fatal("Y served bytes it does not have")
	}
	if in, err := prov.store.Info(id); err != nil || in.Complete || in.Private {
		t.Fatalf("after Y's attempt: %+v %v (want begun, public, incomplete)", in, err)
	}
	holdFor(t, prov, x, id)
	if err := prov.store.MayRead(id, artifact.Reader{}); err == nil {
		t.Fatal("X's private artifact is public on the provider")
	}
	if err := prov.store.MayRead(id, artifact.For(sign.ID(y.net.ID()))); err == nil {
		t.Fatal("Y may read X's artifact")
	}
	if slices.Contains(prov.store.Held(64), id) {
		t.Fatal("X's private artifact is advertised by its id")
	}
}
