package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

func TestNormalizeZero(t *testing.T) {
	now := time.Now()
	spec := testSpec()
	spec.ScaleToZero = true
	if err := normalize(&spec, now); err != nil || spec.IdleAfter != api.DefaultIdleAfter {
		t.Fatalf("scale to zero alone: %v, idle after %s; want the default %s", err, spec.IdleAfter, api.DefaultIdleAfter)
	}
	for _, tc := range []struct {
		name string
		zero bool
		idle time.Duration
		want string
	}{
		{"idle without scale to zero", false, time.Minute, "give scale to zero too"},
		{"idle too short", true, 500 * time.Millisecond, "at least 1s, got 500ms"},
		{"idle negative", true, -time.Second, "at least 1s"},
	} {
		spec := testSpec()
		spec.ScaleToZero, spec.IdleAfter = tc.zero, tc.idle
		if err := normalize(&spec, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestAwaitReplicaWakesAndWaits: a request to a service scaled to zero
// wakes it (the desired count back to its replicas) and is given the
// first replica routed; one to a service that does not scale to zero is
// not held.
func TestAwaitReplicaWakesAndWaits(t *testing.T) {
	spec := testSpec()
	spec.ScaleToZero, spec.IdleAfter, spec.StartTimeout = true, time.Second, 5*time.Second
	s := regionService(t, spec)
	s.asleep, s.desired = true, 0
	got := make(chan *replica, 1)
	go func() { got <- s.awaitReplica(t.Context()) }()
	// The request counts itself waiting, then kicks the control loop
	// (which this test runs none of).
	deadline := time.After(5 * time.Second)
	select {
	case <-s.kick:
	case <-deadline:
		t.Fatal("the request never woke the service")
	}
	if n := s.waiting.Load(); n != 1 {
		t.Fatalf("%d requests waiting, want 1", n)
	}
	s.mu.Lock()
	if s.asleep || s.desired != 1 || s.wakeAt.IsZero() {
		t.Fatalf("after a request: asleep %v, desired %d, woken at %v; want awake, 1 replica wanted", s.asleep, s.desired, s.wakeAt)
	}
	r := deadReplica("r")
	r.state = api.ReplicaStarting
	s.reps = append(s.reps, r)
	s.setState(r, api.ReplicaReady)
	s.coldStarted(s.now())
	s.mu.Unlock()
	select {
	case w := <-got:
		if w != r {
			t.Fatalf("the waiting request got %v, want the replica made ready", w)
		}
	case <-deadline:
		t.Fatal("the waiting request was not given the ready replica")
	}
	if v := s.view(); v.ColdStarts != 1 || v.LastColdStartMS <= 0 || v.ScaledToZero {
		t.Fatalf("view after the cold start: %d cold starts, last %v ms, scaled to zero %v", v.ColdStarts, v.LastColdStartMS, v.ScaledToZero)
	}

	plain := regionService(t, testSpec())
	if r := plain.awaitReplica(t.Context()); r != nil {
		t.Fatalf("a service that does not scale to zero held a request for %v", r)
	}
}

// TestUnadmittedRequestDoesNotWake (hostile): a request without the
// gateway's token is refused before it can wake a service scaled to zero.
func TestUnadmittedRequestDoesNotWake(t *testing.T) {
	spec := testSpec()
	spec.ScaleToZero, spec.IdleAfter, spec.StartTimeout = true, time.Second, time.Second
	s := regionService(t, spec)
	s.asleep, s.desired = true, 0
	for _, h := range []map[string]string{{}, {TokenHeader: "wrong"}} {
		if w := callWith(s, http.MethodGet, "/x", "", s.Gateway(), h); w.Code != http.StatusUnauthorized {
			t.Fatalf("request with %v: %d, want 401", h, w.Code)
		}
	}
	if w := callWith(s, http.MethodGet, "/x", "", "evil.example", map[string]string{TokenHeader: s.token}); w.Code != http.StatusMisdirectedRequest {
		t.Fatalf("request for another host: %d, want 421", w.Code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.asleep || s.desired != 0 || s.waiting.Load() != 0 {
		t.Fatalf("after refused requests: asleep %v, desired %d; want still scaled to zero", s.asleep, s.desired)
	}
}

// TestIdleCountsFromTheLastRequestsEnd: a service scales to zero once no
// request has been in flight for its IdleAfter, counted from the end of
// the last one: an answer that took longer than IdleAfter does not put
// the service to sleep the moment it is delivered.
func TestIdleCountsFromTheLastRequestsEnd(t *testing.T) {
	spec := testSpec()
	spec.ScaleToZero, spec.IdleAfter = true, 2*time.Second
	r := deadReplica("r")
	s := regionService(t, spec, r)
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	s.m.cfg.Now = func() time.Time { return now }

	// A request arrives, and its answer takes 5 s: three past IdleAfter.
	s.requested()
	r.outstanding.Add(1)
	req := httptest.NewRequest(http.MethodGet, "/slow", nil)
	resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("done")), Header: http.Header{}}
	body := s.track(r, req, resp, time.Millisecond)
	now = now.Add(5 * time.Second)
	s.mu.Lock()
	s.sleepIfIdle(now)
	asleep := s.asleep
	s.mu.Unlock()
	if asleep {
		t.Fatal("scaled to zero with a request in flight")
	}
	_, _ = io.Copy(io.Discard, body)
	body.Close() // delivered: its end is now

	s.mu.Lock()
	s.sleepIfIdle(now.Add(spec.IdleAfter - time.Millisecond))
	asleep = s.asleep
	s.mu.Unlock()
	if asleep {
		t.Fatalf("scaled to zero %s after the last answer's end, before its %s idle_after", spec.IdleAfter-time.Millisecond, spec.IdleAfter)
	}
	s.mu.Lock()
	s.sleepIfIdle(now.Add(spec.IdleAfter))
	asleep = s.asleep
	s.mu.Unlock()
	if !asleep {
		t.Fatalf("still awake %s after the last answer's end", spec.IdleAfter)
	}
}
