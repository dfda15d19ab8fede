package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// A peer id as libp2p makes them, its short form in tables, and a second
// one.
const (
	fullPeer  = "12D3KooWLqVY8r2F4mXgGxVq7DkqZs1oHHcq2s7yXJk5dWc3bD9a"
	shortForm = "LqVY8r2F4mXg"
	fullPeer2 = "12D3KooWQ5nB1mE6yW3TzKf2cWb7Hn8aUe1gQ9rVs4XpLdY2mN7k"
)

// TestProvidersShowAvailabilityPriceReliability: providers lists what
// each has free now, its price for a GPU-hour now and its reliability;
// --json carries the same fields (free_gpus, price_now, reliability).
func TestProvidersShowAvailabilityPriceReliability(t *testing.T) {
	one := 1
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/providers", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, []api.ProviderView{
			{Capability: terms.Capability{Peer: fullPeer, Region: "eu-west", GPUs: []terms.GPU{{Model: "A100", VRAMGB: 80}, {Model: "A100", VRAMGB: 80}},
				Policy: terms.Policy{PriceFloor: 1.25}, FreeGPUs: &one}, PriceNow: 1.875, Reliability: 0.73},
			{Capability: terms.Capability{Peer: fullPeer2, Region: "us-east", GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}},
				Policy: terms.Policy{PriceFloor: 2}}, PriceNow: 2, Reliability: 0.5},
		})
	})
	dir := fakeDaemon(t, mux)
	code, out, errOut := runCLI(t, "-d", dir, "providers")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	lines := strings.Split(out, "\n")
	head := strings.Fields(strings.NewReplacer("$/GPU-h", "").Replace(lines[0]))
	for i, want := range []string{"PEER", "REGION", "GPUS", "AVAILABLE", "PRICE", "FLOOR", "RELIABILITY"} {
		if i >= len(head) || head[i] != want {
			t.Fatalf("header %q: want columns PEER REGION GPUS AVAILABLE PRICE FLOOR RELIABILITY first", lines[0])
		}
	}
	for i, want := range [][]string{{shortForm, "eu-west", "2xA100/80GB", "1/2", "1.88", "1.25", "0.730"},
		{"Q5nB1mE6yW3T", "us-east", "1xH100/80GB", "-/1", "2.00", "2.00", "0.500"}} {
		if f := strings.Fields(lines[i+1]); len(f) < len(want) || strings.Join(f[:len(want)], " ") != strings.Join(want, " ") {
			t.Fatalf("row %d %q, want it to start %q", i+1, lines[i+1], want)
		}
	}
	code, out, _ = runCLI(t, "-d", dir, "providers", "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 2 {
		t.Fatalf("--json: code %d, err %v:\n%s", code, err, out)
	}
	if got[0]["peer"] != fullPeer || got[0]["free_gpus"] != 1.0 || got[0]["price_now"] != 1.875 || got[0]["reliability"] != 0.73 {
		t.Fatalf("--json %v: want the full peer id, free_gpus, price_now and reliability", got[0])
	}
}

// TestTablesShortenPeerIDs: every table that names peers (providers,
// bids, job list, job status, artifact ls, serve status) shortens them
// the same way, to the 12 characters after 12D3KooW as Docker shortens
// ids; --no-trunc and --json show them in full.
func TestTablesShortenPeerIDs(t *testing.T) {
	job := leasedView("j1", terms.RunRunning)
	job.Winner, job.Lease.Provider = fullPeer, fullPeer
	job.History = []api.LeaseRecord{{Lease: terms.Lease{ID: "lease-0", Provider: fullPeer2}, Run: terms.RunPreempted}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/providers", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, []api.ProviderView{{Capability: terms.Capability{Peer: fullPeer, GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}}}}})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/bids", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.BidsView{JobID: "j1", Bids: []terms.Ranked{{Candidate: terms.Candidate{Bid: terms.Bid{Provider: fullPeer, Price: 1}}, Score: 2}},
			Explain: terms.Explanation{Winner: fullPeer, Rank: 1, Rule: terms.RuleOnlyEligible}})
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, []api.JobView{job}) })
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, job) })
	mux.HandleFunc("GET /v1/artifacts", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, []api.ArtifactView{{ArtifactInfo: api.ArtifactInfo{ID: "a1", Name: "data", Owner: fullPeer, Complete: true}}})
	})
	mux.HandleFunc("GET /v1/services/{id}", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.ServiceView{ID: "s1", Replicas: []api.ReplicaView{{JobID: "r1", Provider: fullPeer, State: "ready"}}})
	})
	dir := fakeDaemon(t, mux)
	for _, args := range [][]string{{"providers"}, {"bids", "j1"}, {"job", "list"}, {"job", "status", "j1"}, {"artifact", "ls"}, {"serve", "status", "s1"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"-d", dir}, args...)...)
			if code != 0 || !strings.Contains(out, shortForm) || strings.Contains(out, fullPeer) {
				t.Fatalf("code %d, stderr %q: the table does not name %s as %s:\n%s", code, errOut, fullPeer, shortForm, out)
			}
			code, out, _ = runCLI(t, append(append([]string{"-d", dir}, args...), "--no-trunc")...)
			if code != 0 || !strings.Contains(out, fullPeer) {
				t.Fatalf("--no-trunc: code %d, %s not in full:\n%s", code, fullPeer, out)
			}
			code, out, _ = runCLI(t, append(append([]string{"-d", dir}, args...), "--json")...)
			if code != 0 || !strings.Contains(out, fullPeer) {
				t.Fatalf("--json: code %d, %s not in full:\n%s", code, fullPeer, out)
			}
		})
	}
	if code, out, _ := runCLI(t, "-d", dir, "job", "status", "j1"); code != 0 || !strings.Contains(out, "  1  Q5nB1mE6yW3T  preempted") {
		t.Fatalf("job status attempts name the first lease's provider by its short id:\n%s", out)
	}
}

