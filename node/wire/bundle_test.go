package wire

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

type tarEntry struct {
	name     string
	typeflag byte
	body     string
	link     string
	mode     int64
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: mode, Linkname: e.link}
		if e.typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name, body string) tarEntry { return tarEntry{name: name, typeflag: tar.TypeReg, body: body} }

func outFile(name, body string) terms.OutputFile {
	s := sha256.Sum256([]byte(body))
	return terms.OutputFile{Path: name, Size: int64(len(body)), SHA256: hex.EncodeToString(s[:])}
}

// listTree returns every path under dir, relative and slash-separated.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestExtractBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	archive := makeTar(t,
		tarEntry{name: "sub/", typeflag: tar.TypeDir, mode: 0o755},
		reg("metrics.json", `{"loss":0.1}`),
		reg("sub/model.bin", strings.Repeat("w", 10000)),
		tarEntry{name: "run.sh", typeflag: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o755},
		reg("empty", ""),
	)
	manifest := []terms.OutputFile{
		outFile("sub/model.bin", strings.Repeat("w", 10000)),
		outFile("metrics.json", `{"loss":0.1}`),
		outFile("run.sh", "#!/bin/sh\n"),
		outFile("empty", ""),
	}
	got, err := ExtractBundle(bytes.NewReader(archive), manifest, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []terms.OutputFile{manifest[1], manifest[0], manifest[2], manifest[3]} // archive order
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("extracted %+v\nwant %+v", got, want)
	}
	if tree, want := listTree(t, dir), []string{"empty", "metrics.json", "run.sh", "sub", "sub/model.bin"}; !reflect.DeepEqual(tree, want) {
		t.Fatalf("destination holds %q, want %q (no staging leftovers)", tree, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sub", "model.bin"))
	if err != nil || string(b) != strings.Repeat("w", 10000) {
		t.Fatalf("sub/model.bin: %v, %d bytes", err, len(b))
	}
	if fi, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("run.sh lost its executable bit: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "metrics.json")); err != nil || fi.Mode().Perm()&0o111 != 0 {
		t.Fatalf("metrics.json mode %v, %v", fi.Mode(), err)
	}

	// A second fetch refuses to overwrite, and leaves the files alone.
	changed := makeTar(t, reg("metrics.json", `{"loss":0.2}`))
	changedManifest := []terms.OutputFile{outFile("metrics.json", `{"loss":0.2}`)}
	if _, err := ExtractBundle(bytes.NewReader(changed), changedManifest, dir, false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrite without force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "metrics.json")); string(b) != `{"loss":0.1}` {
		t.Fatalf("metrics.json changed without --force: %s", b)
	}
	if _, err := ExtractBundle(bytes.NewReader(changed), changedManifest, dir, true); err != nil {
		t.Fatalf("overwrite with force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "metrics.json")); string(b) != `{"loss":0.2}` {
		t.Fatalf("metrics.json after --force: %s", b)
	}
}

func TestExtractBundleRefuses(t *testing.T) {
	ok := reg("ok.txt", "fine")
	okM := outFile("ok.txt", "fine")
	cases := []struct {
		name     string
		entries  []tarEntry
		manifest []terms.OutputFile
		want     string
	}{
		{"parent escape", []tarEntry{ok, reg("../x", "evil")}, []terms.OutputFile{okM, outFile("../x", "evil")}, "escapes the destination"},
		{"nested escape", []tarEntry{reg("a/../../x", "evil")}, []terms.OutputFile{outFile("x", "evil")}, "escapes the destination"},
		{"absolute path", []tarEntry{reg("/tmp/x", "evil")}, []terms.OutputFile{outFile("x", "evil")}, "absolute"},
		{"symlink", []tarEntry{ok, {name: "link", typeflag: tar.TypeSymlink, link: "/etc/passwd"}}, []terms.OutputFile{okM}, "links are not extracted"},
		{"hard link", []tarEntry{ok, {name: "hard", typeflag: tar.TypeLink, link: "ok.txt"}}, []terms.OutputFile{okM}, "links are not extracted"},
		{"fifo", []tarEntry{{name: "pipe", typeflag: tar.TypeFifo}}, nil, "not a regular file"},
		{"device", []tarEntry{{name: "dev", typeflag: tar.TypeChar}}, nil, "not a regular file"},
		{"checksum mismatch", []tarEntry{ok, reg("model.bin", "tampered")},
			[]terms.OutputFile{okM, {Path: "model.bin", Size: 8, SHA256: outFile("x", "original").SHA256}}, `checksum mismatch for "model.bin"`},
		{"size mismatch", []tarEntry{reg("a", "abc")}, []terms.OutputFile{outFile("a", "abcd")}, "archive says 3 bytes, manifest 4"},
		{"not in manifest", []tarEntry{ok, reg("extra", "x")}, []terms.OutputFile{okM}, `"extra" is not in the manifest`},
		{"missing from archive", []tarEntry{ok}, []terms.OutputFile{okM, outFile("b", "x"), outFile("a", "y")}, "missing from the archive: a, b"},
		{"duplicate in archive", []tarEntry{ok, ok}, []terms.OutputFile{okM}, "appears twice"},
		{"duplicate in manifest", []tarEntry{ok}, []terms.OutputFile{okM, okM}, "twice"},
		{"bad manifest path", []tarEntry{ok}, []terms.OutputFile{okM, outFile("../../etc/x", "")}, "manifest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			_, err := ExtractBundle(bytes.NewReader(makeTar(t, c.entries...)), c.manifest, dir, true)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ExtractBundle = %v, want an error mentioning %q", err, c.want)
			}
			// Nothing lands anywhere: not in dir (all or nothing), not beside it.
			if tree := listTree(t, parent); len(tree) > 1 || (len(tree) == 1 && tree[0] != "out") {
				t.Fatalf("files left after a refused fetch: %q", tree)
			}
		})
	}

	t.Run("truncated archive", func(t *testing.T) {
		a := makeTar(t, reg("big", strings.Repeat("z", 4096)))
		_, err := ExtractBundle(bytes.NewReader(a[:1024]), []terms.OutputFile{outFile("big", strings.Repeat("z", 4096))}, t.TempDir(), false)
		if err == nil {
			t.Fatal("truncated archive accepted")
		}
	})
}

