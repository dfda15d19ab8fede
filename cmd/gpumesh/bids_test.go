package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
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
	view := api.BidsView{JobID: "j1", Bids: []auction.Ranked{
		{Candidate: auction.Candidate{Bid: auction.Bid{Provider: busy, Price: 0.5, Start: now.Add(time.Hour)}, Reliability: 0.9}, Score: 0.5556},
		{Candidate: auction.Candidate{Bid: auction.Bid{Provider: free, Price: 1, Start: now}, Reliability: 0.9}, Score: 1.111},
	}, Explain: auction.Explanation{Winner: free, Rank: 2, Score: 1.111, Price: 1, Reliability: 0.9, Rule: auction.RulePassedOver,
		Passed: []auction.PassedBid{{Provider: busy, Reason: "starts later (2026-03-14T11:00:00Z), while the winner's bid could start at once (2026-03-14T10:00:00Z)"}}}}
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
