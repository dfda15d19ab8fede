package ledger

import (
	"errors"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/gpumesh/gpumesh/ledger/record"
)

func settlement(lease string, asRenter bool) []record.Entry {
	pay := record.Entry{Kind: record.KindPaymentEarned, Counterparty: "renter", LeaseID: lease, JobID: "j-" + lease, Amount: 2}
	if asRenter {
		pay = record.Entry{Kind: record.KindPaymentOwed, Counterparty: "provider", LeaseID: lease, JobID: "j-" + lease, Amount: 2}
	}
	return []record.Entry{{Kind: record.KindReceipt, Counterparty: pay.Counterparty, LeaseID: lease, JobID: "j-" + lease, Data: []byte(`{"lease":"` + lease + `"}`)}, pay}
}

// TestSecondSettlementRefused: a lease is settled (receipt and payment)
// once; a second receipt or payment for it is refused with
// ErrAlreadySettled, atomically with the append, also after a reopen.
func TestSecondSettlementRefused(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, noSync())
	if _, err := db.AppendAll(settlement("L1", false)); err != nil {
		t.Fatalf("first settlement: %v", err)
	}
	refused := func(t *testing.T, db *DB) {
		t.Helper()
		seq, hash, _ := db.Head()
		for _, c := range []struct {
			name  string
			batch []record.Entry
		}{
			{"receipt and payment again", settlement("L1", false)},
			{"receipt again", settlement("L1", false)[:1]},
			{"payment again", settlement("L1", false)[1:]},
			{"owed instead of earned", settlement("L1", true)[1:]},
			{"fresh lease batched with a repeat", append(settlement("L2", false), settlement("L1", false)[0])},
			{"two receipts in one batch", append(settlement("L3", false)[:1], settlement("L3", false)[0])},
		} {
			t.Run(c.name, func(t *testing.T) {
				if _, err := db.AppendAll(c.batch); !errors.Is(err, ErrAlreadySettled) {
					t.Fatalf("got %v, want ErrAlreadySettled", err)
				}
				if s, h, _ := db.Head(); s != seq || h != hash {
					t.Fatalf("refused batch moved the head %d -> %d", seq, s)
				}
			})
		}
		for _, kind := range []record.Kind{record.KindReceipt, record.KindPaymentEarned} {
			if got, _ := db.List(record.Filter{LeaseID: "L1", Kind: kind}); len(got) != 1 {
				t.Fatalf("%d %s entries for L1", len(got), kind)
			}
		}
		if got, _ := db.List(record.Filter{LeaseID: "L2"}); len(got) != 0 {
			t.Fatalf("part of a refused batch was stored: %+v", got)
		}
	}
	refused(t, db)
	// Not settlements: a preemption credit, entries without a lease id.
	if _, err := db.AppendAll([]record.Entry{
		{Kind: record.KindPreemptionCredit, Direction: record.DirCreditGranted, Counterparty: "renter", LeaseID: "L1", Amount: 1},
		{Kind: record.KindPaymentOwed, Counterparty: "x", Amount: 1},
		{Kind: record.KindPaymentOwed, Counterparty: "x", Amount: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, noSync())
	t.Run("after reopen", func(t *testing.T) { refused(t, db) })
	if _, err := db.AppendAll(settlement("L2", false)); err != nil {
		t.Fatalf("a fresh lease after the refusals: %v", err)
	}
	if _, err := db.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestSettlementIndexBuiltForOldLedgers: a ledger written before the index
// existed (simulated by deleting it) is indexed when opened, so its
// settled leases are refused too.
func TestSettlementIndexBuiltForOldLedgers(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, noSync())
	if _, err := db.AppendAll(settlement("old", true)); err != nil {
		t.Fatal(err)
	}
	err := db.bdb.Update(func(txn *badger.Txn) error {
		for _, k := range [][]byte{settledIndexKey, settledKey("receipt", "old"), settledKey("payment", "old")} {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, noSync())
	for _, e := range settlement("old", true) {
		if _, err := db.Append(e); !errors.Is(err, ErrAlreadySettled) {
			t.Fatalf("%s for an old settled lease: %v", e.Kind, err)
		}
	}
}
