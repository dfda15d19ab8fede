package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestProviderDrainCLI: `provider drain` sends its grace, prints the plan
// and follows the drain until it is done, through the drain's long poll
// (?wait=D), not by asking again and again; `drain --cancel` undrains; a
// negative grace is a one-line error.
func TestProviderDrainCLI(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = 5 * time.Millisecond
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	plan := func(run terms.RunState, done bool) api.DrainView {
		return api.DrainView{Draining: true, Grace: 90 * time.Second, Done: done, Leases: []api.DrainLease{
			{LeaseID: "lease-short", JobID: "job-s", Tier: terms.Silver, Start: start, End: start.Add(time.Minute), Action: api.DrainFinish, Run: run},
			{LeaseID: "lease-long", JobID: "job-l", Tier: terms.Gold, Start: start, End: start.Add(time.Hour), Action: api.DrainHandBack,
				Run: terms.RunPreempted, Detail: terms.HandBackDetail},
		}}
	}
	var grace atomic.Int64
	var polls, longPolls, undrains atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/provider/drain", func(w http.ResponseWriter, r *http.Request) {
		var req api.DrainRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			replyJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
			return
		}
		grace.Store(int64(req.Grace))
		replyJSON(w, http.StatusOK, plan(terms.RunRunning, false))
	})
	mux.HandleFunc("GET /v1/provider/drain", func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && d == waitInterval {
			longPolls.Add(1)
		}
		if polls.Add(1) < 2 {
			replyJSON(w, http.StatusOK, plan(terms.RunRunning, false))
			return
		}
		replyJSON(w, http.StatusOK, plan(terms.RunSucceeded, true))
	})
	mux.HandleFunc("POST /v1/provider/undrain", func(w http.ResponseWriter, _ *http.Request) {
		undrains.Add(1)
		replyJSON(w, http.StatusOK, api.DrainView{Leases: []api.DrainLease{}, Done: true})
	})
	dir := fakeDaemon(t, mux)

	code, out, errOut := runCLI(t, "-d", dir, "provider", "drain", "--grace", "90s")
	if code != 0 {
		t.Fatalf("drain exited %d: %s", code, errOut)
	}
	if time.Duration(grace.Load()) != 90*time.Second {
		t.Fatalf("grace sent %s", time.Duration(grace.Load()))
	}
	for _, want := range []string{"draining: not bidding; grace 1m30s", "lease-long", "hand_back",
		"in progress: 0/1 finishing leases ended, 1/1 handed back, 0 reservation(s) kept",
		"done: 1/1 finishing leases ended, 1/1 handed back", "drained:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("drain output lacks %q:\n%s", want, out)
		}
	}
	if polls.Load() < 2 {
		t.Fatalf("drain returned after %d polls, before the drain was done", polls.Load())
	}
	if longPolls.Load() != polls.Load() {
		t.Fatalf("%d of %d asks for the drain's progress were long polls", longPolls.Load(), polls.Load())
	}

	if code, out, errOut := runCLI(t, "-d", dir, "provider", "drain", "--cancel"); code != 0 || !strings.Contains(out, "bidding again") || undrains.Load() != 1 {
		t.Fatalf("drain --cancel: exit %d, %d undrains, out %q err %q", code, undrains.Load(), out, errOut)
	}
	oneLineError(t, "--grace must not be negative", "-d", dir, "provider", "drain", "--grace", "-1s")
}
