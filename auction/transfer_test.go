package auction

import (
	"strings"
	"testing"
	"time"
)

func artifactID(c byte) string { return strings.Repeat(string(c), 64) }

// TestEvaluateReportsMissingInputBytes: an offer reports the bytes of the
// job's inputs the provider's store does not hold, each input once.
func TestEvaluateReportsMissingInputBytes(t *testing.T) {
	now := at(0, "10:00")
	a, b := artifactID('a'), artifactID('b')
	cases := []struct {
		name string
		held []string
		want int64
	}{
		{"cold", nil, 3 << 30},
		{"holds one", []string{b}, 1 << 30},
		{"warm", []string{b, a}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps := baseState()
			ps.Cap.Artifacts = c.held
			j := evalJob()
			j.Run.Inputs = map[string]string{"train": a, "train-again": a, "eval": b}
			j.InputBytes = map[string]int64{a: 1 << 30, b: 2 << 30}
			off, err := Evaluate(ps, j, now)
			if err != nil {
				t.Fatal(err)
			}
			if off.MissingBytes != c.want {
				t.Fatalf("missing %d, want %d", off.MissingBytes, c.want)
			}
		})
	}
}

// TestRankChargesInputTransfer: at equal prices the provider that holds the
// job's inputs (warm) wins; a provider that must fetch them (cold) wins
// only when it is cheaper by more than the fetch costs.
func TestRankChargesInputTransfer(t *testing.T) {
	now := at(0, "10:00")
	// 6 GB at TransferRate is a minute: 10% of a 10-minute job.
	const size = 6e9
	j := &Job{ID: "j", Tier: Silver, MaxPrice: 5, GPUCount: 1, Duration: 10 * time.Minute, Run: RunSpec{Command: []string{"x"},
		Inputs: map[string]string{"data": artifactID('a')}}, InputBytes: map[string]int64{artifactID('a'): size}}
	bid := func(p string, price float64, missing int64) Candidate {
		return Candidate{Reliability: 0.5, Bid: Bid{JobID: "j", Provider: p, Region: "eu-west", Price: price, Start: now,
			End: now.Add(time.Hour), ExpiresAt: now.Add(time.Minute), MissingBytes: missing}}
	}
	cases := []struct {
		name       string
		coldPrice  float64
		wantWinner string
	}{
		{"equal price: warm wins", 1.00, "warm"},
		{"cold 5% cheaper: warm still wins", 0.95, "warm"},
		{"cold 20% cheaper: cold wins", 0.80, "cold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := RankAt(j, []Candidate{bid("cold", c.coldPrice, size), bid("warm", 1.00, 0)}, now)
			if r[0].Bid.Provider != c.wantWinner {
				t.Fatalf("winner %s, want %s (scores %v %v)", r[0].Bid.Provider, c.wantWinner, r[0].Score, r[1].Score)
			}
			for _, x := range r {
				wantT := time.Duration(0)
				if x.Bid.Provider == "cold" {
					wantT = time.Minute
				}
				if x.Transfer != wantT {
					t.Fatalf("%s: transfer estimate %v, want %v", x.Bid.Provider, x.Transfer, wantT)
				}
			}
		})
	}
	if f := TransferFactor(j, size); f != 1.1 {
		t.Fatalf("TransferFactor = %v, want 1.1", f)
	}
}
