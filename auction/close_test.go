package auction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestBidWindowClosesEarly(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	const window = 5 * time.Second
	t.Run("quiet spell after the last bid keeps the best price", func(t *testing.T) {
		m := newMarket(t, eightProviders())
		r, _ := m.renter(t, RenterConfig{QuietClose: 200 * time.Millisecond})
		j := euJob(m.now())
		j.BidWindow = window
		job, took := postTimed(t, r, j)
		if took >= window/2 {
			t.Fatalf("auction took %v of a %v window: did not close early", took, window)
		}
		st, _ := r.Status(job.ID)
		if len(st.Bids) != 3 || m.name(st.Winner) != "eu-good" {
			t.Fatalf("%d bids, winner %s: want all 3 eligible bids and eu-good", len(st.Bids), m.name(st.Winner))
		}
	})
	t.Run("gold closes at its first acceptable bid", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, pol(1), 0.9}})
		// A quiet spell longer than the window: only the gold rule closes early.
		r, _ := m.renter(t, RenterConfig{QuietClose: 2 * window})
		j := euJob(m.now())
		j.Tier, j.BidWindow = terms.Gold, window
		if _, took := postTimed(t, r, j); took >= window/2 {
			t.Fatalf("gold auction took %v of a %v window", took, window)
		}
	})
	t.Run("a gold gang closes at its members' first acceptable bids", func(t *testing.T) {
		m := newMarket(t, fourOneGPU())
		r, _ := m.renter(t, RenterConfig{QuietClose: 2 * window})
		j := gangJob(m.now(), 3, 1)
		j.Tier, j.BidWindow = terms.Gold, window
		job, took := postTimed(t, r, j)
		if took >= window/2 {
			t.Fatalf("gold gang auction took %v of a %v window", took, window)
		}
		st, _ := r.Status(job.ID)
		checkGang(t, m, st, 3)
	})
	t.Run("a bid that starts later does not close the window early", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, pol(1), 0.9}})
		box := m.provs[0]
		if err := box.p.cfg.Calendar.Reserve(Booking{LeaseID: "busy", Start: m.now().Add(-time.Minute), End: m.now().Add(time.Hour), GPUs: 2}); err != nil {
			t.Fatal(err)
		}
		r, _ := m.renter(t, RenterConfig{QuietClose: 50 * time.Millisecond})
		j := euJob(m.now())
		j.Tier, j.BidWindow, j.Deadline = terms.Gold, 600*time.Millisecond, m.now().Add(2*time.Hour)
		job, took := postTimed(t, r, j)
		st, _ := r.Status(job.ID)
		if len(st.Bids) != 1 || !st.Bids[0].Bid.Start.After(m.now().Add(30*time.Minute)) {
			t.Fatalf("bids %+v: want the busy box's one later bid", st.Bids)
		}
		if took < j.BidWindow {
			t.Fatalf("auction closed after %v of its %v window on a bid starting in an hour", took, j.BidWindow)
		}
	})
	t.Run("disabled runs the full window", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, pol(1), 0.9}})
		r, _ := m.renter(t, RenterConfig{QuietClose: -1})
		j := euJob(m.now())
		j.BidWindow = 300 * time.Millisecond
		if _, took := postTimed(t, r, j); took < j.BidWindow {
			t.Fatalf("auction took %v, less than its %v window", took, j.BidWindow)
		}
	})
	t.Run("a window without bids is extended once", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"pricey", "eu-west", "A100", 80, 2, pol(50), 0.9}})
		r, _ := m.renter(t, RenterConfig{QuietClose: 50 * time.Millisecond})
		j := euJob(m.now())
		j.BidWindow = 200 * time.Millisecond
		start := time.Now()
		_, err := r.Post(context.Background(), j)
		took := time.Since(start)
		if !errors.Is(err, ErrUnplaceable) || !strings.Contains(err.Error(), "no bids") {
			t.Fatalf("err %v, want unplaceable: no bids", err)
		}
		if took < 2*j.BidWindow || took > 4*j.BidWindow {
			t.Fatalf("empty auction took %v, want one extension (about %v)", took, 2*j.BidWindow)
		}
	})
}

