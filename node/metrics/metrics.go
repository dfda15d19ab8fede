// Package metrics is the daemon's Prometheus metrics and the opt-in
// loopback listener that serves them, beside the web console and pprof.
// Events of the lease lifecycle are observed where they happen (Observer);
// levels and totals the daemon already keeps are read at scrape time
// (Register).
package metrics

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the daemon's Prometheus metrics. Events of the lease
// lifecycle (auctions ending, heartbeats, jobs ending) are observed where
// they happen, through lease.Observer; levels and totals the daemon already
// keeps (peers, occupancy, bids, the ledger's sums, protocol counters) are
// read at scrape time. They are served only on the opt-in loopback
// listener (metrics_addr), with /debug/pprof/.
type Metrics struct {
	reg *prometheus.Registry

	auctions     *prometheus.CounterVec
	auctionBids  prometheus.Histogram
	postToLease  prometheus.Histogram
	hbLag        prometheus.Histogram
	renterEnded  *prometheus.CounterVec
	renterRun    *prometheus.HistogramVec
	providerEnd  *prometheus.CounterVec
	providerRun  *prometheus.HistogramVec
	heartbeatsIn prometheus.Counter

	// last holds the last heartbeat of each live lease, by role, for the
	// per-lease GPU gauges.
	mu   sync.Mutex
	last map[leaseKey]attest.Heartbeat
}

type leaseKey struct{ role, lease string }

// Metric names the daemon exports, in one place (the Grafana dashboard in
// cmd/gpumesh/deploy may only query these; a test checks it).
const namespace = "gpumesh"

// New returns the lifecycle's metrics, registered.
func New() *Metrics {
	ns := namespace
	m := &Metrics{reg: prometheus.NewRegistry(), last: map[leaseKey]attest.Heartbeat{}}
	runBuckets := []float64{1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600}
	m.auctions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renter_auctions_total",
		Help: "Auctions of this node's jobs that ended, by outcome (leased, unplaceable)."}, []string{"outcome"})
	m.auctionBids = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "renter_auction_bids",
		Help: "Valid bids one bid window drew.", Buckets: []float64{0, 1, 2, 3, 5, 8, 13, 21}})
	m.postToLease = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "renter_post_to_lease_seconds",
		Help: "Time from a job's post to its confirmed lease.", Buckets: []float64{0.5, 1, 2, 3, 5, 10, 20, 40, 90}})
	m.hbLag = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "renter_heartbeat_lag_seconds",
		Help:    "Delay between a provider signing a heartbeat and this renter verifying it (includes clock skew).",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}})
	m.heartbeatsIn = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "renter_heartbeats_total",
		Help: "Verified heartbeats received for this node's leases."})
	m.renterEnded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renter_jobs_ended_total",
		Help: "This node's leases that ended, by run state (succeeded, failed, preempted, expired, cancelled)."}, []string{"run"})
	m.renterRun = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "renter_job_run_seconds",
		Help: "How long this node's jobs ran, by run state.", Buckets: runBuckets}, []string{"run"})
	m.providerEnd = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "provider_leases_ended_total",
		Help: "Leases this provider ran that ended, by run state."}, []string{"run"})
	m.providerRun = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "provider_job_run_seconds",
		Help: "How long jobs ran on this provider, by run state.", Buckets: runBuckets}, []string{"run"})
	m.reg.MustRegister(m.auctions, m.auctionBids, m.postToLease, m.hbLag, m.heartbeatsIn, m.renterEnded, m.renterRun,
		m.providerEnd, m.providerRun, leaseGPUCollector{m})
	return m
}

