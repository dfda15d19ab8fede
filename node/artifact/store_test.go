package artifact

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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

func openStore(t testing.TB, budget int64) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), budget)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStoreAddFileRoundTrip(t *testing.T) {
	src := t.TempDir()
	data := randFile(t, src, "data.bin", 3*ChunkSize+123)
	s := openStore(t, 0)
	id, err := s.Add(filepath.Join(src, "data.bin"), Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	m, complete, err := s.Manifest(id)
	if err != nil || !complete {
		t.Fatalf("manifest: %v complete=%v", err, complete)
	}
	if m.ID() != id || m.Size != int64(len(data)) || len(m.Entries[0].Chunks) != 4 {
		t.Fatalf("manifest %+v for id %s", m, id)
	}
	// Same content, same id; the store does not hold it twice.
	id2, err := s.Add(filepath.Join(src, "data.bin"), Meta{})
	if err != nil || id2 != id {
		t.Fatalf("re-add: %s %v, want %s", id2, err, id)
	}
	if _, used := s.Budget(); used != int64(len(data)) {
		t.Fatalf("used %d, want %d", used, len(data))
	}
	out := filepath.Join(t.TempDir(), "copy.bin")
	if err := s.Export(id, out, Local); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, data) {
		t.Fatal("exported file differs from the original")
	}
}

func TestStoreAddDirAndReopen(t *testing.T) {
	src := t.TempDir()
	a := randFile(t, src, "a.txt", 10)
	b := randFile(t, src, "sub/b.bin", ChunkSize+1)
	if err := os.WriteFile(filepath.Join(src, "empty"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Add(src, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	in, err := s2.Info(id)
	if err != nil || !in.Complete || in.Files != 3 || in.Size != int64(len(a)+len(b)) {
		t.Fatalf("reopened info %+v %v", in, err)
	}
	out := t.TempDir()
	if err := s2.Export(id, out, Local); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"a.txt": a, "sub/b.bin": b, "empty": {}} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %v (len %d want %d)", name, err, len(got), len(want))
		}
	}
	if fi, _ := os.Stat(filepath.Join(out, "empty")); fi.Mode()&0o111 == 0 {
		t.Fatal("executable bit lost")
	}
}

