// Package providerstats is a provider's figures for its operator (the
// console, `gpumesh provider stats`, the metrics): its live stats
// (occupancy, bids, earnings, leases, utilisation, reputation, drain) and
// their history over the last day, one sample a minute.
package providerstats

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/history"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/runtime"
)

// ErrNotProvider refuses the figures of a node that is not a provider.
var ErrNotProvider = &api.StatusError{Code: http.StatusBadRequest, Msg: "this node is not a provider (set provider.enabled in its config)"}

// Ledger is the node's ledger as the provider's figures read it
// (ledger.DB).
type Ledger interface {
	// Balances are the ledger's balances per counterparty.
	Balances() (map[string]record.Balance, error)
}

// Config is what the figures are read from.
type Config struct {
	Provider   *auction.Provider
	Supervisor *lease.Supervisor
	// Book is the node's reputation book; Self is the node in it.
	Book *attest.Book
	Self string
	// Inventory is the provider's GPUs (utilisation read off NVML).
	Inventory runtime.Inventory
	// Ledger holds the earnings settled.
	Ledger Ledger
	Now    func() time.Time
	Log    *slog.Logger
}

// Stats are a provider's figures; a nil *Stats is a node that is not a
// provider (ErrNotProvider).
type Stats struct {
	cfg  Config
	hist *history.Ring[api.ProviderSample]
}

// New returns the figures of the provider cfg describes.
func New(cfg Config) *Stats {
	return &Stats{cfg: cfg, hist: history.New[api.ProviderSample](history.Keep)}
}

// Now is the provider's live view: occupancy, bids, earnings, leases,
// utilisation and reputation.
func (s *Stats) Now() (api.ProviderStatsView, error) {
	if s == nil {
		return api.ProviderStatsView{}, ErrNotProvider
	}
	c := s.cfg
	v := api.ProviderStatsView{ProviderStats: c.Provider.Stats(), Enabled: true, GPUs: len(c.Inventory.GPUs),
		Reputation: c.Book.Stats(c.Self)}
	if v.Leases == nil {
		v.Leases = []terms.Lease{}
	}
	c.Supervisor.FillStats(&v)
	if v.Draining {
		dv := c.Supervisor.DrainView()
		dv.Draining = true
		v.Drain = &dv
	}
	if len(v.Running) > 0 && c.Inventory.Source == "nvml" {
		v.UtilizationPct = runtime.Sample(c.Inventory).GPUUtil
	}
	bal, err := c.Ledger.Balances()
	if err != nil {
		return v, err
	}
	for _, b := range bal {
		v.LedgerEarnedUSD += b.Earned
	}
	return v, nil
}

// sample is a point of the provider's history: its stats now.
func (s *Stats) sample() (api.ProviderSample, error) {
	v, err := s.Now()
	return api.ProviderSample{Time: s.cfg.Now(), Occupancy: v.Occupancy, Running: len(v.Running), EarningsUSD: v.EarningsUSD,
		LedgerEarnedUSD: v.LedgerEarnedUSD}, err
}

// History is the provider's earnings and occupancy over the last day:
// the samples kept, then one of now (the stats it answers now).
func (s *Stats) History() (api.ProviderHistoryView, error) {
	if s == nil {
		return api.ProviderHistoryView{}, ErrNotProvider
	}
	now, err := s.sample()
	if err != nil {
		return api.ProviderHistoryView{}, err
	}
	return api.ProviderHistoryView{Every: history.Every, Samples: append(s.hist.All(), now)}, nil
}

// Sample keeps the provider's history: a sample at the start of every
// minute, until ctx ends. A sample whose ledger read failed keeps the
// other figures.
func (s *Stats) Sample(ctx context.Context) {
	take := func() api.ProviderSample {
		p, err := s.sample()
		if err != nil {
			s.cfg.Log.Warn("provider history sample", "err", err)
		}
		return p
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.cfg.Now()
		s.hist.Sample(now, take)
		t.Reset(min(max(history.Next(now), time.Second), history.Every))
	}
}
