package ledger

import (
	"bytes"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// TamperError reports the first entry at which the chain does not verify.
type TamperError struct {
	// Seq is the sequence number of the bad (or missing) entry; 0 when the
	// stored chain head itself is unreadable.
	Seq uint64
	// Reason says what is wrong with it.
	Reason string
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("ledger: chain does not verify at seq %d: %s", e.Seq, e.Reason)
}

// Verify walks the whole chain from one consistent snapshot: it checks that
// every stored entry is byte-for-byte in canonical form, that its hash
// recomputes, that it links to its predecessor, that sequence numbers are
// contiguous from 1, that every succession entry is signed by both its keys
// and hands over from the owner before it, and that the stored head names
// the last entry and the owner the successions give. The
// first failure is returned as a *TamperError, with the report counting the
// entries verified before it; other errors are I/O errors.
func (db *DB) Verify() (record.VerifyReport, error) {
	done, err := db.acquire()
	if err != nil {
		return record.VerifyReport{}, err
	}
	defer done()
	var rep record.VerifyReport
	err = db.bdb.View(func(txn *badger.Txn) error {
		head, err := readHead(txn)
		if err != nil {
			return &TamperError{Seq: 0, Reason: err.Error()}
		}
		rep.HeadSeq, rep.HeadHash = head.Seq, head.Hash

		it := txn.NewIterator(badger.IteratorOptions{Prefix: entryPrefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		var cv ChainVerifier
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			want := cv.head().Seq + 1
			seq, ok := seqOfKey(item.Key())
			if !ok {
				return &TamperError{Seq: want, Reason: fmt.Sprintf("malformed entry key %q", item.Key())}
			}
			if seq > head.Seq && seq == want {
				return &TamperError{Seq: seq, Reason: fmt.Sprintf("entry beyond the chain head %d", head.Seq)}
			}
			err := item.Value(func(v []byte) error { return cv.Next(seq, v) })
			if err != nil {
				var te *TamperError
				if errors.As(err, &te) {
					return err
				}
				return fmt.Errorf("ledger: read entry %d: %w", seq, err)
			}
			rep.Entries++
		}
		prev := cv.head()
		if prev.Seq != head.Seq {
			return &TamperError{Seq: head.Seq, Reason: fmt.Sprintf("chain head names entry %d, last stored entry is %d", head.Seq, prev.Seq)}
		}
		if prev.Hash != head.Hash {
			return &TamperError{Seq: head.Seq, Reason: "chain head hash does not match the last entry"}
		}
		if prev.Owner != head.Owner || prev.Succession != head.Succession {
			return &TamperError{Seq: head.Seq, Reason: fmt.Sprintf("chain head names owner %q (succession %d), the chain's successions give %q (%d)",
				head.Owner, head.Succession, prev.Owner, prev.Succession)}
		}
		return nil
	})
	return rep, err
}

// ChainVerifier checks a chain's entries in order from the first, by the
// rules Verify applies to each stored entry: contiguous sequence numbers,
// the canonical encoding, a hash that recomputes, a link to the entry
// before, and successions signed by both keys that hand over from the
// owner before them. It needs no store; its zero value expects entry 1.
type ChainVerifier struct {
	prev    chainHead
	started bool
}

func (cv *ChainVerifier) head() chainHead {
	if !cv.started {
		return genesis()
	}
	return cv.prev
}

// Next checks raw, the stored bytes of entry seq, as the entry after the
// last one checked. The first failure is a *TamperError, and the verifier
// stays at the entry before it.
func (cv *ChainVerifier) Next(seq uint64, raw []byte) error {
	prev := cv.head()
	if want := prev.Seq + 1; seq != want {
		// Entries come in seq order, so a gap means want is missing.
		return &TamperError{Seq: want, Reason: fmt.Sprintf("entry missing (next stored entry is %d)", seq)}
	}
	e, err := decodeEntry(raw)
	if err != nil {
		return &TamperError{Seq: seq, Reason: "undecodable entry: " + err.Error()}
	}
	canon, err := encodeEntry(&e)
	if err != nil {
		return &TamperError{Seq: seq, Reason: err.Error()}
	}
	if !bytes.Equal(canon, raw) {
		return &TamperError{Seq: seq, Reason: "stored bytes altered (not the canonical encoding)"}
	}
	if e.Seq != seq {
		return &TamperError{Seq: seq, Reason: fmt.Sprintf("entry stored under seq %d claims seq %d", seq, e.Seq)}
	}
	if e.PrevHash != prev.Hash {
		return &TamperError{Seq: seq, Reason: "prev_hash does not match the previous entry's hash"}
	}
	if h := e.ComputeHash(); e.Hash != h {
		return &TamperError{Seq: seq, Reason: "hash mismatch: entry content altered"}
	}
	if e.Kind == record.KindSuccession {
		// Signed by both keys: a rewrite of the chain from here on
		// cannot forge one.
		if err := checkSuccession(&e); err != nil {
			return &TamperError{Seq: seq, Reason: "succession does not verify: " + err.Error()}
		}
	}
	owners, err := handOver(prev, &e)
	if err != nil {
		return &TamperError{Seq: seq, Reason: err.Error()}
	}
	cv.prev = chainHead{Seq: seq, Hash: e.Hash, Owner: owners.Owner, Succession: owners.Succession}
	cv.started = true
	return nil
}

// Head is the sequence number and hash of the last entry checked: 0 and
// ZeroHash before the first.
func (cv *ChainVerifier) Head() (seq uint64, hash string) {
	h := cv.head()
	return h.Seq, h.Hash
}
