package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	bopt "github.com/dgraph-io/badger/v4/options"
	"github.com/gpumesh/gpumesh/ledger/record"
)

func TestAppendLinksChain(t *testing.T) {
	db := openTest(t, "", noSync())
	seq, hash, err := db.Head()
	if err != nil || seq != 0 || hash != record.ZeroHash {
		t.Fatalf("empty Head() = %d, %q, %v; want 0, ZeroHash, nil", seq, hash, err)
	}
	before := time.Now()
	got := appendN(t, db, 6)
	noTime, err := db.Append(record.Entry{Kind: record.KindPaymentOwed, Counterparty: "p", Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, noTime)
	if noTime.Time.Before(before) || noTime.Time.After(time.Now()) || noTime.Time.Location() != time.UTC {
		t.Errorf("zero Time became %v, want now in UTC", noTime.Time)
	}
	if noTime.Direction != record.DirOwed {
		t.Errorf("payment_owed direction defaulted to %q, want %q", noTime.Direction, record.DirOwed)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Errorf("entry %d: Seq = %d", i, e.Seq)
		}
		wantPrev := record.ZeroHash
		if i > 0 {
			wantPrev = got[i-1].Hash
		}
		if e.PrevHash != wantPrev {
			t.Errorf("seq %d: PrevHash = %s, want %s", e.Seq, e.PrevHash, wantPrev)
		}
		if len(e.Hash) != 64 || e.Hash != e.ComputeHash() {
			t.Errorf("seq %d: Hash = %q, ComputeHash = %q", e.Seq, e.Hash, e.ComputeHash())
		}
		stored, err := db.Get(e.Seq)
		if err != nil {
			t.Fatalf("Get(%d): %v", e.Seq, err)
		}
		if !reflect.DeepEqual(stored, e) {
			t.Errorf("Get(%d) = %+v, want %+v", e.Seq, stored, e)
		}
	}
	if !got[1].Time.Equal(sampleEntry(1).Time) {
		t.Errorf("explicit Time changed: %v", got[1].Time)
	}
	seq, hash, err = db.Head()
	if err != nil || seq != 7 || hash != got[6].Hash {
		t.Fatalf("Head() = %d, %q, %v; want 7, %q", seq, hash, err, got[6].Hash)
	}
	if _, err := db.Get(8); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(8) error = %v, want ErrNotFound", err)
	}
	rep, err := db.Verify()
	if err != nil || rep.Entries != 7 || rep.HeadSeq != 7 || rep.HeadHash != hash {
		t.Fatalf("Verify() = %+v, %v", rep, err)
	}
}

func TestHashCoversEveryField(t *testing.T) {
	base := sampleEntry(3)
	base.Seq, base.PrevHash = 9, record.ZeroHash
	h := base.ComputeHash()
	mutations := map[string]func(*record.Entry){
		"seq":          func(e *record.Entry) { e.Seq++ },
		"time":         func(e *record.Entry) { e.Time = e.Time.Add(time.Nanosecond) },
		"kind":         func(e *record.Entry) { e.Kind = record.KindPaymentOwed },
		"lease":        func(e *record.Entry) { e.LeaseID += "x" },
		"job":          func(e *record.Entry) { e.JobID += "x" },
		"counterparty": func(e *record.Entry) { e.Counterparty += "x" },
		"amount":       func(e *record.Entry) { e.Amount = math.Nextafter(e.Amount, 10) },
		"direction":    func(e *record.Entry) { e.Direction = record.DirEarned },
		"data":         func(e *record.Entry) { e.Data = json.RawMessage(`{}`) },
		"prev_hash":    func(e *record.Entry) { e.PrevHash = strings.Repeat("1", 64) },
		// Moving bytes across a field boundary must change the hash too.
		"boundary": func(e *record.Entry) { e.LeaseID, e.JobID = e.LeaseID+e.JobID[:1], e.JobID[1:] },
	}
	for name, mut := range mutations {
		e := base
		mut(&e)
		if e.ComputeHash() == h {
			t.Errorf("changing %s does not change the hash", name)
		}
	}
	e := base
	e.Hash = "anything"
	if e.ComputeHash() != h {
		t.Error("Hash field must not be part of the hash")
	}
}

