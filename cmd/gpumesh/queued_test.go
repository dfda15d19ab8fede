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

// TestJobPostQueued: a job no provider can take yet is queued on the
// daemon: `job post` says so and why and succeeds; with --wait it waits
// until the job is leased and then for its run.
func TestJobPostQueued(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = 5 * time.Millisecond
	queued := func(id string) api.JobView {
		v := leasedView(id, "")
		v.State, v.Lease, v.Winner = terms.JobQueued, nil, ""
		v.Reasons = []string{"queued: no bids (offered 1 times)"}
		v.Declines = map[string]int{"vram": 1, "price": 3}
		return v
	}
	var polls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, queued("jq"))
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		switch n := polls.Add(1); {
		case n < 3:
			replyJSON(w, 200, queued("jq"))
		case n < 5:
			replyJSON(w, 200, leasedView("jq", terms.RunRunning))
		default:
			v := leasedView("jq", terms.RunSucceeded)
			v.State = terms.JobFinished
			replyJSON(w, 200, v)
		}
	})
	dir := fakeDaemon(t, mux)
	t.Run("post returns once queued", func(t *testing.T) {
		code, out, errOut := runCLI(t, "-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--", "x")
		if code != 0 || strings.TrimSpace(out) != "job jq queued: no bids (offered 1 times)" || polls.Load() != 0 {
			t.Fatalf("code %d polls %d\nout %s\nerr %s", code, polls.Load(), out, errOut)
		}
	})
	t.Run("post wait waits for the lease and the run", func(t *testing.T) {
		code, out, errOut := runCLI(t, "-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--wait", "--", "x")
		if code != 0 || !strings.Contains(out, "job jq queued: no bids (offered 1 times); waiting") ||
			!strings.Contains(out, "job jq leased to 12D3KooWprov") || !strings.Contains(out, "run:        succeeded") {
			t.Fatalf("code %d\nout %s\nerr %s", code, out, errOut)
		}
		if polls.Load() < 5 {
			t.Fatalf("returned after %d polls", polls.Load())
		}
	})
}

// TestJobStatusShowsDeclines: job status aggregates why providers did not
// bid.
func TestJobStatusShowsDeclines(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		v := leasedView("jq", "")
		v.State, v.Lease, v.Winner = terms.JobQueued, nil, ""
		v.Reasons = []string{"queued: no bids (4 declined: price; 1: vram) (offered 2 times)"}
		v.Declines = map[string]int{"vram": 1, "price": 4}
		replyJSON(w, 200, v)
	})
	dir := fakeDaemon(t, mux)
	code, out, errOut := runCLI(t, "-d", dir, "job", "status", "jq")
	if code != 0 || !strings.Contains(out, "state:      queued") || !strings.Contains(out, "declines:   4 declined: price; 1: vram") {
		t.Fatalf("code %d\nout %s\nerr %s", code, out, errOut)
	}
}

// TestJobStatusListsAttempts: job status lists a job's attempts, the lost
// one (provider, fault, why, cost) and the current one, with the budget and
// the excluded provider; --json carries the same history.
func TestJobStatusListsAttempts(t *testing.T) {
	lostProv := "12D3KooWlostprovider0000abcdef"
	v := leasedView("jr", terms.RunRunning)
	v.Job.Attempt, v.Job.MaxAttempts, v.Job.Exclude = 1, 4, []string{lostProv}
	first := *v.Lease
	first.ID, first.Provider, first.State = "lease-0", lostProv, terms.RunFailed
	v.History = []api.LeaseRecord{{Lease: first, Run: terms.RunFailed, Fault: terms.FaultProvider, CostUSD: 0.0125, Receipt: true,
		Detail:     "provider lost: no heartbeat for 32s",
		Checkpoint: &terms.Checkpoint{Artifact: strings.Repeat("ab", 32), Work: 20 * time.Minute, Reason: terms.CheckpointPeriodic}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, v) })
	dir := fakeDaemon(t, mux)
	code, out, errOut := runCLI(t, "-d", dir, "job", "status", "jr")
	if code != 0 {
		t.Fatalf("code %d\nout %s\nerr %s", code, out, errOut)
	}
	lines := strings.Split(out, "\n")
	var table []string
	for i, l := range lines {
		if strings.HasPrefix(l, "attempts:") {
			table = lines[i : i+4]
		}
	}
	if table == nil {
		t.Fatalf("no attempts in\n%s", out)
	}
	if table[0] != "attempts:   2 of 4, excluded lostprovider" {
		t.Fatalf("attempts header %q", table[0])
	}
	for i, want := range [][]string{
		{"#", "PROVIDER", "RUN", "FAULT", "CHECKPOINT", "COST", "DETAIL"},
		{"1", "lostprovider", "failed", "provider", "saved 20m0s of work (periodic)", "$0.0125", "provider lost: no heartbeat for 32s"},
		{"2", "prov", "running", "-", "-", "$0.0000 (unsettled)", "-"},
	} {
		row := table[i+1]
		at := 0
		for _, cell := range want {
			k := strings.Index(row[at:], cell)
			if k < 0 {
				t.Fatalf("row %d %q lacks %q after column %d", i, row, cell, at)
			}
			at += k + len(cell)
		}
	}
	code, out, errOut = runCLI(t, "-d", dir, "job", "status", "--json", "jr")
	var got api.JobView
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.History) != 1 || got.History[0].Fault != terms.FaultProvider ||
		got.History[0].Detail != v.History[0].Detail || !got.Job.Excludes(lostProv) {
		t.Fatalf("job status --json: code %d history %+v\nerr %s", code, got.History, errOut)
	}
}

// TestJobPostNoProviderFits: the daemon's refusal of a job no known
// provider could run is one line and exit 1; --queue asks it to post the
// job anyway.
func TestJobPostNoProviderFits(t *testing.T) {
	const refusal = "no known provider can run this job (2 known): no provider in region 'mars' (known: eu-west, us-east); post it with --queue to wait for providers that may appear"
	var queued []bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req api.PostJobRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			replyJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		queued = append(queued, req.Queue)
		if !req.Queue {
			replyJSON(w, 422, map[string]string{"error": refusal})
			return
		}
		v := leasedView("jq", "")
		v.State, v.Lease, v.Winner = terms.JobQueued, nil, ""
		v.Reasons = []string{"queued: no bids (offered 1 times)"}
		replyJSON(w, 200, v)
	})
	dir := fakeDaemon(t, mux)
	oneLineError(t, refusal, "-d", dir, "job", "post", "--region", "mars", "--max-price", "2", "--duration", "1h", "--", "x")
	code, out, errOut := runCLI(t, "-d", dir, "job", "post", "--region", "mars", "--max-price", "2", "--duration", "1h", "--queue", "--", "x")
	if code != 0 || !strings.Contains(out, "job jq queued") {
		t.Fatalf("--queue: code %d\nout %s\nerr %s", code, out, errOut)
	}
	if len(queued) != 2 || queued[0] || !queued[1] {
		t.Fatalf("queue sent %v, want [false true]", queued)
	}
}
