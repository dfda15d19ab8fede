package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/net/websocket"
)

// buildServer returns a copy of testdata/svcserver, the replicas' HTTP
// server (built once per test binary), of this test's own, in a
// directory job uids can read. As root, jobs get a private /tmp, so the
// copy goes under /run instead of t.TempDir.
func buildServer(t testing.TB) string {
	t.Helper()
	src := goProgram(t, "./testdata/svcserver")
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		d, err := os.MkdirTemp("/run", "gpumesh-svc-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return copyProgram(t, src, dir)
}

// serviceSpec is a gold service of the test server on port 8000, with
// fast probes.
func serviceSpec(bin string, replicas, maxReplicas int) api.ServiceSpec {
	return api.ServiceSpec{
		Job: terms.Job{Tier: terms.Gold, MaxPrice: 2, Region: "eu", GPUCount: 1, Duration: 10 * time.Minute,
			BidWindow: time.Second, Run: terms.RunSpec{Command: []string{bin}, ServicePort: 8000}},
		Replicas: replicas, MaxReplicas: maxReplicas, Health: "/healthz",
		ProbeInterval: 300 * time.Millisecond, StartTimeout: 20 * time.Second,
	}
}

// waitService reads a service's status through c, the control API of
// renter d, at each change of d's services (service.Manager.Changed) and
// of what next announces (a load's requests, for their figures) until
// cond holds.
func waitService(t *testing.T, c *api.Client, d *Daemon, id string, within time.Duration, what string, cond func(api.ServiceView) bool,
	next ...func() <-chan struct{}) api.ServiceView {
	t.Helper()
	next = append(next, d.market.svc.Changed)
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	cases := make([]reflect.SelectCase, len(next)+1)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}
	for {
		for i, n := range next {
			cases[i+1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n())}
		}
		v, err := c.Service(context.Background(), id)
		if err == nil && cond(v) {
			return v
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("service %s: %s not reached within %s (err %v); last view: desired %d ready %d replicas %+v events %+v",
				id, what, within, err, v.Desired, v.Ready, v.Replicas, v.Events)
		}
	}
}

func readyOn(v api.ServiceView, provider string) bool {
	for _, r := range v.Replicas {
		if r.Provider == provider && r.State == api.ReplicaReady {
			return true
		}
	}
	return false
}

// load sends GET path through the gateway from workers goroutines until
// stop is closed, counting successes and failures.
type load struct {
	ok, failed atomic.Int64
	okAdded    chan struct{}    // holds a wake-up after ok grew (waitOK)
	served     broadcast.Signal // at each request answered, or failed
	wg         sync.WaitGroup
	stop       chan struct{}
	mu         sync.Mutex
	lastErr    string
}

// gatewayTransport adds a service's gateway token to every request, as
// its owner's clients do.
type gatewayTransport struct {
	token string
	base  http.RoundTripper
}

func (g gatewayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(service.TokenHeader, g.token)
	return g.base.RoundTrip(r)
}

// gatewayClient is an HTTP client of v's gateway, carrying its token.
func gatewayClient(v api.ServiceView, conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: gatewayTransport{v.Token, &http.Transport{MaxIdleConnsPerHost: conns}}}
}

func startLoad(v api.ServiceView, path string, workers int) *load {
	l := &load{stop: make(chan struct{}), okAdded: make(chan struct{}, 1)}
	client := gatewayClient(v, workers)
	gateway := v.Gateway
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := client.Get("http://" + gateway + path)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				l.served.Notify()
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					l.lastErr = err.Error()
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
				select {
				case l.okAdded <- struct{}{}:
				default: // a wake-up is pending already
				}
			}
		}()
	}
	return l
}

// waitOK waits until n requests have succeeded.
func (l *load) waitOK(t *testing.T, n int64) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for l.ok.Load() < n {
		select {
		case <-l.okAdded:
		case <-deadline.C:
			t.Fatalf("only %d requests succeeded (%d failed, last %q)", l.ok.Load(), l.failed.Load(), l.lastErr)
		}
	}
}

