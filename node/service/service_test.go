package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	base := scaleInput{now: now, desired: 2, min: 1, max: 4, ready: 2, target: 100 * time.Millisecond,
		targetConcurrency: 8, downAfter: time.Minute}
	with := func(f func(*scaleInput)) scaleInput { in := base; f(&in); return in }
	cases := []struct {
		name    string
		in      scaleInput
		desired int
		low     time.Time
	}{
		{"p95 above target scales up", with(func(in *scaleInput) { in.p95, in.samples = 200*time.Millisecond, 50 }), 3, time.Time{}},
		{"too few samples do not count", with(func(in *scaleInput) { in.p95, in.samples = 200*time.Millisecond, 2 }), 2, now},
		{"one step at a time", with(func(in *scaleInput) { in.p95, in.samples, in.pending = 200*time.Millisecond, 50, 1 }), 2, time.Time{}},
		{"never above max", with(func(in *scaleInput) { in.p95, in.samples, in.desired = 200*time.Millisecond, 50, 4 }), 4, time.Time{}},
		{"concurrency above target scales up", with(func(in *scaleInput) { in.outstanding = 20 }), 3, time.Time{}},
		{"low load starts the hysteresis", with(func(in *scaleInput) { in.p95, in.samples = 10*time.Millisecond, 50 }), 2, now},
		{"low load within the hysteresis holds", with(func(in *scaleInput) {
			in.p95, in.samples, in.lowSince = 10*time.Millisecond, 50, now.Add(-30*time.Second)
		}), 2, now.Add(-30 * time.Second)},
		{"low load after the hysteresis scales down and restarts it", with(func(in *scaleInput) { in.lowSince = now.Add(-time.Minute) }), 1, now},
		{"never below min", with(func(in *scaleInput) { in.desired, in.lowSince = 1, now.Add(-time.Hour) }), 1, now.Add(-time.Hour)},
		{"between the thresholds resets the hysteresis", with(func(in *scaleInput) {
			in.p95, in.samples, in.lowSince = 80*time.Millisecond, 50, now.Add(-time.Hour)
		}), 2, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, low := decide(tc.in)
			if d != tc.desired || !low.Equal(tc.low) {
				t.Fatalf("decide = %d, low since %v; want %d, %v", d, low, tc.desired, tc.low)
			}
		})
	}
}

// TestAutoscaleEventAtDecision: a scale step's event carries the time of
// the decision, from which the next step's hysteresis counts, however
// late the step is recorded (the service's clock moves on between the two
// on a loaded host: here at each reading).
func TestAutoscaleEventAtDecision(t *testing.T) {
	s := testService(t)
	clock := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	s.m.cfg.Now = func() time.Time { clock = clock.Add(150 * time.Millisecond); return clock }
	s.spec.Replicas, s.spec.MaxReplicas, s.spec.TargetConcurrency = 1, 3, 4
	s.spec.ScaleDownAfter = 2 * time.Second
	s.desired = 3
	decided := s.now()
	s.lowSince = decided.Add(-s.spec.ScaleDownAfter)
	s.autoscale(decided)
	if s.desired != 2 || len(s.events) != 1 || !strings.HasPrefix(s.events[0].What, "autoscale: 3 → 2") {
		t.Fatalf("desired %d, events %+v: want one step down to 2", s.desired, s.events)
	}
	if at := s.events[0].Time; !at.Equal(decided) || !s.lowSince.Equal(decided) {
		t.Fatalf("step decided at %s recorded at %s, hysteresis from %s", decided.Format(time.StampMilli), at.Format(time.StampMilli), s.lowSince.Format(time.StampMilli))
	}
}

func TestWindowStats(t *testing.T) {
	now := time.Now()
	var w window
	w.add(sample{at: now.Add(-2 * time.Minute), lat: time.Hour}, "") // outside the span
	for i := 1; i <= 100; i++ {
		w.add(sample{at: now, lat: time.Duration(i) * time.Millisecond}, "")
	}
	w.add(sample{at: now, err: true}, "boom")
	v := w.view(now, 3)
	if v.P50MS != 50 || v.P95MS != 95 || v.P99MS != 99 {
		t.Fatalf("percentiles %v %v %v, want 50 95 99", v.P50MS, v.P95MS, v.P99MS)
	}
	if v.Requests != 102 || v.Errors != 1 || v.LastError != "boom" || v.Outstanding != 3 {
		t.Fatalf("totals %+v", v)
	}
	if v.ErrorRate != 1.0/101 || v.RatePerSec != 10.1 {
		t.Fatalf("error rate %v, rate %v", v.ErrorRate, v.RatePerSec)
	}
}

