package metrics

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/console"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsGuard: with a token, the listener answers only requests that
// carry it; without the listener's own Host, none.
func TestMetricsGuard(t *testing.T) {
	const token = "0123456789abcdef-secret"
	h := guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if console.Public(r) {
			io.WriteString(w, "console file")
			return
		}
		io.WriteString(w, "gpumesh_gpus 1")
	}), "127.0.0.1:9464", "localhost:9464", token, console.Public)
	for _, tc := range []struct {
		name, host, target, auth string
		code                     int
	}{
		{"no token", "127.0.0.1:9464", "/metrics", "", http.StatusUnauthorized},
		{"wrong token", "127.0.0.1:9464", "/metrics", "Bearer 0123456789abcdef-secreT", http.StatusUnauthorized},
		{"basic auth", "127.0.0.1:9464", "/metrics", "Basic " + token, http.StatusUnauthorized},
		{"bearer", "127.0.0.1:9464", "/metrics", "Bearer " + token, http.StatusOK},
		{"query", "localhost:9464", "/?token=" + token, "", http.StatusOK},
		{"rebound host", "evil.example:9464", "/metrics", "Bearer " + token, http.StatusMisdirectedRequest},
		// The console's own files hold no data: a page loaded with ?token=
		// gets its script and style without it, and its data with it.
		{"console page", "127.0.0.1:9464", "/job.html", "", http.StatusOK},
		{"console script", "127.0.0.1:9464", "/console.js", "", http.StatusOK},
		{"console view", "127.0.0.1:9464", "/v1/jobs", "", http.StatusUnauthorized},
		{"not a console file", "127.0.0.1:9464", "/console.js.map", "", http.StatusUnauthorized},
		{"console file, rebound host", "evil.example:9464", "/console.js", "", http.StatusMisdirectedRequest},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.target, nil)
		req.Host = tc.host
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.code || (tc.code != http.StatusOK && strings.Contains(w.Body.String(), "gpumesh_")) {
			t.Errorf("%s: %d %q, want %d", tc.name, w.Code, w.Body.String(), tc.code)
		}
	}
}

// TestMetricsHeartbeatGauges: while a lease runs, the provider exports its
// last heartbeat's GPU readings and the renter the ones it verified.
func TestMetricsHeartbeatGauges(t *testing.T) {
	m := New()
	o := m.Observer()
	now := time.Now()
	l := terms.Lease{ID: "l1"}
	o.HeartbeatSent(hbAt("l1", now, 87.5), l)
	o.HeartbeatReceived(hbAt("l1", now, 87.5), now.Add(250*time.Millisecond))
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, role := range []string{"provider", "renter"} {
		if got := value(t, byName, "gpumesh_lease_gpu_utilization_percent", map[string]string{"role": role, "lease": "l1"}); got != 87.5 {
			t.Errorf("%s utilisation %v", role, got)
		}
		if got := value(t, byName, "gpumesh_lease_gpu_temperature_celsius", map[string]string{"role": role}); got != 71 {
			t.Errorf("%s temperature %v", role, got)
		}
		if got := value(t, byName, "gpumesh_lease_gpu_power_watts", map[string]string{"role": role}); got != 300 {
			t.Errorf("%s power %v", role, got)
		}
	}
	if h := byName["gpumesh_renter_heartbeat_lag_seconds"].Metric[0].Histogram; h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-0.25) > 1e-9 {
		t.Errorf("lag histogram %v", h)
	}
	o.LeaseEnded(l, terms.RunSucceeded, time.Second)
	o.JobEnded(l, terms.RunSucceeded, time.Second)
	fams, _ = m.reg.Gather()
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "gpumesh_lease_") && len(f.Metric) > 0 {
			t.Errorf("%s outlives the lease", f.GetName())
		}
	}
}

func hbAt(leaseID string, at time.Time, util float64) attest.Heartbeat {
	return attest.Heartbeat{LeaseID: leaseID, Provider: "p", Seq: 1, Time: at, GPUUtil: util, TempC: 71, PowerW: 300, Source: attest.SourceNVML}
}

// value is the value of the first sample of metric name whose labels
// include want.
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
		if m.Gauge != nil {
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no sample of %s with labels %v", name, want)
	return 0
}

// TestCheckAddr: the listener's address is loopback, with a port, or
// refused in one line.
func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9464": true, "[::1]:9464": true, "localhost:9464": true,
		"127.0.0.1.example.com:9464": false, "0.0.0.0:9999": false, ":9464": false, "10.0.0.1:9464": false,
		"127.0.0.1": false, "127.0.0.1:0": false, "127.0.0.1:99999": false, "localhost": false, "\x00:1": false,
	} {
		if err := CheckAddr(addr); (err == nil) != ok || (err != nil && strings.Contains(err.Error(), "\n")) {
			t.Errorf("CheckAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}
