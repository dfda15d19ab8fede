package runtime

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onTmpfs reports whether dir is on a tmpfs.
func onTmpfs(t *testing.T, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Type == unix.TMPFS_MAGIC
}

// TestSealedWorkDirOnTmpfs (issue 27): a sealed job's work dir, where it
// writes its outputs and checkpoints, is a tmpfs on both executors, also
// where the executor gives other jobs none (a process executor without a
// work dir quota; the Docker executor, which binds its work dir into the
// container), so its plaintext never reaches the host's disk; another
// job's there is on the work root's disk.
func TestSealedWorkDirOnTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a tmpfs mount needs root")
	}
	check := func(t *testing.T, e Executor, spec Spec) {
		for _, sealed := range []bool{false, true} {
			spec := spec
			spec.Sealed = sealed
			if sealed {
				spec.ID += "-sealed"
			}
			var out syncBuffer
			h, err := e.Start(context.Background(), spec, &out, &out)
			if err != nil {
				t.Fatalf("start (sealed %v): %v", sealed, err)
			}
			got := onTmpfs(t, h.WorkDir())
			_ = h.Stop(0)
			waitTimeout(t, h, 30*time.Second)
			if err := h.Cleanup(); err != nil {
				t.Fatal(err)
			}
			if got != sealed {
				t.Fatalf("sealed %v: work dir on a tmpfs %v", sealed, got)
			}
		}
	}
	t.Run("process", func(t *testing.T) {
		e := newTestExecutor(t, ProcessOptions{WorkDirMB: -1})
		if onTmpfs(t, e.root) {
			t.Skip("the test's work root is itself a tmpfs")
		}
		check(t, e, Spec{ID: "p-seal", Command: []string{helperBin, "sleep", "30s"}})
	})
	t.Run("docker", func(t *testing.T) {
		e := dockerExecutor(t)
		if onTmpfs(t, e.root) {
			t.Skip("the test's work root is itself a tmpfs")
		}
		check(t, e, Spec{ID: "d-seal", Image: testImage, Command: []string{"/jobhelper", "sleep", "30s"}})
	})
}