// Observer is what the lease lifecycle tells the metrics.
func (m *Metrics) Observer() *lease.Observer {
	return &lease.Observer{
		AuctionEnded: func(_ terms.Job, outcome string, bids int, wait time.Duration) {
			m.auctions.WithLabelValues(outcome).Inc()
			m.auctionBids.Observe(float64(bids))
			if outcome == lease.OutcomeLeased {
				m.postToLease.Observe(wait.Seconds())
			}
		},
		HeartbeatReceived: func(hb attest.Heartbeat, at time.Time) {
			m.heartbeatsIn.Inc()
			m.hbLag.Observe(max(0, at.Sub(hb.Time).Seconds()))
			m.setLast("renter", hb)
		},
		HeartbeatSent: func(hb attest.Heartbeat, _ terms.Lease) { m.setLast("provider", hb) },
		JobEnded: func(l terms.Lease, run terms.RunState, ran time.Duration) {
			m.renterEnded.WithLabelValues(string(run)).Inc()
			m.renterRun.WithLabelValues(string(run)).Observe(ran.Seconds())
			m.forget("renter", l.ID)
		},
		LeaseEnded: func(l terms.Lease, run terms.RunState, ran time.Duration) {
			m.providerEnd.WithLabelValues(string(run)).Inc()
			m.providerRun.WithLabelValues(string(run)).Observe(ran.Seconds())
			m.forget("provider", l.ID)
		},
	}
}

func (m *Metrics) setLast(role string, hb attest.Heartbeat) {
	m.mu.Lock()
	m.last[leaseKey{role, hb.LeaseID}] = hb
	m.mu.Unlock()
}

func (m *Metrics) forget(role, leaseID string) {
	m.mu.Lock()
	delete(m.last, leaseKey{role, leaseID})
	m.mu.Unlock()
}

// leaseGPUCollector exports the last heartbeat's GPU readings of each live
// lease: utilisation (mean over the lease's GPUs), temperature (hottest)
// and power (sum), as the provider sent them or the renter verified them.
// A heartbeat describes a lease's devices together, so the lease is the
// finest grain.
type leaseGPUCollector struct{ m *Metrics }

var (
	descUtil = prometheus.NewDesc(namespace+"_lease_gpu_utilization_percent",
		"Mean GPU utilisation of a live lease's GPUs in its last heartbeat.", []string{"role", "lease", "source"}, nil)
	descTemp = prometheus.NewDesc(namespace+"_lease_gpu_temperature_celsius",
		"Hottest GPU of a live lease in its last heartbeat.", []string{"role", "lease", "source"}, nil)
	descPower = prometheus.NewDesc(namespace+"_lease_gpu_power_watts",
		"Power drawn by a live lease's GPUs in its last heartbeat.", []string{"role", "lease", "source"}, nil)
	descHBAge = prometheus.NewDesc(namespace+"_lease_heartbeat_timestamp_seconds",
		"When a live lease's last heartbeat was signed (Unix time).", []string{"role", "lease", "source"}, nil)
)

func (c leaseGPUCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUtil, descTemp, descPower, descHBAge} {
		ch <- d
	}
}

func (c leaseGPUCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	keys := make([]leaseKey, 0, len(c.m.last))
	for k := range c.m.last {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].role+keys[i].lease < keys[j].role+keys[j].lease })
	hbs := make([]attest.Heartbeat, len(keys))
	for i, k := range keys {
		hbs[i] = c.m.last[k]
	}
	c.m.mu.Unlock()
	for i, k := range keys {
		hb := hbs[i]
		l := []string{k.role, k.lease, hb.Source}
		ch <- prometheus.MustNewConstMetric(descUtil, prometheus.GaugeValue, hb.GPUUtil, l...)
		ch <- prometheus.MustNewConstMetric(descTemp, prometheus.GaugeValue, float64(hb.TempC), l...)
		ch <- prometheus.MustNewConstMetric(descPower, prometheus.GaugeValue, float64(hb.PowerW), l...)
		ch <- prometheus.MustNewConstMetric(descHBAge, prometheus.GaugeValue, float64(hb.Time.UnixNano())/1e9, l...)
	}
}

// eventsCollector exports the daemon's protocol counters (the per-reason
// table of /v1/counters) as one counter with the event as a label.
type eventsCollector struct{ counters func() map[string]int }

var descEvents = prometheus.NewDesc(namespace+"_protocol_events_total",
	"Protocol events by kind: rejected or invalid messages by reason, accepted and duplicate receipts (as in `gpumesh counters`).",
	[]string{"event"}, nil)

func (c eventsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descEvents }

func (c eventsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counters()
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(counts[k]), k)
	}
}