func TestExtractBundleDoesNotFollowSymlinks(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, "file")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sub/x", "file"} {
		a := makeTar(t, reg(name, "evil"))
		if _, err := ExtractBundle(bytes.NewReader(a), []terms.OutputFile{outFile(name, "evil")}, dir, true); err == nil {
			t.Fatalf("%s: wrote through a symlink in the destination", name)
		}
	}
	if tree := listTree(t, outside); len(tree) != 0 {
		t.Fatalf("files written outside the destination: %q", tree)
	}
}

// BenchmarkExtractBundle measures verified extraction of a job's outputs
// (16 files of 1 MiB): tar parsing, SHA-256, staging and the final renames.
func BenchmarkExtractBundle(b *testing.B) {
	const files, size = 16, 1 << 20
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	sum := sha256.Sum256(body)
	var manifest []terms.OutputFile
	for i := 0; i < files; i++ {
		name := "out/part-" + strconv.Itoa(i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			b.Fatal(err)
		}
		manifest = append(manifest, terms.OutputFile{Path: name, Size: size, SHA256: hex.EncodeToString(sum[:])})
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	archive := buf.Bytes()
	base := b.TempDir()
	b.SetBytes(files * size)
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(base, strconv.Itoa(i))
		if _, err := ExtractBundle(bytes.NewReader(archive), manifest, dir, false); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// WriteBundle's archive is what ExtractBundle accepts: the provider's files
// arrive byte for byte, and a file shorter than its manifest size fails the
// writer instead of producing a bundle that cannot verify.
func TestWriteBundleRoundTrip(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"metrics.json": `{"loss":0.1}`, "ckpt/model.bin": strings.Repeat("w", 70000), "empty": ""}
	var outs []terms.OutputFile
	for _, p := range []string{"ckpt/model.bin", "empty", "metrics.json"} {
		full := filepath.Join(src, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, outFile(p, files[p]))
	}
	var buf bytes.Buffer
	if err := WriteBundle(&buf, src, outs); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "res")
	got, err := ExtractBundle(&buf, outs, dst, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, outs) {
		t.Fatalf("extracted %+v\nwant %+v", got, outs)
	}
	for p, body := range files {
		if b, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(p))); err != nil || string(b) != body {
			t.Fatalf("%s: %v, %d bytes, want %d", p, err, len(b), len(body))
		}
	}

	t.Run("missing file", func(t *testing.T) {
		err := WriteBundle(&bytes.Buffer{}, src, []terms.OutputFile{outFile("absent", "x")})
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("WriteBundle of a missing file = %v, want not-exist", err)
		}
	})
	t.Run("file shorter than the manifest", func(t *testing.T) {
		short := outFile("metrics.json", files["metrics.json"]+"more")
		if err := WriteBundle(&bytes.Buffer{}, src, []terms.OutputFile{short}); err == nil {
			t.Fatal("WriteBundle padded or truncated a file that is shorter than its manifest size")
		}
	})
	t.Run("existing file wraps ErrExists", func(t *testing.T) {
		var again bytes.Buffer
		if err := WriteBundle(&again, src, outs); err != nil {
			t.Fatal(err)
		}
		if _, err := ExtractBundle(&again, outs, dst, false); !errors.Is(err, ErrExists) {
			t.Fatalf("second extraction without force = %v, want ErrExists", err)
		}
	})
}

// TestLeaseEventOutputs: a lease event lists at most MaxEventOutputs files
// with the whole manifest's count and hash, and inconsistent output fields
// are refused.
func TestLeaseEventOutputs(t *testing.T) {
	many := make([]terms.OutputFile, 1000)
	for i := range many {
		many[i] = terms.OutputFile{Path: fmt.Sprintf("f%04d", i), SHA256: strings.Repeat("0", 64)}
	}
	var ev LeaseEvent
	ev.SetOutputs(many)
	if len(ev.Outputs) != MaxEventOutputs || ev.OutputCount != 1000 || ev.OutputsHash != terms.ManifestHash(many) {
		t.Fatalf("event lists %d of %d, hash %s", len(ev.Outputs), ev.OutputCount, ev.OutputsHash)
	}
	if err := ev.CheckOutputs(); err != nil {
		t.Fatal(err)
	}
	few := many[:3]
	tests := []struct {
		name string
		ev   LeaseEvent
		ok   bool
	}{
		{"none", LeaseEvent{}, true},
		{"complete", LeaseEvent{Outputs: few, OutputCount: 3, OutputsHash: terms.ManifestHash(few)}, true},
		{"too many listed", LeaseEvent{Outputs: many[:MaxEventOutputs+1], OutputCount: 1000, OutputsHash: "x"}, false},
		{"count below list", LeaseEvent{Outputs: few, OutputCount: 2, OutputsHash: terms.ManifestHash(few)}, false},
		{"complete, wrong hash", LeaseEvent{Outputs: few, OutputCount: 3, OutputsHash: terms.ManifestHash(few[:2])}, false},
		{"count without hash", LeaseEvent{Outputs: few, OutputCount: 10}, false},
		{"hash without outputs", LeaseEvent{OutputsHash: "abc"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.ev.CheckOutputs(); (err == nil) != tc.ok {
				t.Fatalf("CheckOutputs = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
