package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestJobPostWaitLongPolls: `job post --wait` asks for the job's next
// change (a long poll) instead of asking on a clock, so it ends as soon
// as the daemon answers the change, with no turn of waitInterval between.
func TestJobPostWaitLongPolls(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = time.Hour // a clock turn would outlast the test
	var plain, long atomic.Int32
	var badWait atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, leasedView("jw", terms.RunRunning))
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		wait := r.URL.Query().Get("wait")
		if wait == "" {
			plain.Add(1)
			replyJSON(w, 200, leasedView("jw", terms.RunRunning))
			return
		}
		long.Add(1)
		if wait != waitInterval.String() {
			badWait.Store(wait)
		}
		v := leasedView("jw", terms.RunSucceeded)
		v.State = terms.JobFinished
		replyJSON(w, 200, v)
	})
	dir := fakeDaemon(t, mux)
	code, out, errOut := runCLI(t, "-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--wait", "--", "x")
	if code != 0 || !strings.Contains(out, "run:        succeeded") {
		t.Fatalf("code %d\nout %s\nerr %s", code, out, errOut)
	}
	if plain.Load() != 1 || long.Load() != 1 || badWait.Load() != nil {
		t.Fatalf("%d plain asks, %d long polls (a bad wait: %v), want one of each with wait=%s", plain.Load(), long.Load(), badWait.Load(), waitInterval)
	}
}
