package auction

import (
	"testing"
	"time"
)

func verifiedCands(j *Job, now time.Time) []Candidate {
	bid := func(p string, price float64, verified bool) Candidate {
		return Candidate{Bid: Bid{JobID: j.ID, Attempt: j.Attempt, Provider: p, Price: price, GPUModel: "NVIDIA H100 80GB HBM3",
			Start: now, End: now.Add(j.Duration), ExpiresAt: now.Add(time.Minute)}, Reliability: 0.5, Verified: verified}
	}
	return []Candidate{bid("cheap", 1.0, false), bid("verified-dear", 1.5, true), bid("verified-cheap", 1.2, true), bid("mid", 1.1, false)}
}

// TestVerifiedBidsRankFirst: a provider verified for its model (a passed
// GPU challenge) ranks ahead of cheaper unverified ones; among each group
// the usual score decides.
func TestVerifiedBidsRankFirst(t *testing.T) {
	now := time.Now()
	j := &Job{ID: "j", MaxPrice: 2, Duration: time.Hour}
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
	now := time.Now()
	j := &Job{ID: "j", MaxPrice: 2, Duration: time.Hour, Verified: true}
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

func providersOf(rs []Ranked) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Bid.Provider)
	}
	return out
}