func TestAppendRejectsBadInput(t *testing.T) {
	db := openTest(t, "", noSync())
	ok := func() record.Entry {
		return record.Entry{Kind: record.KindPaymentEarned, Counterparty: "peer", Amount: 2}
	}
	cases := []struct {
		name string
		mut  func(*record.Entry)
		want string
	}{
		{"unknown kind", func(e *record.Entry) { e.Kind = "refund" }, `unknown entry kind "refund"`},
		{"no kind", func(e *record.Entry) { e.Kind = "" }, "no kind"},
		{"NaN", func(e *record.Entry) { e.Amount = math.NaN() }, "not a finite number"},
		{"Inf", func(e *record.Entry) { e.Amount = math.Inf(1) }, "not a finite number"},
		{"negative", func(e *record.Entry) { e.Amount = -1 }, "negative"},
		{"huge", func(e *record.Entry) { e.Amount = 1e300 }, "exceeds the limit"},
		{"zero payment", func(e *record.Entry) { e.Amount = 0 }, "positive amount"},
		{"no counterparty", func(e *record.Entry) { e.Counterparty = "" }, "needs a counterparty"},
		{"preset seq", func(e *record.Entry) { e.Seq = 4 }, "assigned by Append"},
		{"preset hash", func(e *record.Entry) { e.Hash = "ab" }, "assigned by Append"},
		{"preset prev", func(e *record.Entry) { e.PrevHash = record.ZeroHash }, "assigned by Append"},
		{"wrong direction", func(e *record.Entry) { e.Direction = record.DirOwed }, `want "earned"`},
		{"credit without direction", func(e *record.Entry) { e.Kind = record.KindPreemptionCredit }, "needs direction"},
		{"receipt bad direction", func(e *record.Entry) { e.Kind, e.Direction = record.KindReceipt, "sideways" }, "unknown direction"},
		{"bad json", func(e *record.Entry) { e.Data = json.RawMessage(`{"a":`) }, "not valid JSON"},
		{"bad utf8", func(e *record.Entry) { e.Counterparty = "\xff\xfe" }, "not valid UTF-8"},
		{"long field", func(e *record.Entry) { e.LeaseID = strings.Repeat("l", MaxFieldLen+1) }, "limit"},
		{"time range", func(e *record.Entry) { e.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "out of range"},
		{"dispute with money", func(e *record.Entry) { e.Kind, e.LeaseID, e.Direction = record.KindDispute, "lease-1", "" }, "moves no money"},
		{"dispute of no lease", func(e *record.Entry) { e.Kind, e.Direction, e.Amount = record.KindDispute, "", 0 }, "names a lease"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := ok()
			c.mut(&e)
			_, err := db.Append(e)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ledger: ") {
				t.Errorf("%s: Append error = %v, want one containing %q", c.name, err, c.want)
			}
		})
	}
	bad := ok()
	bad.Amount = -3
	_, err := db.AppendAll([]record.Entry{ok(), bad, ok()})
	if err == nil || !strings.Contains(err.Error(), "ledger: batch entry 1: amount -3 is negative") {
		t.Errorf("AppendAll with a bad entry: error = %v, want one naming entry 1", err)
	}
	if seq, _, _ := db.Head(); seq != 0 {
		t.Fatalf("rejected entries were written: head seq %d", seq)
	}
	// A valid receipt may have a zero amount and no counterparty.
	if _, err := db.Append(record.Entry{Kind: record.KindReceipt, Data: json.RawMessage(`{"ok":true}`)}); err != nil {
		t.Errorf("valid receipt rejected: %v", err)
	}
	// A dispute names its lease and counterparty, and moves no money.
	if _, err := db.Append(record.Entry{Kind: record.KindDispute, LeaseID: "lease-1", Counterparty: "peer", Data: json.RawMessage(`{"reason":"refused"}`)}); err != nil {
		t.Errorf("valid dispute rejected: %v", err)
	}
}

