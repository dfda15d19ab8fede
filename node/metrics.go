package node

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics exposes Prometheus metrics on the configured loopback
// address (opt-in: metrics_addr). Values are read from the daemon's state at
// scrape time, so no hot path is instrumented.
func (d *Daemon) serveMetrics() error {
	if d.cfg.MetricsAddr == "" {
		return nil
	}
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpumesh", Name: name, Help: help}, f))
	}
	gauge("peers", "Connected libp2p peers.", func() float64 { return float64(len(d.net.Host.Network().Peers())) })
	gauge("gpus", "GPUs offered by this node.", func() float64 { return float64(len(d.inv.GPUs)) })
	m := d.market
	stats := func(f func(api.ProviderStatsView) float64) func() float64 {
		return func() float64 {
			if m == nil || m.provider == nil {
				return 0
			}
			v, err := m.providerStats()
			if err != nil {
				return 0
			}
			return f(v)
		}
	}
	gauge("provider_occupancy_ratio", "Booked GPUs / GPUs now.", stats(func(v api.ProviderStatsView) float64 { return v.Occupancy }))
	gauge("provider_bids_total", "Bids sent.", stats(func(v api.ProviderStatsView) float64 { return float64(v.Bids) }))
	gauge("provider_leases_won_total", "Leases confirmed.", stats(func(v api.ProviderStatsView) float64 { return float64(v.Won) }))
	gauge("provider_running_leases", "Leases running now.", stats(func(v api.ProviderStatsView) float64 { return float64(len(v.Running)) }))
	gauge("provider_earnings_usd", "Earnings of confirmed leases (engine view).", stats(func(v api.ProviderStatsView) float64 { return v.EarningsUSD }))
	gauge("provider_settled_earnings_usd", "Earnings settled in the ledger.", stats(func(v api.ProviderStatsView) float64 { return v.LedgerEarnedUSD }))
	gauge("provider_p95_job_seconds", "95th percentile job run time.", stats(func(v api.ProviderStatsView) float64 { return v.P95JobSeconds }))
	gauge("provider_gpu_utilization_pct", "GPU utilisation over running leases (NVML).", stats(func(v api.ProviderStatsView) float64 { return v.UtilizationPct }))
	gauge("reputation_score", "This node's reputation as its own book sees it.", func() float64 {
		if m == nil {
			return 0
		}
		return m.book.Score(d.ID().String())
	})
	gauge("renter_jobs", "Jobs this node has posted.", func() float64 {
		if m == nil {
			return 0
		}
		return float64(len(m.tracker.List()))
	})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "gpumesh", Name: "rejected_messages", Help: "Rejected or invalid messages (sum of all reasons; per-reason in /v1/counters)."},
		func() float64 {
			if m == nil {
				return 0
			}
			n := 0
			for k, v := range m.allCounters() {
				if k != "reputation.accepted" && k != "reputation.duplicate" {
					n += v
				}
			}
			return float64(n)
		}))
	ln, err := net.Listen("tcp", d.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics_addr %s: %w", d.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Warn("metrics server", "err", err)
		}
	}()
	go func() {
		<-d.ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
