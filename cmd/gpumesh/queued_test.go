package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
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
		v.State, v.Lease, v.Winner = auction.JobQueued, nil, ""
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
			replyJSON(w, 200, leasedView("jq", auction.RunRunning))
		default:
			v := leasedView("jq", auction.RunSucceeded)
			v.State = auction.JobFinished
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
		v.State, v.Lease, v.Winner = auction.JobQueued, nil, ""
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
