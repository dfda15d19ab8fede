package latency

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet/internal/nstest"
)

// buildServer builds node/testdata/svcserver, the replicas' HTTP server,
// into a directory under /run that job uids can read (as root, jobs get a
// private /tmp). Replicas left running by a provider killed under them
// (the test does that) are killed, by their binary, once the test ends.
func buildServer(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/run", "gpumesh-region-test-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "svcserver")
	t.Cleanup(func() {
		killByExe(t, bin)
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, "./node/testdata/svcserver")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build svcserver: %v: %s", err, out)
	}
	return bin
}

// killByExe kills the processes running bin (this test's own binary, at a
// path no one else uses).
func killByExe(t *testing.T, bin string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Errorf("list processes: %v", err)
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == bin {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// p95 is the 95th percentile of ds.
func p95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*95+99)/100-1]
}

// TestRegionalServingOverDelayedLinks (issue 26, acceptance 1): a service
// with two replicas in each of two regions, eu 5 ms of round trip from
// the renter (whose gateway its clients call) and us 80 ms, near eu-west.
// Its requests are served by the eu replicas, whose p95 is below the us
// ones' by about the 75 ms between them; SIGKILLing the eu provider under
// load (GETs, and POSTs with an Idempotency-Key) fails over to us with no
// request failed.
func TestRegionalServingOverDelayedLinks(t *testing.T) {
	requireNetns(t)
	began := time.Now()
	bin, tmp := buildGpumesh(t)
	srv := buildServer(t)
	tp := buildTopology(t)
	n := &testNet{&nstest.Net{T: t, Bin: bin, Tmp: tmp}}
	renter, boot := n.startRenter(tp, "metrics_addr: 127.0.0.1:9464\n")
	near := n.Start("near", tp.near, providerConfig(nearIP, boot, "eu-west", 1.0))
	far := n.Start("far", tp.far, providerConfig(farIP, boot, "us-east", 1.0))
	n.awaitProviders(renter, map[string]string{near.ID: "near", far.ID: "far"})

	var v api.ServiceView
	posted := time.Now()
	if err := n.CLIJSON(renter, &v, "serve", "post", "--id", "regional", "--port", "8000", "--max-price", "5", "--gpu", "RTX4090",
		"--regions", "eu,us", "--replicas-per-region", "2", "--near", "eu-west", "--health", "/healthz", "--lease", "10m",
		"--json", "--", srv); err != nil {
		t.Fatal(err)
	}
	if v.Spec.Replicas != 4 {
		t.Fatalf("service posted with %d replicas, want 2 regions × 2", v.Spec.Replicas)
	}
	status := func() api.ServiceView {
		t.Helper()
		var v api.ServiceView
		if err := n.CLIJSON(renter, &v, "serve", "status", "--json", "regional"); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// byRegion adds up the requests each region's replicas served.
	byRegion := func(v api.ServiceView) map[string]int64 {
		m := map[string]int64{}
		for _, r := range v.Replicas {
			m[r.Region] += r.Requests
		}
		return m
	}
	v = nstest.Await(t, "four replicas ready, eu routed first", 120*time.Second, func() (api.ServiceView, error) {
		v := status()
		if v.Ready != 4 || len(v.Regions) != 2 || v.Regions[0].Rank != 1 || v.Regions[0].Ready != 2 || v.Regions[1].Ready != 2 {
			return v, fmt.Errorf("%d ready, regions %+v", v.Ready, v.Regions)
		}
		return v, nil
	})
	for _, r := range v.Replicas {
		if want := map[string]string{"eu": near.ID, "us": far.ID}[r.Region]; r.Provider != want {
			t.Fatalf("replica %s in %s on %s, want the provider there", r.JobID, r.Region, r.Provider)
		}
		if want := map[string]string{"eu": "eu-west", "us": "us-east"}[r.Region]; r.ProviderRegion != want || r.RTTMS <= 0 {
			t.Fatalf("replica %s in %s: provider region %q, rtt %v ms; want %s, measured", r.JobID, r.Region, r.ProviderRegion, r.RTTMS, want)
		}
	}
	client := nstest.HTTPClient(tp.renter)
	resp, err := client.Get("http://127.0.0.1:9464/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`gpumesh_service_region_ready_replicas{region="eu",service="regional"} 2`,
		`gpumesh_service_region_ready_replicas{region="us",service="regional"} 2`} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("the renter's metrics lack %q", want)
		}
	}
	// The us region's round trip, in seconds: at least the 80 ms the link
	// adds (less 5 ms for the clock's grain), and far under a second (not
	// milliseconds). Above that, the figure is the host's load, not the
	// link's.
	rtt := regexp.MustCompile(`(?m)^gpumesh_service_region_rtt_seconds\{region="us",service="regional"\} (\S+)$`).FindSubmatch(metrics)
	if rtt == nil {
		t.Fatalf("the renter's metrics lack the us region's rtt")
	}
	if sec, err := strconv.ParseFloat(string(rtt[1]), 64); err != nil || sec < 0.075 || sec >= 1 {
		t.Fatalf("the us region's rtt is %s s, want the link's 80 ms in seconds", rtt[1])
	}
	t.Logf("4 replicas ready %s after the post (test at %s); regions %+v", time.Since(posted).Round(time.Millisecond), time.Since(began).Round(time.Millisecond), v.Regions)

	base := "http://" + v.Gateway
	do := func(method, path, key, body string) (time.Duration, error) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, rd)
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-Gpumesh-Token", v.Token)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		switch {
		case err != nil:
			return 0, err
		case resp.StatusCode != 200:
			return 0, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, got)
		case body != "" && string(got) != body:
			return 0, fmt.Errorf("%s %s answered %q, want %q", method, path, got, body)
		}
		return took, nil
	}
	series := func(what string, count int) []time.Duration {
		t.Helper()
		var ds []time.Duration
		for i := range count {
			d, err := do(http.MethodGet, "/work", "", "")
			if err != nil {
				t.Fatalf("%s: request %d: %v", what, i, err)
			}
			ds = append(ds, d)
		}
		return ds
	}

	const count = 100
	series("warm-up", 10)
	before := byRegion(status())
	nearLat := series("near", count)
	after := byRegion(status())
	if after["eu"]-before["eu"] != count || after["us"] != before["us"] {
		t.Fatalf("requests served: eu %d, us %d; want all %d by eu (near eu-west)", after["eu"]-before["eu"], after["us"]-before["us"], count)
	}

	// Fail over under load: workers send GETs and keyed POSTs while the eu
	// provider is killed, until the us region has served a good share.
	var sent, failed atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					_, err = do(http.MethodGet, "/work", "", "")
				} else {
					key := fmt.Sprintf("w%d-%d", w, i)
					_, err = do(http.MethodPost, "/echo", key, "body of "+key)
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					errMu.Lock()
					firstErr = cmp.Or(firstErr, err)
					errMu.Unlock()
				}
			}
		})
	}
	nstest.Await(t, "load under way", 30*time.Second, func() (int64, error) {
		if s := sent.Load(); s < 40 {
			return s, fmt.Errorf("%d requests sent", s)
		}
		return 0, nil
	})
	killed := time.Now()
	if err := near.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	atKill := sent.Load()
	nstest.Await(t, "eu out of routing, us serving", 60*time.Second, func() (int64, error) {
		v := status()
		if v.Regions[0].Ready != 0 || sent.Load() < atKill+100 {
			return 0, fmt.Errorf("regions %+v, %d requests since the kill", v.Regions, sent.Load()-atKill)
		}
		return 0, nil
	})
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed during the failover; first: %v", failed.Load(), sent.Load(), firstErr)
	}
	v = status()
	t.Logf("failover: %d requests (%d after the kill), none failed; %d retried; eu out of routing %s after the kill",
		sent.Load(), sent.Load()-atKill, v.Retries, time.Since(killed).Round(time.Millisecond))

	before = byRegion(v)
	farLat := series("far", count)
	after = byRegion(status())
	if after["us"]-before["us"] != count {
		t.Fatalf("after the failover the us region served %d of %d requests", after["us"]-before["us"], count)
	}
	np, fp := p95(nearLat), p95(farLat)
	t.Logf("p95 through the gateway: eu %s, us %s (difference %s; injected 75ms)", np.Round(100*time.Microsecond), fp.Round(100*time.Microsecond), (fp - np).Round(100*time.Microsecond))
	injected := 2 * (farOneWay - nearOneWay)
	if d := fp - np; d < injected*8/10 || d > injected*2 {
		t.Fatalf("p95 eu %s, us %s: difference %s, want about the injected %s", np, fp, d, injected)
	}
	t.Logf("regional serving test took %s", time.Since(began).Round(time.Millisecond))
}
