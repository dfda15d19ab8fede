package auction

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

func artifactID(c byte) string { return strings.Repeat(string(c), 64) }

// TestEvaluateReportsMissingInputBytes: an offer reports the bytes of the
// job's inputs the provider's store does not hold, each input once.
func TestEvaluateReportsMissingInputBytes(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	now := at(0, "10:00")
	// 6 GB at TransferRate is a minute: 10% of a 10-minute job.
	const size = 6e9
	j := &terms.Job{ID: "j", Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, Duration: 10 * time.Minute, Run: terms.RunSpec{Command: []string{"x"},
		Inputs: map[string]string{"data": artifactID('a')}}, InputBytes: map[string]int64{artifactID('a'): size}}
	bid := func(p string, price float64, missing int64) terms.Candidate {
		return terms.Candidate{Reliability: 0.5, Bid: terms.Bid{JobID: "j", Provider: p, Region: "eu-west", Price: price, Start: now,
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
			r := RankAt(j, []terms.Candidate{bid("cold", c.coldPrice, size), bid("warm", 1.00, 0)}, now)
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

// TestRankChecksMissingClaims: a bid's MissingBytes claim is charged as is
// only when the renter has no holdings to check it against; otherwise the
// larger of the claim and what the provider's advertised holdings imply
// is charged.
func TestRankChecksMissingClaims(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	a := artifactID('a')
	j := &terms.Job{ID: "j", Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, Duration: 10 * time.Minute, Run: terms.RunSpec{Command: []string{"x"},
		Inputs: map[string]string{"data": a}}, InputBytes: map[string]int64{a: 6e9}}
	cases := []struct {
		name    string
		claim   int64
		held    []string
		checked bool
		want    int64
	}{
		{"unchecked claim of 0 is trusted", 0, nil, false, 0},
		{"claim of 0 backed by the advertisement", 0, []string{a}, true, 0},
		{"claim of 0 not advertised", 0, []string{artifactID('b')}, true, 6e9},
		{"claim of 0, no record found", 0, nil, true, 6e9},
		{"claim above the advertisement's estimate", 7e9, []string{a}, true, 7e9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cand := terms.Candidate{Reliability: 0.5, Held: c.held, HeldChecked: c.checked, Bid: terms.Bid{JobID: "j", Provider: "p", Region: "eu-west",
				Price: 1, Start: now, End: now.Add(time.Hour), ExpiresAt: now.Add(time.Minute), MissingBytes: c.claim}}
			r := RankAt(j, []terms.Candidate{cand}, now)
			if r[0].Rejected != "" {
				t.Fatal(r[0].Rejected)
			}
			if r[0].Missing != c.want || r[0].Transfer != TransferEstimate(c.want) {
				t.Fatalf("charged %d (transfer %v), want %d", r[0].Missing, r[0].Transfer, c.want)
			}
			if wantScore := Score(1, 0.5) * TransferFactor(j, c.want); r[0].Score != wantScore {
				t.Fatalf("score %v, want %v", r[0].Score, wantScore)
			}
		})
	}
}

// TestRenterDistrustsUnadvertisedHoldings: two providers both claim to
// hold the job's input, the one 5% cheaper falsely; the renter's holdings
// lookup finds the input advertised by the other only, so the liar is
// charged for the fetch (10% of the job) and the honest one wins.
func TestRenterDistrustsUnadvertisedHoldings(t *testing.T) {
	t.Parallel()
	a := artifactID('a')
	specs := []provSpec{
		{name: "liar", region: "eu-west", model: "A100", vram: 80, n: 2, policy: pol(0.95), rel: 0.9},
		{name: "honest", region: "eu-west", model: "A100", vram: 80, n: 2, policy: pol(1), rel: 0.9},
	}
	m := newMarket(t, specs)
	var liar, honest string
	for _, p := range m.provs {
		p.held = []string{a}
		if p.spec.name == "liar" {
			liar = p.s.ID().String()
		} else {
			honest = p.s.ID().String()
		}
	}
	var mu sync.Mutex
	looked := map[string]int{}
	r, _ := m.renter(t, RenterConfig{Holdings: hooks{holdings: func(_ context.Context, provider string) ([]string, bool) {
		mu.Lock()
		looked[provider]++
		mu.Unlock()
		if provider == honest {
			return []string{a}, true
		}
		return []string{artifactID('c')}, true // the liar's record lacks a
	}}})
	job := euJob(m.now())
	job.GPUCount = 1
	job.Duration = 10 * time.Minute
	job.Run.Inputs = map[string]string{"data": a}
	job.InputBytes = map[string]int64{a: 6e9}
	got, err := r.Post(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(got.ID)
	if st.Winner != honest {
		t.Fatalf("winner %s, want the provider whose advertisement backs its claim; bids %+v", m.name(st.Winner), st.Bids)
	}
	for _, b := range st.Bids {
		want := int64(0)
		if b.Bid.Provider == liar {
			want = 6e9
		}
		if b.Bid.MissingBytes != 0 || b.Missing != want {
			t.Fatalf("%s: claimed %d, charged %d; want claim 0 charged %d", m.name(b.Bid.Provider), b.Bid.MissingBytes, b.Missing, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if looked[liar] != 1 || looked[honest] != 1 {
		t.Fatalf("holdings lookups %v, want one per bidder", looked)
	}
}

// TestWarmTargetsRankByScore: warm targets come cheapest (per verified
// reliability) first, ties by peer id.
func TestWarmTargetsRankByScore(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	caps := []terms.Capability{
		{Peer: "dear", Policy: terms.Policy{PriceFloor: 3}},
		{Peer: "b-cheap", Policy: terms.Policy{PriceFloor: 1}},
		{Peer: "unreliable", Policy: terms.Policy{PriceFloor: 1}},
		{Peer: "a-cheap", Policy: terms.Policy{PriceFloor: 1}},
	}
	rel := func(p string) float64 {
		if p == "unreliable" {
			return 0.1
		}
		return 0.9
	}
	var got []string
	for _, c := range WarmTargets(caps, rel, now) {
		got = append(got, c.Peer)
	}
	if want := []string{"a-cheap", "b-cheap", "dear", "unreliable"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
