package transfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// testPeer is a real libp2p host on loopback with a store and a service.
type testPeer struct {
	net   *p2p.Node
	store *artifact.Store
	svc   *Service
	dir   string

	mu      sync.Mutex
	leasees map[peer.ID]bool // peers holding a "lease" naming our artifacts
}

// MayFetch admits the peers the test leased to.
func (tp *testPeer) MayFetch(_ string, from peer.ID) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.leasees[from]
}

func newTestPeer(t testing.TB, budget int64) *testPeer {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(context.Background(), p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	signer, err := p2p.Signer(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := artifact.Open(dir, budget)
	if err != nil {
		t.Fatal(err)
	}
	tp := &testPeer{net: n, store: st, dir: dir, leasees: map[peer.ID]bool{}}
	tp.svc, err = NewService(ServiceConfig{Store: st, Net: n, Signer: signer, Leases: tp})
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func (tp *testPeer) info() peer.AddrInfo {
	return peer.AddrInfo{ID: tp.net.ID(), Addrs: tp.net.Host.Addrs()}
}

// chunkFile is where tp's store keeps chunk h on disk (a file named by its
// hash under the store's directory).
func (tp *testPeer) chunkFile(t testing.TB, h string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(tp.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == h {
			found = p
		}
		return err
	})
	if found == "" {
		t.Fatalf("chunk %s is not on disk", artifact.ShortID(h))
	}
	return found
}

// claimComplete makes tp's store claim artifact id complete without its
// bytes, as a hostile peer's store may: its record is rewritten on disk
// and the store reopened under tp's service.
func (tp *testPeer) claimComplete(t testing.TB, id string) {
	t.Helper()
	p := filepath.Join(tp.dir, "meta", id+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["complete"] = true
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := artifact.Open(tp.dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := st.Info(id); err != nil || !in.Complete {
		t.Fatalf("the rewritten record does not claim completion: %+v %v", in, err)
	}
	st.SetAccess(sign.ID(tp.net.ID()), tp.svc.mayFetch)
	tp.store, tp.svc.cfg.Store = st, st
}

func (tp *testPeer) lease(p *testPeer) {
	tp.mu.Lock()
	tp.leasees[p.net.ID()] = true
	tp.mu.Unlock()
}

func randFile(t testing.TB, dir, name string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeRandom(t testing.TB, size int) (string, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dataset.bin")
	data := randFile(t, filepath.Dir(p), "dataset.bin", size)
	return p, data
}

func exported(t testing.TB, s *artifact.Store, id string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	if err := s.Export(id, out, artifact.Local); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFetchPrivateFromOriginThenFromTwoHolders(t *testing.T) {
	t.Parallel()
	src, data := writeRandom(t, 24*artifact.ChunkSize+77)
	origin, first, second, stranger := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := origin.store.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	oi := origin.info()

	// Without a lease the private artifact is refused.
	if _, err := first.svc.Fetch(ctx, id, FetchOptions{Origin: &oi, NoDiscovery: true}); err == nil {
		t.Fatal("a peer without a lease fetched a private artifact")
	}
	if origin.svc.Counters()["artifact.denied"] == 0 {
		t.Fatal("refusal not counted")
	}

	origin.lease(first)
	res, err := first.svc.Fetch(ctx, id, FetchOptions{Origin: &oi, NoDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != int64(len(data)) || !bytes.Equal(exported(t, first.store, id), data) {
		t.Fatalf("first fetch: %+v", res)
	}
	if meta, _, _ := first.store.Meta(id); !meta.Private || meta.Owner != origin.net.ID().String() {
		t.Fatalf("fetched copy held as %+v, want private and owned by the origin", meta)
	}

	// The second job's provider pulls from both holders: the origin and the
	// first provider, which admits it on the origin's grant.
	origin.lease(second)
	fi := first.info()
	res, err = second.svc.Fetch(ctx, id, FetchOptions{Origin: &oi, Peers: []peer.AddrInfo{fi}, NoDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(exported(t, second.store, id), data) {
		t.Fatal("second fetch: content differs")
	}
	if res.FromPeer[origin.net.ID().String()] == 0 || res.FromPeer[first.net.ID().String()] == 0 {
		t.Fatalf("second fetch did not pull from both holders: %v", res.FromPeer)
	}

	// A stranger is refused by the holder too (no grant from the owner).
	if _, err := stranger.svc.Fetch(ctx, id, FetchOptions{Origin: &fi, NoDiscovery: true}); err == nil {
		t.Fatal("a holder served a private artifact to a peer without a grant")
	}
	// An explicit share admits it at the origin.
	if err := origin.store.Share(id, stranger.net.ID().String()); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.svc.Fetch(ctx, id, FetchOptions{Origin: &oi, NoDiscovery: true}); err != nil {
		t.Fatalf("shared fetch: %v", err)
	}
}

func TestFetchDiscoversHoldersInTheDHT(t *testing.T) {
	t.Parallel()
	src, data := writeRandom(t, 3*artifact.ChunkSize)
	holder, fetcher := newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := holder.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fetcher.net.Host.Connect(ctx, holder.info()); err != nil {
		t.Fatal(err)
	}
	// Announce once the DHT's routing table knows the other peer ...
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := holder.svc.Announce(ctx, id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("announce: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the DHT's routing table fills over real connections, signalling nothing
	}
	// ... and until the fetcher's DHT lookups reach it.
	for found := false; !found; {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		for ai := range fetcher.net.DHT.FindProvidersAsync(fctx, p2p.KeyCID(wire.ArtifactKey(id)), 1) {
			found = found || ai.ID == holder.net.ID()
		}
		fcancel()
		if !found && time.Now().After(deadline) {
			t.Fatal("the fetcher never found the holder's provider record")
		}
	}
	res, err := fetcher.svc.Fetch(ctx, id, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.FromPeer[holder.net.ID().String()] != int64(len(data)) {
		t.Fatalf("fetched %v", res.FromPeer)
	}
}

func TestFetchDropsCorruptPeer(t *testing.T) {
	t.Parallel()
	src, data := writeRandom(t, 16*artifact.ChunkSize)
	good, bad, fetcher := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := good.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.store.Add(src, artifact.Meta{}); err != nil {
		t.Fatal(err)
	}
	// The bad peer's disk rots: every chunk it holds is flipped.
	m, _, _ := bad.store.Manifest(id)
	for _, c := range m.Chunks() {
		p := bad.chunkFile(t, c.Hash)
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bi := bad.info()
	res, err := fetcher.svc.Fetch(ctx, id, FetchOptions{Origin: &bi, Peers: []peer.AddrInfo{good.info()}, NoDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(exported(t, fetcher.store, id), data) {
		t.Fatal("content differs")
	}
	if len(res.BadPeers) != 1 || res.BadPeers[0] != bad.net.ID().String() || res.FromPeer[bad.net.ID().String()] != 0 {
		t.Fatalf("bad peers %v, from %v", res.BadPeers, res.FromPeer)
	}
	if fetcher.svc.BadPeers()[bad.net.ID()] != 1 || fetcher.svc.Counters()["artifact.bad_chunk"] != 1 {
		t.Fatalf("bad peer not counted: %v %v", fetcher.svc.BadPeers(), fetcher.svc.Counters())
	}
}

func TestFetchSurvivesPeerKilledMidTransfer(t *testing.T) {
	t.Parallel()
	src, data := writeRandom(t, 32*artifact.ChunkSize)
	stay, dies, fetcher := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := stay.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dies.store.Add(src, artifact.Meta{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var once sync.Once
	di := dies.info()
	res, err := fetcher.svc.Fetch(ctx, id, FetchOptions{Origin: &di, Peers: []peer.AddrInfo{stay.info()}, NoDiscovery: true,
		Progress: func(done, total int64) {
			if done >= total/4 {
				once.Do(func() { _ = dies.net.Close() })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(exported(t, fetcher.store, id), data) {
		t.Fatal("content differs")
	}
	if res.FromPeer[stay.net.ID().String()] == 0 {
		t.Fatalf("from %v", res.FromPeer)
	}
}

func TestFetchResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	src, data := writeRandom(t, 32*artifact.ChunkSize)
	holder, fetcher := newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := holder.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	hi := holder.info()
	ctx, cancel := context.WithCancel(context.Background())
	_, err = fetcher.svc.Fetch(ctx, id, FetchOptions{Origin: &hi, NoDiscovery: true, Progress: func(done, total int64) {
		if done >= total/2 {
			cancel()
		}
	}})
	if err == nil {
		t.Fatal("interrupted fetch reported success")
	}
	m, complete, _ := fetcher.store.Manifest(id)
	held := m.Size
	for _, c := range fetcher.store.Missing(&m, artifact.Reader{}) {
		held -= c.Size
	}
	if complete || held < m.Size/2 || held == m.Size {
		t.Fatalf("after interruption: complete=%v held %d of %d", complete, held, m.Size)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	res, err := fetcher.svc.Fetch(ctx2, id, FetchOptions{Origin: &hi, NoDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != m.Size-held {
		t.Fatalf("resumed fetch transferred %d bytes, want only the %d missing", res.Fetched, m.Size-held)
	}
	if !bytes.Equal(exported(t, fetcher.store, id), data) {
		t.Fatal("content differs")
	}
}

func TestFetchOverBudgetFailsClearly(t *testing.T) {
	t.Parallel()
	src, _ := writeRandom(t, 8*artifact.ChunkSize)
	holder, fetcher := newTestPeer(t, 0), newTestPeer(t, 4*artifact.ChunkSize)
	id, err := holder.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	hi := holder.info()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = fetcher.svc.Fetch(ctx, id, FetchOptions{Origin: &hi, NoDiscovery: true})
	if !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("fetch beyond the budget: %v, want ErrFull", err)
	}
	if _, used := fetcher.store.Budget(); used > 4*artifact.ChunkSize {
		t.Fatalf("store over budget: %d", used)
	}
}

// TestServeLimitsStreamsPerPeer: a peer may hold MaxServeStreams artifact
// streams open at once; one more is refused and counted.
func TestServeLimitsStreamsPerPeer(t *testing.T) {
	t.Parallel()
	src, _ := writeRandom(t, 10)
	holder, greedy := newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := holder.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := greedy.net.Host.Connect(ctx, holder.info()); err != nil {
		t.Fatal(err)
	}
	req := wire.ArtifactRequest{Op: wire.ArtifactOpManifest, ID: id}
	for i := 0; i < MaxServeStreams; i++ {
		ss, err := greedy.svc.open(ctx, holder.net.ID())
		if err != nil {
			t.Fatal(err)
		}
		defer ss.close()
		if _, err := ss.call(req, 10*time.Second); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	ss, err := greedy.svc.open(ctx, holder.net.ID())
	if err == nil {
		defer ss.close()
		_, err = ss.call(req, 10*time.Second)
	}
	if err == nil {
		t.Fatalf("stream %d beyond the limit was served", MaxServeStreams+1)
	}
	if holder.svc.Counters()["artifact.streams_refused"] != 1 {
		t.Fatalf("refusal not counted: %v", holder.svc.Counters())
	}
}

// TestFetchSkipsHolderLackingChunks: a peer that holds only part of an
// artifact refuses the chunks it lacks, and they come from another source.
func TestFetchSkipsHolderLackingChunks(t *testing.T) {
	t.Parallel()
	src, data := writeRandom(t, 8*artifact.ChunkSize)
	full, partial, fetcher := newTestPeer(t, 0), newTestPeer(t, 0), newTestPeer(t, 0)
	id, err := full.store.Add(src, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	m, _, _ := full.store.Manifest(id)
	if _, _, err := partial.store.Begin(m, artifact.Meta{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Chunks()[:3] {
		b, _ := full.store.ReadChunk(c.Hash)
		if err := partial.store.PutChunk(id, c.Hash, b, artifact.Local); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fi := full.info()
	res, err := fetcher.svc.Fetch(ctx, id, FetchOptions{Origin: &fi, Peers: []peer.AddrInfo{partial.info()}, NoDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(exported(t, fetcher.store, id), data) || res.Fetched != int64(len(data)) {
		t.Fatalf("fetch %+v", res)
	}
	if got := res.FromPeer[partial.net.ID().String()]; got > 3*artifact.ChunkSize {
		t.Fatalf("partial holder served %d bytes, more than it holds", got)
	}
}