// TestWindowClosesWhenExpectedAnswered: a renter that knows which
// providers will answer a call (Directory.ExpectedBidders) closes the window
// as soon as each has bid or declined, even with quiet closing disabled;
// one that stays silent leaves the window to run its course.
// (Every expected provider is asked: MaxBidders -1; sampling has its own
// tests.)
func TestWindowClosesWhenExpectedAnswered(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	const window = 5 * time.Second
	fitting := func(m *market, j *terms.Job) []string {
		var out []string
		for _, tp := range m.provs {
			c := tp.p.cfg.Self.Capability()
			if StaticFit(&c, j) == nil {
				out = append(out, c.Peer)
			}
		}
		return out
	}
	t.Run("all answered", func(t *testing.T) {
		m := newMarket(t, eightProviders())
		var expected []string
		r, _ := m.renter(t, RenterConfig{QuietClose: -1, MaxBidders: -1, Directory: hooks{expected: func(j *terms.Job) []string {
			expected = fitting(m, j)
			return expected
		}}})
		j := euJob(m.now())
		j.BidWindow, j.WantDeclines = window, true
		job, took := postTimed(t, r, j)
		if took >= window/2 {
			t.Fatalf("auction took %v of a %v window once all %d expected providers had answered", took, window, len(expected))
		}
		st, _ := r.Status(job.ID)
		declined := 0
		for _, n := range st.Declines {
			declined += n
		}
		// Providers that do not fit the job hear the call too, and decline.
		if len(st.Bids)+declined < len(expected) || len(st.Bids) != 3 || m.name(st.Winner) != "eu-good" {
			t.Fatalf("%d bids and %d declines from %d expected, winner %s", len(st.Bids), declined, len(expected), m.name(st.Winner))
		}
	})
	t.Run("one silent", func(t *testing.T) {
		m := newMarket(t, eightProviders())
		silent := signtest.New(t).ID().String()
		r, _ := m.renter(t, RenterConfig{QuietClose: -1, MaxBidders: -1, Directory: hooks{expected: func(j *terms.Job) []string { return append(fitting(m, j), silent) }}})
		j := euJob(m.now())
		j.BidWindow, j.WantDeclines = 300*time.Millisecond, true
		if _, took := postTimed(t, r, j); took < j.BidWindow {
			t.Fatalf("auction closed after %v of its %v window while an expected provider had not answered", took, j.BidWindow)
		}
	})
}