func (l *load) end() (ok, failed int64) {
	close(l.stop)
	l.wg.Wait()
	return l.ok.Load(), l.failed.Load()
}

// TestServiceGateway: a two-replica service of a real HTTP server, run by
// the sandboxed process executor on two providers, answers 1,000 requests
// through the renter's loopback gateway; bodies and server-sent events
// pass through; the replicas' port is not on the host's loopback; and the
// status shows each replica's requests and latency.
func TestServiceGateway(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns...)
	c := api.NewClient(boot.dir)
	v, err := c.PostService(context.Background(), serviceSpec(bin, 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.Gateway, "127.0.0.1:") {
		t.Fatalf("gateway %q is not on loopback", v.Gateway)
	}
	st0 := waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "2 ready replicas", func(v api.ServiceView) bool { return v.Ready == 2 })

	// Only the service's owner gets through its gateway: another local
	// user without the token, or a browser page on a rebound name, is
	// turned away.
	if len(v.Token) < 32 || st0.Token != v.Token {
		t.Fatalf("gateway token %q (status %q)", v.Token, st0.Token)
	}
	for _, tc := range []struct {
		name, host, token string
		code              int
	}{{"no token", "", "", http.StatusUnauthorized}, {"wrong token", "", "x" + v.Token[1:], http.StatusUnauthorized},
		{"rebound host", "attacker.example", v.Token, http.StatusMisdirectedRequest}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+v.Gateway+"/work", nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.token != "" {
			req.Header.Set(service.TokenHeader, tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("%s: %s, want %d", tc.name, resp.Status, tc.code)
		}
	}

	const total, workers = 1000, 8
	client := gatewayClient(v, workers)
	var next, okCount atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= total {
				resp, err := client.Get("http://" + v.Gateway + "/work")
				if err != nil {
					errs <- err
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(string(b), "ok ") {
					errs <- fmt.Errorf("status %s body %q err %v", resp.Status, b, err)
					continue
				}
				okCount.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	if okCount.Load() != total {
		t.Fatalf("%d of %d requests succeeded", okCount.Load(), total)
	}

	// A request body passes through.
	resp, err := client.Post("http://"+v.Gateway+"/echo", "text/plain", strings.NewReader("ping through libp2p"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ping through libp2p" {
		t.Fatalf("echo = %q", b)
	}
	// Server-sent events arrive as they are sent, not at the end.
	start := time.Now()
	resp, err = client.Get("http://" + v.Gateway + "/stream?n=5")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	firstAt := time.Since(start)
	if err != nil || first != "data: event 0\n" {
		t.Fatalf("first event %q, %v", first, err)
	}
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	all := time.Since(start)
	if got := strings.Count(string(rest), "data: event"); got != 4 {
		t.Fatalf("got %d more events, want 4: %q", got, rest)
	}
	if all-firstAt < 300*time.Millisecond {
		t.Fatalf("first event after %s, the stream ended after %s: events were buffered", firstAt, all)
	}

	// A WebSocket (an HTTP upgrade) goes through to a replica and stays
	// open both ways.
	wsCfg, err := websocket.NewConfig("ws://"+v.Gateway+"/ws", "http://"+v.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	wsCfg.Header = http.Header{service.TokenHeader: {v.Token}}
	ws, err := websocket.DialConfig(wsCfg)
	if err != nil {
		t.Fatalf("WebSocket through the gateway: %v", err)
	}
	_ = ws.SetDeadline(time.Now().Add(10 * time.Second))
	var wsPID string
	for _, msg := range []string{"ping", "pong"} {
		var got string
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatal(err)
		}
		pid, echoed, _ := strings.Cut(got, ": ")
		if echoed != msg || (wsPID != "" && pid != wsPID) {
			t.Fatalf("WebSocket echo of %q: %q (earlier from %s)", msg, got, wsPID)
		}
		wsPID = pid
	}
	ws.Close()

	// Only a lease's renter gets through to its replica: another peer is
	// refused by the provider.
	rep := st0.Replicas[0]
	var other *testNode
	for _, n := range ns {
		if n.ID().String() != rep.Provider {
			other = n
		}
	}
	provID, err := peer.Decode(rep.Provider)
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return other.net.Host.NewStream(ctx, p, wire.ProtoService)
	}
	if conn, err := service.Connect(context.Background(), open, provID, rep.LeaseID); !errors.Is(err, service.ErrRefused) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("a stream from a peer that is not the renter: %v, want refused", err)
	}

	// The replicas listen on their jobs' own loopback only.
	if os.Geteuid() == 0 {
		if conn, err := net.DialTimeout("tcp", "127.0.0.1:8000", time.Second); err == nil {
			conn.Close()
			t.Fatal("a replica's port is reachable on the host's loopback")
		}
	}

	st, err := c.Service(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, r := range st.Replicas {
		// Shared evenly (issue 29: 52 of 54 requests went to one of two).
		if share := float64(r.Requests) / total; share < 0.4 || share > 0.6 {
			t.Errorf("replica %s served %d of %d requests", r.JobID, r.Requests, total)
		}
		if r.Requests == 0 || r.P50MS <= 0 || r.P95MS < r.P50MS || r.P99MS < r.P95MS {
			t.Errorf("replica %s on %s: %d requests, p50 %.3f p95 %.3f p99 %.3f ms", r.JobID, r.Provider, r.Requests, r.P50MS, r.P95MS, r.P99MS)
		}
		sum += r.Requests
		t.Logf("replica %s: %d requests, %d errors, %.1f req/s, p50 %.2f p95 %.2f p99 %.2f ms", r.JobID, r.Requests, r.Errors, r.RatePerSec, r.P50MS, r.P95MS, r.P99MS)
	}
	if sum < total || st.Totals.Errors != 0 {
		t.Fatalf("status counts %d requests (%d errors), want at least %d and none", sum, st.Totals.Errors, total)
	}
	if _, err := c.StopService(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Get("http://" + v.Gateway + "/work"); err == nil {
		resp.Body.Close()
		t.Fatal("the gateway still answers after stop")
	}
}

// TestServiceFailover: under steady load, one replica's provider goes
// away (its daemon closes): routing drops the replica within 3 s, a
// replacement leased through a new auction serves within 30 s, and at
// least 99 % of the requests succeed throughout.
func TestServiceFailover(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), fastConfig(providerConfig("eu-west", 1.0, a100)),
		fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns...)
	c := api.NewClient(boot.dir)
	v, err := c.PostService(context.Background(), serviceSpec(bin, 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "2 ready replicas", func(v api.ServiceView) bool { return v.Ready == 2 })
	victim, victimJob := v.Replicas[0].Provider, v.Replicas[0].JobID
	var dead *testNode
	for _, n := range ns {
		if n.ID().String() == victim {
			dead = n
		}
	}
	if dead == nil {
		t.Fatalf("replica provider %s is none of the test's providers", victim)
	}

	l := startLoad(v, "/work?ms=5", 6)
	l.waitOK(t, 200) // steady load before the failure
	killed := time.Now()
	if err := dead.Close(); err != nil {
		t.Logf("close provider: %v", err)
	}
	waitService(t, c, boot.Daemon, v.ID, 3*time.Second, "the dead provider's replica out of routing", func(v api.ServiceView) bool {
		return !readyOn(v, victim)
	})
	dropped := time.Since(killed)
	v = waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "2 ready replicas again", func(v api.ServiceView) bool {
		return v.Ready == 2 && !readyOn(v, victim)
	})
	replaced := time.Since(killed)
	// The replacement carries load.
	v = waitService(t, c, boot.Daemon, v.ID, 10*time.Second, "both replicas serving requests", func(v api.ServiceView) bool {
		serving := 0
		for _, r := range v.Replicas {
			if r.State == api.ReplicaReady && r.Requests > 0 {
				serving++
			}
		}
		return serving == 2
	}, l.served.Wait)
	ok, failed := l.end()
	t.Logf("dropped from routing after %s, replacement ready after %s; %d ok, %d failed (last error %q), %d retries",
		dropped.Round(time.Millisecond), replaced.Round(time.Millisecond), ok, failed, l.lastErr, v.Retries)
	if ok == 0 || float64(ok) < 0.99*float64(ok+failed) {
		t.Fatalf("%d of %d requests succeeded, want at least 99%%", ok, ok+failed)
	}
	for _, r := range v.Replicas {
		if r.Provider == victim {
			t.Fatalf("the dead provider still holds a replica: %+v", r)
		}
	}
	// The service replaced the replica; the renter never requeued its job
	// (one owner of the replacement, no wasted auction).
	jv := waitJob(t, boot, victimJob, 30*time.Second, "the lost replica's job ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if jv.State != terms.JobFinished || len(jv.History) != 0 || jv.Job.Attempt != 0 || jv.Lease == nil || jv.Lease.Provider != victim {
		t.Fatalf("the lost replica's job: %s (run %s, %q), %d earlier attempts, attempt %d", jv.State, jv.Run, jv.Detail, len(jv.History), jv.Job.Attempt)
	}
}

// TestServiceAutoscale: load whose latency is above the target p95 scales
// the service up to its max replicas, one step at a time; once the load
// is gone, it scales back down to its min, each step after the hysteresis.
func TestServiceAutoscale(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	// One provider with three GPUs: the three replicas listen on the same
	// port, each in its own sandbox.
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100, a100, a100)))
	waitAdvertised(t, boot, ns...)
	c := api.NewClient(boot.dir)
	spec := serviceSpec(bin, 1, 3)
	spec.TargetP95 = 50 * time.Millisecond
	spec.ScaleDownAfter = 2 * time.Second
	v, err := c.PostService(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "1 ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })
	l := startLoad(v, "/work?ms=120", 4)
	waitService(t, c, boot.Daemon, v.ID, 40*time.Second, "3 ready replicas under load", func(v api.ServiceView) bool {
		return v.Desired == 3 && v.Ready == 3
	})
	ok, failed := l.end()
	idle := time.Now()
	if failed != 0 {
		t.Errorf("%d of %d requests failed under load (last %q)", failed, ok+failed, l.lastErr)
	}
	v = waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "back to 1 replica", func(v api.ServiceView) bool {
		return v.Desired == 1 && len(v.Replicas) == 1 && v.Ready == 1
	})
	var ups, downs []time.Time
	for _, e := range v.Events {
		switch {
		case strings.HasPrefix(e.What, "autoscale: 1 → 2"), strings.HasPrefix(e.What, "autoscale: 2 → 3"):
			ups = append(ups, e.Time)
		case strings.HasPrefix(e.What, "autoscale: 3 → 2"), strings.HasPrefix(e.What, "autoscale: 2 → 1"):
			downs = append(downs, e.Time)
		}
	}
	if len(ups) != 2 || len(downs) != 2 {
		t.Fatalf("autoscale events: %d up, %d down, want 2 each: %+v", len(ups), len(downs), v.Events)
	}
	if first := downs[0].Sub(idle); first < spec.ScaleDownAfter-200*time.Millisecond {
		t.Fatalf("first scale-down %s after the load ended, before the %s hysteresis", first, spec.ScaleDownAfter)
	}
	if gap := downs[1].Sub(downs[0]); gap < spec.ScaleDownAfter {
		t.Fatalf("second scale-down %s after the first, before the %s hysteresis", gap, spec.ScaleDownAfter)
	}
	t.Logf("scaled up at %v, down %s and %s after the load ended", ups, downs[0].Sub(idle).Round(time.Millisecond), downs[1].Sub(idle).Round(time.Millisecond))
}

