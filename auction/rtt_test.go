package auction

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// rttCands are bids for j from providers at known round trips (0: none
// measured), in regions, all starting now.
func rttCands(j *terms.Job, now time.Time, bids ...rttBid) []terms.Candidate {
	out := make([]terms.Candidate, len(bids))
	for i, b := range bids {
		out[i] = terms.Candidate{Bid: terms.Bid{JobID: j.ID, Attempt: j.Attempt, Provider: b.name, Region: b.region, Price: b.price,
			Start: now, End: now.Add(j.Duration), ExpiresAt: now.Add(time.Minute)}, Reliability: 0.5, RTT: b.rtt}
	}
	return out
}

type rttBid struct {
	name, region string
	price        float64
	rtt          time.Duration
}

func rankedBy(t *testing.T, rs []terms.Ranked, name string) terms.Ranked {
	t.Helper()
	for _, r := range rs {
		if r.Bid.Provider == name {
			return r
		}
	}
	t.Fatalf("no bid of %s in %v", name, providersOf(rs))
	return terms.Ranked{}
}

// TestMaxRTTRanksAndRejectsByMeasuredRTT: under MaxRTT 50ms a provider
// 5 ms away beats one 30% cheaper 45 ms away (the RTT is a weighted term
// of the score), a still cheaper one 120 ms away is rejected with the
// reason, and so is one the renter could not measure. The same bids for a
// job without MaxRTT rank by price as before.
func TestMaxRTTRanksAndRejectsByMeasuredRTT(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour, MaxRTT: 50 * time.Millisecond}
	bids := []rttBid{
		{"far", "eu-west", 0.7, 45 * time.Millisecond},
		{"near", "eu-west", 1.0, 5 * time.Millisecond},
		{"too-far", "eu-west", 0.3, 120 * time.Millisecond},
		{"unmeasured", "eu-west", 0.2, 0},
	}
	got := RankAt(j, rttCands(j, now, bids...), now)
	if got[0].Bid.Provider != "near" || got[1].Bid.Provider != "far" || got[0].Rejected != "" || got[1].Rejected != "" {
		t.Fatalf("ranked %v (%q, %q): want near, then the cheaper far one", providersOf(got), got[0].Rejected, got[1].Rejected)
	}
	if want := Score(1.0, 0.5) * (1 + RTTWeight*0.1); !approxEq(got[0].Score, want) {
		t.Fatalf("near's score %v, want price/reliability × (1 + w × 5ms/50ms) = %v", got[0].Score, want)
	}
	if r := rankedBy(t, got, "too-far"); r.Rejected != "rtt 120ms > max 50ms" {
		t.Fatalf("too-far rejected %q, want %q", r.Rejected, "rtt 120ms > max 50ms")
	}
	if r := rankedBy(t, got, "unmeasured"); !strings.HasPrefix(r.Rejected, "rtt unknown") {
		t.Fatalf("unmeasured rejected %q, want rtt unknown", r.Rejected)
	}
	if r := rankedBy(t, got, "near"); r.RTT != 5*time.Millisecond {
		t.Fatalf("near's ranked RTT %v, want 5ms", r.RTT)
	}

	plain := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour}
	got = RankAt(plain, rttCands(plain, now, bids...), now)
	if want := []string{"unmeasured", "too-far", "far", "near"}; strings.Join(providersOf(got), ",") != strings.Join(want, ",") {
		t.Fatalf("without MaxRTT ranked %v, want by price %v", providersOf(got), want)
	}
	if got[0].Score != Score(0.2, 0.5) {
		t.Fatalf("without MaxRTT the score %v is charged for latency", got[0].Score)
	}
}