// TestQuietSpellWaitsForMostExpected: a quiet spell after the first bid
// does not close the window while most expected providers have not
// answered (they are slower, not absent: the cheapest is among them); once
// half have, it does.
func TestQuietSpellWaitsForMostExpected(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	const window, quietFor = 10 * time.Second, 50 * time.Millisecond
	type box struct {
		name  string
		floor float64
	}
	// setup builds a market of eu-west A100 boxes whose gated ones answer
	// calls only once gate closes, and a renter that expects all of them.
	// rtt, when set, is the round trips the renter knows (Latency).
	setup := func(t *testing.T, boxes []box, rtt map[string]time.Duration, gated ...string) (m *market, gate chan struct{}, r *Renter, tr *auctiontest.MemTransport) {
		var specs []provSpec
		for _, b := range boxes {
			specs = append(specs, provSpec{b.name, "eu-west", "A100", 80, 4, pol(b.floor), 0.9})
		}
		m, gate = newMarket(t, specs), make(chan struct{})
		var all []string
		for _, tp := range m.provs {
			all = append(all, tp.s.ID().String())
			if !slices.Contains(gated, tp.spec.name) {
				continue
			}
			p := tp.p
			tp.t.Handle(auctiontest.MemHandlers{OnAward: p.HandleAward, OnCall: func(from peer.ID, data []byte) ([]byte, error) {
				<-gate
				return p.HandleCall(from, data)
			}, OnGossipedCall: func(from peer.ID, data []byte) error {
				<-gate
				return p.HandleGossipedCall(from, data)
			}})
		}
		cfg := RenterConfig{QuietClose: quietFor, Directory: hooks{expected: func(*terms.Job) []string { return all }}}
		if rtt != nil {
			cfg.Latency = hooks{rtt: func(p string) (time.Duration, bool) {
				d, ok := rtt[m.name(p)]
				return d, ok
			}}
		}
		r, tr = m.renter(t, cfg)
		return m, gate, r, tr
	}
	// allIn posts a job and checks that its window waited for all n
	// expected bids (the slow ones' too: winner, the cheapest, among
	// them), and closed once they were in, long before its end.
	allIn := func(t *testing.T, m *market, r *Renter, n int, winner string) {
		t.Helper()
		j := euJob(m.now())
		j.BidWindow = window
		job, took := postTimed(t, r, j)
		st, _ := r.Status(job.ID)
		if len(st.Bids) != n || m.name(st.Winner) != winner {
			t.Fatalf("%d bids, winner %s: want all %d bids and %s (the window closed on a quiet spell before the slow ones answered)", len(st.Bids), m.name(st.Winner), n, winner)
		}
		if took >= window/2 {
			t.Fatalf("auction took %v of a %v window once every expected provider had answered", took, window)
		}
	}
	t.Run("one of four in", func(t *testing.T) {
		m, gate, r, tr := setup(t, []box{{"fast", 2.0}, {"slow-cheap", 1.0}, {"slow-a", 2.5}, {"slow-b", 2.5}}, nil,
			"slow-cheap", "slow-a", "slow-b")
		// The slow three answer four quiet spells after the fast bid: the
		// latency of a farther network, not a synchronisation.
		var once sync.Once
		tr.Handle(auctiontest.MemHandlers{OnBid: func(from peer.ID, data []byte) error {
			err := r.HandleBid(from, data)
			if m.name(from.String()) == "fast" {
				once.Do(func() { time.AfterFunc(4*quietFor, func() { close(gate) }) })
			}
			return err
		}})
		allIn(t, m, r, 4, "slow-cheap")
	})
	t.Run("two of four in", func(t *testing.T) {
		m, gate, r, _ := setup(t, []box{{"fast", 2.0}, {"fast-cheap", 1.5}, {"silent-a", 1.0}, {"silent-b", 1.0}}, nil,
			"silent-a", "silent-b")
		t.Cleanup(func() { close(gate) })
		j := euJob(m.now())
		j.BidWindow = window
		job, took := postTimed(t, r, j)
		st, _ := r.Status(job.ID)
		if took >= window/2 || len(st.Bids) != 2 || m.name(st.Winner) != "fast-cheap" {
			t.Fatalf("auction took %v of a %v window with %d bids, winner %s: want a close on the quiet spell once half had answered", took, window, len(st.Bids), m.name(st.Winner))
		}
	})
	t.Run("a far provider's round trip", func(t *testing.T) {
		// Half the expected providers are in at once, but the renter
		// measured the cheap one 10 quiet spells away: its answer is due
		// then (and a spell later), and the window waits for it.
		const far = 10 * quietFor
		m, gate, r, _ := setup(t, []box{{"near", 2.0}, {"far-cheap", 1.0}}, map[string]time.Duration{"near": time.Millisecond, "far-cheap": far},
			"far-cheap")
		// The far provider's network: its answer comes half its round
		// trip after the call, long after the near bid's quiet spell, long
		// before the far one's.
		time.AfterFunc(far/2, func() { close(gate) })
		allIn(t, m, r, 2, "far-cheap")
	})
}

