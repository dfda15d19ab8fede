package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// sealedDir writes a directory whose files hold marker, spanning several
// chunks and segments.
func sealedDir(t *testing.T, marker []byte) (string, []byte) {
	t.Helper()
	src := t.TempDir()
	big := randFile(t, src, "sub/big.bin", 3*ChunkSize+12345)
	copy(big[ChunkSize-len(marker)/2:], marker) // across a chunk boundary
	if err := os.WriteFile(filepath.Join(src, "sub/big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "note.txt"), marker, 0o644); err != nil {
		t.Fatal(err)
	}
	return src, big
}

// storeHolds reports whether any file under the store's dir holds b.
func storeHolds(t *testing.T, s *Store, b []byte) string {
	t.Helper()
	found := ""
	_ = filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, b) {
			found = p
		}
		return err
	})
	return found
}

// TestSealedArtifactCiphertextOnly: a sealed artifact's store holds no
// byte of its plaintext (nor its file names), every chunk is named by the
// hash of its stored bytes, another holder takes it chunk by chunk with
// no key (PutChunk verifies each), cannot open it without the key, and
// the key's holder gets the files back intact.
func TestSealedArtifactCiphertextOnly(t *testing.T) {
	marker := []byte("MARKER-" + hex.EncodeToString([]byte("sealed artifact test marker")))
	src, big := sealedDir(t, marker)
	owner := openStore(t, 0)
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id, ck, err := owner.AddSealed(src, k, Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{marker, []byte("big.bin"), []byte("note.txt")} {
		if p := storeHolds(t, owner, b); p != "" {
			t.Fatalf("the owner's store holds %q in plaintext: %s", b, p)
		}
	}
	if got, ok := owner.Key(id); !ok || got != ck {
		t.Fatalf("owner's recorded key %v %v, want the content key", got, ok)
	}
	m, _, err := owner.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Sealed || m.Name != sealedName || m.Dir {
		t.Fatalf("manifest %+v", m)
	}

	// A holder without the key: the chunks verify against their ids.
	holder := openStore(t, 0)
	if _, _, err := holder.Begin(m, Meta{Private: true, Owner: "someone"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Chunks() {
		data, err := owner.ReadChunk(c.Hash)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != c.Hash {
			t.Fatalf("chunk %s does not hash to its id", c.Hash)
		}
		if err := holder.PutChunk(id, c.Hash, data, Local); err != nil {
			t.Fatal(err)
		}
	}
	if err := holder.Complete(id, Local, Meta{Private: true, Owner: "someone"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := holder.Key(id); ok {
		t.Fatal("a holder that was given no key has one")
	}
	if p := storeHolds(t, holder, marker); p != "" {
		t.Fatalf("the holder's store holds the marker: %s", p)
	}
	other, _ := NewKey()
	dst := filepath.Join(t.TempDir(), "out")
	if err := holder.Unseal(id, dst, Local, other); !errors.Is(err, ErrSealed) {
		t.Fatalf("unsealed with another key: %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a failed unseal left %s: %v", dst, err)
	}
	if wrong, err := holder.ContentKey(id, other); err != nil || holder.SetKey(id, wrong) == nil {
		t.Fatalf("a content key derived from another key was recorded (%v)", err)
	}
	if err := holder.Unseal(id, dst, Local, ck); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "sub/big.bin")); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("big.bin does not come back intact: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "note.txt")); err != nil || !bytes.Equal(b, marker) {
		t.Fatalf("note.txt: %q %v", b, err)
	}
	// The key it was sealed with derives the same content key.
	if got, err := holder.ContentKey(id, k); err != nil || got != ck {
		t.Fatalf("content key from the sealing key: %v", err)
	}
}

// TestSealedArtifactTamperRefused: one flipped byte in a stored chunk (a
// hostile holder rewriting its copy under the same name) fails the
// unseal; a sealed single file unseals to dst itself.
func TestSealedArtifactTamperRefused(t *testing.T) {
	dir := t.TempDir()
	want := randFile(t, dir, "f.bin", 2*sealSegment+7)
	s := openStore(t, 0)
	id, ck, err := s.AddSealed(filepath.Join(dir, "f.bin"), mustKey(t), Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "in")
	if err := s.Unseal(id, dst, Local, ck); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("file artifact: %v", err)
	}
	m, _, _ := s.Manifest(id)
	p := s.chunkPath(m.Entries[0].Chunks[0])
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[saltSize+sealSegment+100] ^= 1 // inside the second segment
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Unseal(id, filepath.Join(t.TempDir(), "again"), Local, ck); !errors.Is(err, ErrSealed) {
		t.Fatalf("a tampered artifact unsealed: %v", err)
	}
	if err := s.SetKey(id, ck); !errors.Is(err, ErrSealed) {
		t.Fatalf("SetKey accepted a key for tampered bytes: %v", err)
	}
}

// TestSealedKeysPerArtifact: two artifacts sealed with one lease key (a
// lease's checkpoint and its outputs) get content keys of their own: a
// peer handed A's content key (a provider restoring A) cannot open B.
// Public artifacts stay plain and shared by content.
func TestSealedKeysPerArtifact(t *testing.T) {
	s := openStore(t, 0)
	lk, err := s.LeaseKey("lease-1")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.LeaseKey("lease-1"); again != lk {
		t.Fatal("a lease key is not stable")
	}
	if other, _ := s.LeaseKey("lease-2"); other == lk {
		t.Fatal("two leases share a key")
	}
	dir := t.TempDir()
	randFile(t, dir, "a", 1000)
	randFile(t, dir, "b", 1000)
	a, cka, err := s.AddSealed(filepath.Join(dir, "a"), lk, Meta{Private: true, Owner: "renter"})
	if err != nil {
		t.Fatal(err)
	}
	b, ckb, err := s.AddSealed(filepath.Join(dir, "b"), lk, Meta{Private: true, Owner: "renter"})
	if err != nil {
		t.Fatal(err)
	}
	if cka == ckb || cka == lk {
		t.Fatal("artifacts sealed with one lease key share a content key")
	}
	if _, ok := s.Key(a); ok {
		t.Fatal("an artifact sealed for a peer keeps its key here")
	}
	if err := s.Unseal(b, filepath.Join(t.TempDir(), "b"), Local, cka); !errors.Is(err, ErrSealed) {
		t.Fatalf("A's key opened B: %v", err)
	}
	if err := s.Unseal(a, filepath.Join(t.TempDir(), "a"), Local, cka); err != nil {
		t.Fatal(err)
	}
	// Sealing the same bytes twice makes two artifacts (fresh salts);
	// public ones still dedupe.
	p1, err := s.Add(filepath.Join(dir, "a"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.Add(filepath.Join(dir, "a"), Meta{})
	if err != nil || p1 != p2 {
		t.Fatalf("public artifact not deduplicated: %s %s %v", p1, p2, err)
	}
	if m, _, _ := s.Manifest(p1); m.Sealed {
		t.Fatal("a public artifact is sealed")
	}
	if err := s.Unseal(p1, filepath.Join(t.TempDir(), "p"), Local, cka); err == nil {
		t.Fatal("unsealed a plain artifact")
	}
}

func mustKey(t *testing.T) Key {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPrivateArtifactSealedOncePerOwner: a private file or tree is
// sealed (its store holds no byte of it) under a key of its owner's, and
// the same data added again, also once evicted, is the same artifact; the
// same data added by another store (another owner) is another, which the
// first owner's key does not open, and the owner's key opens its own.
func TestPrivateArtifactSealedOncePerOwner(t *testing.T) {
	marker := []byte("MARKER-" + hex.EncodeToString([]byte("private artifact marker")))
	src, big := sealedDir(t, marker)
	a := openStore(t, 0)
	id, err := a.AddPrivate(src)
	if err != nil {
		t.Fatal(err)
	}
	in, err := a.Info(id)
	if err != nil || !in.Private || !in.Sealed || in.Owner != "" || in.Name != filepath.Base(src) {
		t.Fatalf("added %+v %v", in, err)
	}
	if m, _, err := a.Manifest(id); err != nil || m.Name != sealedName {
		t.Fatalf("manifest (served to holders) %+v %v: names the data", m, err)
	}
	if p := storeHolds(t, a, marker); p != "" {
		t.Fatalf("the owner's store holds the plaintext in %s", p)
	}
	again, err := a.AddPrivate(src)
	if err != nil || again != id {
		t.Fatalf("added again: %s %v, want %s", again, err, id)
	}
	if err := a.Remove(id); err != nil {
		t.Fatal(err)
	}
	if again, err = a.AddPrivate(src); err != nil || again != id {
		t.Fatalf("added again once removed: %s %v, want %s", again, err, id)
	}
	b := openStore(t, 0)
	other, err := b.AddPrivate(src)
	if err != nil || other == id {
		t.Fatalf("another owner's copy: %s %v (first owner's %s)", other, err, id)
	}
	ka, _ := a.Key(id)
	if err := b.Unseal(other, filepath.Join(t.TempDir(), "x"), Local, ka); !errors.Is(err, ErrSealed) {
		t.Fatalf("another owner's copy opened with the first owner's key: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := a.ExportFor(id, dst, Local, map[string]Key{id: ka}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "sub/big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("opened: %v", err)
	}
}