// State is what the metrics read from the daemon at scrape time.
type State struct {
	// Peers is the number of connected libp2p peers.
	Peers func() int
	// GPUs is the number of GPUs the node offers.
	GPUs int
	// ProviderStats is the provider's figures; false when the node is not
	// a provider or cannot read them now.
	ProviderStats func() (api.ProviderStatsView, bool)
	// Balances are the ledger's balances per counterparty.
	Balances func() (map[string]record.Balance, error)
	// Reputation is the node's own score in its own book.
	Reputation func() float64
	// Jobs is the number of jobs the node has posted (all states).
	Jobs func() int
	// Counters are the protocol counters (as `gpumesh counters` shows).
	Counters func() map[string]int
	// Services are the node's services (as `serve status` shows them).
	Services func() []api.ServiceView
}

// Register adds the metrics read from s at scrape time.
func (m *Metrics) Register(s State) {
	ns := namespace
	reg := m.reg
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, f))
	}
	gauge("peers", "Connected libp2p peers.", func() float64 { return float64(s.Peers()) })
	gauge("gpus", "GPUs offered by this node.", func() float64 { return float64(s.GPUs) })
	stats := func(f func(api.ProviderStatsView) float64) func() float64 {
		return func() float64 {
			v, ok := s.ProviderStats()
			if !ok {
				return 0
			}
			return f(v)
		}
	}
	gauge("provider_occupancy_ratio", "Booked GPUs / GPUs now.", stats(func(v api.ProviderStatsView) float64 { return v.Occupancy }))
	gauge("provider_running_leases", "Leases running now.", stats(func(v api.ProviderStatsView) float64 { return float64(len(v.Running)) }))
	counter("provider_calls_total", "Calls for bids heard.", stats(func(v api.ProviderStatsView) float64 { return float64(v.Calls) }))
	counter("provider_bids_total", "Bids sent.", stats(func(v api.ProviderStatsView) float64 { return float64(v.Bids) }))
	counter("provider_leases_won_total", "Leases confirmed.", stats(func(v api.ProviderStatsView) float64 { return float64(v.Won) }))
	gauge("provider_booked_earnings_usd", "Earnings of confirmed leases as the auction engine books them (before settlement).",
		stats(func(v api.ProviderStatsView) float64 { return v.EarningsUSD }))
	gauge("provider_gpu_utilization_percent", "GPU utilisation now over running leases (NVML; 0 without it).",
		stats(func(v api.ProviderStatsView) float64 { return v.UtilizationPct }))
	counter("provider_earned_usd_total", "Earnings settled in the ledger (payments earned).", func() float64 {
		return ledgerSum(s.Balances, func(earned, _ float64) float64 { return earned })
	})
	counter("renter_spent_usd_total", "Spending settled in the ledger (payments owed).", func() float64 {
		return ledgerSum(s.Balances, func(_, owed float64) float64 { return owed })
	})
	gauge("reputation_score", "This node's reputation as its own book sees it.", s.Reputation)
	gauge("renter_jobs", "Jobs this node has posted (all states).", func() float64 { return float64(s.Jobs()) })
	reg.MustRegister(eventsCollector{s.Counters}, servicesCollector{s.Services})
}

// servicesCollector exports each service's figures (as `serve status`
// shows them), for the service (gone replicas included) and for each of
// its replicas, by job id.
type servicesCollector struct{ list func() []api.ServiceView }

// serviceFigure is one figure of ReplicaStats as a metric, exported as
// gpumesh_service_NAME{service} and gpumesh_service_replica_NAME{service,
// replica}.
type serviceFigure struct {
	name, help string
	kind       prometheus.ValueType
	value      func(api.ReplicaStats) float64
	svc, rep   *prometheus.Desc
}