// TestServiceOutlivesLease: a service whose leases are short re-leases
// each replica before its lease ends and drains the old one once the
// successor is ready; requests keep succeeding across the handover.
func TestServiceOutlivesLease(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100, a100)))
	waitAdvertised(t, boot, ns...)
	c := api.NewClient(boot.dir)
	spec := serviceSpec(bin, 1, 1)
	spec.Job.Duration = 12 * time.Second // renewed 6 s before its end
	v, err := c.PostService(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "1 ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })
	first := v.Replicas[0]
	l := startLoad(v, "/work?ms=5", 4)
	v = waitService(t, c, boot.Daemon, v.ID, 20*time.Second, "a successor serving alone", func(v api.ServiceView) bool {
		return len(v.Replicas) == 1 && v.Replicas[0].JobID != first.JobID && v.Ready == 1 && v.Replicas[0].Requests > 0
	}, l.served.Wait)
	ok, failed := l.end()
	if !time.Now().Before(first.LeaseEnd.Add(time.Second)) {
		t.Errorf("the successor took over only at %s, after the first lease's end %s", time.Now().Format(time.TimeOnly), first.LeaseEnd.Format(time.TimeOnly))
	}
	if failed != 0 || ok == 0 {
		t.Fatalf("%d ok, %d failed across the handover (last %q)", ok, failed, l.lastErr)
	}
	if v.Replicas[0].LeaseEnd.Sub(first.LeaseEnd) < 3*time.Second {
		t.Fatalf("the successor's lease ends at %s, the first at %s", v.Replicas[0].LeaseEnd, first.LeaseEnd)
	}
}

