package ledger

import (
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// Compaction. Badger's own compactors each wake every 50 ms to look for
// work, forever: on an idle daemon that was the largest source of wake-ups
// (about 40 a second, most of the daemon's idle CPU). A ledger is written
// a few entries at a time, and only a write can give the LSM tree work
// (a memtable flushed to level 0), so the DB runs with no Badger
// compactors and compacts itself: once at open, and after writes, at most
// once per compactEvery, when a level is over its target (level 0 at
// numL0Tables tables). Idle, it never wakes.
//
// A burst of writes that fills level 0 to Badger's stall mark
// (NumLevelZeroTablesStall, 15 tables of 4 MiB) before the next check
// only waits for that check: the compaction does not need the write path.

// numL0Tables is the number of level-0 tables that makes compaction due
// (Badger's default).
const numL0Tables = 5

// compactEvery bounds how often writes trigger a look at the tree.
const compactEvery = time.Second

type compactor struct {
	kick chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
	// compacted counts compactions run, and looked is notified after each
	// look at the tree (for tests).
	mu        sync.Mutex
	compacted int
	looked    broadcast.Signal
}

// wrote tells the compactor a write committed. It never blocks.
func (db *DB) wrote() {
	select {
	case db.comp.kick <- struct{}{}:
	default:
	}
}

func (db *DB) startCompactor() {
	db.comp = &compactor{kick: make(chan struct{}, 1), quit: make(chan struct{})}
	db.comp.kick <- struct{}{} // look once at open
	db.comp.wg.Add(1)
	go db.compactLoop()
}

// stopCompactor stops the loop and waits for a compaction in progress.
func (db *DB) stopCompactor() {
	close(db.comp.quit)
	db.comp.wg.Wait()
}

func (db *DB) compactLoop() {
	defer db.comp.wg.Done()
	for {
		select {
		case <-db.comp.quit:
			return
		case <-db.comp.kick:
		}
		db.compactIfDue()
		db.comp.looked.Notify()
		select {
		case <-db.comp.quit:
			return
		case <-time.After(compactEvery):
		}
	}
}

// compactIfDue compacts the tree when a level is over its target. Flatten
// merges every level into one, which for a ledger-sized tree is a small
// rewrite and leaves nothing due.
func (db *DB) compactIfDue() {
	if !compactionDue(db.bdb.Levels()) {
		return
	}
	if err := db.bdb.Flatten(1); err != nil {
		db.log.Warn("ledger compaction failed", "err", err)
		return
	}
	db.comp.mu.Lock()
	db.comp.compacted++
	db.comp.mu.Unlock()
}

// compactionDue says whether a level is over its target: level 0 by its
// number of tables, the others by size (Badger's scores).
func compactionDue(levels []badger.LevelInfo) bool {
	for _, l := range levels {
		if l.Level == 0 && l.NumTables >= numL0Tables {
			return true
		}
		if l.Level > 0 && l.Score > 1 {
			return true
		}
	}
	return false
}
