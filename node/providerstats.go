package node

import (
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/history"
	"github.com/gpumesh/gpumesh/runtime"
)

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
