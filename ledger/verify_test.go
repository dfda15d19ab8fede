package ledger

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// The tamper helpers below bypass the ledger and edit Badger directly, the
// way an attacker with access to the data dir would.

func rawGet(t *testing.T, db *DB, key []byte) []byte {
	t.Helper()
	var v []byte
	err := db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		t.Fatalf("raw get %q: %v", key, err)
	}
	return v
}

func rawSet(t *testing.T, db *DB, key, val []byte) {
	t.Helper()
	if err := db.bdb.Update(func(txn *badger.Txn) error { return txn.Set(key, val) }); err != nil {
		t.Fatalf("raw set %q: %v", key, err)
	}
}

func rawDelete(t *testing.T, db *DB, key []byte) {
	t.Helper()
	if err := db.bdb.Update(func(txn *badger.Txn) error { return txn.Delete(key) }); err != nil {
		t.Fatalf("raw delete %q: %v", key, err)
	}
}

// wantTamper asserts that Verify fails naming seq, with a reason containing
// reason (if not empty).
func wantTamper(t *testing.T, db *DB, seq uint64, reason string) {
	t.Helper()
	_, err := db.Verify()
	var te *TamperError
	if !errors.As(err, &te) {
		t.Fatalf("Verify() = %v, want a *TamperError at seq %d", err, seq)
	}
	if te.Seq != seq || !strings.Contains(te.Reason, reason) {
		t.Fatalf("Verify() = %v, want seq %d with reason containing %q", te, seq, reason)
	}
}

func wantValid(t *testing.T, db *DB, entries uint64) {
	t.Helper()
	rep, err := db.Verify()
	if err != nil {
		t.Fatalf("Verify() = %v, want a valid chain", err)
	}
	if rep.Entries != entries {
		t.Fatalf("Verify() checked %d entries, want %d", rep.Entries, entries)
	}
}

func TestVerifyDetectsEveryFlippedByte(t *testing.T) {
	db := openTest(t, "", noSync())
	appendN(t, db, 4) // seq 4 is a receipt with data
	for _, seq := range []uint64{1, 4} {
		key := entryKey(seq)
		orig := rawGet(t, db, key)
		// 0x01 flips the low bit; 0x20 flips ASCII case, which
		// encoding/json would otherwise ignore in field names.
		for _, mask := range []byte{0x01, 0x20} {
			for i := range orig {
				bad := append([]byte(nil), orig...)
				bad[i] ^= mask
				rawSet(t, db, key, bad)
				_, err := db.Verify()
				var te *TamperError
				if !errors.As(err, &te) || te.Seq != seq {
					t.Fatalf("seq %d byte %d (%q) ^ %#x: Verify() = %v, want a TamperError at seq %d",
						seq, i, orig[i], mask, err, seq)
				}
			}
		}
		rawSet(t, db, key, orig)
		wantValid(t, db, 4)
	}
}

func TestVerifyDetectsDeletion(t *testing.T) {
	db := openTest(t, "", noSync())
	appendN(t, db, 5)
	orig := rawGet(t, db, entryKey(3))
	rawDelete(t, db, entryKey(3))
	wantTamper(t, db, 3, "missing")
	rawSet(t, db, entryKey(3), orig)
	wantValid(t, db, 5)

	rawDelete(t, db, entryKey(1))
	wantTamper(t, db, 1, "missing")
	rawSet(t, db, entryKey(1), rawGet(t, db, entryKey(2)))
	wantTamper(t, db, 1, "claims seq 2")
}

func TestVerifyDetectsTruncation(t *testing.T) {
	db := openTest(t, "", noSync())
	appendN(t, db, 5)
	rawDelete(t, db, entryKey(5))
	wantTamper(t, db, 5, "chain head names entry 5")
}

func TestVerifyDetectsReorder(t *testing.T) {
	db := openTest(t, "", noSync())
	appendN(t, db, 5)
	a, b := rawGet(t, db, entryKey(2)), rawGet(t, db, entryKey(3))
	rawSet(t, db, entryKey(2), b)
	rawSet(t, db, entryKey(3), a)
	wantTamper(t, db, 2, "claims seq 3")
}

func TestVerifyDetectsReplacement(t *testing.T) {
	db := openTest(t, "", noSync())
	entries := appendN(t, db, 5)

	// A forged entry whose own hash is right and which links to its
	// predecessor still breaks the link from its successor.
	forged := entries[2]
	forged.Amount = 1000
	forged.Hash = forged.ComputeHash()
	v, err := encodeEntry(&forged)
	if err != nil {
		t.Fatal(err)
	}
	rawSet(t, db, entryKey(3), v)
	wantTamper(t, db, 4, "prev_hash")

	// Same edit without recomputing the hash is caught at the entry.
	forged.Hash = entries[2].Hash
	v, _ = encodeEntry(&forged)
	rawSet(t, db, entryKey(3), v)
	wantTamper(t, db, 3, "hash mismatch")

	// An entry relinked to a made-up predecessor.
	forged = entries[2]
	forged.PrevHash = strings.Repeat("ab", 32)
	forged.Hash = forged.ComputeHash()
	v, _ = encodeEntry(&forged)
	rawSet(t, db, entryKey(3), v)
	wantTamper(t, db, 3, "prev_hash")
}

func TestVerifyDetectsHeadMismatch(t *testing.T) {
	db := openTest(t, "", noSync())
	entries := appendN(t, db, 5)
	origHead := rawGet(t, db, headKey)
	setHead := func(seq uint64, hash string) {
		b, _ := json.Marshal(chainHead{Seq: seq, Hash: hash})
		rawSet(t, db, headKey, b)
	}

	setHead(5, entries[3].Hash)
	wantTamper(t, db, 5, "head hash")

	setHead(4, entries[3].Hash)
	wantTamper(t, db, 5, "beyond the chain head")

	setHead(6, entries[4].Hash)
	wantTamper(t, db, 6, "chain head names entry 6")

	rawSet(t, db, headKey, []byte("{not json"))
	wantTamper(t, db, 0, "corrupt")

	rawDelete(t, db, headKey)
	wantTamper(t, db, 1, "beyond the chain head")

	rawSet(t, db, headKey, origHead)
	wantValid(t, db, 5)

	// An appended forgery that links correctly but is not under the head.
	extra := entries[4]
	extra.Seq, extra.PrevHash = 6, entries[4].Hash
	extra.Hash = extra.ComputeHash()
	v, _ := encodeEntry(&extra)
	rawSet(t, db, entryKey(6), v)
	wantTamper(t, db, 6, "beyond the chain head")
}

func TestCorruptHeadBlocksAppend(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, noSync())
	appendN(t, db, 2)
	rawSet(t, db, headKey, []byte("garbage"))
	db.Close()

	db = openTest(t, dir, noSync())
	if _, err := db.Append(sampleEntry(0)); err == nil || !strings.Contains(err.Error(), "chain head is corrupt") {
		t.Fatalf("Append on a corrupt head = %v, want a refusal", err)
	}
	wantTamper(t, db, 0, "corrupt")
}

func TestVerifyEmpty(t *testing.T) {
	db := openTest(t, "", noSync())
	rep, err := db.Verify()
	if err != nil || rep.Entries != 0 || rep.HeadSeq != 0 || rep.HeadHash != record.ZeroHash {
		t.Fatalf("Verify() on empty ledger = %+v, %v", rep, err)
	}
}
