package node

import (
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// The read-only local dashboard: one HTML page on the metrics listener
// (loopback only, opt-in), rendered on the server from the same views the
// control API answers (`gpumesh provider stats`, `gpumesh job list`), with
// no script. Every figure carries a data-field attribute naming its JSON
// field, so tests (and scrapers) can compare it with the API.

var dashboardPage = template.Must(template.New("dash").Funcs(template.FuncMap{
	"usd":  func(v float64) string { return fmt.Sprintf("%.4f", v) },
	"pct":  func(v float64) string { return fmt.Sprintf("%.1f", 100*v) },
	"time": func(t time.Time) string { return fmtTimeUTC(t) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="15">
<title>gpumesh {{.Peer}}</title>
<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}h2{margin-top:1.5em}</style>
</head><body>
<h1>gpumesh node <code data-field="peer_id">{{.Peer}}</code></h1>
<p>version <span data-field="version">{{.Version}}</span>, <span data-field="peers">{{.Peers}}</span> peers, region <span data-field="region">{{.Region}}</span>. Read-only; refreshes every 15 s.</p>
<h2>Provider</h2>
{{with .Provider}}<table id="provider">
<tr><th>GPUs</th><td data-field="gpus">{{.GPUs}}</td></tr>
<tr><th>Occupancy %</th><td data-field="occupancy">{{pct .Occupancy}}</td></tr>
<tr><th>Calls</th><td data-field="calls">{{.Calls}}</td></tr>
<tr><th>Bids</th><td data-field="bids">{{.Bids}}</td></tr>
<tr><th>Won</th><td data-field="won">{{.Won}}</td></tr>
<tr><th>Lost</th><td data-field="lost">{{.Lost}}</td></tr>
<tr><th>Earnings booked (USD)</th><td data-field="earnings_usd">{{usd .EarningsUSD}}</td></tr>
<tr><th>Earnings settled (USD)</th><td data-field="ledger_earned_usd">{{usd .LedgerEarnedUSD}}</td></tr>
<tr><th>Reputation</th><td data-field="reputation.score">{{printf "%.3f" .Reputation.Score}}</td></tr>
</table>
<h3>Leases</h3><table id="provider-leases"><tr><th>lease</th><th>job</th><th>run</th><th>started</th><th>ended</th></tr>
{{range .Running}}<tr data-lease="{{.Lease.ID}}"><td>{{.Lease.ID}}</td><td>{{.Lease.JobID}}</td><td>{{.Run}}</td><td>{{time .Started}}</td><td>{{time .Ended}}</td></tr>
{{end}}{{range .Recent}}<tr data-lease="{{.Lease.ID}}"><td>{{.Lease.ID}}</td><td>{{.Lease.JobID}}</td><td>{{.Run}}</td><td>{{time .Started}}</td><td>{{time .Ended}}</td></tr>
{{end}}</table>{{else}}<p id="provider">This node does not sell GPU time.</p>{{end}}
<h2>Renter</h2>
<table id="jobs"><tr><th>job</th><th>state</th><th>run</th><th>provider</th><th>price</th><th>cost (USD)</th></tr>
{{range .Jobs}}<tr data-job="{{.Job.ID}}"><td>{{.Job.ID}}</td><td data-field="state">{{.State}}</td><td data-field="run">{{.Run}}</td><td>{{with .Lease}}{{.Provider}}{{end}}</td><td>{{with .Lease}}{{.Price}}{{end}}</td><td data-field="cost_usd">{{usd .CostUSD}}</td></tr>
{{end}}</table>
</body></html>
`))

func fmtTimeUTC(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

type dashboardData struct {
	Peer, Version, Region string
	Peers                 int
	Provider              *api.ProviderStatsView
	Jobs                  []api.JobView
}

// serveDashboard renders the page at "/".
func (d *Daemon) serveDashboard(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	data := dashboardData{Peer: d.ID().String(), Version: Version, Region: d.cfg.Region, Peers: len(d.net.Host.Network().Peers())}
	if m := d.market; m != nil {
		if m.provider != nil {
			if v, err := m.providerStats(); err == nil {
				data.Provider = &v
			}
		}
		data.Jobs = m.tracker.List()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	if err := dashboardPage.Execute(w, data); err != nil {
		d.log.Warn("dashboard", "err", err)
	}
}
