package node

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func freeLoopback(t *testing.T) string {
	t.Helper()
	// Below the kernel's ephemeral range: the other parallel tests'
	// daemons listen on port 0 and dial out from ports in that range, so
	// a port taken from it and freed is anyone's until this test's daemon
	// binds it (a bootstrap peer started after its provider once lost its
	// port so: "address already in use").
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const first = 10000
	for i := 0; i < 100 && low > first+1000; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first+rand.IntN(low-first))))
		if err != nil {
			continue
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func scrape(t *testing.T, addr string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, body)
	}
	return body, fams
}

// value is the value of the sample of family name whose labels include
// want (a counter's or gauge's value, a histogram's count).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		for _, lp := range m.Label {
			if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no sample of %s with labels %v", name, want)
	return 0
}

// TestMetricsAfterAJob: a renter and a provider with metrics on run one job;
// both endpoints then carry the lifecycle's observations (auction outcome,
// post→lease latency, heartbeats, run time by outcome, settled money),
// every *_total is a counter, promtool accepts the exposition, and pprof
// answers on the same listener.
func TestMetricsAfterAJob(t *testing.T) {
	provCfg := fastConfig(providerConfig("eu-west", 1.0, a100))
	provCfg.MetricsAddr = freeLoopback(t)
	provCfg.MetricsPprof = true
	renterCfg := renterConfig()
	renterCfg.MetricsAddr = freeLoopback(t)
	root := t.TempDir()
	renter := startNode(t, root+"/renter", renterCfg, nil)
	defer renter.Close()
	prov := startNode(t, root+"/prov", provCfg, renter.Daemon)
	defer prov.Close()
	waitAdvertised(t, renter, prov)

	v := post(t, renter, shJob(terms.Silver, 2, `sleep 1; echo done`))
	if !leased(v) {
		t.Fatalf("not leased: %v", v.Reasons)
	}
	v = waitJob(t, renter, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("run %s: %s", v.Run, v.Detail)
	}
	// The provider settles its side once the renter countersigned.
	var provBody []byte
	var provFams map[string]*dto.MetricFamily
	waitChange(t, 15*time.Second, "provider settled", func() bool {
		provBody, provFams = scrape(t, provCfg.MetricsAddr)
		f := provFams["gpumesh_provider_earned_usd_total"]
		return f != nil && f.Metric[0].Counter.GetValue() > 0
	}, prov.market.receipts.Changed)
	renterBody, renterFams := scrape(t, renterCfg.MetricsAddr)

	checks := []struct {
		name   string
		fams   map[string]*dto.MetricFamily
		metric string
		labels map[string]string
		min    float64
		max    float64
	}{
		{"auction leased", renterFams, "gpumesh_renter_auctions_total", map[string]string{"outcome": "leased"}, 1, 1},
		{"post to lease observed", renterFams, "gpumesh_renter_post_to_lease_seconds", nil, 1, 1},
		{"bids per window observed", renterFams, "gpumesh_renter_auction_bids", nil, 1, 1},
		{"heartbeat lag observed", renterFams, "gpumesh_renter_heartbeat_lag_seconds", nil, 1, 1e9},
		{"renter job succeeded", renterFams, "gpumesh_renter_jobs_ended_total", map[string]string{"run": "succeeded"}, 1, 1},
		{"renter run time observed", renterFams, "gpumesh_renter_job_run_seconds", map[string]string{"run": "succeeded"}, 1, 1},
		{"renter spent", renterFams, "gpumesh_renter_spent_usd_total", nil, 1e-9, 2},
		{"provider lease succeeded", provFams, "gpumesh_provider_leases_ended_total", map[string]string{"run": "succeeded"}, 1, 1},
		{"provider run time observed", provFams, "gpumesh_provider_job_run_seconds", map[string]string{"run": "succeeded"}, 1, 1},
		{"provider won", provFams, "gpumesh_provider_leases_won_total", nil, 1, 1},
		{"provider bid", provFams, "gpumesh_provider_bids_total", nil, 1, 1e9},
		{"provider earned", provFams, "gpumesh_provider_earned_usd_total", nil, 1e-9, 2},
		{"provider occupancy back to idle", provFams, "gpumesh_provider_occupancy_ratio", nil, 0, 0},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if got := value(t, c.fams, c.metric, c.labels); got < c.min || got > c.max {
				t.Fatalf("%s%v = %v, want in [%v, %v]", c.metric, c.labels, got, c.min, c.max)
			}
		})
	}
	// Settled money agrees with the receipt.
	if got := value(t, renterFams, "gpumesh_renter_spent_usd_total", nil); absf(got-v.Receipt.Amount) > 1e-9 {
		t.Errorf("spent %v, receipt %v", got, v.Receipt.Amount)
	}
	// A finished lease leaves no per-lease GPU gauge behind.
	if f := renterFams["gpumesh_lease_gpu_utilization_percent"]; f != nil && len(f.Metric) > 0 {
		t.Errorf("per-lease gauges outlive the lease: %v", f.Metric)
	}
	for who, fams := range map[string]map[string]*dto.MetricFamily{"renter": renterFams, "provider": provFams} {
		for name, f := range fams {
			isTotal := strings.HasSuffix(name, "_total")
			if isTotal != (f.GetType() == dto.MetricType_COUNTER) {
				t.Errorf("%s: %s is a %s", who, name, f.GetType())
			}
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian package prometheus; .ci/run installs it): exposition lint skipped")
	} else {
		for who, body := range map[string][]byte{"renter": renterBody, "provider": provBody} {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = bytes.NewReader(body)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics (%s): %v\n%s", who, err, out)
			}
		}
	}
	resp, err := http.Get("http://" + provCfg.MetricsAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "goroutine profile") {
		t.Fatalf("pprof: %d %.200s", resp.StatusCode, b)
	}
}