func TestAppendAllIsOneChainSegment(t *testing.T) {
	db := openTest(t, "", noSync())
	first := appendN(t, db, 2)
	batch := []record.Entry{sampleEntry(10), sampleEntry(11), sampleEntry(12)}
	got, err := db.AppendAll(batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 3 || got[0].PrevHash != first[1].Hash ||
		got[1].PrevHash != got[0].Hash || got[2].PrevHash != got[1].Hash || got[2].Seq != 5 {
		t.Fatalf("AppendAll did not extend the chain: %+v", got)
	}
	if seq, hash, _ := db.Head(); seq != 5 || hash != got[2].Hash {
		t.Fatalf("Head = %d %s after AppendAll", seq, hash)
	}
	if _, err := db.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppends(t *testing.T) {
	db := openTest(t, "", noSync())
	const workers, per = 8, 25
	var wg sync.WaitGroup
	results := make([][]record.Entry, workers)
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				e, err := db.Append(sampleEntry(w*per + i))
				if err != nil {
					errs <- err
					return
				}
				results[w] = append(results[w], e)
			}
		}(w)
	}
	// Readers run alongside the writers.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if _, err := db.Verify(); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := make(map[uint64]bool)
	for _, r := range results {
		for _, e := range r {
			if seen[e.Seq] {
				t.Fatalf("seq %d assigned twice", e.Seq)
			}
			seen[e.Seq] = true
			stored, err := db.Get(e.Seq)
			if err != nil || stored.Hash != e.Hash {
				t.Fatalf("Get(%d) = %v, %v; want hash %s", e.Seq, stored.Hash, err, e.Hash)
			}
		}
	}
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries != workers*per || rep.HeadSeq != workers*per || len(seen) != workers*per {
		t.Fatalf("Verify = %+v with %d distinct seqs, want %d entries", rep, len(seen), workers*per)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := appendN(t, db, 9)
	// Evidence with characters a JSON encoder likes to escape or reflow.
	tricky, err := db.Append(record.Entry{Kind: record.KindReceipt, Data: json.RawMessage("{ \"html\": \"<b>&</b>\",\n \"sep\": \"\u2028\", \"n\": 1e3 }")})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, tricky)
	if err := db.State("jobs").Put("job-1", map[string]int{"attempt": 2}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = reopenHolds(t, dir, want)
	if _, err := db.Verify(); err != nil {
		t.Fatalf("Verify after reopen: %v", err)
	}
	var st map[string]int
	if ok, err := db.State("jobs").Get("job-1", &st); !ok || err != nil || st["attempt"] != 2 {
		t.Fatalf("state after reopen: %v %v %v", st, ok, err)
	}
	next, err := db.Append(sampleEntry(9)) // the next lease after appendN's

	if err != nil {
		t.Fatal(err)
	}
	if next.Seq != 11 || next.PrevHash != tricky.Hash {
		t.Fatalf("append after reopen: seq %d prev %s, want 11 linked to %s", next.Seq, next.PrevHash, tricky.Hash)
	}
}

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, noSync())
	_, err := Open(dir, noSync())
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open error = %v, want ErrInUse", err)
	}
	if want := "ledger: data dir " + dir + " is in use by another gpumesh daemon"; err.Error() != want {
		t.Errorf("second Open error = %q, want %q", err, want)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir, noSync())
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	db2.Close()
}

func TestClosed(t *testing.T) {
	db := openTest(t, "", noSync())
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := db.Append(sampleEntry(0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v", err)
	}
	if _, err := db.Verify(); !errors.Is(err, ErrClosed) {
		t.Errorf("Verify after Close = %v", err)
	}
	if err := db.State("x").Put("k", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close = %v", err)
	}
}

func TestBalances(t *testing.T) {
	db := openTest(t, "", noSync())
	seq := []record.Entry{
		{Kind: record.KindPaymentOwed, Counterparty: "alice", Amount: 10.5},
		{Kind: record.KindPaymentOwed, Counterparty: "alice", Amount: 2.25},
		{Kind: record.KindPreemptionCredit, Direction: record.DirCreditReceived, Counterparty: "alice", Amount: 1.5},
		{Kind: record.KindReceipt, Counterparty: "alice", Amount: 99}, // informational
		{Kind: record.KindPaymentEarned, Counterparty: "bob", Amount: 8},
		{Kind: record.KindPreemptionCredit, Direction: record.DirCreditGranted, Counterparty: "bob", Amount: 0.75},
		{Kind: record.KindPaymentOwed, Counterparty: "bob", Amount: 3},
		{Kind: record.KindPaymentEarned, Counterparty: "carol", Amount: 0.125},
		{Kind: record.KindDispute, Counterparty: "dave", LeaseID: "lease-1"}, // no money
	}
	if _, err := db.AppendAll(seq); err != nil {
		t.Fatal(err)
	}
	got, err := db.Balances()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]record.Balance{
		"alice": {Owed: 12.75, Credits: 1.5, Net: -11.25},
		"bob":   {Owed: 3, Earned: 8, Credits: -0.75, Net: 4.25},
		"carol": {Earned: 0.125, Net: 0.125},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Balances() = %+v\nwant %+v", got, want)
	}
}

