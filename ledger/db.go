package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
	bopt "github.com/dgraph-io/badger/v4/options"
)

// ErrInUse matches (with errors.Is) the error Open returns when the data
// directory is already open, in this process or another one.
var ErrInUse = errors.New("ledger: data dir is in use by another gpumesh daemon")

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = errors.New("ledger: database is closed")

// ErrDiskFull matches (with errors.Is) the error Open and every write
// (Append, AppendAll, State.Put) return when the file system holding the
// data dir has less free space than the floor (WithMinFreeSpace): the
// database refuses to write rather than let Badger fail mid-write (a full
// disk can kill the process with SIGBUS in its memory-mapped files).
// Nothing is written; the write can be retried once space is freed.
var ErrDiskFull = errors.New("ledger: disk full")

// DefaultMinFreeSpace is the default floor of free space below which the
// database refuses writes.
const DefaultMinFreeSpace = 64 << 20

type diskFullError struct {
	dir         string
	free, floor uint64
}

func (e *diskFullError) Error() string {
	return fmt.Sprintf("ledger: disk full: %.1f MiB free in %s, below the %.0f MiB floor; refusing to write",
		float64(e.free)/(1<<20), e.dir, float64(e.floor)/(1<<20))
}

func (e *diskFullError) Is(target error) bool { return target == ErrDiskFull }

type inUseError struct{ dir string }

func (e *inUseError) Error() string {
	return fmt.Sprintf("ledger: data dir %s is in use by another gpumesh daemon", e.dir)
}

func (e *inUseError) Is(target error) bool { return target == ErrInUse }

// Option configures Open.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	sync      bool
	minFree   uint64
	freeSpace func(dir string) (uint64, error)
}

// WithMinFreeSpace sets the floor of free space, in bytes, on the data
// dir's file system below which Open and writes fail with ErrDiskFull
// (default DefaultMinFreeSpace; 0 disables the check).
func WithMinFreeSpace(bytes uint64) Option {
	return func(o *options) { o.minFree = bytes }
}

// WithLogger sets the logger Badger's messages are bridged to: its warnings
// and errors at those levels, its chatter at debug level. The default is
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// DB is a node's database: the ledger chain plus the daemon's state store.
// All methods are safe for concurrent use.
type DB struct {
	bdb  *badger.DB
	lock *dirLock
	dir  string
	log  *slog.Logger
	comp *compactor

	minFree   uint64
	freeSpace func(dir string) (uint64, error)
	// sync forces each append to disk (off only in tests).
	sync bool

	// closeMu guards closed and the Badger handle against Close racing
	// with in-flight operations: operations hold it shared.
	closeMu sync.RWMutex
	closed  bool

	// appendMu serializes appends and guards the cached head.
	appendMu sync.Mutex
	head     chainHead
	headErr  error // non-nil when the stored head could not be read
}

// Open opens (creating it if needed) the database in dir. Ledger entries
// are synchronous: once an append returns, it survives a crash of the
// process or the machine. State writes (State.Put, Delete: a daemon's
// working records of jobs and leases, rewritten at every change) survive
// a crash of the process but are not forced to disk one by one: a crash
// of the machine may lose the last of them, never an entry. Each forced
// write costs an fsync, and a busy node's state changes many times per
// job.
func Open(dir string, opts ...Option) (*DB, error) {
	if dir == "" {
		return nil, errors.New("ledger: empty data dir")
	}
	o := options{logger: slog.Default(), sync: true, minFree: DefaultMinFreeSpace, freeSpace: freeSpace}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: create data dir: %w", err)
	}
	// Badger writes as it opens (memtables, manifest): check first.
	if err := checkFree(dir, o.minFree, o.freeSpace); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	bo := badger.DefaultOptions(dir).
		WithLogger(slogBridge{o.logger.With("component", "ledger/badger")}).
		// Appends sync themselves (DB.syncEntries); state writes do not.
		WithSyncWrites(false).
		// A ledger is small and written a few entries at a time: keep
		// Badger's memory and disk footprint modest. Each memtable is an
		// arena allocated up front, and the Go heap (hence the RSS) grows
		// to twice what is live, so memtables are small; values above
		// 64 KiB go to the value log so that a transaction (at most 15%
		// of a memtable) still takes an entry of any allowed size.
		WithMemTableSize(4 << 20).
		WithNumMemtables(2).
		WithValueThreshold(64 << 10).
		// No compression, so no block cache (Badger needs one only to
		// hold decompressed blocks): entries are small, and the cache's
		// background goroutine woke an idle daemon several times a second.
		WithCompression(bopt.None).
		WithBlockCacheSize(0).
		WithValueLogFileSize(64 << 20).
		// No Badger compactors (they poll every 50 ms): the DB compacts
		// itself after writes (see compact.go).
		WithNumCompactors(0).
		WithNumLevelZeroTables(numL0Tables).
		WithMetricsEnabled(false)
	bdb, err := badger.Open(bo)
	if err != nil {
		lock.release()
		if strings.Contains(err.Error(), "Cannot acquire directory lock") {
			return nil, &inUseError{dir: dir}
		}
		return nil, fmt.Errorf("ledger: open badger in %s: %w", dir, err)
	}
	db := &DB{bdb: bdb, lock: lock, dir: dir, log: o.logger, minFree: o.minFree, freeSpace: o.freeSpace, sync: o.sync}
	db.head, db.headErr = db.loadHead()
	if err := db.buildSettledIndex(); err != nil {
		_ = bdb.Close()
		lock.release()
		return nil, err
	}
	db.startCompactor()
	return db, nil
}

// Close flushes and closes the database and releases the data directory.
// Closing a closed DB is a no-op.
func (db *DB) Close() error {
	db.closeMu.Lock()
	defer db.closeMu.Unlock()
	if db.closed {
		return nil
	}
	db.closed = true
	// In-flight operations are done (a write stalled on a full level 0
	// has had the compactor it waited for): stop compacting, then close.
	db.stopCompactor()
	err := db.bdb.Close()
	db.lock.release()
	if err != nil {
		return fmt.Errorf("ledger: close: %w", err)
	}
	return nil
}

// checkFree fails with ErrDiskFull when dir's file system has less than
// floor bytes free. An unreadable free-space figure does not block writes.
func checkFree(dir string, floor uint64, free func(string) (uint64, error)) error {
	if floor == 0 {
		return nil
	}
	n, err := free(dir)
	if err != nil || n >= floor {
		return nil
	}
	return &diskFullError{dir: dir, free: n, floor: floor}
}

// checkWrite is checkFree for this DB, before a write.
func (db *DB) checkWrite() error { return checkFree(db.dir, db.minFree, db.freeSpace) }

// acquire marks the start of an operation; the returned func ends it.
func (db *DB) acquire() (func(), error) {
	db.closeMu.RLock()
	if db.closed {
		db.closeMu.RUnlock()
		return nil, ErrClosed
	}
	return db.closeMu.RUnlock, nil
}

// slogBridge adapts a slog.Logger to badger.Logger. Badger's info messages
// (table and value-log housekeeping) are demoted to debug, so a daemon
// logging at info or warn level only hears about problems.
type slogBridge struct{ l *slog.Logger }

func (b slogBridge) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a) }
func (b slogBridge) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b slogBridge) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a) }
func (b slogBridge) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a) }

func (b slogBridge) log(level slog.Level, f string, a []any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(f, a...)))
}
