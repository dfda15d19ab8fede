package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestBidsNamesTheLeasedBid: the cheapest bid ranks first but starts an
// hour late, so the lease went to the second, which could start at once
// (a bronze job's usual case). `bids` prints the ranking once, marks the
// second bid as the lease's and names its provider as the winner, with
// why the first was passed over; --json carries the explanation as fields,
// not as a text table.
func TestBidsNamesTheLeasedBid(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	busy, free := "12D3KooWbusyProviderAAAAAAAA", "12D3KooWfreeProviderBBBBBBBB"
	view := api.BidsView{JobID: "j1", Bids: []terms.Ranked{
		{Candidate: terms.Candidate{Bid: terms.Bid{Provider: busy, Price: 0.5, Start: now.Add(time.Hour)}, Reliability: 0.9}, Score: 0.5556},
		{Candidate: terms.Candidate{Bid: terms.Bid{Provider: free, Price: 1, Start: now}, Reliability: 0.9}, Score: 1.111},
	}, Explain: terms.Explanation{Winner: free, Rank: 2, Score: 1.111, Price: 1, Reliability: 0.9, Rule: terms.RulePassedOver,
		Passed: []terms.PassedBid{{Provider: busy, Reason: "starts later (2026-03-14T11:00:00Z), while the winner's bid could start at once (2026-03-14T10:00:00Z)"}}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}/bids", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, view) })
	dir := fakeDaemon(t, mux)

	code, out, errOut := runCLI(t, "-d", dir, "bids", "j1")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if n := strings.Count(out, "PROVIDER"); n != 1 {
		t.Fatalf("the ranking is printed %d times:\n%s", n, out)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[2], "2 (lease)  freeProvider ") || strings.Contains(lines[1], "(lease)") {
		t.Fatalf("the second bid is not marked as the lease's:\n%s", out)
	}
	if !strings.Contains(out, "winner freeProvider (rank 2)") || !strings.Contains(out, "busyProvider starts later") {
		t.Fatalf("the explanation does not name the leased bid's provider and why the first was passed over:\n%s", out)
	}
	if code, out, _ = runCLI(t, "-d", dir, "bids", "j1", "--no-trunc"); code != 0 || !strings.Contains(out, "winner "+free+" (rank 2)") ||
		!strings.Contains(out, "2 (lease)  "+free+" ") {
		t.Fatalf("--no-trunc: code %d, peers not in full:\n%s", code, out)
	}

	code, out, _ = runCLI(t, "-d", dir, "bids", "j1", "--json")
	var got struct {
		Explain map[string]any `json:"explain"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("--json: code %d, err %v, out %s", code, err, out)
	}
	if got.Explain["winner"] != free || got.Explain["rank"] != 2.0 || got.Explain["rule"] != "passed_over" {
		t.Fatalf("--json explain %v: want the winner, its rank and the rule as fields", got.Explain)
	}
}

// TestBidsShowRTT: `bids` shows the round trip the renter measured to
// each bidder ("-" when it has none), a bid rejected for it with the
// reason, and the winner's RTT and nearness rule; --json carries it as
// each bid's "rtt" (nanoseconds).
func TestBidsShowRTT(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	near, far, mute := "12D3KooWnearProviderAAAAAAAA", "12D3KooWfarProviderBBBBBBBBB", "12D3KooWmuteProviderCCCCCCCC"
	bid := func(p string, price float64) terms.Bid { return terms.Bid{Provider: p, Price: price, Start: now} }
	view := api.BidsView{JobID: "j1", Bids: []terms.Ranked{
		{Candidate: terms.Candidate{Bid: bid(near, 1), Reliability: 0.5, RTT: 4200 * time.Microsecond}, Score: 2.17, Nearness: 2},
		{Candidate: terms.Candidate{Bid: bid(far, 0.6), Reliability: 0.5, RTT: 81230 * time.Microsecond}, Rejected: "rtt 81.2ms > max 50ms"},
		{Candidate: terms.Candidate{Bid: bid(mute, 0.5), Reliability: 0.5}, Rejected: "rtt unknown: no ping answered within the bid window (max 50ms)"},
	}, Explain: terms.Explanation{Winner: near, Rank: 1, Score: 2.17, Price: 1, Reliability: 0.5, RTT: 4200 * time.Microsecond,
		RunnerUp: far, Rule: terms.RuleNearer}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}/bids", func(w http.ResponseWriter, r *http.Request) { replyJSON(w, 200, view) })
	dir := fakeDaemon(t, mux)

	code, out, errOut := runCLI(t, "-d", dir, "bids", "j1")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], " RTT ") {
		t.Fatalf("no RTT column:\n%s", out)
	}
	col := strings.Index(lines[0], "RTT")
	for i, want := range []string{"4.2ms", "81.2ms", "-"} {
		if got := strings.Fields(lines[i+1][col:])[0]; got != want {
			t.Fatalf("bid %d: RTT column %q, want %q:\n%s", i+1, got, want, out)
		}
	}
	if !strings.Contains(lines[2], "rtt 81.2ms > max 50ms") || !strings.Contains(lines[3], "rtt unknown") {
		t.Fatalf("the rejections for RTT are not shown:\n%s", out)
	}
	if !strings.Contains(out, "reliability 0.50, rtt 4.2ms; in or nearer the job's --near region than runner-up farProvider") {
		t.Fatalf("the explanation does not give the winner's RTT and its nearness:\n%s", out)
	}
	code, out, _ = runCLI(t, "-d", dir, "bids", "j1", "--json")
	var got struct {
		Bids []map[string]any `json:"bids"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Bids) != 3 {
		t.Fatalf("--json: code %d, err %v, out %s", code, err, out)
	}
	if got.Bids[1]["rtt"] != float64(81230*time.Microsecond) || got.Bids[2]["rtt"] != nil {
		t.Fatalf("--json rtt fields %v, %v: want 81.23ms in ns, and none when unmeasured", got.Bids[1]["rtt"], got.Bids[2]["rtt"])
	}
}