// TestNoLaterStartFallback: while some bid can start at once, a failed
// award does not fall back to a bid that starts later (its provider was
// busy when it bid: the job would wait behind a running lease); the
// auction ends without a lease and the job can be offered again. With no
// bid that starts at once, the later start is awarded as before.
func TestNoLaterStartFallback(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"free", "eu-west", "A100", 80, 2, pol(1), 0.9}, {"busy", "eu-west", "A100", 80, 2, pol(0.5), 0.9}})
	free, busy := m.provs[0], m.provs[1]
	if err := busy.cal.Reserve(Booking{LeaseID: "busy", Start: m.now().Add(-time.Minute), End: m.now().Add(time.Hour), GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	free.t.Handle(auctiontest.MemHandlers{OnCall: free.p.HandleCall, OnGossipedCall: free.p.HandleGossipedCall, OnAward: func(peer.ID, []byte) ([]byte, error) {
		return nil, errors.New("gone")
	}})
	r, _ := m.renter(t, RenterConfig{QuietClose: -1})
	j := euJob(m.now())
	j.BidWindow, j.Deadline = 300*time.Millisecond, m.now().Add(2*time.Hour)
	job, err := r.Post(context.Background(), j)
	if !errors.Is(err, ErrUnplaceable) || !strings.Contains(err.Error(), "all 1 awards failed (error: ") {
		t.Fatalf("err %v, want unplaceable after the one immediate award failed", err)
	}
	st, _ := r.Status(job.ID)
	if len(st.Bids) != 2 || len(st.Attempts) != 1 || st.Attempts[0].Provider != free.s.ID().String() {
		t.Fatalf("%d bids, awards %+v: want only the free provider awarded", len(st.Bids), st.Attempts)
	}
	// The free provider leaves: the later start is the only bid, and wins.
	m.net.Drop(peer.ID(free.s.ID()))
	j2 := euJob(m.now())
	j2.BidWindow, j2.Deadline = 300*time.Millisecond, m.now().Add(2*time.Hour)
	job2, err := r.Post(context.Background(), j2)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(job2.ID); m.name(st.Winner) != "busy" {
		t.Fatalf("winner %s, want the busy provider's later start", m.name(st.Winner))
	}
}

// TestExplainNamesTheLeasedBid: a bronze job's best-ranked bid starts an
// hour late (its provider is busy, and so cheap that it ranks first even
// charged for the wait, WaitFactor) and a dearer one can start at once:
// the lease goes to the one that starts now, and Explain names that
// provider as the winner, ranked second, with the busy one passed over for
// its later start (it named the top of the ranking, which got nothing).
func TestExplainNamesTheLeasedBid(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"free", "eu-west", "A100", 80, 2, pol(1), 0.9}, {"busy", "eu-west", "A100", 80, 2, pol(0.2), 0.9}})
	free, busy := m.provs[0], m.provs[1]
	if err := busy.cal.Reserve(Booking{LeaseID: "busy", Start: m.now().Add(-time.Minute), End: m.now().Add(time.Hour), GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	r, _ := m.renter(t, RenterConfig{QuietClose: -1})
	j := euJob(m.now())
	j.Tier, j.Preemptible = terms.Bronze, true
	j.BidWindow, j.Deadline = 300*time.Millisecond, m.now().Add(2*time.Hour)
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(job.ID)
	if len(st.Bids) != 2 || m.name(st.Bids[0].Bid.Provider) != "busy" || m.name(st.Winner) != "free" {
		t.Fatalf("ranked %d bids, first %s, lease to %s: want busy ranked first and the lease on free", len(st.Bids),
			m.name(st.Bids[0].Bid.Provider), m.name(st.Winner))
	}
	ex := Explain(st.Bids, st.Winner, st.Attempts)
	if ex.Winner != free.s.ID().String() || ex.Rank != 2 || ex.Rule != terms.RulePassedOver || ex.Price != 1 {
		t.Fatalf("explanation %+v: want the free provider, ranked 2nd, passed_over", ex)
	}
	if len(ex.Passed) != 1 || ex.Passed[0].Provider != busy.s.ID().String() || !strings.HasPrefix(ex.Passed[0].Reason, "starts later") {
		t.Fatalf("passed over: %+v, want the busy provider, for its later start", ex.Passed)
	}
}

// TestOnlyHeldBidsAreReleased: the renter releases the losing bids that
// hold GPUs on their provider's calendar (Bid.Held), and only those: a
// bid without a hold expires by itself, and a release per losing bidder
// would double what a job costs a large market.
func TestOnlyHeldBidsAreReleased(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"winner", "eu-west", "A100", 80, 2, pol(0.5), 0.9},
		{"holder", "eu-west", "A100", 80, 2, pol(1), 0.9}, {"plain", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	holder, plain := m.provs[1], m.provs[2]
	holder.p.cfg.HoldGrace = DefaultHoldGrace
	r, _ := m.renter(t, RenterConfig{QuietClose: -1})
	j := euJob(m.now())
	j.BidWindow = 300 * time.Millisecond
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(job.ID)
	if len(st.Bids) != 3 || m.name(st.Winner) != "winner" {
		t.Fatalf("%d bids, winner %s", len(st.Bids), m.name(st.Winner))
	}
	for _, b := range st.Bids {
		if want := b.Bid.Provider == holder.s.ID().String(); b.Bid.Held != want {
			t.Fatalf("bid of %s held %v, want %v", m.name(b.Bid.Provider), b.Bid.Held, want)
		}
	}
	m.waitHandled(t, 5*time.Second, "the holding bid released", func() bool { return holder.p.Stats().Lost != 0 })
	if n := holder.cal.Holds(m.now()); n != 0 {
		t.Fatalf("%d holds left after the release", n)
	}
	plain.p.mu.Lock()
	kept := len(plain.p.bids)
	plain.p.mu.Unlock()
	if kept != 1 || plain.p.Stats().Lost != 0 {
		t.Fatalf("the bid without a hold was released (%d bids kept, %d lost)", kept, plain.p.Stats().Lost)
	}
}

// TestCallAsksASampleOfALargeMarket: with more providers expected to
// answer than the renter needs bids from (MaxBidders), the call asks a
// random share of them (Job.BidSample, seeded per call), sent to each
// directly: exactly those bid, the others never hear of it, and the window
// closes once the share has answered.
func TestCallAsksASampleOfALargeMarket(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	var specs []provSpec
	for i := 0; i < 20; i++ {
		// Four GPUs each: a provider that won the first round can bid again.
		specs = append(specs, provSpec{fmt.Sprintf("p%02d", i), "eu-west", "A100", 80, 4, pol(1 + float64(i)/100), 0.9})
	}
	m := newMarket(t, specs)
	all := func(*terms.Job) []string {
		var out []string
		for _, tp := range m.provs {
			out = append(out, tp.s.ID().String())
		}
		return out
	}
	// A market the renter's book knows nothing of: the draw alone picks
	// whom to ask (invitations: TestEstablishedProvidersAskedAmongSybilRecords).
	unknown := func(string) float64 { return terms.NeutralReliability }
	r, _ := m.renter(t, RenterConfig{QuietClose: -1, MaxBidders: 5, Directory: hooks{expected: all}, Reputation: hooks{reliability: unknown}})
	const window = 5 * time.Second
	askedAll := 0
	for round := 0; round < 20; round++ {
		j := euJob(m.now())
		j.BidWindow = window
		job, took := postTimed(t, r, j)
		if job.BidSample != 0.25 || job.BidSeed == "" {
			t.Fatalf("call sample %v seed %q, want 5 of 20", job.BidSample, job.BidSeed)
		}
		st, _ := r.Status(job.ID)
		var asked, bid []string
		for _, tp := range m.provs {
			if terms.SampledBidder(&job, tp.s.ID().String()) {
				asked = append(asked, tp.s.ID().String())
			}
		}
		for _, b := range st.Bids {
			bid = append(bid, b.Bid.Provider)
		}
		askedAll += len(asked)
		slices.Sort(asked)
		slices.Sort(bid)
		// At least half the 5 wanted: the renter draws again when a seed asks fewer.
		if len(asked) < 3 || len(asked) == len(m.provs) || !slices.Equal(asked, bid) {
			t.Fatalf("round %d: %d providers asked, %d bid: want exactly the asked ones", round, len(asked), len(bid))
		}
		if took >= window/2 {
			t.Fatalf("round %d: auction took %v of its %v window once the %d asked providers had answered", round, took, window, len(asked))
		}
	}
	// The call went to the asked providers alone: none outside a sample
	// took it, or even dropped it (it was sent, not gossiped).
	took, dropped := 0, 0
	for _, tp := range m.provs {
		took += tp.p.Stats().Calls
		dropped += tp.p.Stats().Ineligible["not_sampled"]
	}
	if took != askedAll || dropped != 0 {
		t.Fatalf("providers took %d calls and dropped %d outside the sample; %d were asked", took, dropped, askedAll)
	}
}

// postTimed posts j, failing the test on an error, and returns the job as
// posted and how long its auction took.
func postTimed(t *testing.T, r *Renter, j terms.Job) (terms.Job, time.Duration) {
	t.Helper()
	start := time.Now()
	job, err := r.Post(context.Background(), j)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	return job, took
}