// columns splits a table row into its cells (two or more spaces apart).
var columns = regexp.MustCompile(`\s{2,}`)

// jobAt is a job of this renter created at, in state st (run run), with
// its run's times.
func jobAt(id string, created time.Time, st terms.JobState, run terms.RunState) api.JobView {
	v := leasedView(id, run)
	v.Job.CreatedAt, v.PostedAt, v.State = created, created, st
	if run != terms.RunPending {
		v.Started = created.Add(time.Minute)
	}
	if run.Terminal() {
		v.Ended = created.Add(2 * time.Minute)
	}
	return v
}

// TestJobListNewestFirstFilteredLimited: job list shows the newest jobs
// first (the daemon answers oldest first), --state keeps the jobs in any
// of the given auction or run states (repeatable, or a comma list),
// --limit keeps the newest N (default 20, 0 for all), and the table gives
// created, started and ended times relative to now, --json as RFC3339.
func TestJobListNewestFirstFilteredLimited(t *testing.T) {
	now := time.Now()
	var jobs []api.JobView
	for i := 30; i >= 1; i-- { // oldest first, as the daemon lists them
		jobs = append(jobs, jobAt(fmt.Sprintf("old-%02d", i), now.Add(-time.Duration(i)*time.Hour-time.Hour), terms.JobFinished, terms.RunSucceeded))
	}
	jobs = append(jobs,
		jobAt("failed", now.Add(-50*time.Minute), terms.JobFinished, terms.RunFailed),
		jobAt("running", now.Add(-10*time.Minute), terms.JobLeased, terms.RunRunning),
		jobAt("queued", now.Add(-3*time.Minute), terms.JobQueued, ""))
	jobs[len(jobs)-1].Lease, jobs[len(jobs)-1].Winner, jobs[len(jobs)-1].Started = nil, "", time.Time{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, jobs) })
	dir := fakeDaemon(t, mux)
	ids := func(out string) []string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] != "" && !strings.Contains(l, "job(s)") {
				got = append(got, f[0])
			}
		}
		return got
	}

	code, out, errOut := runCLI(t, "-d", dir, "job", "list")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	got := ids(out)
	if len(got) != 20 || got[0] != "queued" || got[1] != "running" || got[2] != "failed" || got[3] != "old-01" || got[19] != "old-17" {
		t.Fatalf("job list shows %v: want the 20 newest, newest first", got)
	}
	if !strings.HasSuffix(out, "20 of 33 job(s), newest first (--limit 0 lists all)\n") {
		t.Fatalf("no note that the list is cut:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	if f := strings.Fields(lines[0]); strings.Join(f[len(f)-3:], " ") != "CREATED STARTED ENDED" {
		t.Fatalf("header %q: want CREATED STARTED ENDED last", lines[0])
	}
	for i, want := range []string{"3m ago|-|-", "10m ago|9m ago|-", "50m ago|49m ago|48m ago", "2h ago|1h ago|1h ago"} {
		cells := columns.Split(strings.TrimSpace(lines[i+1]), -1)
		if got := strings.Join(cells[len(cells)-3:], "|"); got != want {
			t.Fatalf("row %d: created|started|ended %q, want %q relative to now:\n%s", i+1, got, want, strings.Join(lines[:5], "\n"))
		}
	}
	if code, out, _ = runCLI(t, "-d", dir, "job", "list", "--limit", "0"); code != 0 || len(ids(out)) != 33 || !strings.HasSuffix(out, "33 job(s)\n") {
		t.Fatalf("--limit 0: code %d, %d jobs:\n%s", code, len(ids(out)), out)
	}
	for _, args := range [][]string{{"--state", "running,queued"}, {"--state", "running", "--state", "queued"}, {"--state", "leased", "--state", "QUEUED"}} {
		if code, out, _ = runCLI(t, append([]string{"-d", dir, "job", "list"}, args...)...); code != 0 || strings.Join(ids(out), " ") != "queued running" {
			t.Fatalf("%v: code %d, jobs %v, want queued and running", args, code, ids(out))
		}
	}
	if code, out, _ = runCLI(t, "-d", dir, "job", "list", "--state", "failed", "--limit", "5"); code != 0 || strings.Join(ids(out), " ") != "failed" {
		t.Fatalf("--state failed: code %d, jobs %v", code, ids(out))
	}
	code, out, _ = runCLI(t, "-d", dir, "job", "list", "--state", "finished", "--limit", "2", "--json")
	var vs []api.JobView
	if err := json.Unmarshal([]byte(out), &vs); code != 0 || err != nil || len(vs) != 2 || vs[0].Job.ID != "failed" || vs[1].Job.ID != "old-01" {
		t.Fatalf("--json: code %d, err %v, %d jobs:\n%s", code, err, len(vs), out)
	}
	var raw []map[string]any
	_ = json.Unmarshal([]byte(out), &raw)
	if s, _ := raw[0]["started"].(string); s == "" || s != vs[0].Started.Format(time.RFC3339Nano) {
		t.Fatalf("--json started %v, want RFC3339", raw[0]["started"])
	}
	oneLineError(t, `unknown --state "sleeping" (job states: bidding, awarding, queued, leased, finished, unplaceable, cancelled, failed; run states: pending, running, succeeded, failed, preempted, expired, cancelled)`,
		"-d", dir, "job", "list", "--state", "running,sleeping")
	oneLineError(t, "--limit must be >= 0 (0: all), got -1", "-d", dir, "job", "list", "--limit", "-1")
}

