package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// regionService is testService with spec's regions and Near: reps are
// in routing, each in its region.
func regionService(t *testing.T, spec api.ServiceSpec, reps ...*replica) *Service {
	t.Helper()
	m := &Manager{cfg: Config{Now: time.Now}, ctx: context.Background(), log: slog.New(slog.DiscardHandler)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	spec.ID = "svc-r"
	s := newService(m, spec, ln, "")
	s.reps = reps
	s.reroute()
	return s
}

// in places a replica in region, its provider in providerRegion, rtt away.
func in(r *replica, region, providerRegion string, rtt time.Duration) *replica {
	r.region, r.providerRegion = region, providerRegion
	r.rtt.Store(int64(rtt))
	return r
}

// echo answers with its name, the method and the body it got.
func echo(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", name, r.Method, b)
	})
}

func TestNormalizeRegions(t *testing.T) {
	now := time.Now()
	with := func(f func(*api.ServiceSpec)) api.ServiceSpec { s := testSpec(); s.Replicas = 0; f(&s); return s }
	ok := with(func(s *api.ServiceSpec) { s.Regions = []string{" eu", "us-east"}; s.ReplicasPerRegion = 2 })
	if err := normalize(&ok, now); err != nil {
		t.Fatal(err)
	}
	if ok.Replicas != 4 || ok.MaxReplicas != 4 || ok.Regions[0] != "eu" {
		t.Fatalf("2 regions × 2: replicas %d..%d, regions %q; want 4..4, trimmed", ok.Replicas, ok.MaxReplicas, ok.Regions)
	}
	one := with(func(s *api.ServiceSpec) { s.Regions = []string{"eu", "us"} })
	if err := normalize(&one, now); err != nil || one.ReplicasPerRegion != 1 || one.Replicas != 2 {
		t.Fatalf("regions alone: %v, %d per region, %d replicas; want 1 and 2", err, one.ReplicasPerRegion, one.Replicas)
	}
	for _, tc := range []struct {
		name string
		spec api.ServiceSpec
		want string
	}{
		{"per region without regions", with(func(s *api.ServiceSpec) { s.Replicas, s.ReplicasPerRegion = 1, 2 }), "give regions too"},
		{"region and regions", with(func(s *api.ServiceSpec) { s.Regions, s.Job.Region = []string{"eu"}, "us" }), "not both"},
		{"bad region", with(func(s *api.ServiceSpec) { s.Regions = []string{"eu", "-x"} }), `"-x" is not a region`},
		{"twice", with(func(s *api.ServiceSpec) { s.Regions = []string{"eu", "EU"} }), "EU given twice"},
		{"fewer replicas", with(func(s *api.ServiceSpec) { s.Regions, s.ReplicasPerRegion, s.Replicas = []string{"eu", "us"}, 2, 3 }), "fewer than 2 regions × 2"},
		{"negative", with(func(s *api.ServiceSpec) { s.Regions, s.ReplicasPerRegion = []string{"eu"}, -1 }), "at least 1"},
		{"too many", with(func(s *api.ServiceSpec) { s.Regions, s.ReplicasPerRegion = []string{"eu", "us"}, 40 }), "over 64 replicas"},
	} {
		if err := normalize(&tc.spec, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestRegionsSpreadReplicas: a service with two regions and two replicas
// per region leases two in each, each replica's job resident in its
// region, and its status shows each region's share.
func TestRegionsSpreadReplicas(t *testing.T) {
	f := &fakeLeaser{gate: make(chan struct{})}
	defer close(f.gate)
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Replicas, spec.Regions, spec.ReplicasPerRegion = 0, []string{"eu", "us"}, 2
	v, err := m.Post(spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "four auctions", func() bool { p, _ := f.counts(); return p == 4 })
	f.mu.Lock()
	count := map[string]int{}
	for _, r := range f.regions {
		count[r]++
	}
	f.mu.Unlock()
	if count["eu"] != 2 || count["us"] != 2 {
		t.Fatalf("auctions by region %v, want 2 in eu and 2 in us", count)
	}
	v, _ = m.View(v.ID)
	if len(v.Regions) != 2 || v.Regions[0].Want != 2 || v.Regions[1].Want != 2 || v.Regions[0].Ready != 0 {
		t.Fatalf("regions in status %+v, want eu and us wanting 2 each, none ready", v.Regions)
	}
	for _, r := range v.Replicas {
		if r.Region != "eu" && r.Region != "us" {
			t.Fatalf("replica %s in region %q", r.JobID, r.Region)
		}
	}
	if _, err := m.Scale(v.ID, api.ScaleRequest{Replicas: 3}); err == nil || !strings.Contains(err.Error(), "fewer than its 2 regions × 2") {
		t.Fatalf("scaling below the regions' floor: %v", err)
	}
}

// TestDrainKeepsRegionsEven: scaling down drains from the regions most
// over their share first.
func TestDrainKeepsRegionsEven(t *testing.T) {
	spec := testSpec()
	spec.Regions, spec.ReplicasPerRegion = []string{"eu", "us"}, 1
	mk := func(name, region string, age time.Duration) *replica {
		r := in(deadReplica(name), region, "", 0)
		r.leasedAt = time.Now().Add(-age)
		return r
	}
	eu1, eu2, eu3, us1 := mk("eu1", "eu", 3*time.Minute), mk("eu2", "eu", 2*time.Minute), mk("eu3", "eu", time.Minute), mk("us1", "us", 0)
	s := regionService(t, spec, eu1, eu2, eu3, us1)
	s.desired = 2
	cands := []*replica{us1, eu1, eu2, eu3}
	s.drainOrder(cands, cands)
	if cands[0] != eu3 || cands[1] != eu2 {
		t.Fatalf("drain order %s %s %s %s, want the newest eu ones first", cands[0].jobID, cands[1].jobID, cands[2].jobID, cands[3].jobID)
	}
	if got := s.regionFor([]*replica{eu1, eu2}, nil); got != "us" {
		t.Fatalf("a new replica with eu holding 2 of 2 goes to %q, want us", got)
	}
}

// TestRouteNearestRegion: requests go to the region Near names; without
// Near, to the region with the lowest round trip; to the next region when
// the nearest one's replicas are all at the target concurrency.
func TestRouteNearestRegion(t *testing.T) {
	spec := testSpec()
	spec.Regions, spec.TargetConcurrency = []string{"us", "eu"}, 2
	spec.Job.Near = "eu-west"
	eu1 := in(localReplica(t, "eu1", echo("eu1")), "eu", "eu-west", 80*time.Millisecond)
	eu2 := in(localReplica(t, "eu2", echo("eu2")), "eu", "eu-central", 90*time.Millisecond)
	us := in(localReplica(t, "us", echo("us")), "us", "us-east", 5*time.Millisecond)
	s := regionService(t, spec, us, eu1, eu2)
	got := map[string]int{}
	for range 20 {
		w := call(s, http.MethodGet, "/x", "")
		got[strings.Fields(w.Body.String())[0]]++
	}
	if got["eu1"] != 10 || got["eu2"] != 10 {
		t.Fatalf("requests %v, want all in eu (Near eu-west), shared evenly", got)
	}
	eu1.outstanding.Store(2)
	if r := s.pick(nil); r != eu2 {
		t.Fatalf("picked %s with eu1 at the target concurrency, want eu2", r.jobID)
	}
	eu2.outstanding.Store(2)
	if r := s.pick(nil); r != us {
		t.Fatalf("picked %s with eu at the target concurrency, want us", r.jobID)
	}
	us.outstanding.Store(5)
	if r := s.pick(nil); r != eu1 && r != eu2 {
		t.Fatalf("picked %s with every region at the target concurrency, want the least loaded (eu)", r.jobID)
	}
	eu1.outstanding.Store(0)
	eu2.outstanding.Store(0)
	us.outstanding.Store(0)

	spec.Job.Near = ""
	s = regionService(t, spec, eu1, eu2, us)
	if r := s.pick(nil); r != us {
		t.Fatalf("without Near picked %s, want us (5 ms against 80 ms)", r.jobID)
	}
	v := s.view()
	want := []api.RegionView{{Region: "us", Ready: 1, Want: 1, RTTMS: 5, Rank: 1}, {Region: "eu", Ready: 2, Want: 0, RTTMS: 80, Rank: 2}}
	if fmt.Sprint(v.Regions) != fmt.Sprint(want) {
		t.Fatalf("region views %+v, want %+v", v.Regions, want)
	}
}

// TestRegionFailover: with the near region's replicas gone (their
// provider's transport fails), idempotent requests (GET, and a POST with
// an Idempotency-Key, body and all) are served by the far region with no
// failure; a POST without one is not sent twice.
func TestRegionFailover(t *testing.T) {
	spec := testSpec()
	spec.Regions, spec.Job.Near = []string{"eu", "us"}, "eu"
	eu1 := in(deadReplica("eu1"), "eu", "eu-west", 5*time.Millisecond)
	eu2 := in(deadReplica("eu2"), "eu", "eu-west", 6*time.Millisecond)
	us := in(localReplica(t, "us", echo("us")), "us", "us-east", 80*time.Millisecond)
	s := regionService(t, spec, eu1, eu2, us)
	if w := call(s, http.MethodGet, "/x", ""); w.Code != 200 || w.Body.String() != "us GET " {
		t.Fatalf("GET with eu down: %d %q, want served by us", w.Code, w.Body.String())
	}
	if s.retries.Load() != 2 || !eu1.suspect.Load() || !eu2.suspect.Load() {
		t.Fatalf("%d retries, eu suspected %v %v; want both eu replicas tried, then us", s.retries.Load(), eu1.suspect.Load(), eu2.suspect.Load())
	}
	eu1.suspect.Store(false)
	eu2.suspect.Store(false)
	body := strings.Repeat("b", 5000)
	if w := callWith(s, http.MethodPost, "/x", body, s.Gateway(), map[string]string{TokenHeader: s.token, IdempotencyKey: "k1"}); w.Code != 200 || w.Body.String() != "us POST "+body {
		t.Fatalf("POST with an Idempotency-Key: %d %.40q, want served by us with its body", w.Code, w.Body.String())
	}
	eu1.suspect.Store(false)
	eu2.suspect.Store(false)
	if w := call(s, http.MethodPost, "/x", body); w.Code != http.StatusBadGateway {
		t.Fatalf("POST without an Idempotency-Key: %d %.40q, want 502 (not sent again)", w.Code, w.Body.String())
	}
	big := strings.Repeat("b", maxRetryBody+10)
	eu1.suspect.Store(false)
	eu2.suspect.Store(false)
	if w := callWith(s, http.MethodPost, "/x", big, s.Gateway(), map[string]string{TokenHeader: s.token, IdempotencyKey: "k2"}); w.Code != http.StatusBadGateway {
		t.Fatalf("POST with a key and a body over %d bytes: %d, want 502 (sent once)", maxRetryBody, w.Code)
	}
	eu1.suspect.Store(true) // known down: the long body goes to us2 at once
	us2 := in(localReplica(t, "us2", echo("us2")), "us", "us-east", 80*time.Millisecond)
	s = regionService(t, spec, eu1, us2)
	if w := callWith(s, http.MethodPost, "/x", big, s.Gateway(), map[string]string{TokenHeader: s.token, IdempotencyKey: "k3"}); w.Code != 200 || len(w.Body.String()) != len("us2 POST ")+len(big) {
		t.Fatalf("POST with a key and a long body, eu1 suspected: %d, %d bytes; want served whole by us2", w.Code, len(w.Body.String()))
	}
}

// TestKeptBodiesBounded (hostile): the bodies kept to send again are
// bounded per service: past maxKeptBodies in flight, a keyed request is
// sent once (not held in memory), and every request gives its room back.
func TestKeptBodiesBounded(t *testing.T) {
	dead := deadReplica("dead")
	ok := localReplica(t, "ok", echo("ok"))
	s := regionService(t, testSpec(), dead, ok)
	post := func() int {
		dead.suspect.Store(false)
		s.turn.Store(0) // the dead replica first
		w := callWith(s, http.MethodPost, "/x", "payload", s.Gateway(), map[string]string{TokenHeader: s.token, IdempotencyKey: "k"})
		return w.Code
	}
	s.keptBytes.Store(maxKeptBodies - 3)
	if code := post(); code != http.StatusBadGateway {
		t.Fatalf("keyed POST with the budget spent: %d, want 502 (sent once, not kept)", code)
	}
	if got := s.keptBytes.Load(); got != maxKeptBodies-3 {
		t.Fatalf("kept bytes %d after a request not kept, want %d", got, maxKeptBodies-3)
	}
	s.keptBytes.Store(0)
	if code := post(); code != http.StatusOK {
		t.Fatalf("keyed POST with room: %d, want 200 (retried on ok)", code)
	}
	if got := s.keptBytes.Load(); got != 0 {
		t.Fatalf("kept bytes %d after the request, want its room given back", got)
	}
}
