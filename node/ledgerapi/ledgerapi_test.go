package ledgerapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestLedgerCalls: entries are listed, fetched, summed, verified and
// exported; queries that are no query are bad requests, an entry there is
// not is not found.
func TestLedgerCalls(t *testing.T) {
	db, err := ledger.Open(filepath.Join(t.TempDir(), "db"), ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mux := http.NewServeMux()
	Routes(mux, db, slog.New(slog.DiscardHandler))
	get := func(target string) (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		return w.Code, w.Body.String()
	}
	if code, body := get("/v1/ledger"); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("empty ledger: %d %s", code, body)
	}
	if _, err := db.Append(record.Entry{Kind: record.KindPaymentOwed, Amount: 1.5, Counterparty: "p1", LeaseID: "l1"}); err != nil {
		t.Fatal(err)
	}
	var es []record.Entry
	if code, body := get("/v1/ledger?kind=payment_owed&counterparty=p1&limit=5"); code != 200 || json.Unmarshal([]byte(body), &es) != nil || len(es) != 1 || es[0].Amount != 1.5 {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := get("/v1/ledger/1"); code != 200 || !strings.Contains(body, `"lease_id":"l1"`) {
		t.Fatalf("entry 1: %d %s", code, body)
	}
	if code, body := get("/v1/ledger/balances"); code != 200 || !strings.Contains(body, `"p1"`) {
		t.Fatalf("balances: %d %s", code, body)
	}
	if code, body := get("/v1/ledger/verify"); code != 200 {
		t.Fatalf("verify: %d %s", code, body)
	}
	if code, body := get("/v1/ledger/export?format=csv"); code != 200 || !strings.Contains(body, "l1") {
		t.Fatalf("export: %d %s", code, body)
	}
	for target, want := range map[string]int{
		"/v1/ledger?limit=-1": 400, "/v1/ledger?limit=many": 400, "/v1/ledger?since=yesterday": 400,
		"/v1/ledger?kind=bribe": 400, "/v1/ledger/0": 400, "/v1/ledger/abc": 400, "/v1/ledger/-1": 400,
		"/v1/ledger/99": 404, "/v1/ledger/export?format=xml": 400, "/v1/ledger/export?kind=bribe": 400,
	} {
		code, body := get(target)
		var eb api.ErrorBody
		if code != want || json.Unmarshal([]byte(body), &eb) != nil || eb.Error == "" {
			t.Errorf("%s: %d %s, want %d", target, code, body, want)
		}
	}
}
