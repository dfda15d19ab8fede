package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestJobPostWaitStreamsLogs: `job post --wait` prints the job's log while
// it runs (whole lines, control characters made visible, never mixed
// with the status lines) and exits with the job's own exit code; a job
// that ended otherwise exits 1 saying how.
func TestJobPostWaitStreamsLogs(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = 5 * time.Millisecond
	exit7 := 7
	var (
		wrote     = make(chan struct{}) // the log's first part is out
		gate      = make(chan struct{}) // the job has ended: the log may end
		closeGate sync.Once
		logQuery  atomic.Value
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req api.PostJobRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		replyJSON(w, 200, leasedView(req.Job.Workload, terms.RunPending))
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		v := leasedView(id, terms.RunRunning)
		switch id {
		case "w7":
			select {
			case <-wrote:
				v.State, v.Run, v.ExitCode, v.Detail = terms.JobFinished, terms.RunFailed, &exit7, "exit code 7"
				closeGate.Do(func() { close(gate) })
			default:
			}
		case "exp":
			v.State, v.Run = terms.JobFinished, terms.RunExpired
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		logQuery.Store(r.URL.RawQuery)
		if r.PathValue("id") != "w7" {
			return
		}
		io.WriteString(w, "step 1\npar")
		w.(http.Flusher).Flush()
		select {
		case <-wrote:
		default:
			close(wrote)
		}
		<-gate
		io.WriteString(w, "tial\n\x1b[2Jdone")
	})
	dir := fakeDaemon(t, mux)
	post := func(id string, extra ...string) (int, string, string) {
		args := append([]string{"-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--workload", id, "--wait"}, extra...)
		return runCLI(t, append(args, "--", "x")...)
	}

	code, out, errOut := post("w7")
	if code != 7 {
		t.Fatalf("exit %d, want the job's 7\nout %s\nerr %s", code, out, errOut)
	}
	if errOut != "gpumesh: job w7 failed (exit code 7)\n" {
		t.Fatalf("stderr %q", errOut)
	}
	if q, _ := logQuery.Load().(string); q != "attempt=1&follow=1" {
		t.Fatalf("log requested with %q, want the first attempt's, followed", q)
	}
	lines := strings.Split(out, "\n")
	for _, want := range []string{"step 1", "partial", "^[[2Jdone"} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("no log line %q in:\n%s", want, out)
		}
	}
	status := regexp.MustCompile(`^  \d\d:\d\d:\d\d run (running|failed)$`)
	n := 0
	for _, l := range lines {
		if strings.Contains(l, " run ") && !strings.HasPrefix(l, "run:") {
			if !status.MatchString(l) {
				t.Errorf("status line mixed with the log: %q", l)
			}
			n++
		}
	}
	if n < 1 || !strings.Contains(out, "run failed\n") {
		t.Errorf("no run-state lines in:\n%s", out)
	}

	// --json: stdout stays JSON (no log), the exit code is the job's.
	wrote, gate, closeGate = make(chan struct{}), make(chan struct{}), sync.Once{}
	close(wrote) // no log stream: let the job end
	code, out, _ = post("w7", "--json")
	var v api.JobView
	if code != 7 || json.Unmarshal([]byte(out), &v) != nil || v.Run != terms.RunFailed {
		t.Fatalf("--json: exit %d, out %q", code, out)
	}

	// Ended without an exit code of its own: exit 1, saying how.
	oneLineError(t, "job exp expired", "-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--workload", "exp", "--wait", "--", "x")
	if code, _, _ := post("exp"); code != 1 {
		t.Fatalf("expired job: exit %d, want 1", code)
	}
}
