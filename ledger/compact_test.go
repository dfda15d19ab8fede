package ledger

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// compactions is how many compactions db's compactor has run.
func (db *DB) compactions() int {
	db.comp.mu.Lock()
	defer db.comp.mu.Unlock()
	return db.comp.compacted
}

// TestCompactsAfterWrites writes enough to flush more memtables than
// Badger's level-0 stall mark (15 tables): with no Badger compactors and
// nothing compacting, the writes would block for good. They all finish,
// level 0 is brought back under its limit, and everything reads back,
// also after a reopen.
func TestCompactsAfterWrites(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, noSync())
	st := db.State("bulk")
	val := bytes.Repeat([]byte("x"), 30<<10) // stays in the LSM tree (below the value threshold)
	type blob struct{ B []byte }
	const n = 2800 // ~110 MiB of JSON: ~25 memtables of 4 MiB
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := st.Put(fmt.Sprintf("k%05d", i), blob{B: val}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("writes stalled: levels %+v", db.bdb.Levels()[:2])
	}
	// Only a compaction brings level 0 down, and the compactor announces
	// each look at the tree.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		looked := db.comp.looked.Wait()
		if db.compactions() > 0 && !compactionDue(db.bdb.Levels()) {
			break
		}
		select {
		case <-looked:
		case <-deadline.C:
			t.Fatalf("30s after the writes: %d compactions, level 0 has %d tables", db.compactions(), db.bdb.Levels()[0].NumTables)
		}
	}
	check := func(db *DB) {
		t.Helper()
		for _, i := range []int{0, 1, n / 2, n - 1} {
			var got blob
			ok, err := db.State("bulk").Get(fmt.Sprintf("k%05d", i), &got)
			if err != nil || !ok || !bytes.Equal(got.B, val) {
				t.Fatalf("k%05d: found %v, err %v, %d bytes", i, ok, err, len(got.B))
			}
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	check(openTest(t, dir, noSync()))
}

// TestIdleDBDoesNotPoll: an open DB runs none of Badger's compactors
// (each polls every 50 ms), and a DB with nothing due does not compact.
func TestIdleDBDoesNotPoll(t *testing.T) {
	db := openTest(t, "", noSync())
	appendN(t, db, 20)
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if strings.Contains(stacks, "runCompactor") {
		t.Fatal("a Badger compactor goroutine is running")
	}
	if compactionDue(db.bdb.Levels()) {
		t.Fatal("compaction due after 20 small entries")
	}
	if c := db.compactions(); c != 0 {
		t.Fatalf("%d compactions with nothing due", c)
	}
}
