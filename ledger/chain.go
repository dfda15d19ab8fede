package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// Key layout. Ledger and state keys have disjoint prefixes.
var (
	entryPrefix = []byte("ledger/e/") // + 8-byte big-endian seq
	headKey     = []byte("ledger/head")
	// settledPrefix indexes settlements: + class + 0x00 + lease id -> the
	// 8-byte seq of the entry that settled it. settledIndexKey marks the
	// index as built (ledgers written before it existed are indexed once by
	// Open).
	settledPrefix   = []byte("ledger/settled/")
	settledIndexKey = []byte("ledger/settled-index/v1")
)

// ErrAlreadySettled matches (with errors.Is) the error Append and AppendAll
// return for a second settlement of one lease: a KindReceipt entry for a
// LeaseID that already has one, or a payment (KindPaymentOwed or
// KindPaymentEarned) for a LeaseID that already has one. Nothing of the
// refused batch is stored.
var ErrAlreadySettled = errors.New("ledger: lease already settled")

// settlementClass is the class of settlement e records for its lease, or ""
// when it is not a settlement (or names no lease). A receipt and its
// payment are one settlement's two classes, so both may be appended for one
// lease, once each.
func settlementClass(e *record.Entry) string {
	if e.LeaseID == "" {
		return ""
	}
	switch e.Kind {
	case record.KindReceipt:
		return "receipt"
	case record.KindPaymentOwed, record.KindPaymentEarned:
		return "payment"
	}
	return ""
}

func settledKey(class, lease string) []byte {
	k := make([]byte, 0, len(settledPrefix)+len(class)+1+len(lease))
	k = append(append(append(k, settledPrefix...), class...), 0)
	return append(k, lease...)
}

// settle records in txn that e (already numbered) settles its lease, or
// fails with ErrAlreadySettled when the lease already has a settlement of
// e's class, in the store or earlier in the same transaction.
func settle(txn *badger.Txn, e *record.Entry) error {
	class := settlementClass(e)
	if class == "" {
		return nil
	}
	k := settledKey(class, e.LeaseID)
	item, err := txn.Get(k)
	switch {
	case err == nil:
		var prev uint64
		_ = item.Value(func(v []byte) error {
			if len(v) == 8 {
				prev = binary.BigEndian.Uint64(v)
			}
			return nil
		})
		return fmt.Errorf("%w: lease %q already has a %s entry (seq %d)", ErrAlreadySettled, e.LeaseID, class, prev)
	case !errors.Is(err, badger.ErrKeyNotFound):
		return fmt.Errorf("ledger: read settlement index: %w", err)
	}
	return txn.Set(k, binary.BigEndian.AppendUint64(nil, e.Seq))
}

// buildSettledIndex indexes the settlements of a ledger written before the
// index existed (the first entry of each lease and class wins; later
// duplicates, which such a ledger may hold, stay in the chain but are not
// indexed). It does nothing once the index is marked built.
func (db *DB) buildSettledIndex() error {
	built := false
	err := db.bdb.View(func(txn *badger.Txn) error {
		_, err := txn.Get(settledIndexKey)
		if err == nil {
			built = true
			return nil
		}
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err != nil || built {
		return err
	}
	txn := db.bdb.NewTransaction(true)
	defer func() { txn.Discard() }()
	seen := make(map[string]bool)
	err = db.scan(record.Filter{}, func(e *record.Entry) error {
		class := settlementClass(e)
		if class == "" {
			return nil
		}
		k := settledKey(class, e.LeaseID)
		if seen[string(k)] {
			return nil
		}
		seen[string(k)] = true
		v := binary.BigEndian.AppendUint64(nil, e.Seq)
		if err := txn.Set(k, v); errors.Is(err, badger.ErrTxnTooBig) {
			if err := txn.Commit(); err != nil {
				return err
			}
			txn = db.bdb.NewTransaction(true)
			return txn.Set(k, v)
		} else if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: build settlement index: %w", err)
	}
	if err := txn.Set(settledIndexKey, []byte{1}); err != nil {
		return fmt.Errorf("ledger: build settlement index: %w", err)
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("ledger: build settlement index: %w", err)
	}
	return db.syncEntries()
}

// ErrNotFound is returned (wrapped) by Get for a sequence number that is not
// in the ledger.
var ErrNotFound = errors.New("ledger: entry not found")

func entryKey(seq uint64) []byte {
	k := make([]byte, len(entryPrefix)+8)
	copy(k, entryPrefix)
	binary.BigEndian.PutUint64(k[len(entryPrefix):], seq)
	return k
}

func seqOfKey(k []byte) (uint64, bool) {
	if len(k) != len(entryPrefix)+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(entryPrefix):]), true
}

type chainHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Owner is the new identity of the last succession entry, and
	// Succession that entry's seq (none before the first rotation).
	Owner      string `json:"owner,omitempty"`
	Succession uint64 `json:"succession,omitempty"`
}