var serviceFigures = func() []serviceFigure {
	fs := []serviceFigure{
		{name: "requests_total", help: "Requests answered (or failed).", kind: prometheus.CounterValue,
			value: func(s api.ReplicaStats) float64 { return float64(s.Requests) }},
		{name: "errors_total", help: "Requests that failed (transport errors and 5xx answers).", kind: prometheus.CounterValue,
			value: func(s api.ReplicaStats) float64 { return float64(s.Errors) }},
		{name: "outstanding_requests", help: "Requests in flight.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return float64(s.Outstanding) }},
		{name: "error_ratio", help: "Failed requests / requests over the last minute.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.ErrorRate }},
		{name: "latency_p50_seconds", help: "Median time to first byte over the last minute.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.P50MS / 1e3 }},
		{name: "latency_p95_seconds", help: "95th percentile time to first byte over the last minute.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.P95MS / 1e3 }},
		{name: "latency_p99_seconds", help: "99th percentile time to first byte over the last minute.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.P99MS / 1e3 }},
		{name: "gpu_seconds_total", help: "GPU time of the replicas' leases so far.", kind: prometheus.CounterValue,
			value: func(s api.ReplicaStats) float64 { return s.GPUSeconds }},
		{name: "cost_usd_total", help: "What the replicas' GPU time costs at their lease prices (the renter's estimate).", kind: prometheus.CounterValue,
			value: func(s api.ReplicaStats) float64 { return s.CostUSD }},
		{name: "usd_per_1k_requests", help: "Cost per 1,000 requests.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.USDPer1kRequests }},
		{name: "prompt_tokens_total", help: "Prompt tokens of OpenAI-compatible answers (their usage).", kind: prometheus.CounterValue,
			value: func(s api.ReplicaStats) float64 { return float64(s.PromptTokens) }},
		{name: "completion_tokens_total", help: "Completion tokens of OpenAI-compatible answers (their usage).", kind: prometheus.CounterValue,
			value: func(s api.ReplicaStats) float64 { return float64(s.CompletionTokens) }},
		{name: "completion_tokens_per_second", help: "Completion tokens per second over the last 10 s.", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.TokensPerSec }},
		{name: "usd_per_1m_tokens", help: "Cost per million tokens (prompt and completion).", kind: prometheus.GaugeValue,
			value: func(s api.ReplicaStats) float64 { return s.USDPer1MTokens }},
	}
	for i := range fs {
		f := &fs[i]
		f.svc = prometheus.NewDesc(namespace+"_service_"+f.name, "Service: "+f.help, []string{"service"}, nil)
		f.rep = prometheus.NewDesc(namespace+"_service_replica_"+f.name, "Service replica: "+f.help, []string{"service", "replica"}, nil)
	}
	return fs
}()

// Figures of a service as a whole (scale to zero) and of its regions.
var (
	serviceColdStarts = prometheus.NewDesc(namespace+"_service_cold_starts_total",
		"Service: requests that woke it from zero replicas.", []string{"service"}, nil)
	serviceLastColdStart = prometheus.NewDesc(namespace+"_service_last_cold_start_seconds",
		"Service: the latest cold start, from the waking request to its first replica ready.", []string{"service"}, nil)
	serviceScaledToZero = prometheus.NewDesc(namespace+"_service_scaled_to_zero",
		"Service: 1 while it runs no replica for being idle.", []string{"service"}, nil)
	serviceRegionReady = prometheus.NewDesc(namespace+"_service_region_ready_replicas",
		"Service region: replicas ready.", []string{"service", "region"}, nil)
	serviceRegionRTT = prometheus.NewDesc(namespace+"_service_region_rtt_seconds",
		"Service region: round trip to its nearest ready replica's provider, which routing ranks it by.", []string{"service", "region"}, nil)
)

func (c servicesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range serviceFigures {
		ch <- f.svc
		ch <- f.rep
	}
	for _, d := range []*prometheus.Desc{serviceColdStarts, serviceLastColdStart, serviceScaledToZero, serviceRegionReady, serviceRegionRTT} {
		ch <- d
	}
}

func (c servicesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.list() {
		if v.Stopped {
			continue
		}
		for _, f := range serviceFigures {
			ch <- prometheus.MustNewConstMetric(f.svc, f.kind, f.value(v.Totals), v.ID)
			for _, r := range v.Replicas {
				ch <- prometheus.MustNewConstMetric(f.rep, f.kind, f.value(r.ReplicaStats), v.ID, r.JobID)
			}
		}
		if v.Spec.ScaleToZero {
			asleep := 0.0
			if v.ScaledToZero {
				asleep = 1
			}
			ch <- prometheus.MustNewConstMetric(serviceColdStarts, prometheus.CounterValue, float64(v.ColdStarts), v.ID)
			ch <- prometheus.MustNewConstMetric(serviceLastColdStart, prometheus.GaugeValue, v.LastColdStartMS/1e3, v.ID)
			ch <- prometheus.MustNewConstMetric(serviceScaledToZero, prometheus.GaugeValue, asleep, v.ID)
		}
		for _, g := range v.Regions {
			ch <- prometheus.MustNewConstMetric(serviceRegionReady, prometheus.GaugeValue, float64(g.Ready), v.ID, g.Region)
			ch <- prometheus.MustNewConstMetric(serviceRegionRTT, prometheus.GaugeValue, g.RTTMS/1e3, v.ID, g.Region)
		}
	}
}

// ledgerSum adds f(earned, owed) over the ledger's balances.
func ledgerSum(balances func() (map[string]record.Balance, error), f func(earned, owed float64) float64) float64 {
	bal, err := balances()
	if err != nil {
		return 0
	}
	var s float64
	for _, b := range bal {
		s += f(b.Earned, b.Owed)
	}
	return s
}

// Console is the web console the metrics listener serves.
type Console interface {
	// Routes adds the console's pages and views to mux; tokened says a
	// token guards them.
	Routes(mux *http.ServeMux, tokened bool)
	// Public says which requests hold no data (the console's own files).
	Public(r *http.Request) bool
}

// ListenConfig is the metrics listener's.
type ListenConfig struct {
	// Addr is where it listens (metrics_addr), a loopback address
	// (CheckAddr).
	Addr string
	// TokenFile, when set, names the file holding the token every request
	// but Public's must carry (metrics_token_file).
	TokenFile string
	// Pprof adds /debug/pprof/ (metrics_pprof).
	Pprof bool
	// Console is the web console served beside the metrics.
	Console Console
}

// Listen opens the metrics listener: the metrics at /metrics, the web
// console (and, with Pprof, /debug/pprof/) on cfg.Addr, loopback only.
// The caller serves srv on ln and closes srv.
func (m *Metrics) Listen(cfg ListenConfig) (srv *http.Server, ln net.Listener, err error) {
	if err := CheckAddr(cfg.Addr); err != nil {
		return nil, nil, fmt.Errorf("metrics_addr %q: %w", cfg.Addr, err)
	}
	var token string
	if f := cfg.TokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("metrics_token_file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); len(token) < 16 {
			return nil, nil, fmt.Errorf("metrics_token_file %s: the token must be at least 16 characters", f)
		}
	}
	ln, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics_addr %s: %w", cfg.Addr, err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		// localhost resolved to something else.
		_ = ln.Close()
		return nil, nil, fmt.Errorf("metrics_addr %s: listening on %s, not loopback", cfg.Addr, ln.Addr())
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	cfg.Console.Routes(mux, token != "")
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv = &http.Server{Handler: guard(mux, ln.Addr().String(), cfg.Addr, token, cfg.Console.Public),
		ReadHeaderTimeout: 5 * time.Second}
	return srv, ln, nil
}

// CheckAddr accepts HOST:PORT where HOST is a loopback IP or exactly
// "localhost" (never a name that merely starts like one, such as
// 127.0.0.1.example.com) and PORT a port number: the metrics listener is
// never exposed.
func CheckAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want a loopback HOST:PORT (127.0.0.1:9464, [::1]:9464 or localhost:9464): %v", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q is not a port number (1-65535)", port)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("host %q is not a loopback address (127.0.0.1, ::1 or localhost): the metrics listener is never exposed", host)
	}
	return nil
}

// guard admits a request to the metrics listener only when its
// Host names the listener (its address, the configured one, or
// localhost on its port: a browser page on a name rebound to loopback is
// refused) and, with a token, when it carries it (Authorization: Bearer,
// or ?token= for the console in a browser; compared in constant time),
// except what public says holds no data (the console's own files). No
// answer of the listener is to be sniffed into another type (a job's log
// is text, whatever it says).
func guard(next http.Handler, listenAddr, configured, token string, public func(*http.Request) bool) http.Handler {
	hosts := []string{listenAddr, configured}
	if _, port, err := net.SplitHostPort(listenAddr); err == nil {
		hosts = append(hosts, net.JoinHostPort("localhost", port))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !slices.ContainsFunc(hosts, func(h string) bool { return strings.EqualFold(h, r.Host) }) {
			http.Error(w, fmt.Sprintf("host %q is not this listener", r.Host), http.StatusMisdirectedRequest)
			return
		}
		if token != "" && !public(r) {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok {
				got = r.URL.Query().Get("token")
			}
			if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "metrics: token required (metrics_token_file)", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
