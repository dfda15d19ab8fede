package ledger

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/ledger/record"
)

// noSync turns off synchronous writes; tests that do not exercise
// durability use it to stay fast.
func noSync() Option { return func(o *options) { o.sync = false } }

func openTest(t testing.TB, dir string, opts ...Option) *DB {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	db, err := Open(dir, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sampleEntry returns a valid entry of a kind chosen by i.
func sampleEntry(i int) record.Entry {
	cp := fmt.Sprintf("12D3KooPeer%d", i%3)
	e := record.Entry{
		Time:         t0.Add(time.Duration(i) * time.Minute),
		LeaseID:      fmt.Sprintf("lease-%d", i),
		JobID:        fmt.Sprintf("job-%d", i/2),
		Counterparty: cp,
		Amount:       float64(i%7+1) * 0.25,
	}
	switch i % 4 {
	case 0:
		e.Kind = record.KindPaymentOwed
	case 1:
		e.Kind = record.KindPaymentEarned
	case 2:
		e.Kind, e.Direction = record.KindPreemptionCredit, record.DirCreditReceived
	case 3:
		e.Kind = record.KindReceipt
		e.Data = json.RawMessage(fmt.Sprintf(`{"lease":"lease-%d","gpu_seconds":%d}`, i, 3600*i))
	}
	return e
}

func appendN(t testing.TB, db *DB, n int) []record.Entry {
	t.Helper()
	out := make([]record.Entry, 0, n)
	for i := 0; i < n; i++ {
		e, err := db.Append(sampleEntry(i))
		if err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
		out = append(out, e)
	}
	return out
}
