package ledger

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/ledger/record"
)

func exportFixture(t *testing.T) (*DB, []record.Entry) {
	db := openTest(t, "", noSync())
	entries := appendN(t, db, 8)
	e, err := db.Append(record.Entry{
		Kind: record.KindReceipt, LeaseID: "l,\"quoted\"", Counterparty: "peer\nwith newline",
		Data: json.RawMessage(`{"html":"<a href=\"x\">&</a>","u":"\u2028é"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return db, append(entries, e)
}

// checkChain asserts that entries form a valid chain segment by themselves,
// as an auditor of an export would.
func checkChain(t *testing.T, entries []record.Entry) {
	t.Helper()
	for i, e := range entries {
		if e.ComputeHash() != e.Hash {
			t.Fatalf("exported seq %d: recomputed hash differs", e.Seq)
		}
		if i > 0 && e.PrevHash != entries[i-1].Hash {
			t.Fatalf("exported seq %d: does not link to seq %d", e.Seq, entries[i-1].Seq)
		}
	}
}

func TestExportJSON(t *testing.T) {
	db, want := exportFixture(t)
	var buf bytes.Buffer
	if err := db.ExportJSON(&buf, record.Filter{}); err != nil {
		t.Fatal(err)
	}
	var got []record.Entry
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("export does not parse: %v\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("exported %+v\nwant %+v", got, want)
	}
	checkChain(t, got)

	buf.Reset()
	if err := db.ExportJSON(&buf, record.Filter{Kind: record.KindPaymentEarned}); err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 6 {
		t.Fatalf("filtered export = seqs %v, want [2 6]", seqs(got))
	}

	buf.Reset()
	if err := db.ExportJSON(&buf, record.Filter{LeaseID: "none"}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil || len(got) != 0 {
		t.Fatalf("empty export %q = %v, %v", buf.String(), got, err)
	}
}

func TestExportCSV(t *testing.T) {
	db, want := exportFixture(t)
	var buf bytes.Buffer
	if err := db.ExportCSV(&buf, record.Filter{}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows[0], CSVHeader) {
		t.Fatalf("header = %q", rows[0])
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	var got []record.Entry
	for _, r := range rows[1:] {
		seq, err := strconv.ParseUint(r[col["seq"]], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := time.Parse(time.RFC3339Nano, r[col["time"]])
		if err != nil {
			t.Fatal(err)
		}
		amt, err := strconv.ParseFloat(r[col["amount"]], 64)
		if err != nil {
			t.Fatal(err)
		}
		e := record.Entry{
			Seq: seq, Time: ts, Kind: record.Kind(r[col["kind"]]), Direction: record.Direction(r[col["direction"]]),
			Amount: amt, Counterparty: r[col["counterparty"]], LeaseID: r[col["lease_id"]],
			JobID: r[col["job_id"]], PrevHash: r[col["prev_hash"]], Hash: r[col["hash"]],
		}
		if d := r[col["data"]]; d != "" {
			e.Data = json.RawMessage(d)
		}
		got = append(got, e)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CSV parsed back to %+v\nwant %+v", got, want)
	}
	checkChain(t, got)
}
