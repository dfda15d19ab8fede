package wire

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

func oneLine(t *testing.T, err error) {
	t.Helper()
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error is not one line: %q", err)
	}
}

// sameJSON fails t unless a and b encode alike.
func sameJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatalf("%s does not encode: %v", what, err)
	}
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("%s changed in a round trip:\n%s\n%s", what, ja, jb)
	}
}

// FuzzDecodeStreamRequest: the first frame of a logs or outputs stream,
// from any peer. What is accepted encodes to a request read back the same.
func FuzzDecodeStreamRequest(f *testing.F) {
	for _, s := range []string{`{"lease_id":"lease-1","follow":true}`, `{"lease_id":"../../etc"}`, `{"lease_id":""}`, `{}`, `null`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeStreamRequest(b)
		if err != nil {
			oneLine(t, err)
			return
		}
		again, _ := json.Marshal(r)
		r2, err := DecodeStreamRequest(again)
		if err != nil {
			t.Fatalf("re-encoded stream request refused: %v", err)
		}
		sameJSON(t, "stream request", r, r2)
	})
}

// FuzzDecodeExecRequest: an exec stream's request frame, from any peer.
func FuzzDecodeExecRequest(f *testing.F) {
	for _, s := range []string{`{"lease_id":"lease-1","command":["sh","-c","ls"],"stdin":true,"tty":true,"rows":24,"cols":80}`,
		`{"lease_id":"lease-1","command":[]}`, `{"lease_id":"/abs","command":["x"]}`, `{"rows":70000}`, `{}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeExecRequest(b)
		if err != nil {
			oneLine(t, err)
			return
		}
		again, _ := json.Marshal(r)
		r2, err := DecodeExecRequest(again)
		if err != nil {
			t.Fatalf("re-encoded exec request refused: %v", err)
		}
		sameJSON(t, "exec request", r, r2)
	})
}

// FuzzReadExecFrame reads exec frames as both ends of an exec stream do:
// each accepted frame is at most MaxExecFrame and writes back to exactly
// the bytes it was read from; a header claiming more is refused without
// reading (or allocating) it; a resize frame parses only at 4 bytes and
// round trips.
func FuzzReadExecFrame(f *testing.F) {
	var b bytes.Buffer
	_ = WriteExecFrame(&b, ExecFrameStdin, []byte("ls\n"))
	_ = WriteExecFrame(&b, ExecFrameResize, ResizePayload(24, 80))
	_ = WriteExecFrame(&b, ExecFrameExit, []byte(`{"code":0}`))
	f.Add(b.Bytes())
	f.Add([]byte{ExecFrameStdout, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{ExecFrameStdout, 0, 0, 0x80, 1, 'x'})
	f.Add([]byte{ExecFrameResize, 0, 0, 0, 3, 1, 2, 3})
	f.Add([]byte{ExecFrameStdin, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		buf := make([]byte, MaxExecFrame)
		var again bytes.Buffer
		for {
			at := len(data) - r.Len()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			kind, p, err := ReadExecFrame(r, buf)
			runtime.ReadMemStats(&after)
			// The payload goes to the caller's buffer: what is allocated is
			// an error's text (and whatever the fuzzing runtime allocates
			// meanwhile), never a claimed length, the least of which that is
			// refused is MaxExecFrame+1.
			if got := after.TotalAlloc - before.TotalAlloc; got > MaxExecFrame/2 {
				t.Fatalf("reading a frame allocated %d bytes", got)
			}
			if err != nil {
				if errors.Is(err, io.EOF) && at != len(data) {
					t.Fatalf("io.EOF %d bytes before the end", len(data)-at)
				}
				if !errors.Is(err, io.EOF) {
					oneLine(t, err)
				}
				if len(data)-at >= 5 && binary.BigEndian.Uint32(data[at+1:]) > MaxExecFrame && r.Len() != len(data)-at-5 {
					t.Fatalf("an oversized frame's payload was read")
				}
				break
			}
			if len(p) > MaxExecFrame {
				t.Fatalf("accepted a frame of %d bytes", len(p))
			}
			if err := WriteExecFrame(&again, kind, p); err != nil {
				t.Fatalf("an accepted frame does not write: %v", err)
			}
			if !bytes.Equal(again.Bytes(), data[:len(data)-r.Len()]) {
				t.Fatal("frames written back differ from the bytes read")
			}
			if kind == ExecFrameResize {
				rows, cols, err := ParseResize(p)
				if (err == nil) != (len(p) == 4) {
					t.Fatalf("resize of %d bytes: %v", len(p), err)
				}
				if err == nil && !bytes.Equal(ResizePayload(rows, cols), p) {
					t.Fatal("resize payload does not round trip")
				}
			}
		}
	})
}

// FuzzExtractBundle is a hostile provider's outputs: the manifest frame
// and the tar body both come from it. An extraction that succeeds leaves
// exactly the manifest's files, with its sizes and sums, under the
// destination and nothing anywhere else; one that fails leaves the
// destination as it was (empty).
func FuzzExtractBundle(f *testing.F) {
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tarOf := func(entries ...tarEntry) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range entries {
			h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: 0o644, Linkname: e.link, Size: int64(len(e.body))}
			if e.typeflag != tar.TypeReg {
				h.Size = 0
			}
			_ = tw.WriteHeader(h)
			_, _ = tw.Write([]byte(e.body))
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	man := func(files ...terms.OutputFile) []byte { b, _ := json.Marshal(files); return b }
	ok := man(terms.OutputFile{Path: "r.txt", Size: 7, SHA256: sum("result\n")}, terms.OutputFile{Path: "d/x", Size: 1, SHA256: sum("x")})
	f.Add(ok, tarOf(reg("r.txt", "result\n"), tarEntry{name: "d/", typeflag: tar.TypeDir}, reg("d/x", "x")))
	f.Add(ok, tarOf(reg("r.txt", "result\n")))
	f.Add(man(terms.OutputFile{Path: "../x", Size: 1, SHA256: sum("x")}), tarOf(reg("../x", "x")))
	f.Add(man(terms.OutputFile{Path: "a", Size: 1, SHA256: sum("x")}, terms.OutputFile{Path: "a/b", Size: 1, SHA256: sum("x")}),
		tarOf(reg("a", "x"), reg("a/b", "x")))
	f.Add(man(terms.OutputFile{Path: "l", Size: 0, SHA256: sum("")}), tarOf(tarEntry{name: "l", typeflag: tar.TypeSymlink, link: "/etc/passwd"}))
	f.Add([]byte("null"), []byte{})
	f.Fuzz(func(t *testing.T, manifest, archive []byte) {
		var files []terms.OutputFile
		if json.Unmarshal(manifest, &files) != nil {
			return // the renter refuses a manifest frame that does not decode
		}
		base := t.TempDir()
		dir := filepath.Join(base, "out")
		got, err := ExtractBundle(bytes.NewReader(archive), files, dir, false)
		var found []string
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				found = append(found, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			oneLine(t, err)
			if len(found) > 0 {
				t.Fatalf("a failed extraction (%v) left %q", err, found)
			}
			return
		}
		if len(got) != len(files) || len(found) != len(files) {
			t.Fatalf("extracted %d files, %d on disk, for a manifest of %d", len(got), len(found), len(files))
		}
		want := map[string]terms.OutputFile{}
		for _, m := range files {
			want[path.Clean(m.Path)] = m
		}
		extracted := map[string]bool{}
		for _, g := range got {
			extracted[g.Path] = true
		}
		for _, p := range found {
			if !extracted[p] {
				t.Fatalf("%s is on disk but was not extracted", p)
			}
		}
		for _, g := range got {
			m, ok := want[g.Path]
			if !ok || m.Size != g.Size || !strings.EqualFold(m.SHA256, g.SHA256) {
				t.Fatalf("extracted %+v, the manifest says %+v", g, m)
			}
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(g.Path)))
			if err != nil {
				t.Fatalf("extracted %s is not under the destination: %v", g.Path, err)
			}
			if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != g.SHA256 || int64(len(b)) != g.Size {
				t.Fatalf("%s on disk differs from what was checked", g.Path)
			}
		}
	})
}