// TestServiceSurvivesRenterRestart: the renter's daemon restarts; its
// service is served again on the same gateway address by the replica it
// had leased (adopted, not leased again: the provider's one GPU is
// taken), and stopping it afterwards cancels that lease.
func TestServiceSurvivesRenterRestart(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	rdir := filepath.Join(t.TempDir(), "renter")
	r := startNode(t, rdir, renterConfig(), boot.Daemon)
	t.Cleanup(func() { r.Close() })
	waitAdvertised(t, r, ns...)
	c := api.NewClient(rdir)
	v, err := c.PostService(context.Background(), serviceSpec(bin, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, r.Daemon, v.ID, 30*time.Second, "1 ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })
	first := v.Replicas[0]
	get := func() error {
		resp, err := gatewayClient(v, 1).Get("http://" + v.Gateway + "/work")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := startNode(t, rdir, renterConfig(), boot.Daemon)
	t.Cleanup(func() { r2.Close() })
	v2 := waitService(t, c, r2.Daemon, v.ID, 20*time.Second, "the replica adopted and ready", func(v api.ServiceView) bool {
		return v.Ready == 1 && len(v.Replicas) == 1 && v.Replicas[0].JobID == first.JobID
	})
	if v2.Gateway != v.Gateway || v2.Token != v.Token {
		t.Fatalf("gateway moved from %s to %s (or its token changed)", v.Gateway, v2.Gateway)
	}
	if err := get(); err != nil {
		t.Fatalf("through the restored gateway: %v", err)
	}
	if _, err := c.StopService(context.Background(), v.ID); err != nil {
		t.Fatal(err)
	}
	waitJob(t, r2, first.JobID, 15*time.Second, "the adopted replica's lease cancelled", func(j api.JobView) bool {
		return j.Run.Terminal()
	})
}

// TestServiceCostAndTokens: an OpenAI-compatible server as a service's
// replica answers chat completions through the gateway, streamed and
// not; the service's status counts the tokens the test read in its own
// answers, its tokens/s is their completion tokens over the 10 s span,
// and its costs follow the lease's GPU time and price (per 1,000
// requests, per million tokens); the Prometheus metrics say the same.
func TestServiceCostAndTokens(t *testing.T) {
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.25, a100)))
	rn, rdir, metricsAddr := metricsRenter(t, boot, ns)
	c := api.NewClient(rdir)
	v, err := c.PostService(context.Background(), serviceSpec(bin, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, rn.Daemon, v.ID, 30*time.Second, "1 ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })

	client := gatewayClient(v, 1)
	type usage struct{ Prompt, Completion int64 }
	var sum usage
	for i, n := range []int{7, 12, 30, 1, 19, 4} {
		stream := i%2 == 0
		body := fmt.Sprintf(`{"model":"m","stream":%t,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
			stream, n, strings.Repeat("word ", i+2))
		resp, err := client.Post("http://"+v.Gateway+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("completion %d: %s %q %v", i, resp.Status, b, err)
		}
		// The usage as an OpenAI client reads it: the body's, or the last
		// streamed chunk's.
		type answer struct {
			Usage *struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		var u answer
		if stream {
			for _, line := range strings.Split(string(b), "\n") {
				if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" {
					var chunk answer
					if err := json.Unmarshal([]byte(data), &chunk); err != nil {
						t.Fatalf("chunk %q: %v", data, err)
					}
					if chunk.Usage != nil {
						u = chunk
					}
				}
			}
		} else if err := json.Unmarshal(b, &u); err != nil {
			t.Fatal(err)
		}
		if u.Usage == nil {
			t.Fatalf("completion %d carries no usage: %q", i, b)
		}
		sum.Prompt += u.Usage.Prompt
		sum.Completion += u.Usage.Completion
	}

	st, err := c.Service(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	rel := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1e-12, math.Abs(b)) }
	rep := st.Replicas[0]
	for _, s := range []struct {
		name string
		st   api.ReplicaStats
	}{{"service", st.Totals}, {"replica", rep.ReplicaStats}} {
		f := s.st
		t.Logf("%s: %d requests, %d + %d tokens, %.1f tokens/s, %.1f GPU-s, $%.6f, $%.4f per 1,000 requests, $%.4f per 1M tokens",
			s.name, f.Requests, f.PromptTokens, f.CompletionTokens, f.TokensPerSec, f.GPUSeconds, f.CostUSD, f.USDPer1kRequests, f.USDPer1MTokens)
		if f.Requests != 6 || f.PromptTokens != sum.Prompt || f.CompletionTokens != sum.Completion {
			t.Fatalf("%s: %d requests, %d + %d tokens; the test read 6, %d + %d", s.name, f.Requests, f.PromptTokens, f.CompletionTokens, sum.Prompt, sum.Completion)
		}
		if want := float64(sum.Completion) / 10; !rel(f.TokensPerSec, want) {
			t.Fatalf("%s: %v tokens/s, want %v (completion tokens over 10 s)", s.name, f.TokensPerSec, want)
		}
		if f.GPUSeconds <= 0 || f.GPUSeconds > time.Since(v.Created).Seconds()+1 || !rel(f.CostUSD, f.GPUSeconds/3600*rep.PriceUSD) {
			t.Fatalf("%s: %v GPU-s costing $%v at $%v/GPU-h", s.name, f.GPUSeconds, f.CostUSD, rep.PriceUSD)
		}
		if !rel(f.USDPer1MTokens, f.CostUSD/float64(sum.Prompt+sum.Completion)*1e6) || !rel(f.USDPer1kRequests, f.CostUSD/6*1e3) {
			t.Fatalf("%s: $%v per 1M tokens, $%v per 1,000 requests, for $%v", s.name, f.USDPer1MTokens, f.USDPer1kRequests, f.CostUSD)
		}
	}
	if rep.PriceUSD < 1.25 || rep.PriceUSD > 2 || rep.GPUs != 1 {
		t.Fatalf("replica lease: $%v/GPU-h, %d GPUs", rep.PriceUSD, rep.GPUs)
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`gpumesh_service_completion_tokens_total{service=%q} %d`, v.ID, sum.Completion),
		fmt.Sprintf(`gpumesh_service_prompt_tokens_total{service=%q} %d`, v.ID, sum.Prompt),
		fmt.Sprintf(`gpumesh_service_requests_total{service=%q} 6`, v.ID),
		fmt.Sprintf(`gpumesh_service_replica_completion_tokens_total{replica=%q,service=%q} %d`, rep.JobID, v.ID, sum.Completion),
		`gpumesh_service_cost_usd_total{service="` + v.ID + `"}`,
		`gpumesh_service_usd_per_1m_tokens{service="` + v.ID + `"}`,
		`gpumesh_service_latency_p99_seconds{service="` + v.ID + `"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestServiceScalesToZero: a service that scales to zero drains its
// replica and cancels its lease once idle for its idle_after; the next
// request wakes it, waits through the cold start (an auction, the
// replica's start, its first passed probe) and is served; the status
// reports the cold start's time.
func TestServiceScalesToZero(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	renter, rdir, metricsAddr := metricsRenter(t, boot, ns)
	c := api.NewClient(rdir)
	spec := serviceSpec(bin, 1, 1)
	spec.ScaleToZero, spec.IdleAfter = true, 2*time.Second
	v, err := c.PostService(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, renter.Daemon, v.ID, 30*time.Second, "1 ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })
	first := v.Replicas[0].JobID
	client := gatewayClient(v, 1)
	client.Timeout = 60 * time.Second
	get := func() string {
		t.Helper()
		resp, err := client.Get("http://" + v.Gateway + "/work")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /work: %s: %s", resp.Status, b)
		}
		return string(b)
	}
	get()
	lastCall := time.Now()
	v = waitService(t, c, renter.Daemon, v.ID, 30*time.Second, "scaled to zero", func(v api.ServiceView) bool {
		return v.ScaledToZero && v.Desired == 0 && len(v.Replicas) == 0
	})
	if idle := time.Since(lastCall); idle < spec.IdleAfter {
		t.Fatalf("scaled to zero %s after the last request, before its %s idle_after", idle, spec.IdleAfter)
	}
	waitJob(t, renter, first, 20*time.Second, "the idle replica's lease ended", func(jv api.JobView) bool { return jv.Run.Terminal() })
	woke := time.Now()
	if got := get(); !strings.HasPrefix(got, "ok ") {
		t.Fatalf("the request that woke the service got %q", got)
	}
	took := time.Since(woke)
	v = waitService(t, c, renter.Daemon, v.ID, 5*time.Second, "awake with its cold start reported", func(v api.ServiceView) bool {
		return !v.ScaledToZero && v.Ready == 1 && v.ColdStarts == 1
	})
	if cold := time.Duration(v.LastColdStartMS * float64(time.Millisecond)); cold <= 0 || cold > took {
		t.Fatalf("cold start reported as %s; the request that woke the service took %s", cold, took)
	}
	if v.Replicas[0].JobID == first {
		t.Fatalf("the woken service's replica is the idle one's job %s", first)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`gpumesh_service_cold_starts_total{service=%q} 1`, v.ID),
		fmt.Sprintf(`gpumesh_service_scaled_to_zero{service=%q} 0`, v.ID),
		fmt.Sprintf(`gpumesh_service_last_cold_start_seconds{service=%q} %g`, v.ID, v.LastColdStartMS/1e3),
	} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
	t.Logf("cold start %.0f ms (the waking request took %s)", v.LastColdStartMS, took.Round(time.Millisecond))
}

// metricsRenter starts a renter with a metrics listener on a free loopback
// port, joined to boot's network, once it sees the providers ns; it
// returns the renter, its data dir and the metrics address.
func metricsRenter(t *testing.T, boot *testNode, ns []*testNode) (*testNode, string, string) {
	t.Helper()
	metricsAddr := freeLoopback(t)
	cfg := renterConfig()
	cfg.MetricsAddr = metricsAddr
	rdir := filepath.Join(t.TempDir(), "renter")
	r := startNode(t, rdir, cfg, boot.Daemon)
	t.Cleanup(func() { r.Close() })
	waitAdvertised(t, r, ns...)
	return r, rdir, metricsAddr
}

// TestServiceGangReplicas (issue 25, item 1): a service whose replicas
// are gangs of two members (Job.Nodes 2), on five one-GPU providers: each
// replica is placed all or nothing on two providers; requests through the
// gateway reach rank 0, which reaches rank 1 over the gang network. When
// the provider of one replica's rank 1 is killed (rank 0 still answers its
// probes), the renter calls that member lost, and the service replaces
// the whole replica with a gang elsewhere, leaving that provider out; the
// load of idempotent requests keeps being answered throughout.
func TestServiceGangReplicas(t *testing.T) {
	t.Parallel()
	needGangNetworks(t)
	bin := buildServer(t)
	root := t.TempDir()
	boot := startNode(t, root+"/boot", fastConfig(renterConfig()), nil)
	t.Cleanup(func() { boot.Close() })
	var ns []*testNode
	for i := range 5 {
		n := startNode(t, fmt.Sprintf("%s/n%02d", root, i), fastConfig(providerConfig("eu-west", 1.0, a100)), boot.Daemon)
		t.Cleanup(func() { n.Close() })
		ns = append(ns, n)
	}
	waitAdvertised(t, boot, ns...)
	c := api.NewClient(boot.dir)
	spec := serviceSpec(bin, 2, 2)
	spec.Job.Nodes = 2
	v, err := c.PostService(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, boot.Daemon, v.ID, 60*time.Second, "2 ready gang replicas", func(v api.ServiceView) bool { return v.Ready == 2 })
	used := map[string]bool{}
	for _, r := range v.Replicas {
		if len(r.Members) != 2 || r.Members[0].Provider != r.Provider || r.Members[0].LeaseID != r.LeaseID || r.GPUs != 2 {
			t.Fatalf("replica %s: lease %s on %s, %d GPUs, members %+v; want two, rank 0's lease its own", r.JobID, r.LeaseID, r.Provider, r.GPUs, r.Members)
		}
		for _, m := range r.Members {
			if used[m.Provider] {
				t.Fatalf("provider %s holds two members: %+v", m.Provider, v.Replicas)
			}
			used[m.Provider] = true
		}
	}

	// Through the gateway: rank 0 answers, and reaches rank 1 at its gang
	// address (each request goes to either replica).
	client := gatewayClient(v, 2)
	get := func(path string) string {
		t.Helper()
		resp, err := client.Get("http://" + v.Gateway + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, b)
		}
		return strings.TrimSpace(string(b))
	}
	for range 4 {
		if got := get("/whoami"); got != "rank 0" {
			t.Fatalf("the gateway reached %q, want rank 0", got)
		}
		if got := get("/peer?rank=1"); got != "rank 1" {
			t.Fatalf("rank 0 reached %q over the gang network, want rank 1", got)
		}
	}

	lost := v.Replicas[0]
	victim := lost.Members[1].Provider
	var dead *testNode
	for _, n := range ns {
		if n.ID().String() == victim {
			dead = n
		}
	}
	l := startLoad(v, "/whoami", 4)
	l.waitOK(t, 100)
	killed := time.Now()
	if err := dead.Close(); err != nil {
		t.Logf("close provider: %v", err)
	}
	v = waitService(t, c, boot.Daemon, v.ID, 60*time.Second, "the lost gang replaced by 2 ready replicas", func(v api.ServiceView) bool {
		if v.Ready != 2 {
			return false
		}
		for _, r := range v.Replicas {
			if r.JobID == lost.JobID {
				return false
			}
			for _, m := range r.Members {
				if m.Provider == victim {
					return false
				}
			}
		}
		return true
	})
	replaced := time.Since(killed)
	ok, failed := l.end()
	t.Logf("gang replica replaced %s after its rank 1's provider was killed; %d ok, %d failed (last error %q), %d retries",
		replaced.Round(time.Millisecond), ok, failed, l.lastErr, v.Retries)
	if ok == 0 || float64(ok) < 0.99*float64(ok+failed) {
		t.Fatalf("%d of %d requests succeeded, want at least 99%%", ok, ok+failed)
	}
	var said, avoided bool
	for _, e := range v.Events {
		said = said || strings.Contains(e.What, "replica "+lost.JobID+" removed: gang member 1 ended: failed")
		avoided = avoided || strings.Contains(e.What, "lost a replica through its own fault")
	}
	if !said || !avoided {
		t.Fatalf("events do not say the gang lost member 1 (%v) and its provider is left out (%v): %+v", said, avoided, v.Events)
	}
	// The replacement is a working gang too.
	for range 4 {
		if got := get("/peer?rank=1"); got != "rank 1" {
			t.Fatalf("after the replacement, rank 0 reached %q, want rank 1", got)
		}
	}
}
