package ledger

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpumesh/gpumesh/ledger/record"
)

// withFreeSpace replaces the free-space probe.
func withFreeSpace(f func(dir string) (uint64, error)) Option {
	return func(o *options) { o.freeSpace = f }
}

// TestDiskFullRefusesWrites: below the free-space floor, Open, Append,
// AppendAll and State.Put fail with ErrDiskFull and write nothing; reads
// still work, and writes resume once space is back.
func TestDiskFullRefusesWrites(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 30)
	probe := withFreeSpace(func(string) (uint64, error) { return free.Load(), nil })
	dir := t.TempDir()
	db := openTest(t, dir, noSync(), probe)
	appendN(t, db, 3)
	seq, hash, _ := db.Head()

	free.Store(DefaultMinFreeSpace - 1)
	writes := []struct {
		name string
		do   func() error
	}{
		{"append", func() error { _, err := db.Append(sampleEntry(3)); return err }},
		{"append all", func() error { _, err := db.AppendAll([]record.Entry{sampleEntry(4), sampleEntry(5)}); return err }},
		{"state put", func() error { return db.State("jobs").Put("j", 1) }},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			err := w.do()
			if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "MiB free") {
				t.Fatalf("got %v, want ErrDiskFull", err)
			}
		})
	}
	if s, h, _ := db.Head(); s != seq || h != hash {
		t.Fatalf("refused writes moved the head %d -> %d", seq, s)
	}
	if ok, _ := db.State("jobs").Get("j", new(int)); ok {
		t.Fatal("refused state put was stored")
	}
	if rep, err := db.Verify(); err != nil || rep.Entries != 3 {
		t.Fatalf("reads on a full disk: %+v %v", rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, noSync(), probe); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("open on a full disk: %v", err)
	}

	free.Store(DefaultMinFreeSpace)
	db = openTest(t, dir, noSync(), probe)
	for _, w := range writes {
		if err := w.do(); err != nil {
			t.Fatalf("%s once space is back: %v", w.name, err)
		}
	}
}

func TestMinFreeSpaceOption(t *testing.T) {
	for _, c := range []struct {
		name     string
		floor    uint64
		free     uint64
		probeErr error
		refused  bool
	}{
		{"custom floor above free", 1 << 30, 512 << 20, nil, true},
		{"custom floor below free", 1 << 20, 2 << 20, nil, false},
		{"check disabled", 0, 0, nil, false},
		{"probe failure does not block", DefaultMinFreeSpace, 0, errors.New("statfs: no"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			probe := withFreeSpace(func(string) (uint64, error) { return c.free, c.probeErr })
			db, err := Open(t.TempDir(), noSync(), WithMinFreeSpace(c.floor), probe)
			if c.refused {
				if !errors.Is(err, ErrDiskFull) {
					t.Fatalf("open: %v, want ErrDiskFull", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Append(sampleEntry(0)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFreeSpaceProbe(t *testing.T) {
	n, err := freeSpace(t.TempDir())
	if err != nil || n == 0 {
		t.Fatalf("free space of a temp dir: %d, %v", n, err)
	}
	if _, err := freeSpace(t.TempDir() + "/missing"); err == nil {
		t.Fatal("free space of a missing dir: no error")
	}
}
