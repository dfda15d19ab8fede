package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"golang.org/x/sys/unix"
)

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestCollectOutputs(t *testing.T) {
	wd := t.TempDir()
	out := filepath.Join(wd, "out")
	writeFile(t, filepath.Join(out, "a.txt"), "alpha")
	writeFile(t, filepath.Join(out, "sub/b.bin"), strings.Repeat("b", 1000))
	writeFile(t, filepath.Join(wd, "not-an-output"), "scratch")
	if err := os.Symlink("a.txt", filepath.Join(out, "link-in")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	files, err := CollectOutputs(wd, "out", dest, 0)
	// A symlink is never followed, even one to a file beside it.
	if !errors.Is(err, ErrOutputsSkipped) || !strings.Contains(err.Error(), "link-in: symlink (not followed)") {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dest, "link-in")); !os.IsNotExist(err) {
		t.Fatalf("symlink reached dest: %v", err)
	}
	got := map[string]terms.OutputFile{}
	var names []string
	for _, f := range files {
		got[f.Path] = f
		names = append(names, f.Path)
	}
	if !sort.StringsAreSorted(names) || strings.Join(names, ",") != "a.txt,sub/b.bin" {
		t.Fatalf("collected %v", names)
	}
	for p, content := range map[string]string{"a.txt": "alpha", "sub/b.bin": strings.Repeat("b", 1000)} {
		f := got[p]
		if f.Size != int64(len(content)) || f.SHA256 != sum(content) {
			t.Errorf("%s: %+v", p, f)
		}
		b, err := os.ReadFile(filepath.Join(dest, p))
		if err != nil || string(b) != content {
			t.Errorf("%s copied as %q, %v", p, b, err)
		}
		if fi, _ := os.Lstat(filepath.Join(dest, p)); fi == nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is not a regular file in dest", p)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "not-an-output")); !os.IsNotExist(err) {
		t.Fatal("file outside the outputs dir was collected")
	}

	// Cap: 1005 bytes in total.
	_, err = CollectOutputs(wd, "out", t.TempDir(), 1004)
	if !errors.Is(err, ErrOutputsTooLarge) {
		t.Fatalf("cap: %v", err)
	}
	if _, err := CollectOutputs(wd, "out", t.TempDir(), 1005); errors.Is(err, ErrOutputsTooLarge) {
		t.Fatalf("exact cap: %v", err)
	}
	// A missing outputs dir is no outputs.
	if files, err := CollectOutputs(wd, "missing", t.TempDir(), 0); err != nil || len(files) != 0 {
		t.Fatalf("missing dir: %v %v", files, err)
	}
	if _, err := CollectOutputs(wd, "../x", t.TempDir(), 0); err == nil {
		t.Fatal("escaping outputs path accepted")
	}
	// An empty outputs dir is no outputs, and makes no destination dir.
	if err := os.Mkdir(filepath.Join(wd, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	emptyDest := filepath.Join(t.TempDir(), "collected")
	if files, err := CollectOutputs(wd, "empty", emptyDest, 0); err != nil || len(files) != 0 {
		t.Fatalf("empty dir: %v %v", files, err)
	}
	if _, err := os.Stat(emptyDest); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty outputs made %s: %v", emptyDest, err)
	}
}

func TestCollectOutputsRefusesEscapingSymlinks(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "key")
	writeFile(t, secret, "private")

	wd := t.TempDir()
	writeFile(t, filepath.Join(wd, "out/ok.txt"), "ok")
	if err := os.Symlink(secret, filepath.Join(wd, "out/steal")); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	if _, err := CollectOutputs(wd, "out", dest, 0); err == nil || !strings.Contains(err.Error(), "steal: symlink (not followed)") {
		t.Fatalf("symlink to a file outside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "steal")); !os.IsNotExist(err) {
		t.Fatal("escaping symlink target was copied")
	}

	// The outputs dir itself a symlink out of the work dir.
	wd2 := t.TempDir()
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(wd2, "out")); err != nil {
		t.Fatal(err)
	}
	if files, err := CollectOutputs(wd2, "out", t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "out: symlink (not followed)") || len(files) != 0 {
		t.Fatalf("outputs dir symlinked outside the work dir: %v %v", files, err)
	}
}

func TestWipeOrphans(t *testing.T) {
	root := t.TempDir()
	for _, id := range []string{"job-1", "job-2", "job-3"} {
		writeFile(t, filepath.Join(root, id, "tmp/data"), id)
	}
	// A job that made its tree read-only is wiped all the same.
	if err := os.Chmod(filepath.Join(root, "job-3", "tmp"), 0o500); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "not-a-dir"), "x")
	n, err := WipeOrphans(root, func(id string) bool { return id == "job-2" })
	if err != nil || n != 2 {
		t.Fatalf("wiped %d, %v", n, err)
	}
	ents, _ := os.ReadDir(root)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if strings.Join(left, ",") != "job-2,not-a-dir" {
		t.Fatalf("left %v", left)
	}
	if n, err := WipeOrphans(root, nil); err != nil || n != 1 {
		t.Fatalf("wipe all: %d %v", n, err)
	}
	if n, err := WipeOrphans(filepath.Join(root, "missing"), nil); err != nil || n != 0 {
		t.Fatalf("missing root: %d %v", n, err)
	}
}