func TestListFilter(t *testing.T) {
	db := openTest(t, "", noSync())
	all := appendN(t, db, 20)
	pick := func(pred func(record.Entry) bool) []record.Entry {
		var out []record.Entry
		for _, e := range all {
			if pred(e) {
				out = append(out, e)
			}
		}
		return out
	}
	cases := []struct {
		name string
		f    record.Filter
		want []record.Entry
	}{
		{"all", record.Filter{}, all},
		{"kind", record.Filter{Kind: record.KindPaymentEarned}, pick(func(e record.Entry) bool { return e.Kind == record.KindPaymentEarned })},
		{"counterparty", record.Filter{Counterparty: "12D3KooPeer1"}, pick(func(e record.Entry) bool { return e.Counterparty == "12D3KooPeer1" })},
		{"lease", record.Filter{LeaseID: "lease-7"}, all[7:8]},
		{"since", record.Filter{Since: all[15].Time}, all[15:]},
		{"limit", record.Filter{Limit: 3}, all[:3]},
		{"kind+limit", record.Filter{Kind: record.KindPaymentOwed, Limit: 2}, []record.Entry{all[0], all[4]}},
		{"kind+counterparty", record.Filter{Kind: record.KindPaymentOwed, Counterparty: "12D3KooPeer0"}, []record.Entry{all[0], all[12]}},
		{"none", record.Filter{LeaseID: "nope"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := db.List(c.f)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if len(c.want) == 0 && len(got) == 0 {
				return
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s: List = %d entries %v, want %d", c.name, len(got), seqs(got), len(c.want))
			}
		})
	}
	if _, err := db.List(record.Filter{Limit: -1}); err == nil {
		t.Error("negative limit accepted")
	}
	if _, err := db.List(record.Filter{Kind: "bogus"}); err == nil {
		t.Error("unknown kind in filter accepted")
	}
}

func seqs(es []record.Entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

// recorder is a slog.Handler that keeps records at or above a level.
type recorder struct {
	mu      sync.Mutex
	level   slog.Level
	records []slog.Record
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func TestBadgerLogsAreBridgedQuietly(t *testing.T) {
	dir := t.TempDir()
	debug := &recorder{level: slog.LevelDebug}
	db, err := Open(dir, noSync(), WithLogger(slog.New(debug)))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, db, 2)
	db.Close()
	if len(debug.records) == 0 {
		t.Fatal("no Badger messages reached the slog logger")
	}
	for _, r := range debug.records {
		if r.Level != slog.LevelDebug {
			t.Errorf("routine Badger message logged at %v: %q", r.Level, r.Message)
		}
	}

	warn := &recorder{level: slog.LevelWarn}
	db, err = Open(dir, noSync(), WithLogger(slog.New(warn)))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if len(warn.records) != 0 {
		t.Errorf("a clean open/close logged at warn level: %q", warn.records[0].Message)
	}
}

// TestOpensSnappyTables: ledgers written before compression was turned off
// hold Snappy-compressed tables; Badger reads each table with the
// compression recorded in its manifest, so they open, list and verify.
func TestOpensSnappyTables(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir)
	want := appendN(t, db, 12)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite every key through Badger's own defaults (Snappy, with the
	// block cache it requires); closing flushes them to a compressed table.
	raw, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithCompression(bopt.Snappy).WithBlockCacheSize(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string][]byte{}
	err = raw.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			kv[string(it.Item().KeyCopy(nil))] = v
		}
		return nil
	})
	if err == nil {
		err = raw.Update(func(txn *badger.Txn) error {
			for k, v := range kv {
				if err := txn.Set([]byte(k), v); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err2 := raw.Close(); err == nil {
		err = err2
	}
	if err != nil || len(kv) == 0 {
		t.Fatalf("rewrite %d keys: %v", len(kv), err)
	}
	mf, err := os.ReadFile(filepath.Join(dir, "MANIFEST"))
	if err != nil {
		t.Fatal(err)
	}
	// A table's manifest change records its compression (protobuf field
	// 6, a varint: tag 0x30; 1 = Snappy).
	if !bytes.Contains(mf, []byte{0x30, byte(bopt.Snappy)}) {
		t.Fatalf("no Snappy table in the manifest after the rewrite")
	}

	db = reopenHolds(t, dir, want)
	wantValid(t, db, uint64(len(want)))
}

// reopenHolds reopens the ledger in dir and fails unless it lists want.
func reopenHolds(t *testing.T, dir string, want []record.Entry) *DB {
	t.Helper()
	db := openTest(t, dir)
	got, err := db.List(record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen List = %+v\nwant %+v", got, want)
	}
	return db
}
