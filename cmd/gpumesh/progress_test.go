package main

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestJobPostProgress: on a terminal, `job post --wait` redraws one status
// line (the auction, then the run with its heartbeats and GPU readings) and
// erases it before every permanent line; off a terminal or with --json it
// draws none.
func TestJobPostProgress(t *testing.T) {
	defer func(d, p time.Duration, f func(io.Writer) bool) { waitInterval, progressTick, isTerminal = d, p, f }(waitInterval, progressTick, isTerminal)
	waitInterval, progressTick = 20*time.Millisecond, 5*time.Millisecond
	var polls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		polls.Store(0)
		replyJSON(w, 200, leasedView("p1", terms.RunPending))
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		v := leasedView("p1", terms.RunRunning)
		v.Heartbeats = &attest.HeartbeatSummary{Count: int(polls.Load())}
		v.LastTelemetry = &attest.Heartbeat{GPUUtil: 87, TempC: 71, PowerW: 300}
		if polls.Add(1) > 4 {
			v.State, v.Run = terms.JobFinished, terms.RunSucceeded
		}
		replyJSON(w, 200, v)
	})
	dir := fakeDaemon(t, mux)
	args := []string{"-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--wait", "--", "true"}

	isTerminal = func(io.Writer) bool { return true }
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"\r[", "job posted; collecting bids for 2s", "job p1: running, 2 heartbeat(s), GPU 87% 71°C 300 W"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, out)
		}
	}
	// Each permanent line is printed on a cleared line: where status lines
	// were drawn on it, the last thing before the text is "\r<spaces>\r".
	var visible []string
	for _, seg := range strings.Split(out, "\n") {
		i := strings.LastIndex(seg, "\r")
		if i >= 0 && strings.Contains(seg[:i+1], "\r[") {
			prior := seg[:i]
			erased := prior[strings.LastIndex(prior, "\r")+1:]
			if erased == "" || strings.Trim(erased, " ") != "" {
				t.Errorf("line %q printed over a status line", seg[i+1:])
			}
		}
		visible = append(visible, seg[i+1:])
	}
	text := strings.Join(visible, "\n")
	for _, perm := range []string{"job p1 leased to", "run running", "run succeeded"} {
		if !strings.Contains(text, perm) {
			t.Errorf("no %q among the visible lines:\n%s", perm, text)
		}
	}
	if tail := out[strings.LastIndex(out, "\n")+1:]; tail != "" {
		t.Errorf("a status line is left at the end: %q", tail)
	}

	for name, f := range map[string]func(io.Writer) bool{"not a terminal": func(io.Writer) bool { return false }, "json": func(io.Writer) bool { return true }} {
		isTerminal = f
		a := args
		if name == "json" {
			a = append(append([]string{}, args[:len(args)-2]...), "--json", "--", "true")
		}
		code, out, errOut := runCLI(t, a...)
		if code != 0 || strings.Contains(out, "\r") {
			t.Errorf("%s: exit %d, output has a status line: %q %s", name, code, out, errOut)
		}
	}
}
