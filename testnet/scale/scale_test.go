package scale

import (
	"context"
	"testing"
	"time"
)

// TestCostFollowsEligibleProviders: a job's call reaches exactly the
// eligible providers, only they bid, and what it costs the network
// grows with the eligible providers, not with the network's size.
func TestCostFollowsEligibleProviders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds networks of up to 100 nodes")
	}
	run := func(nodes, eligible int) *Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r, err := Run(ctx, Config{Nodes: nodes, Eligible: eligible, Jobs: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d nodes, %d eligible: setup %v, gossip %.1f msgs/job, receivers %.1f, bids %.1f, leased %d/%d, post→lease p50 %v",
			nodes, eligible, r.Setup.Round(time.Millisecond), r.Gossip, r.Receivers, r.Bids, r.Leased, len(r.Jobs), r.P50)
		for i, j := range r.Jobs {
			if !j.Leased {
				t.Errorf("%d nodes, %d eligible: job %d not leased", nodes, eligible, i)
			}
			// Only eligible providers hear the call, and every one does;
			// only they bid (a slow one may miss the window).
			if j.Receivers != eligible || j.Bids < 1 || j.Bids > eligible {
				t.Errorf("%d nodes, %d eligible: job %d reached %d nodes and drew %d bids in its window, want %d nodes and 1..%d bids",
					nodes, eligible, i, j.Receivers, j.Bids, eligible, eligible)
			}
		}
		return r
	}
	small, big, more := run(40, 5), run(100, 5), run(100, 20)
	if big.Gossip > 1.5*small.Gossip+5 {
		t.Errorf("gossip per job grew with the network: %.1f messages among 40 nodes, %.1f among 100 (5 eligible in both)",
			small.Gossip, big.Gossip)
	}
	if more.Gossip < 2*big.Gossip {
		t.Errorf("gossip per job did not follow the eligible providers: %.1f messages for 5, %.1f for 20", big.Gossip, more.Gossip)
	}
}
