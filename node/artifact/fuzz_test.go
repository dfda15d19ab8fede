package artifact

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"
	"testing"
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
