package auction

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

func verifiedCands(j *terms.Job, now time.Time) []terms.Candidate {
	bid := func(p string, price float64, verified bool) terms.Candidate {
		return terms.Candidate{Bid: terms.Bid{JobID: j.ID, Attempt: j.Attempt, Provider: p, Price: price, GPUModel: "NVIDIA H100 80GB HBM3",
			Start: now, End: now.Add(j.Duration), ExpiresAt: now.Add(time.Minute)}, Reliability: 0.5, Verified: verified}
	}
	return []terms.Candidate{bid("cheap", 1.0, false), bid("verified-dear", 1.5, true), bid("verified-cheap", 1.2, true), bid("mid", 1.1, false)}
}

// TestVerifiedBidsRankFirst: a provider verified for its model (a passed
// GPU challenge) ranks ahead of cheaper unverified ones; among each group
// the usual score decides.
func TestVerifiedBidsRankFirst(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour}
	got := RankAt(j, verifiedCands(j, now), now)
	want := []string{"verified-cheap", "verified-dear", "cheap", "mid"}
	for i, w := range want {
		if got[i].Bid.Provider != w || got[i].Rejected != "" {
			t.Fatalf("rank %d: %s (%q), want %s; all: %v", i, got[i].Bid.Provider, got[i].Rejected, w, providersOf(got))
		}
	}
}

// TestVerifiedJobTakesOnlyVerified: a job posted --verified rejects the
// bids of providers its renter's book does not hold verified.
func TestVerifiedJobTakesOnlyVerified(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour, Verified: true}
	got := RankAt(j, verifiedCands(j, now), now)
	for i, r := range got {
		if ok := r.Rejected == ""; ok != r.Verified {
			t.Fatalf("rank %d: %s verified=%v rejected %q", i, r.Bid.Provider, r.Verified, r.Rejected)
		}
	}
	if got[0].Bid.Provider != "verified-cheap" {
		t.Fatalf("winner %s, want verified-cheap", got[0].Bid.Provider)
	}
}

func providersOf(rs []terms.Ranked) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Bid.Provider)
	}
	return out
}

// TestUnsampledBidRejected: when a call asks only a sample of the
// providers (Job.BidSample), a bid from a provider outside the sample is
// rejected, however cheap: honest providers outside it do not bid, so such
// a bid is a peer pushing in where the renter did not ask.
func TestUnsampledBidRejected(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour, BidSample: 0.5, BidSeed: "seed"}
	var in, out string
	for i := 0; in == "" || out == ""; i++ {
		p := fmt.Sprintf("provider-%d", i)
		if terms.SampledBidder(j, p) {
			in = p
		} else {
			out = p
		}
	}
	bid := func(p string, price float64) terms.Candidate {
		return terms.Candidate{Bid: terms.Bid{JobID: j.ID, Provider: p, Price: price, Start: now, End: now.Add(j.Duration),
			ExpiresAt: now.Add(time.Minute)}, Reliability: 0.5}
	}
	got := RankAt(j, []terms.Candidate{bid(out, 0.5), bid(in, 1.5)}, now)
	if got[0].Bid.Provider != in || got[0].Rejected != "" {
		t.Fatalf("winner %s (%q), want the sampled provider", got[0].Bid.Provider, got[0].Rejected)
	}
	if got[1].Bid.Provider != out || !strings.Contains(got[1].Rejected, "sample") {
		t.Fatalf("the unsampled bid: %+v, want rejected as outside the sample", got[1])
	}
	// Without sampling everyone may bid.
	j.BidSample = 0
	if got := RankAt(j, []terms.Candidate{bid(out, 0.5), bid(in, 1.5)}, now); got[0].Bid.Provider != out {
		t.Fatalf("without a sample the cheapest bid lost: %+v", got[0])
	}
}