// ErrNotOwner matches (with errors.Is) the error Append and AppendAll
// return for a succession that does not hand over from the ledger's
// current owner. Nothing of the refused batch is stored.
var ErrNotOwner = errors.New("ledger: succession from an identity that does not own the ledger")

// handOver returns head with owner moved by the succession entry e
// (already numbered), or ErrNotOwner.
func handOver(head chainHead, e *record.Entry) (chainHead, error) {
	if e.Kind != record.KindSuccession {
		return head, nil
	}
	rec, err := successionOf(e)
	if err != nil {
		return head, err
	}
	if head.Owner != "" && rec.Old != head.Owner {
		return head, fmt.Errorf("%w: succession of %s, but the ledger's owner is %s", ErrNotOwner, rec.Old, head.Owner)
	}
	head.Owner, head.Succession = rec.New, e.Seq
	return head, nil
}

// Owner is the ledger's owner as its succession entries say: the new
// identity of the last one, and that entry's seq; "" and 0 before the
// first rotation.
func (db *DB) Owner() (id string, seq uint64, err error) {
	done, err := db.acquire()
	if err != nil {
		return "", 0, err
	}
	defer done()
	db.appendMu.Lock()
	defer db.appendMu.Unlock()
	if db.headErr != nil {
		return "", 0, db.headErr
	}
	return db.head.Owner, db.head.Succession, nil
}

func genesis() chainHead { return chainHead{Seq: 0, Hash: record.ZeroHash} }

// loadHead reads the stored chain head (genesis if there is none).
func (db *DB) loadHead() (chainHead, error) {
	h := genesis()
	err := db.bdb.View(func(txn *badger.Txn) error {
		var err error
		h, err = readHead(txn)
		return err
	})
	return h, err
}

func readHead(txn *badger.Txn) (chainHead, error) {
	item, err := txn.Get(headKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return genesis(), nil
	}
	if err != nil {
		return chainHead{}, fmt.Errorf("ledger: read chain head: %w", err)
	}
	var h chainHead
	if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &h) }); err != nil {
		return chainHead{}, fmt.Errorf("ledger: chain head is corrupt: %w", err)
	}
	return h, nil
}

// Append validates e, links it to the chain and stores it together with the
// new head in one synchronous transaction. Seq, PrevHash and Hash must be
// unset; Time defaults to now. It returns the stored entry. A second
// settlement of a lease is refused with ErrAlreadySettled, in the same
// transaction.
func (db *DB) Append(e record.Entry) (record.Entry, error) {
	out, err := db.AppendAll([]record.Entry{e})
	if err != nil {
		return record.Entry{}, err
	}
	return out[0], nil
}

// AppendAll appends entries atomically, in order, in one transaction: either
// all of them are stored or none is. A batch too large for one Badger
// transaction fails as a whole. Below the free-space floor it fails with
// ErrDiskFull and writes nothing.
func (db *DB) AppendAll(entries []record.Entry) ([]record.Entry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	done, err := db.acquire()
	if err != nil {
		return nil, err
	}
	defer done()

	now := time.Now()
	out := make([]record.Entry, len(entries))
	for i, e := range entries {
		p, err := prepare(e, now)
		if err != nil {
			if len(entries) > 1 {
				return nil, fmt.Errorf("ledger: batch entry %d: %w", i, err)
			}
			return nil, fmt.Errorf("ledger: %w", err)
		}
		out[i] = p
	}

	if err := db.checkWrite(); err != nil {
		return nil, err
	}
	db.appendMu.Lock()
	defer db.appendMu.Unlock()
	if db.headErr != nil {
		return nil, fmt.Errorf("ledger: refusing to append: %w", db.headErr)
	}
	head := db.head
	// Successions first, before anything is written: each must hand over
	// from the owner the ledger has at its place in the batch.
	owners := head
	for i := range out {
		out[i].Seq = head.Seq + uint64(i) + 1
		var err error
		if owners, err = handOver(owners, &out[i]); err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
	}
	err = db.bdb.Update(func(txn *badger.Txn) error {
		for i := range out {
			e := &out[i]
			v, err := Link(e, head.Hash)
			if err != nil {
				return err
			}
			if err := txn.Set(entryKey(e.Seq), v); err != nil {
				return err
			}
			if err := settle(txn, e); err != nil {
				return err
			}
			head.Seq, head.Hash = e.Seq, e.Hash
		}
		head.Owner, head.Succession = owners.Owner, owners.Succession
		hv, err := json.Marshal(head)
		if err != nil {
			return err
		}
		return txn.Set(headKey, hv)
	})
	if errors.Is(err, ErrAlreadySettled) {
		return nil, err // refused before the commit: nothing was written
	}
	if err != nil {
		// A failed commit may still have reached the disk: resync the
		// cached head from the store rather than guess.
		db.head, db.headErr = db.loadHead()
		return nil, fmt.Errorf("ledger: append: %w", err)
	}
	db.head = head
	db.wrote()
	if err := db.syncEntries(); err != nil {
		return nil, fmt.Errorf("ledger: append: %w", err)
	}
	return out, nil
}