// A symlink in the outputs (escaping, dangling, to a dir outside, or one
// that stays inside) is skipped with a note; every regular file is still collected.
func TestCollectOutputsSkipsBadSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "key"), "private")
	wd := t.TempDir()
	out := filepath.Join(wd, "outputs")
	for _, f := range []string{"a.txt", "sub/c.txt", "z.txt"} {
		writeFile(t, filepath.Join(out, f), f)
	}
	links := map[string]string{
		"b-escape":   filepath.Join(outside, "key"),
		"b-dangling": "no-such-file",
		"b-dir":      outside,
		"sub/up":     "../../secret",
	}
	writeFile(t, filepath.Join(wd, "secret"), "scratch")
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	dest := t.TempDir()
	files, err := CollectOutputs(wd, "outputs", dest, 0)
	if !errors.Is(err, ErrOutputsSkipped) {
		t.Fatalf("err %v, want ErrOutputsSkipped", err)
	}
	for name := range links {
		if !strings.Contains(err.Error(), name+":") {
			t.Errorf("skipped link %s not named in %q", name, err)
		}
		if _, err := os.Lstat(filepath.Join(dest, name)); !os.IsNotExist(err) {
			t.Errorf("skipped link %s reached dest: %v", name, err)
		}
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
		if f.SHA256 != sum(f.Path) {
			t.Errorf("%s: wrong checksum", f.Path)
		}
	}
	if strings.Join(names, ",") != "a.txt,sub/c.txt,z.txt" {
		t.Fatalf("collected %v", names)
	}
}

func TestCollectOutputsFileCap(t *testing.T) {
	wd := t.TempDir()
	for i := 0; i <= MaxOutputFiles; i++ {
		writeFile(t, filepath.Join(wd, "outputs", fmt.Sprintf("f%04d", i)), "x")
	}
	files, err := CollectOutputs(wd, "outputs", t.TempDir(), 0)
	if !errors.Is(err, ErrTooManyOutputs) || !strings.Contains(err.Error(), "1000 files") || len(files) != MaxOutputFiles {
		t.Fatalf("%d files: %v", len(files), err)
	}
	// Exactly at the cap is fine.
	if err := os.Remove(filepath.Join(wd, "outputs", "f0000")); err != nil {
		t.Fatal(err)
	}
	if files, err := CollectOutputs(wd, "outputs", t.TempDir(), 0); err != nil || len(files) != MaxOutputFiles {
		t.Fatalf("at the cap: %d files, %v", len(files), err)
	}
}

// End to end: a job that leaves a symlink to a host file among its outputs
// still gets its regular files collected.
func TestProcessOutputsWithSymlink(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	res, _, errOut, h := run(t, e, Spec{ID: "outlink", Command: []string{"sh", "-c",
		`cd "$GPUMESH_OUTPUTS" && ln -s /etc/hostname a-link && echo model > model.bin && mkdir logs && echo 1 > logs/epoch1`}})
	if res.ExitCode != 0 {
		t.Fatalf("%+v %q", res, errOut)
	}
	files, err := CollectOutputs(h.WorkDir(), "", t.TempDir(), 1<<20)
	if !errors.Is(err, ErrOutputsSkipped) || !strings.Contains(err.Error(), "a-link: symlink (not followed)") {
		t.Fatalf("err %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	if strings.Join(names, ",") != "logs/epoch1,model.bin" {
		t.Fatalf("collected %v", names)
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-48 * time.Hour)
	outside := filepath.Join(t.TempDir(), "keep")
	writeFile(t, outside, "not ours")
	entries := map[string]bool{ // name -> old
		"lease-1.log": true, "lease-2.log": false, "lease-1": true, "lease-2": false, "link": true,
	}
	writeFile(t, filepath.Join(dir, "lease-1.log"), "x")
	writeFile(t, filepath.Join(dir, "lease-2.log"), "x")
	writeFile(t, filepath.Join(dir, "lease-1", "sub", "model.bin"), "x")
	writeFile(t, filepath.Join(dir, "lease-2", "model.bin"), "x")
	// A read-only old tree is pruned all the same.
	if err := os.Chmod(filepath.Join(dir, "lease-1", "sub"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for name, isOld := range entries {
		if isOld {
			if name != "link" {
				if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
					t.Fatal(err)
				}
			} else {
				ts := []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())}
				if err := unix.Lutimes(filepath.Join(dir, name), ts); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	n, err := Prune(dir, 24*time.Hour)
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	for name, isOld := range entries {
		_, err := os.Lstat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != isOld {
			t.Errorf("%s: gone %v, old %v", name, gone, isOld)
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "not ours" {
		t.Fatalf("pruning a symlink touched its target: %q %v", b, err)
	}
	if _, err := Prune(dir, 0); err == nil {
		t.Fatal("zero retention accepted")
	}
	if n, err := Prune(filepath.Join(dir, "missing"), time.Hour); n != 0 || err != nil {
		t.Fatalf("missing dir: %d %v", n, err)
	}
}