// TestNearRegionRanksFirst: with Near a region, providers in it rank
// ahead of cheaper ones elsewhere (those on its continent next), and the
// others are still allowed; Explain says when a bid won on nearness.
func TestNearRegionRanksFirst(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour, Near: "eu-west"}
	got := RankAt(j, rttCands(j, now,
		rttBid{"us", "us-east", 0.3, 80 * time.Millisecond},
		rttBid{"central", "eu-central", 0.5, 20 * time.Millisecond},
		rttBid{"west", "eu-west-2", 1.0, 10 * time.Millisecond},
		rttBid{"west-far", "eu-west", 0.9, 90 * time.Millisecond},
	), now)
	want := []string{"west", "west-far", "central", "us"}
	if strings.Join(providersOf(got), ",") != strings.Join(want, ",") {
		t.Fatalf("ranked %v, want %v", providersOf(got), want)
	}
	for i, n := range []int{2, 2, 1, 0} {
		if got[i].Rejected != "" || got[i].Nearness != n {
			t.Fatalf("%s: nearness %d rejected %q, want nearness %d and allowed", got[i].Bid.Provider, got[i].Nearness, got[i].Rejected, n)
		}
	}
	if e := Explain(got, "west", nil); e.Rule != terms.RuleBestScore || e.RunnerUp != "west-far" || e.RTT != 10*time.Millisecond {
		t.Fatalf("explanation %+v: want the best score of the region, over west-far, with rtt 10ms", e)
	}
	// west-far beats central, whose score is a third of its own, on
	// nearness alone.
	if e := Explain(got[1:], "west-far", nil); e.Rule != terms.RuleNearer || e.RunnerUp != "central" {
		t.Fatalf("west-far over central: %+v, want rule %s", e, terms.RuleNearer)
	}
}

// TestNearAddrRanksByRTT: with Near a client location's multiaddr, the
// renter's measured RTT is what ranks (no region does): a provider 5 ms
// away beats one 30% cheaper 150 ms away, and one half its price that
// could not be measured, which is charged the cap.
func TestNearAddrRanksByRTT(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour, Near: "/ip4/203.0.113.7/tcp/443"}
	got := RankAt(j, rttCands(j, now,
		rttBid{"far", "eu-west", 0.7, 150 * time.Millisecond},
		rttBid{"unmeasured", "eu-west", 0.5, 0},
		rttBid{"near", "us-east", 1.0, 5 * time.Millisecond},
	), now)
	if want := []string{"near", "unmeasured", "far"}; strings.Join(providersOf(got), ",") != strings.Join(want, ",") {
		t.Fatalf("ranked %v, want %v", providersOf(got), want)
	}
	if r := rankedBy(t, got, "unmeasured"); r.Rejected != "" || !approxEq(r.Score, Score(0.5, 0.5)*(1+RTTWeight*RTTChargeCap)) {
		t.Fatalf("unmeasured: score %v rejected %q, want allowed and charged the cap", r.Score, r.Rejected)
	}
	if r := rankedBy(t, got, "far"); !approxEq(r.Score, Score(0.7, 0.5)*(1+RTTWeight*1.5)) {
		t.Fatalf("far: score %v, want charged 150ms / RTTReference", r.Score)
	}
}

// TestRTTBreaksTies: for any job, tied bids go to the lower measured RTT,
// a measured one before an unmeasured one.
func TestRTTBreaksTies(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour}
	got := RankAt(j, rttCands(j, now,
		rttBid{"a-unmeasured", "eu-west", 1, 0},
		rttBid{"b-far", "eu-west", 1, 40 * time.Millisecond},
		rttBid{"c-near", "eu-west", 1, 4 * time.Millisecond},
	), now)
	if want := []string{"c-near", "b-far", "a-unmeasured"}; strings.Join(providersOf(got), ",") != strings.Join(want, ",") {
		t.Fatalf("ranked %v, want %v", providersOf(got), want)
	}
	if e := Explain(got, "c-near", nil); e.Rule != terms.RuleTieBreak || e.TieBreak != "lower rtt (4ms vs 40ms)" {
		t.Fatalf("explanation %+v: want a tie broken on lower rtt", e)
	}
}

// TestJobValidatesLatencyTerms: MaxRTT is 0 or 1ms..10s; Near is a region
// name or a multiaddr; each problem names its field.
func TestJobValidatesLatencyTerms(t *testing.T) {
	t.Parallel()
	base := terms.Job{Tier: terms.Silver, MaxPrice: 1, GPUCount: 1, Duration: time.Hour, Run: terms.RunSpec{Command: []string{"x"}}}
	for _, c := range []struct {
		maxRTT time.Duration
		near   string
		field  string // "" valid
	}{
		{0, "", ""},
		{time.Millisecond, "eu-west", ""},
		{10 * time.Second, "/ip4/203.0.113.7/tcp/443", ""},
		{50 * time.Millisecond, "/dns4/clients.example.com", ""},
		{-time.Millisecond, "", "max_rtt"},
		{500 * time.Microsecond, "", "max_rtt"},
		{11 * time.Second, "", "max_rtt"},
		{0, "eu west", "near"},
		{0, "/ip4/999.1.1.1", "near"},
		{0, "/nonsense", "near"},
		{0, "-eu", "near"},
		{0, strings.Repeat("e", 65), "near"},
	} {
		j := base
		j.MaxRTT, j.Near = c.maxRTT, c.near
		fes := terms.FieldErrors(j.Validate())
		switch {
		case c.field == "" && len(fes) > 0:
			t.Errorf("max_rtt %v near %q refused: %v", c.maxRTT, c.near, fes)
		case c.field != "" && (len(fes) != 1 || fes[0].Field != c.field):
			t.Errorf("max_rtt %v near %q: errors %v, want one on %s", c.maxRTT, c.near, fes, c.field)
		}
	}
}