// Link chains e, a validated entry already numbered, after the entry whose
// hash is prevHash: it sets e's PrevHash and Hash and returns the bytes
// stored for it, which ChainVerifier (and so Verify) checks.
func Link(e *record.Entry, prevHash string) ([]byte, error) {
	e.PrevHash = prevHash
	e.Hash = e.ComputeHash()
	return encodeEntry(e)
}

// syncEntries forces what was committed to disk (the value log and the
// memtable's write-ahead log), unless the ledger was opened without sync.
func (db *DB) syncEntries() error {
	if !db.sync {
		return nil
	}
	if err := db.bdb.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// Head returns the sequence number and hash of the last entry; for an empty
// ledger, 0 and ZeroHash.
func (db *DB) Head() (seq uint64, hash string, err error) {
	done, err := db.acquire()
	if err != nil {
		return 0, "", err
	}
	defer done()
	db.appendMu.Lock()
	defer db.appendMu.Unlock()
	if db.headErr != nil {
		return 0, "", db.headErr
	}
	return db.head.Seq, db.head.Hash, nil
}

// Get returns the entry with sequence number seq.
func (db *DB) Get(seq uint64) (record.Entry, error) {
	done, err := db.acquire()
	if err != nil {
		return record.Entry{}, err
	}
	defer done()
	var e record.Entry
	err = db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(entryKey(seq))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: seq %d", ErrNotFound, seq)
		}
		if err != nil {
			return fmt.Errorf("ledger: get seq %d: %w", seq, err)
		}
		return item.Value(func(v []byte) error {
			e, err = decodeEntry(v)
			if err != nil {
				return fmt.Errorf("ledger: entry %d is corrupt: %w", seq, err)
			}
			return nil
		})
	})
	if err != nil {
		return record.Entry{}, err
	}
	return e, nil
}

// List returns the entries matching f, in seq order.
func (db *DB) List(f record.Filter) ([]record.Entry, error) {
	var out []record.Entry
	err := db.scan(f, func(e *record.Entry) error {
		out = append(out, *e)
		return nil
	})
	return out, err
}

// scan calls fn for each entry matching f, in seq order, from one
// consistent snapshot.
func (db *DB) scan(f record.Filter, fn func(*record.Entry) error) error {
	if f.Limit < 0 {
		return fmt.Errorf("ledger: negative limit %d", f.Limit)
	}
	if f.Kind != "" && !record.KnownKind(f.Kind) {
		return fmt.Errorf("ledger: unknown entry kind %q in filter", f.Kind)
	}
	done, err := db.acquire()
	if err != nil {
		return err
	}
	defer done()
	return db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPrefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			seq, _ := seqOfKey(item.Key())
			v, err := item.ValueCopy(nil)
			if err != nil {
				return fmt.Errorf("ledger: read entry %d: %w", seq, err)
			}
			e, err := decodeEntry(v)
			if err != nil {
				return fmt.Errorf("ledger: entry %d is corrupt: %w", seq, err)
			}
			if !f.Match(&e) {
				continue
			}
			if err := fn(&e); err != nil {
				return err
			}
			n++
			if f.Limit > 0 && n >= f.Limit {
				return nil
			}
		}
		return nil
	})
}
