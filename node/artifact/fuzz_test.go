package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// FuzzDecodeManifest feeds the manifest decoder (the bytes a peer serves
// for an artifact) arbitrary input: it must never panic, and whatever it
// accepts must be safe to lay out under a directory and consistent in its
// sizes. The seeds run with every `go test`.
func FuzzDecodeManifest(f *testing.F) {
	h := strings.Repeat("ab", 32)
	for _, m := range []Manifest{
		{Name: "data.bin", Size: 3, Entries: []Entry{{Path: "data.bin", Size: 3, Chunks: []string{h}}}},
		{Name: "tree", Dir: true, Size: ChunkSize + 1, Entries: []Entry{
			{Path: "a/b", Size: ChunkSize + 1, Chunks: []string{h, h}}, {Path: "c", Chunks: []string{}}}},
		{Name: "x", Dir: true, Size: 2, Entries: []Entry{{Path: "a", Size: 1, Chunks: []string{h}}, {Path: "a/b", Size: 1, Chunks: []string{h}}}},
		{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: ".", Size: 1, Chunks: []string{h}}}},
		{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: "../etc/passwd", Size: 1, Chunks: []string{h}}}},
		{Name: "x\n", Size: 1, Entries: []Entry{{Path: "a\x00", Size: 1, Chunks: []string{h}}}},
	} {
		b, _ := json.Marshal(&m)
		f.Add(b)
	}
	f.Add([]byte(`{"name":"x","size":-1,"entries":[{"path":"x","size":-1,"chunks":[]}]}`))
	f.Add([]byte(`{"name":"x","size":9223372036854775807,"entries":[{"path":"x","size":9223372036854775807,"chunks":[]}]}`))
	f.Add([]byte(`{"entries":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var probe Manifest
		id := strings.Repeat("0", 64)
		if json.Unmarshal(b, &probe) == nil {
			id = probe.ID() // the id the bytes claim to be
		}
		m, err := DecodeManifest(b, id)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if m.ID() != id {
			t.Fatalf("accepted a manifest whose id is %s, not %s", m.ID(), id)
		}
		root := "/root/dst"
		files := map[string]bool{}
		var sum int64
		for _, e := range m.Entries {
			target := filepath.Join(root, filepath.FromSlash(e.Path))
			if !strings.HasPrefix(target, root+"/") {
				t.Fatalf("path %q lands on %q, outside %q", e.Path, target, root)
			}
			files[e.Path] = true
			for i := range e.Chunks {
				n := chunkLen(e.Size, i)
				if n <= 0 || n > ChunkSize {
					t.Fatalf("%q: chunk %d of %d bytes", e.Path, i, n)
				}
				sum += n
			}
		}
		for p := range files {
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				if files[d] {
					t.Fatalf("%q is both a file and a directory", d)
				}
			}
		}
		if sum != m.Size {
			t.Fatalf("chunks hold %d bytes, the manifest says %d", sum, m.Size)
		}
		var distinct int64
		for _, c := range m.Chunks() {
			distinct += c.Size
		}
		if distinct > m.Size {
			t.Fatalf("distinct chunks hold %d bytes, more than the %d of the files", distinct, m.Size)
		}
	})
}

func oneLine(t *testing.T, err error) {
	t.Helper()
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error is not one line: %q", err)
	}
}

// FuzzAnswer is a hostile peer on an artifact stream: each line of the
// input is one request frame (wire.ArtifactRequest) on the same stream,
// to a holder of a public and a private artifact of its own. The holder
// never hands out a byte the access rule (Store.MayRead) refuses the peer
// on that stream, a chunk it serves is the one asked for and part of the
// artifact named, and a manifest it serves decodes as that artifact's.
func FuzzAnswer(f *testing.F) {
	self, stranger := signtest.Seeded(f, "holder"), signtest.Seeded(f, "stranger")
	store, err := Open(f.TempDir(), 0)
	if err != nil {
		f.Fatal(err)
	}
	src := f.TempDir()
	randFile(f, src, "pub", 3000)
	randFile(f, src, "priv", 2000)
	pub, err := store.Add(filepath.Join(src, "pub"), Meta{})
	if err != nil {
		f.Fatal(err)
	}
	priv, err := store.Add(filepath.Join(src, "priv"), Meta{Private: true})
	if err != nil {
		f.Fatal(err)
	}
	svc := &Service{cfg: ServiceConfig{Store: store, Signer: self}, log: slog.New(slog.DiscardHandler), counters: map[string]int{},
		badPeers: map[peer.ID]int{}, serving: map[peer.ID]int{}, warming: map[string]peer.ID{}}
	store.setAccess(self.ID(), nil)
	grant, err := svc.Grant(priv, stranger.ID())
	if err != nil {
		f.Fatal(err)
	}
	chunkOf := func(id string) string { m, _, _ := store.Manifest(id); return m.Entries[0].Chunks[0] }
	req := func(rs ...wire.ArtifactRequest) []byte {
		var lines [][]byte
		for _, r := range rs {
			b, _ := json.Marshal(r)
			lines = append(lines, b)
		}
		return bytes.Join(lines, []byte("\n"))
	}
	f.Add(req(wire.ArtifactRequest{Op: wire.ArtifactOpManifest, ID: pub}, wire.ArtifactRequest{Op: wire.ArtifactOpChunk, ID: pub, Chunk: chunkOf(pub)}))
	f.Add(req(wire.ArtifactRequest{Op: wire.ArtifactOpChunk, ID: priv, Chunk: chunkOf(priv)}))
	f.Add(req(wire.ArtifactRequest{Op: wire.ArtifactOpManifest, ID: priv, Grant: grant}, wire.ArtifactRequest{Op: wire.ArtifactOpChunk, ID: priv, Chunk: chunkOf(priv)}))
	f.Add(req(wire.ArtifactRequest{Op: wire.ArtifactOpChunk, ID: pub, Chunk: chunkOf(priv)}))
	f.Add(req(wire.ArtifactRequest{Op: "delete", ID: pub}, wire.ArtifactRequest{Op: wire.ArtifactOpManifest, ID: "../x"}))
	f.Add([]byte("{\n[\nnull"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		authorised := map[string]bool{}
		admitted := map[string]bool{}
		for _, frame := range bytes.Split(stream, []byte("\n")) {
			var r wire.ArtifactRequest
			_ = json.Unmarshal(frame, &r)
			if store.MayRead(r.ID, Reader{Peer: stranger.ID(), Grant: r.Grant}) == nil {
				admitted[r.ID] = true
			}
			resp, err := svc.answer(stranger.ID(), frame, authorised)
			if err != nil {
				oneLine(t, err)
				continue
			}
			if !admitted[r.ID] {
				t.Fatalf("answered %s of %s, which the access rule never let the peer read on this stream", r.Op, short(r.ID))
			}
			switch r.Op {
			case wire.ArtifactOpChunk:
				h := sha256.Sum256(resp)
				m, _, _ := store.Manifest(r.ID)
				if hex.EncodeToString(h[:]) != r.Chunk || !m.hasChunk(r.Chunk) {
					t.Fatalf("served %d bytes for chunk %s of %s", len(resp), short(r.Chunk), short(r.ID))
				}
			case wire.ArtifactOpManifest:
				var a wire.ArtifactManifest
				if err := json.Unmarshal(resp, &a); err != nil {
					t.Fatalf("served a manifest answer that does not decode: %v", err)
				}
				if _, err := DecodeManifest(a.Manifest, r.ID); err != nil {
					t.Fatalf("served a manifest that is not %s's: %v", short(r.ID), err)
				}
				if a.Private != (r.ID == priv) {
					t.Fatalf("served %s as private=%v", short(r.ID), a.Private)
				}
			default:
				t.Fatalf("answered unknown op %q", r.Op)
			}
		}
	})
}

// FuzzOpenWarm: a peer's request that this node fetch an artifact ahead
// of a job, signed by whatever it likes. What openWarm accepts is signed
// by the sender, names this node, expires within the window, names a
// well-formed artifact, and seals again to the same request.
func FuzzOpenWarm(f *testing.F) {
	self, renter := signtest.Seeded(f, "provider"), signtest.Seeded(f, "renter")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, w := range []wire.ArtifactWarm{{ID: strings.Repeat("ab", 32), Provider: self.ID().String(), Expires: now.Add(WarmTTL)},
		{ID: strings.Repeat("ab", 32), Provider: renter.ID().String(), Expires: now.Add(WarmTTL), Grant: []byte("x")},
		{ID: "../x", Provider: self.ID().String(), Expires: now.Add(time.Hour)},
		{ID: strings.Repeat("ab", 32), Provider: "a\nb", Expires: now.Add(WarmTTL)}} {
		b, _ := json.Marshal(w)
		f.Add(b, true)
	}
	for _, s := range []string{"", "{}", "null", `{"domain":"artifact-warm/v1","signer":"x","payload":"","sig":"AA=="}`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		if signed {
			data = signtest.RawBytes(t, renter, sign.DomainArtifactWarm, data)
		}
		w, err := openWarm(data, renter.ID(), self.ID(), now)
		if err != nil {
			oneLine(t, err)
			return
		}
		if w.Provider != self.ID().String() || !now.Before(w.Expires) || w.Expires.After(now.Add(2*WarmTTL)) || !ValidID(w.ID) {
			t.Fatalf("accepted %+v", w)
		}
		env, err := sign.Seal(renter, sign.DomainArtifactWarm, w)
		if err != nil {
			t.Fatalf("an accepted warm request does not seal again: %v", err)
		}
		again, _ := env.Marshal()
		w2, err := openWarm(again, renter.ID(), self.ID(), now)
		if err != nil {
			t.Fatalf("a re-sealed warm request is refused: %v", err)
		}
		a, _ := json.Marshal(w)
		b, _ := json.Marshal(w2)
		if !bytes.Equal(a, b) {
			t.Fatalf("warm request changed in a round trip:\n%s\n%s", a, b)
		}
		if _, err := openWarm(again, self.ID(), self.ID(), now); err == nil {
			t.Fatal("a warm request relayed by another peer was accepted")
		}
	})
}