// TestRenterMeasuresLatencySensitiveBidders: the renter measures each
// bidder of a MaxRTT job once, as its bid comes in, and ranks on the
// result: the cheaper provider 80 ms away is rejected for its RTT and
// the one 5 ms away gets the lease, even though its ping answers only
// after the window's quiet spell. A hostile provider that never answers
// a ping is rejected as unmeasured once the bid window bounds its
// measurement. A job without MaxRTT or Near measures nobody and ranks
// with the samples the renter has.
func TestRenterMeasuresLatencySensitiveBidders(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	m := newMarket(t, []provSpec{
		{"near", "eu-west", "A100", 80, 2, pol(1.0), 0.9},
		{"far", "eu-west", "A100", 80, 2, pol(0.6), 0.9},
		{"mute", "eu-west", "A100", 80, 2, pol(0.4), 0.9},
	})
	rtt := map[string]time.Duration{}
	for _, p := range m.provs {
		rtt[p.s.ID().String()] = map[string]time.Duration{"near": 5 * time.Millisecond, "far": 80 * time.Millisecond}[p.spec.name]
	}
	var mu sync.Mutex
	measured := map[string]int{}
	r, _ := m.renter(t, RenterConfig{
		Latency: hooks{rtt: func(p string) (time.Duration, bool) { return rtt[p], rtt[p] > 0 }, measure: func(ctx context.Context, p string) (time.Duration, bool) {
			mu.Lock()
			measured[m.name(p)]++
			mu.Unlock()
			if rtt[p] == 0 {
				<-ctx.Done() // a provider that never answers
				return 0, false
			}
			// The ping's answer takes longer than the quiet spell that
			// closes the window.
			select {
			case <-time.After(DefaultQuietClose + 100*time.Millisecond):
				return rtt[p], true
			case <-ctx.Done():
				return 0, false
			}
		}}})
	j := euJob(m.now())
	j.GPUCount, j.MaxRTT = 1, 50*time.Millisecond
	posted := time.Now()
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(posted); took > 2*j.BidWindow+time.Second {
		t.Fatalf("the auction took %v: the unanswered ping was not bounded by the bid window (%v)", took, j.BidWindow)
	}
	st, _ := r.Status(job.ID)
	if m.name(st.Winner) != "near" {
		t.Fatalf("lease to %s, want near; bids %+v", m.name(st.Winner), st.Bids)
	}
	for _, b := range st.Bids {
		want := map[string]string{"near": "", "far": "rtt 80ms > max 50ms", "mute": "rtt unknown"}[m.name(b.Bid.Provider)]
		if !strings.HasPrefix(b.Rejected, want) || (want == "") != (b.Rejected == "") {
			t.Fatalf("%s rejected %q, want %q", m.name(b.Bid.Provider), b.Rejected, want)
		}
	}
	mu.Lock()
	if len(measured) != 3 || measured["near"] != 1 || measured["far"] != 1 || measured["mute"] != 1 {
		t.Fatalf("measurements %v, want one per bidder", measured)
	}
	clear(measured)
	mu.Unlock()

	plain := euJob(m.now())
	plain.GPUCount = 1
	job, err = r.Post(context.Background(), plain)
	if err != nil {
		t.Fatal(err)
	}
	st, _ = r.Status(job.ID)
	if m.name(st.Winner) != "mute" {
		t.Fatalf("a job without latency terms leased to %s, want the cheapest", m.name(st.Winner))
	}
	for _, b := range st.Bids {
		if b.RTT != rtt[b.Bid.Provider] {
			t.Fatalf("%s ranked with rtt %v, want the renter's sample %v", m.name(b.Bid.Provider), b.RTT, rtt[b.Bid.Provider])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(measured) != 0 {
		t.Fatalf("a job without latency terms measured %v", measured)
	}
}

func approxEq(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