// testService is a Service with replicas served by local HTTP servers
// (no libp2p), for the gateway's routing and retry rules.
func testService(t testing.TB, reps ...*replica) *Service {
	t.Helper()
	m := &Manager{cfg: Config{Now: time.Now}, ctx: context.Background()}
	m.log = slog.New(slog.DiscardHandler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := newService(m, api.ServiceSpec{ID: "svc-t"}, ln, "")
	s.reps = reps
	s.reroute()
	return s
}

func localReplica(t *testing.T, name string, h http.Handler) *replica {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	return &replica{jobID: name, state: api.ReplicaReady, stop: make(chan struct{}), transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}}}
}

func deadReplica(name string) *replica {
	return &replica{jobID: name, state: api.ReplicaReady, stop: make(chan struct{}), transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("provider gone")
		}}}
}

// call sends a request to s's gateway as its owner does: to its own
// address, with its token.
func call(s *Service, method, path, body string) *httptest.ResponseRecorder {
	return callWith(s, method, path, body, s.Gateway(), map[string]string{TokenHeader: s.token})
}

func callWith(s *Service, method, path, body, host string, header map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w
}

func TestGatewayRetriesIdempotentOnce(t *testing.T) {
	ok := localReplica(t, "ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "served "+r.Method) }))
	dead := deadReplica("dead")
	// Turns start at the first replica: the dead one is tried first.
	s := testService(t, dead, ok)
	for i := range 20 {
		if w := call(s, http.MethodGet, "/x", ""); w.Code != 200 || w.Body.String() != "served GET" {
			t.Fatalf("GET %d: %d %q", i, w.Code, w.Body.String())
		}
	}
	if !dead.suspect.Load() {
		t.Fatal("a replica that failed at the transport is not suspected")
	}
	if s.retries.Load() != 1 || dead.win.requests != 1 {
		t.Fatalf("%d retries, %d requests to the dead replica: the failover path was not taken", s.retries.Load(), dead.win.requests)
	}

	// A POST is not retried: on the dead replica alone it fails.
	only := testService(t, deadReplica("dead2"))
	if w := call(only, http.MethodPost, "/x", "body"); w.Code != http.StatusBadGateway {
		t.Fatalf("POST to a dead replica: %d %q", w.Code, w.Body.String())
	}
	if only.retries.Load() != 0 {
		t.Fatal("a POST was retried")
	}
	// No replica at all: 503.
	if w := call(testService(t), http.MethodGet, "/x", ""); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("no replica: %d", w.Code)
	}
}

// TestHandshakeRefusal: a provider's refusal reaches the dialer as
// ErrRefused with its reason.
func TestHandshakeRefusal(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		var req struct {
			LeaseID string `json:"lease_id"`
		}
		if readMsg(b, &req) == nil {
			_ = writeMsg(b, map[string]string{"error": "lease " + req.LeaseID + ": no such lease of yours"})
		}
		b.Close()
	}()
	open := func(context.Context, peer.ID) (network.Stream, error) { return pipeStream{c: a}, nil }
	_, err := Connect(context.Background(), open, "", "lease-1")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "lease lease-1: no such lease of yours") {
		t.Fatalf("Connect = %v", err)
	}
}

// pipeStream is a net.Conn posing as a stream for the handshake (only
// Read, Write, deadlines and Reset are used).
type pipeStream struct {
	network.Stream
	c net.Conn
}

func (p pipeStream) Read(b []byte) (int, error)         { return p.c.Read(b) }
func (p pipeStream) Write(b []byte) (int, error)        { return p.c.Write(b) }
func (p pipeStream) Close() error                       { return p.c.Close() }
func (p pipeStream) Reset() error                       { return p.c.Close() }
func (p pipeStream) SetDeadline(t time.Time) error      { return p.c.SetDeadline(t) }
func (p pipeStream) SetReadDeadline(t time.Time) error  { return p.c.SetReadDeadline(t) }
func (p pipeStream) SetWriteDeadline(t time.Time) error { return p.c.SetWriteDeadline(t) }

