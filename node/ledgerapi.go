package node

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/history"
	"github.com/gpumesh/gpumesh/runtime"
)

func ledgerFilter(r *http.Request) (record.Filter, error) {
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

func (m *market) ledgerRoutes(mux *http.ServeMux) {
	db := m.d.db
	api.Handle(mux, "GET /v1/ledger", func(r *http.Request) (any, error) {
		f, err := ledgerFilter(r)
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
		f, err := ledgerFilter(r)
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
			m.d.log.Warn("ledger export", "err", err)
		}
	})
}

// providerStats is the provider's live view: occupancy, bids, earnings,
// leases, utilisation and reputation.
func (m *market) providerStats() (api.ProviderStatsView, error) {
	if m.provider == nil {
		return api.ProviderStatsView{}, api.BadRequest("%v", errNoProvider)
	}
	v := api.ProviderStatsView{ProviderStats: m.provider.Stats(), Enabled: true, GPUs: len(m.d.inv.GPUs),
		Reputation: m.book.Stats(m.d.ID().String())}
	if v.Leases == nil {
		v.Leases = []auction.Lease{}
	}
	m.sup.FillStats(&v)
	if v.Draining {
		dv := m.sup.DrainView()
		dv.Draining = true
		v.Drain = &dv
	}
	if len(v.Running) > 0 && m.d.inv.Source == "nvml" {
		v.UtilizationPct = runtime.Sample(m.d.inv).GPUUtil
	}
	bal, err := m.d.db.Balances()
	if err != nil {
		return v, err
	}
	for _, b := range bal {
		v.LedgerEarnedUSD += b.Earned
	}
	return v, nil
}

// providerSample is a point of the provider's history: its stats now.
func (m *market) providerSample() (api.ProviderSample, error) {
	v, err := m.providerStats()
	return api.ProviderSample{Time: m.d.now(), Occupancy: v.Occupancy, Running: len(v.Running), EarningsUSD: v.EarningsUSD,
		LedgerEarnedUSD: v.LedgerEarnedUSD}, err
}

// providerHistory is the provider's earnings and occupancy over the last
// day: the samples kept, then one of now (the stats it answers now).
func (m *market) providerHistory() (api.ProviderHistoryView, error) {
	if m.provider == nil {
		return api.ProviderHistoryView{}, api.BadRequest("%v", errNoProvider)
	}
	now, err := m.providerSample()
	if err != nil {
		return api.ProviderHistoryView{}, err
	}
	return api.ProviderHistoryView{Every: history.Every, Samples: append(m.provHistory.All(), now)}, nil
}

// sampleProvider keeps the provider's history: a sample at the start of
// every minute, until the market closes. A sample whose ledger read
// failed keeps the other figures.
func (m *market) sampleProvider() {
	take := func() api.ProviderSample {
		s, err := m.providerSample()
		if err != nil {
			m.d.log.Warn("provider history sample", "err", err)
		}
		return s
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		now := m.d.now()
		m.provHistory.Sample(now, take)
		t.Reset(min(max(history.Next(now), time.Second), history.Every))
	}
}
