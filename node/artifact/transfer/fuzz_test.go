package transfer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

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
	store, err := artifact.Open(f.TempDir(), 0)
	if err != nil {
		f.Fatal(err)
	}
	src := f.TempDir()
	randFile(f, src, "pub", 3000)
	randFile(f, src, "priv", 2000)
	pub, err := store.Add(filepath.Join(src, "pub"), artifact.Meta{})
	if err != nil {
		f.Fatal(err)
	}
	priv, err := store.Add(filepath.Join(src, "priv"), artifact.Meta{Private: true})
	if err != nil {
		f.Fatal(err)
	}
	svc := &Service{cfg: ServiceConfig{Store: store, Signer: self}, log: slog.New(slog.DiscardHandler), counters: map[string]int{},
		badPeers: map[peer.ID]int{}, serving: map[peer.ID]int{}, warming: map[string]peer.ID{}}
	store.SetAccess(self.ID(), nil)
	grant, err := svc.Grant(priv, peer.ID(stranger.ID()))
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
			if store.MayRead(r.ID, artifact.Reader{Peer: stranger.ID(), Grant: r.Grant}) == nil {
				admitted[r.ID] = true
			}
			resp, err := svc.answer(peer.ID(stranger.ID()), frame, authorised)
			if err != nil {
				oneLine(t, err)
				continue
			}
			if !admitted[r.ID] {
				t.Fatalf("answered %s of %s, which the access rule never let the peer read on this stream", r.Op, artifact.ShortID(r.ID))
			}
			switch r.Op {
			case wire.ArtifactOpChunk:
				h := sha256.Sum256(resp)
				m, _, _ := store.Manifest(r.ID)
				if hex.EncodeToString(h[:]) != r.Chunk || !hasChunk(&m, r.Chunk) {
					t.Fatalf("served %d bytes for chunk %s of %s", len(resp), artifact.ShortID(r.Chunk), artifact.ShortID(r.ID))
				}
			case wire.ArtifactOpManifest:
				var a wire.ArtifactManifest
				if err := json.Unmarshal(resp, &a); err != nil {
					t.Fatalf("served a manifest answer that does not decode: %v", err)
				}
				if _, err := artifact.DecodeManifest(a.Manifest, r.ID); err != nil {
					t.Fatalf("served a manifest that is not %s's: %v", artifact.ShortID(r.ID), err)
				}
				if a.Private != (r.ID == priv) {
					t.Fatalf("served %s as private=%v", artifact.ShortID(r.ID), a.Private)
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
		w, err := openWarm(data, peer.ID(renter.ID()), peer.ID(self.ID()), now)
		if err != nil {
			oneLine(t, err)
			return
		}
		if w.Provider != self.ID().String() || !now.Before(w.Expires) || w.Expires.After(now.Add(2*WarmTTL)) || !artifact.ValidID(w.ID) {
			t.Fatalf("accepted %+v", w)
		}
		env, err := sign.Seal(renter, sign.DomainArtifactWarm, w)
		if err != nil {
			t.Fatalf("an accepted warm request does not seal again: %v", err)
		}
		again, _ := env.Marshal()
		w2, err := openWarm(again, peer.ID(renter.ID()), peer.ID(self.ID()), now)
		if err != nil {
			t.Fatalf("a re-sealed warm request is refused: %v", err)
		}
		a, _ := json.Marshal(w)
		b, _ := json.Marshal(w2)
		if !bytes.Equal(a, b) {
			t.Fatalf("warm request changed in a round trip:\n%s\n%s", a, b)
		}
		if _, err := openWarm(again, peer.ID(self.ID()), peer.ID(self.ID()), now); err == nil {
			t.Fatal("a warm request relayed by another peer was accepted")
		}
	})
}
