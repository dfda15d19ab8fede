package lease

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/runtime"
)

// A job's checkpoint dir that reaches for its provider's identity key
// (issue 22): symlinks to the key and to the daemon's data dir, and, where
// the kernel lets a job do it, a hard link to the key. The checkpoint the
// provider stages for its renter holds none of them; the race variant (an
// entry swapped for a symlink between listing and open) is covered by
// runtime's TestCopyJobTreeNeverFollowsSymlinks.
func TestCheckpointNeverCopiesProviderFiles(t *testing.T) {
	t.Parallel()
	data := t.TempDir() // the daemon's data dir
	key := filepath.Join(data, "identity.key")
	if err := os.WriteFile(key, []byte("PROVIDER-PRIVATE-KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	wd := t.TempDir()
	ck := filepath.Join(wd, runtime.CheckpointDir)
	if err := os.MkdirAll(filepath.Join(ck, "step"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, "step", "model.bin"), []byte("weights"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"identity.key": key, "data": data, "step/up": "../../../.."} {
		if err := os.Symlink(to, filepath.Join(ck, name)); err != nil {
			t.Fatal(err)
		}
	}
	hardlinked := false
	if os.Getuid() == 0 {
		// Root can make the link the job could make where
		// fs.protected_hardlinks is 0; the job's tree is then another
		// uid's, as a job's is.
		if err := os.Link(key, filepath.Join(ck, "stolen.key")); err == nil {
			hardlinked = true
		}
		_ = filepath.WalkDir(ck, func(p string, d fs.DirEntry, err error) error {
			if err == nil && (d.IsDir() || p == filepath.Join(ck, "step", "model.bin")) {
				return os.Lchown(p, 4242, 4242)
			}
			return err
		})
	}

	fp, size, files, err := listCheckpoint(wd)
	if err != nil || files != 1+btoi(hardlinked) || !strings.Contains(fp, "step/model.bin\x00") {
		t.Fatalf("listed %q %d bytes %d files, %v", fp, size, files, err)
	}
	dst := filepath.Join(t.TempDir(), runtime.CheckpointDir)
	skipped, err := copyCheckpoint(wd, dst)
	if err != nil {
		t.Fatal(err)
	}
	var copied []string
	_ = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		copied = append(copied, rel)
		if b, _ := os.ReadFile(p); strings.Contains(string(b), "PRIVATE") {
			t.Errorf("the checkpoint staged for the renter holds the provider's key as %s", rel)
		}
		return nil
	})
	if strings.Join(copied, ",") != "step/model.bin" {
		t.Errorf("copied %v", copied)
	}
	want := "data: symlink (not followed); identity.key: symlink (not followed); step/up: symlink (not followed)"
	if hardlinked {
		want = "data: symlink (not followed); identity.key: symlink (not followed); step/up: symlink (not followed); stolen.key: hard link to a file the job does not own"
	}
	if got := strings.Join(skipped, "; "); got != want {
		t.Errorf("skipped %q, want %q", got, want)
	}

	// The whole dir swapped for a symlink to the data dir is refused.
	wd2 := t.TempDir()
	if err := os.Symlink(data, filepath.Join(wd2, runtime.CheckpointDir)); err != nil {
		t.Fatal(err)
	}
	if _, _, files, err := listCheckpoint(wd2); err == nil || files != 0 {
		t.Errorf("symlinked checkpoint dir listed: %d files, %v", files, err)
	}
	dst2 := filepath.Join(t.TempDir(), runtime.CheckpointDir)
	if _, err := copyCheckpoint(wd2, dst2); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked checkpoint dir copied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst2, "identity.key")); !os.IsNotExist(err) {
		t.Errorf("key copied from a symlinked checkpoint dir: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
