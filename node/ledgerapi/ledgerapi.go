// Package ledgerapi is the control API's ledger calls: entries (listed or
// exported as JSON or CSV, by kind, counterparty, lease, time and count),
// one entry, the balances, and a verification of the chain.
package ledgerapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
)

// filter is the entries a call asks for: kind, counterparty, lease,
// limit and since (RFC 3339) from its query.
func filter(r *http.Request) (record.Filter, error) {
	q := r.URL.Query()
	f := record.Filter{Kind: record.Kind(q.Get("kind")), Counterparty: q.Get("counterparty"), LeaseID: q.Get("lease")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, api.BadRequest("limit must be a non-negative integer, got %q", v)
		}
		f.Limit = n
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, api.BadRequest("since must be RFC3339, got %q", v)
		}
		f.Since = t
	}
	if f.Kind != "" && !record.KnownKind(f.Kind) {
		return f, api.BadRequest("unknown entry kind %q (%s)", f.Kind, record.KindNames())
	}
	return f, nil
}

// Routes registers the ledger calls of db on mux; log receives an export
// that failed half way (its answer is under way).
func Routes(mux *http.ServeMux, db *ledger.DB, log *slog.Logger) {
	api.Handle(mux, "GET /v1/ledger", func(r *http.Request) (any, error) {
		f, err := filter(r)
		if err != nil {
			return nil, err
		}
		es, err := db.List(f)
		if es == nil {
			es = []record.Entry{}
		}
		return es, err
	})
	api.Handle(mux, "GET /v1/ledger/verify", func(*http.Request) (any, error) {
		rep, err := db.Verify()
		var te *ledger.TamperError
		if errors.As(err, &te) {
			return nil, &api.StatusError{Code: http.StatusConflict, Msg: err.Error()}
		}
		return rep, err
	})
	api.Handle(mux, "GET /v1/ledger/balances", func(*http.Request) (any, error) { return db.Balances() })
	api.Handle(mux, "GET /v1/ledger/{seq}", func(r *http.Request) (any, error) {
		seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
		if err != nil || seq == 0 {
			return nil, api.BadRequest("entry sequence number must be a positive integer, got %q", r.PathValue("seq"))
		}
		e, err := db.Get(seq)
		if errors.Is(err, ledger.ErrNotFound) {
			return nil, api.NotFound("no ledger entry %d", seq)
		}
		return e, err
	})
	mux.HandleFunc("GET /v1/ledger/export", func(w http.ResponseWriter, r *http.Request) {
		f, err := filter(r)
		if err != nil {
			api.WriteError(w, err)
			return
		}
		switch r.URL.Query().Get("format") {
		case "", "json":
			w.Header().Set("Content-Type", "application/json")
			err = db.ExportJSON(w, f)
		case "csv":
			w.Header().Set("Content-Type", "text/csv")
			err = db.ExportCSV(w, f)
		default:
			api.WriteError(w, api.BadRequest("format must be json or csv"))
			return
		}
		if err != nil {
			log.Warn("ledger export", "err", err)
		}
	})
}