// TestArtifactLsJobsAndCheckpoints: artifact ls names the job each
// artifact belongs to; a job's periodic checkpoints stay out of the list
// (a line says how many) unless --checkpoints, which lists every
// checkpoint under its job, newest first.
func TestArtifactLsJobsAndCheckpoints(t *testing.T) {
	at := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	ck := func(id, job string, seq int, reason string) api.ArtifactView {
		return api.ArtifactView{ArtifactInfo: api.ArtifactInfo{ID: id, Name: "checkpoint", Size: 2048, Files: 1, Complete: true, Private: true},
			Job: job, Use: api.ArtifactCheckpoint, Checkpoint: &terms.Checkpoint{JobID: job, Seq: seq, Attempt: 1, Reason: reason,
				Work: time.Duration(seq) * time.Minute, Artifact: id, TakenAt: at.Add(time.Duration(seq) * time.Minute)}}
	}
	list := []api.ArtifactView{
		{ArtifactInfo: api.ArtifactInfo{ID: "data1", Name: "imagenet", Size: 4096, Files: 3, Complete: true}},
		{ArtifactInfo: api.ArtifactInfo{ID: "out1", Name: "outputs", Size: 100, Files: 1, Complete: true, Private: true}, Job: "job-a", Use: api.ArtifactOutputs},
		ck("ckA1", "job-a", 1, terms.CheckpointPeriodic), ck("ckA2", "job-a", 2, terms.CheckpointPeriodic),
		ck("ckB1", "job-b", 1, terms.CheckpointPeriodic), ck("ckB2", "job-b", 2, terms.CheckpointStopped),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/artifacts", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, list) })
	dir := fakeDaemon(t, mux)

	code, out, errOut := runCLI(t, "-d", dir, "artifact", "ls")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if f := strings.Fields(lines[0]); len(f) < 3 || f[2] != "JOB" {
		t.Fatalf("header %q: no JOB column", lines[0])
	}
	rows := map[string][]string{}
	for _, l := range lines[1 : len(lines)-1] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	if len(rows) != 3 || rows["data1"][2] != "-" || rows["out1"][3] != "job-a" || rows["ckB2"][4] != "job-b" {
		t.Fatalf("want the dataset (no job), job-a's outputs and job-b's stopped checkpoint, each with its job:\n%s", out)
	}
	if want := "3 periodic checkpoint(s) of 2 job(s) not listed: --checkpoints lists them; `gpumesh job status ID` shows a job's latest"; lines[len(lines)-1] != want {
		t.Fatalf("last line %q, want %q", lines[len(lines)-1], want)
	}
	code, out, _ = runCLI(t, "-d", dir, "artifact", "ls", "--json")
	var got []api.ArtifactView
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 3 || got[1].Job != "job-a" {
		t.Fatalf("--json: code %d, err %v: %s", code, err, out)
	}

	code, out, _ = runCLI(t, "-d", dir, "artifact", "ls", "--checkpoints")
	a := strings.Index(out, "checkpoints of job job-a (newest first):\n")
	b := strings.Index(out, "checkpoints of job job-b (newest first):\n")
	if code != 0 || a < 0 || b < a {
		t.Fatalf("--checkpoints: code %d, no group per job:\n%s", code, out)
	}
	main, groupA, groupB := out[:a], out[a:b], out[b:]
	if strings.Contains(main, "ck") || !strings.Contains(main, "data1") || !strings.Contains(main, "out1") {
		t.Fatalf("--checkpoints: the main table should hold the other artifacts only:\n%s", main)
	}
	if strings.Index(groupA, "ckA2") < 0 || strings.Index(groupA, "ckA2") > strings.Index(groupA, "ckA1") || strings.Contains(groupA, "ckB") {
		t.Fatalf("job-a's checkpoints, newest first:\n%s", groupA)
	}
	var rowsB []string
	for _, l := range strings.Split(groupB, "\n")[2:] {
		if f := strings.Fields(l); len(f) >= 4 {
			rowsB = append(rowsB, strings.Join(f[:4], " "))
		}
	}
	if strings.Join(rowsB, "; ") != "ckB2 1 2 stopped; ckB1 1 1 periodic" {
		t.Fatalf("job-b's checkpoints with their attempt, seq and reason, newest first: %q\n%s", rowsB, groupB)
	}
}

// TestJobLogsAttempts: job logs prints the last attempt's log, under a
// header naming it when the job had several; --attempt N prints attempt
// N's, --all-attempts each in turn under its header, going on past one
// whose provider is gone and failing at the end.
func TestJobLogsAttempts(t *testing.T) {
	v := leasedView("j3", terms.RunRunning)
	v.Lease.ID, v.Lease.Provider = "lease-c", fullPeer
	v.History = []api.LeaseRecord{{Lease: terms.Lease{ID: "lease-a", Provider: fullPeer2}}, {Lease: terms.Lease{ID: "lease-b", Provider: fullPeer2}}}
	var queries []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "one" {
			replyJSON(w, 200, leasedView("one", terms.RunRunning))
			return
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		a := r.URL.Query().Get("attempt")
		queries = append(queries, r.URL.RawQuery)
		if a == "2" {
			replyJSON(w, 502, api.ErrorBody{Error: "provider " + fullPeer2 + " unreachable"})
			return
		}
		w.Write([]byte("log of attempt " + a + "\n"))
	})
	dir := fakeDaemon(t, mux)

	code, out, errOut := runCLI(t, "-d", dir, "job", "logs", "j3")
	if code != 0 || out != "==> attempt 3 of 3: lease lease-c on "+shortForm+" <==\nlog of attempt 3\n" {
		t.Fatalf("code %d, stderr %q, out %q: want the last attempt's log under its header", code, errOut, out)
	}
	queries = nil
	if code, out, _ = runCLI(t, "-d", dir, "job", "logs", "--attempt", "1", "-f", "j3"); code != 0 || queries[0] != "attempt=1" ||
		out != "==> attempt 1 of 3: lease lease-a on Q5nB1mE6yW3T <==\nlog of attempt 1\n" {
		t.Fatalf("--attempt 1: code %d, queries %v, out %q (an ended attempt is not followed)", code, queries, out)
	}
	queries = nil
	code, out, errOut = runCLI(t, "-d", dir, "job", "logs", "--all-attempts", "j3")
	if code != 1 || out != "==> attempt 1 of 3: lease lease-a on Q5nB1mE6yW3T <==\nlog of attempt 1\n"+
		"==> attempt 2 of 3: lease lease-b on Q5nB1mE6yW3T <==\n"+
		"==> attempt 3 of 3: lease lease-c on "+shortForm+" <==\nlog of attempt 3\n" {
		t.Fatalf("--all-attempts: code %d, out %q", code, out)
	}
	if !strings.Contains(errOut, "gpumesh: attempt 2: provider "+fullPeer2+" unreachable\n") ||
		!strings.HasSuffix(errOut, "gpumesh: the logs of attempt(s) 2 of job j3 are unavailable\n") {
		t.Fatalf("--all-attempts stderr %q", errOut)
	}
	if code, out, _ = runCLI(t, "-d", dir, "job", "logs", "one"); code != 0 || out != "log of attempt 1\n" {
		t.Fatalf("a job with one attempt: code %d, out %q (no header)", code, out)
	}
	oneLineError(t, "job j3 has no attempt 4 (it had 3)", "-d", dir, "job", "logs", "--attempt", "4", "j3")
	oneLineError(t, "--attempt must be 1 or more, got 0", "-d", dir, "job", "logs", "--attempt", "0", "j3")
	oneLineError(t, "give --attempt N or --all-attempts, not both", "-d", dir, "job", "logs", "--attempt", "2", "--all-attempts", "j3")
}
