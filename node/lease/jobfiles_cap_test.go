package lease

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestJobFilesTotalCap: the job logs and outputs a provider keeps are
// capped in total (DefaultJobFilesMaxBytes), not only by age: past the
// cap the oldest lease's files go first, the newer ones stay.
func TestJobFilesTotalCap(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := h.provider(provSpec{model: "H100", price: 0.5})
	now := time.Now()
	plant := func(rel string, size int64, age time.Duration) string {
		path := filepath.Join(p.jobsDir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil { // sparse: the size counts, the disk is not used
			t.Fatal(err)
		}
		f.Close()
		at := now.Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(filepath.Dir(path)) != "logs" {
			_ = os.Chtimes(filepath.Dir(path), at, at)
			return filepath.Dir(path)
		}
		return path
	}
	const gib = 1 << 30
	oldest := plant("outputs/lease-a/model.bin", 4*gib, 72*time.Hour)
	older := plant("outputs/lease-b/model.bin", 4*gib, 48*time.Hour)
	old := plant("logs/lease-c.log", 4*gib, 24*time.Hour)
	fresh := plant("logs/lease-d.log", 1<<20, time.Minute)
	p.sup.pruneJobFiles("")
	if _, err := os.Stat(oldest); !os.IsNotExist(err) {
		t.Fatalf("12 GiB of job files past the cap: the oldest lease's outputs are still there (%v)", err)
	}
	for _, keep := range []string{older, old, fresh} {
		if _, err := os.Stat(keep); err != nil {
			t.Fatalf("%s removed although the rest fits the cap: %v", keep, err)
		}
	}
}