// TestGatewayAdmitsOnlyItsOwnerOnItsOwnHost: a request without the
// service's token, with a wrong one, or naming another host (a DNS
// rebinding page) never reaches a replica; the token, as a header or
// in the query, is let through and stripped before the replica sees it.
func TestGatewayAdmitsOnlyItsOwnerOnItsOwnHost(t *testing.T) {
	var seen []string
	rep := localReplica(t, "ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.RawQuery+"|"+r.Header.Get(TokenHeader))
		fmt.Fprint(w, "served")
	}))
	s := testService(t, rep)
	if len(s.token) < 32 {
		t.Fatalf("token %q is too short to be a secret", s.token)
	}
	if other := testService(t); other.token == s.token {
		t.Fatal("two services share a token")
	}
	_, port, _ := net.SplitHostPort(s.Gateway())
	good := map[string]string{TokenHeader: s.token}
	refused := []struct {
		name, path, host string
		header           map[string]string
		code             int
	}{
		{"no token", "/x", s.Gateway(), nil, http.StatusUnauthorized},
		{"wrong token", "/x", s.Gateway(), map[string]string{TokenHeader: strings.Repeat("0", len(s.token))}, http.StatusUnauthorized},
		{"token prefix", "/x", s.Gateway(), map[string]string{TokenHeader: s.token[:10]}, http.StatusUnauthorized},
		{"wrong query token", "/x?token=nope", s.Gateway(), nil, http.StatusUnauthorized},
		{"rebound name", "/x", "evil.example:" + port, good, http.StatusMisdirectedRequest},
		{"other port", "/x", "127.0.0.1:1", good, http.StatusMisdirectedRequest},
		{"no host", "/x", "", good, http.StatusMisdirectedRequest},
	}
	for _, tc := range refused {
		if w := callWith(s, http.MethodGet, tc.path, "", tc.host, tc.header); w.Code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.name, w.Code, w.Body.String(), tc.code)
		}
	}
	if len(seen) != 0 {
		t.Fatalf("refused requests reached the replica: %q", seen)
	}
	for _, host := range []string{s.Gateway(), "localhost:" + port, "LOCALHOST:" + port} {
		if w := callWith(s, http.MethodGet, "/x?a=1", "", host, good); w.Code != 200 {
			t.Fatalf("owner's request on %s: %d %q", host, w.Code, w.Body.String())
		}
	}
	if w := callWith(s, http.MethodGet, "/x?a=1&token="+s.token, "", s.Gateway(), nil); w.Code != 200 {
		t.Fatalf("owner's request with ?token=: %d %q", w.Code, w.Body.String())
	}
	for _, got := range seen {
		if got != "a=1|" {
			t.Fatalf("the replica saw %q: the token was forwarded", got)
		}
	}
}

// TestServiceLatencyHistory: the control loop keeps a sample of the
// gateway's figures a minute, each what the status showed then (the
// minute before it), and the history ends with one of now that equals
// the status view's totals.
func TestServiceLatencyHistory(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	clock := t0
	s := testService(t)
	s.m.cfg.Now = func() time.Time { return clock }
	s.m.svcs = map[string]*Service{s.spec.ID: s}
	for i := 1; i <= 10; i++ {
		s.win.add(sample{at: t0.Add(-10 * time.Second), lat: time.Duration(i) * time.Millisecond}, "")
	}
	s.tick()
	clock = t0.Add(30 * time.Second) // not a minute yet: no sample
	s.tick()
	for range 4 {
		s.win.add(sample{at: t0.Add(50 * time.Second), lat: 100 * time.Millisecond}, "")
	}
	s.win.add(sample{at: t0.Add(50 * time.Second), err: true}, "refused")
	clock = t0.Add(time.Minute)
	s.tick()
	s.win.add(sample{at: t0.Add(70 * time.Second), lat: 300 * time.Millisecond}, "")
	clock = t0.Add(80 * time.Second)
	h, err := s.m.History(s.spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.LatencySample{
		{Time: t0, Requests: 10, P50MS: 5, P95MS: 10},
		{Time: t0.Add(time.Minute), Requests: 5, Errors: 1, P50MS: 100, P95MS: 100},
		{Time: clock, Requests: 6, Errors: 1, P50MS: 100, P95MS: 300},
	}
	if h.ID != s.spec.ID || h.Every != time.Minute || fmt.Sprint(h.Samples) != fmt.Sprint(want) {
		t.Fatalf("history %s every %s:\n%v\nwant\n%v", h.ID, h.Every, h.Samples, want)
	}
	tot := s.view().Totals
	if last := h.Samples[len(h.Samples)-1]; last.P50MS != tot.P50MS || last.P95MS != tot.P95MS {
		t.Errorf("now's sample %+v, status totals p50 %v p95 %v", last, tot.P50MS, tot.P95MS)
	}
	if _, err := s.m.History("nope"); err == nil || !strings.Contains(err.Error(), `no service "nope"`) {
		t.Errorf("history of an unknown service: %v", err)
	}
}

// A readiness probe may take the spec's probe timeout: a server slower to
// answer it than the probe interval (500ms at least) is still ready.
func TestProbeTimeout(t *testing.T) {
	slow := localReplica(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second): // a server slow to answer
		case <-r.Context().Done():
		}
	}))
	s := testService(t, slow)
	s.spec.Health, s.spec.ProbeInterval = "/health", 100*time.Millisecond
	if err := s.probe(slow); err == nil {
		t.Fatal("a probe answered after 1s passed, bounded by the 100ms interval")
	}
	s.spec.ProbeTimeout = 20 * time.Second
	if err := s.probe(slow); err != nil {
		t.Fatalf("probe with a 20s timeout: %v", err)
	}
}