func TestStoreBudgetEvictsLRUAndRefusesWhenPinned(t *testing.T) {
	src := t.TempDir()
	randFile(t, src, "one", 2*ChunkSize)
	randFile(t, src, "two", 2*ChunkSize)
	randFile(t, src, "three", 2*ChunkSize)
	s := openStore(t, 5*ChunkSize)
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	one, err := s.Add(filepath.Join(src, "one"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Add(filepath.Join(src, "two"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	// Using "one" makes "two" the least recently used.
	s.Pin(one)()
	three, err := s.Add(filepath.Join(src, "three"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Info(two); !errors.Is(err, ErrNotFound) {
		t.Fatalf("least recently used artifact kept: %v", err)
	}
	for _, id := range []string{one, three} {
		if _, err := s.Info(id); err != nil {
			t.Fatalf("recently used artifact evicted: %v", err)
		}
	}
	if _, used := s.Budget(); used != 4*ChunkSize {
		t.Fatalf("used %d after eviction", used)
	}
	// With both held artifacts pinned, a new one cannot fit.
	u1, u3 := s.Pin(one), s.Pin(three)
	randFile(t, src, "four", 2*ChunkSize)
	_, err = s.Add(filepath.Join(src, "four"), Meta{})
	if !errors.Is(err, ErrFull) {
		t.Fatalf("add with a full pinned store: %v, want ErrFull", err)
	}
	if _, used := s.Budget(); used != 4*ChunkSize {
		t.Fatalf("failed add left %d bytes used, want %d", used, 4*ChunkSize)
	}
	if err := s.Remove(one); err == nil {
		t.Fatal("removed a pinned artifact")
	}
	u1()
	u3()
	if _, err := s.Add(filepath.Join(src, "four"), Meta{}); err != nil {
		t.Fatalf("add after unpinning: %v", err)
	}
}

func TestStorePutChunkVerifies(t *testing.T) {
	src := t.TempDir()
	randFile(t, src, "f", ChunkSize+5)
	donor := openStore(t, 0)
	id, err := donor.Add(filepath.Join(src, "f"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	m, _, _ := donor.Manifest(id)
	s := openStore(t, 0)
	if gotID, complete, err := s.Begin(m, Meta{Private: true, Owner: "peer"}); err != nil || gotID != id || complete {
		t.Fatalf("begin: %s %v %v", gotID, complete, err)
	}
	if err := s.Complete(id, Local, Meta{}); err == nil {
		t.Fatal("completed an artifact with missing chunks")
	}
	c0, _ := donor.ReadChunk(m.Entries[0].Chunks[0])
	bad := append([]byte(nil), c0...)
	bad[0] ^= 1
	if err := s.PutChunk(id, m.Entries[0].Chunks[0], bad, Local); err == nil {
		t.Fatal("stored a chunk that does not match its hash")
	}
	if n := len(s.Missing(&m, Reader{})); n != 2 {
		t.Fatalf("missing %d chunks, want 2", n)
	}
	for _, c := range m.Chunks() {
		b, _ := donor.ReadChunk(c.Hash)
		if err := s.PutChunk(id, c.Hash, b, Local); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Complete(id, Local, Meta{Private: true, Owner: "peer"}); err != nil {
		t.Fatal(err)
	}
	if meta, _, _ := s.Meta(id); !meta.Private || meta.Owner != "peer" {
		t.Fatalf("meta %+v", meta)
	}
}

func TestManifestValidate(t *testing.T) {
	h := "aa" + string(bytes.Repeat([]byte("0"), 62))
	for _, tc := range []struct {
		name string
		m    Manifest
	}{
		{"no entries", Manifest{Name: "x"}},
		{"escaping path", Manifest{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: "../x", Size: 1, Chunks: []string{h}}}}},
		{"absolute path", Manifest{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: "/etc/x", Size: 1, Chunks: []string{h}}}}},
		{"chunk count", Manifest{Name: "x", Size: 1, Entries: []Entry{{Path: "x", Size: 1, Chunks: []string{h, h}}}}},
		{"bad hash", Manifest{Name: "x", Size: 1, Entries: []Entry{{Path: "x", Size: 1, Chunks: []string{"zz"}}}}},
		{"size sum", Manifest{Name: "x", Size: 2, Entries: []Entry{{Path: "x", Size: 1, Chunks: []string{h}}}}},
		{"dot path", Manifest{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: ".", Size: 1, Chunks: []string{h}}}}},
		{"file under a file", Manifest{Name: "x", Dir: true, Size: 2, Entries: []Entry{
			{Path: "a", Size: 1, Chunks: []string{h}}, {Path: "a/b", Size: 1, Chunks: []string{h}}}}},
		{"file under a file, deeper", Manifest{Name: "x", Dir: true, Size: 2, Entries: []Entry{
			{Path: "a/b/c", Size: 1, Chunks: []string{h}}, {Path: "a", Size: 1, Chunks: []string{h}}}}},
		{"control character in a path", Manifest{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: "a\nb", Size: 1, Chunks: []string{h}}}}},
		{"NUL in a path", Manifest{Name: "x", Dir: true, Size: 1, Entries: []Entry{{Path: "a\x00b", Size: 1, Chunks: []string{h}}}}},
		{"control character in the name", Manifest{Name: "x\x1b[2J", Size: 1, Entries: []Entry{{Path: "x", Size: 1, Chunks: []string{h}}}}},
		{"upper-case hash", Manifest{Name: "x", Size: 1, Entries: []Entry{{Path: "x", Size: 1, Chunks: []string{"AA" + h[2:]}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.ContainsAny(err.Error(), "\n\x00\x1b") {
				t.Fatalf("error is not one clean line: %q", err)
			}
		})
	}
}

func TestStoreOpenReadsFileInOrder(t *testing.T) {
	dir := t.TempDir()
	data := randFile(t, dir, "dataset.bin", 2*ChunkSize+5)
	src := filepath.Join(dir, "dataset.bin")
	s := openStore(t, 0)
	id, err := s.Add(src, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(id, Local)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the file's %d", len(got), err, len(data))
	}
	dirID, err := s.Add(filepath.Dir(src), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(dirID, Local); err == nil {
		t.Fatal("opened a directory artifact as a file")
	}
}
