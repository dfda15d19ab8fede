package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// secretDir is a provider dir outside any job's tree holding a key file.
func secretDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	writeFile(t, filepath.Join(d, "identity.key"), "PROVIDER-PRIVATE-KEY")
	writeFile(t, filepath.Join(d, "sub", "identity.key"), "PROVIDER-PRIVATE-KEY")
	return d
}

// noSecret fails when any file under dir holds the provider's key.
func noSecret(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, _ := os.Lstat(p); fi == nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: not a regular file in the copy", p)
			return nil
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), "PROVIDER-PRIVATE-KEY") {
			t.Errorf("%s: the provider's key was copied out of the job's tree", p)
		}
		return nil
	})
}

// swapHook makes the job "win the race" deterministically: once the walk
// listed an entry and before it opens it, the entry is replaced by what
// swaps says (a symlink target, or "fifo").
func swapHook(t *testing.T, top string, swaps map[string]string) {
	t.Helper()
	jobTreeHook = func(rel string) {
		to, ok := swaps[rel]
		if !ok {
			return
		}
		p := filepath.Join(top, filepath.FromSlash(rel))
		if err := os.Rename(p, p+".moved"); err != nil {
			t.Errorf("swap %s: %v", rel, err)
			return
		}
		var err error
		if to == "fifo" {
			err = syscall.Mkfifo(p, 0o644)
		} else {
			err = os.Symlink(to, p)
		}
		if err != nil {
			t.Errorf("swap %s: %v", rel, err)
		}
	}
	t.Cleanup(func() { jobTreeHook = nil })
}

// The provider copies a checkpoint dir while the job runs: symlinks put
// there up front and dirs or files swapped for symlinks (or a fifo)
// between the listing and the open are never followed.
func TestCopyJobTreeNeverFollowsSymlinks(t *testing.T) {
	secret := secretDir(t)
	wd := t.TempDir()
	ck := filepath.Join(wd, CheckpointDir)
	writeFile(t, filepath.Join(ck, "a-model.bin"), "weights")
	writeFile(t, filepath.Join(ck, "b-dir", "identity.key"), "job's own")
	writeFile(t, filepath.Join(ck, "c-file"), "job's own")
	writeFile(t, filepath.Join(ck, "d-fifo"), "job's own")
	writeFile(t, filepath.Join(ck, "z-keep", "state"), "step 10")
	for name, to := range map[string]string{
		"link-file": filepath.Join(secret, "identity.key"),
		"link-dir":  secret,
		"link-up":   "../../..",
	} {
		if err := os.Symlink(to, filepath.Join(ck, name)); err != nil {
			t.Fatal(err)
		}
	}
	swapHook(t, ck, map[string]string{
		"b-dir":  filepath.Join(secret, "sub"),
		"c-file": filepath.Join(secret, "identity.key"),
		"d-fifo": "fifo",
	})
	dst := filepath.Join(t.TempDir(), "copy")
	skipped, err := CopyJobTree(wd, CheckpointDir, dst, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, dst)
	got := strings.Join(skipped, "\n")
	for _, want := range []string{"c-file: symlink (not followed)", "d-fifo: not a regular file",
		"link-file: symlink (not followed)", "link-dir: symlink (not followed)", "link-up: symlink (not followed)"} {
		if !strings.Contains(got, want) {
			t.Errorf("skipped %q, want %q", got, want)
		}
	}
	for p, want := range map[string]string{"a-model.bin": "weights", "z-keep/state": "step 10"} {
		if b, err := os.ReadFile(filepath.Join(dst, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "b-dir", "identity.key")); !os.IsNotExist(err) {
		t.Errorf("a dir swapped for a symlink was descended into: %v", err)
	}
}

// The top of the tree, or a step on the way to it, swapped for a symlink
// is refused; so is a path leaving the work dir.
func TestWalkJobTreeRefusesSymlinkedTop(t *testing.T) {
	secret := secretDir(t)
	wd := t.TempDir()
	if err := os.Symlink(secret, filepath.Join(wd, CheckpointDir)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wd, "real", "x"), "x")
	if err := os.Symlink(secret, filepath.Join(wd, "real", "deeper")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{CheckpointDir, "real/deeper", "real/deeper/sub"} {
		dst := t.TempDir()
		_, err := CopyJobTree(wd, rel, dst, 0)
		if !errors.Is(err, ErrSymlink) {
			t.Errorf("%s: %v, want a refused symlink", rel, err)
		}
		noSecret(t, dst)
	}
	if _, err := CopyJobTree(wd, "real/x", t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("file as top: %v", err)
	}
	for _, rel := range []string{"..", "../x", "/etc"} {
		if err := WalkJobTree(wd, rel, func(TreeEntry, error) error { return nil }); err == nil {
			t.Errorf("%q accepted", rel)
		}
	}
	if _, err := CopyJobTree(wd, "missing", t.TempDir(), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing top: %v", err)
	}
}

// A job that hard-links a provider file into its tree (possible where
// fs.protected_hardlinks is off) does not get it copied back.
func TestCopyJobTreeRefusesForeignHardLink(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the tree must belong to another uid than the linked file")
	}
	secret := secretDir(t)
	wd := t.TempDir()
	ck := filepath.Join(wd, CheckpointDir)
	writeFile(t, filepath.Join(ck, "own"), "job's own")
	if err := os.Link(filepath.Join(secret, "identity.key"), filepath.Join(ck, "stolen")); err != nil {
		t.Skipf("cannot hard-link across the test dirs: %v", err)
	}
	writeFile(t, filepath.Join(ck, "linked-own"), "job's own")
	if err := os.Link(filepath.Join(ck, "linked-own"), filepath.Join(ck, "linked-own2")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ck, filepath.Join(ck, "own"), filepath.Join(ck, "linked-own")} {
		if err := os.Lchown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "copy")
	skipped, err := CopyJobTree(wd, CheckpointDir, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, dst)
	if got := strings.Join(skipped, "; "); got != "stolen: hard link to a file the job does not own" {
		t.Errorf("skipped %q", got)
	}
	for _, p := range []string{"own", "linked-own", "linked-own2"} {
		if _, err := os.Stat(filepath.Join(dst, p)); err != nil {
			t.Errorf("the job's own %s not copied: %v", p, err)
		}
	}
}

// Outputs are collected after the job ended, but a process it left behind
// may still swap entries: a dir or file swapped for a symlink to a
// provider dir between the listing and the open is never followed.
func TestCollectOutputsJobSwapsEntriesForSymlinks(t *testing.T) {
	secret := secretDir(t)
	wd := t.TempDir()
	out := filepath.Join(wd, "outputs")
	writeFile(t, filepath.Join(out, "a.txt"), "a")
	writeFile(t, filepath.Join(out, "sub", "identity.key"), "job's own")
	writeFile(t, filepath.Join(out, "z.txt"), "z")
	swapHook(t, out, map[string]string{
		"sub":   filepath.Join(secret, "sub"),
		"z.txt": filepath.Join(secret, "identity.key"),
	})
	dest := t.TempDir()
	files, err := CollectOutputs(wd, "outputs", dest, 0)
	noSecret(t, dest)
	if !errors.Is(err, ErrOutputsSkipped) || !strings.Contains(err.Error(), "z.txt: symlink (not followed)") {
		t.Errorf("err %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	if strings.Join(names, ",") != "a.txt" {
		t.Errorf("collected %v", names)
	}
}
