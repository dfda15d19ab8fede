package auction

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fourOneGPU is four one-GPU providers, alike but for their names.
func fourOneGPU() []provSpec {
	return []provSpec{{"a", "eu-west", "A100", 80, 1, pol(1), 0.9}, {"b", "eu-west", "A100", 80, 1, pol(1), 0.9},
		{"c", "eu-west", "A100", 80, 1, pol(1), 0.9}, {"d", "eu-west", "A100", 80, 1, pol(1), 0.9}}
}

func gangJob(now time.Time, nodes, count int) terms.Job {
	j := euJob(now)
	j.ID, j.Nodes, j.GPUCount, j.BidWindow = terms.NewID("job"), nodes, count, time.Second
	return j
}

// expectAll makes a renter wait for every provider of m to answer, so a
// test's bid windows close as soon as they have.
func (m *market) expectAll(*terms.Job) []string {
	var ids []string
	for _, tp := range m.provs {
		ids = append(ids, tp.s.ID().String())
	}
	return ids
}

// checkGang asserts that a placed gang's members are committed on distinct
// providers, each holding its own rank's terms.
func checkGang(t *testing.T, m *market, st terms.JobStatus, k int) {
	t.Helper()
	if st.State != terms.JobLeased || len(st.Members) != k {
		t.Fatalf("gang state %s with %d members, want leased with %d", st.State, len(st.Members), k)
	}
	seen := map[string]bool{}
	for i, l := range st.Members {
		if seen[l.Provider] {
			t.Fatalf("two members on %s", m.name(l.Provider))
		}
		seen[l.Provider] = true
		if l.Gang == nil || l.Gang.Rank != i || l.Gang.Size != k || l.Gang.Members[i].LeaseID != l.ID || l.Gang.Check(l.ID, l.Provider) != nil {
			t.Fatalf("member %d's gang terms %+v", i, l.Gang)
		}
		var live *terms.Lease
		for _, pl := range m.byID[l.Provider].p.Stats().Leases {
			if pl.ID == l.ID {
				live = &pl
			}
		}
		if live == nil || live.Gang == nil || live.Gang.ID != st.Members[0].Gang.ID || live.Gang.Rank != i {
			t.Fatalf("member %d is not committed on its provider with its terms: %+v", i, live)
		}
	}
}

func TestGangPlacedAllOrNothing(t *testing.T) {
	t.Parallel()
	m := newMarket(t, fourOneGPU())
	var leased []terms.Lease
	var mu sync.Mutex
	r, _ := m.renter(t, RenterConfig{Directory: hooks{expected: m.expectAll}, Listener: hooks{lease: func(l terms.Lease, _ terms.Job) {
		mu.Lock()
		leased = append(leased, l)
		mu.Unlock()
	}}})
	j, err := r.Post(context.Background(), gangJob(m.now(), 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(j.ID)
	checkGang(t, m, st, 3)
	mu.Lock()
	if len(leased) != 3 {
		t.Fatalf("OnLease called for %d members, want 3", len(leased))
	}
	mu.Unlock()
	// The fourth provider was not awarded and holds nothing.
	for _, tp := range m.provs {
		if s := tp.p.Stats(); s.GangHeld != 0 {
			t.Fatalf("%s still holds %d gang members", tp.spec.name, s.GangHeld)
		}
	}

	// A gang larger than the providers left (one GPU free) is not placed
	// at all, and leaves nothing booked.
	j2, err := r.Post(context.Background(), gangJob(m.now(), 2, 1))
	if !errors.Is(err, ErrUnplaceable) {
		t.Fatalf("second gang: %v", err)
	}
	st2, _ := r.Status(j2.ID)
	if len(st2.Members) != 0 || !strings.Contains(strings.Join(st2.Reasons, ";"), "gang of 2 needs 2 providers") {
		t.Fatalf("second gang status %+v", st2)
	}
	booked := 0
	for _, tp := range m.provs {
		booked += len(tp.cal.Bookings())
		if tp.p.Stats().GangHeld != 0 {
			t.Fatalf("%s holds a gang member", tp.spec.name)
		}
	}
	if booked != 3 {
		t.Fatalf("%d bookings, want the first gang's 3", booked)
	}
}

// TestGangMemberDeclinesAbortsTheRest: one chosen provider's GPU is taken
// between its bid and its award; the members that confirmed are aborted
// (their bookings freed, nothing runs), and the gang is placed on the
// others.
func TestGangMemberDeclinesAbortsTheRest(t *testing.T) {
	t.Parallel()
	m := newMarket(t, fourOneGPU())
	var started []terms.Lease
	var mu sync.Mutex
	for _, tp := range m.provs {
		tp.p.cfg.Runtime = runtimeHooks{lease: func(l terms.Lease, _ terms.Job, _ []string) {
			mu.Lock()
			started = append(started, l)
			mu.Unlock()
		}}
	}
	r, _ := m.renter(t, RenterConfig{Directory: hooks{expected: m.expectAll}})
	// The first provider awarded a member finds its GPU booked by its
	// owner meanwhile, and declines.
	var once sync.Once
	var stolen string
	for _, tp := range m.provs {
		tp.t.Handle(auctiontest.MemHandlers{OnCall: tp.p.HandleCall, OnGossipedCall: tp.p.HandleGossipedCall, OnAward: func(from peer.ID, data []byte) ([]byte, error) {
			once.Do(func() {
				stolen = tp.s.ID().String()
				if err := tp.cal.Reserve(Booking{LeaseID: "l-owner", Start: m.now(), End: m.now().Add(2 * time.Hour), GPUs: 1}); err != nil {
					t.Error(err)
				}
			})
			return tp.p.HandleAward(from, data)
		}})
	}
	j, err := r.Post(context.Background(), gangJob(m.now(), 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(j.ID)
	checkGang(t, m, st, 3)
	for _, l := range st.Members {
		if l.Provider == stolen {
			t.Fatal("a member on the provider whose GPU was taken")
		}
	}
	aborted := 0
	for _, a := range st.Attempts {
		if a.Result == "confirmed, aborted (gang incomplete)" {
			aborted++
		}
	}
	if aborted != 2 {
		t.Fatalf("%d members aborted, want the first pick's other 2: %+v", aborted, st.Attempts)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(started) != 3 {
		t.Fatalf("%d members started, want only the committed 3: %+v", len(started), started)
	}
}

// TestGangRace is issue 25's acceptance 2: two gangs of two compete for
// the same four one-GPU providers, raced 100 times. No race deadlocks
// (both auctions end within their deadline), none leaves a hold behind
// (no provider holds an uncommitted member, every booking is a committed
// member of a placed gang), each gang is placed whole or not at all, and
// at least one gang is placed in every race (no livelock). It runs
// without and with providers' bids holding their GPUs tentatively
// (HoldGrace: then each provider bids for one gang only, and no hold of a
// bid not awarded stays either).
func TestGangRace(t *testing.T) {
	t.Parallel()
	for _, grace := range []time.Duration{0, DefaultHoldGrace} {
		t.Run(fmt.Sprintf("bid holds %v", grace), func(t *testing.T) {
			t.Parallel() // each races on a market of its own
			raceGangs(t, grace)
		})
	}
}

func raceGangs(t *testing.T, grace time.Duration) {
	rounds := 100 // the acceptance's count, where members collide
	if grace > 0 {
		rounds = 50 // bids' holds keep them apart: no collision to race
	}
	if testing.Short() {
		rounds = 20
	}
	bothPlaced, aborts := 0, 0
	var slowest time.Duration
	for round := 0; round < rounds; round++ {
		m := newMarket(t, fourOneGPU())
		for _, tp := range m.provs {
			tp.p.cfg.HoldGrace = grace
		}
		type res struct {
			r   *Renter
			j   terms.Job
			err error
		}
		results := make([]res, 2)
		for i := range results {
			r, _ := m.renter(t, RenterConfig{Directory: hooks{expected: m.expectAll}})
			results[i] = res{r: r, j: gangJob(m.now(), 2, 1)}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := make(chan struct{})
		done := make(chan struct{})
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i].j, results[i].err = results[i].r.Post(ctx, results[i].j)
			}()
		}
		t0 := time.Now()
		close(start)
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("race %d: the gangs' auctions did not end (deadlock)", round)
		}
		cancel()
		slowest = max(slowest, time.Since(t0))
		committed := map[string]bool{}
		placed := 0
		for i, rs := range results {
			st, _ := rs.r.Status(rs.j.ID)
			switch {
			case rs.err == nil:
				checkGang(t, m, st, 2)
				for _, l := range st.Members {
					committed[l.ID] = true
				}
				placed++
			case errors.Is(rs.err, ErrUnplaceable):
				if len(st.Members) != 0 {
					t.Fatalf("race %d: gang %d unplaceable with members", round, i)
				}
			default:
				t.Fatalf("race %d: gang %d: %v", round, i, rs.err)
			}
		}
		if placed == 0 {
			t.Fatalf("race %d: neither gang was placed", round)
		}
		if placed == 2 {
			bothPlaced++
		}
		for _, rs := range results {
			aborts += rs.r.Counters()["gang_aborted"]
		}
		for _, tp := range m.provs {
			if s := tp.p.Stats(); s.GangHeld != 0 {
				t.Fatalf("race %d: %s holds %d uncommitted gang members", round, tp.spec.name, s.GangHeld)
			}
			for _, b := range tp.cal.Bookings() {
				if !committed[b.LeaseID] {
					t.Fatalf("race %d: %s keeps booking %s of no placed gang", round, tp.spec.name, b.LeaseID)
				}
			}
			// Bids not awarded are released (in the background).
			m.waitHandled(t, 3*time.Second, "every bid's hold released", func() bool { return tp.cal.Holds(m.now()) == 0 })
		}
	}
	t.Logf("%d races: both gangs placed in %d, %d placement rounds aborted, slowest race %v", rounds, bothPlaced, aborts, slowest)
}

// TestGangHostile: a provider refuses an award whose gang terms do not
// name it (or are malformed), refuses another renter's decision on its
// held member, and frees a held member nobody commits.
func TestGangHostile(t *testing.T) {
	t.Parallel()
	m := newMarket(t, fourOneGPU()[:2])
	for _, tp := range m.provs {
		tp.p.cfg.GangHold = 300 * time.Millisecond
	}
	r, tr := m.renter(t, RenterConfig{})
	job := gangJob(m.now(), 2, 1)
	job.BidWindow = 10 * time.Second // the auction stays open: the test awards by hand
	job.Owner = r.cfg.Signer.ID().String()
	job.CreatedAt = m.now()
	// Collect both bids through a real call.
	gate := bidGate(r, tr, 2)
	go func() { _, _ = r.Post(context.Background(), job) }()
	<-gate
	r.mu.Lock()
	bids := append([]terms.Candidate(nil), r.jobs[job.ID].call.Bids...)
	r.mu.Unlock()
	r.Cancel(job.ID)
	if len(bids) != 2 {
		t.Fatalf("%d bids", len(bids))
	}
	p0 := m.byID[bids[0].Bid.Provider]
	g := terms.Gang{ID: "gang-x", Size: 2, Members: []terms.GangMember{{Rank: 0, Provider: bids[0].Bid.Provider, LeaseID: "lease-a"}, {Rank: 1, Provider: bids[1].Bid.Provider, LeaseID: "lease-b"}}}
	award := func(leaseID string, gang *terms.Gang) error {
		b := bids[0].Bid
		a := terms.Award{LeaseID: leaseID, JobID: job.ID, Renter: job.Owner, Provider: b.Provider, BidNonce: b.Nonce, Price: b.Price,
			Start: b.Start, End: b.End, GPUCount: 1, Job: job, IssuedAt: m.now(), Gang: gang}
		data, err := terms.EncodeAward(r.cfg.Signer, a)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := p0.p.HandleAward(tr.ID(), data)
		if err != nil {
			return err
		}
		c, _, err := terms.DecodeConfirm(reply)
		if err != nil || !c.Accepted {
			t.Fatalf("confirm %+v %v", c, err)
		}
		return nil
	}
	var rej *Rejection
	if err := award("lease-a", nil); !errors.As(err, &rej) || rej.Reason != "bad_gang" {
		t.Fatalf("gang job awarded without terms: %v", err)
	}
	if err := award("lease-a", g.WithRank(1)); !errors.As(err, &rej) || rej.Reason != "bad_gang" {
		t.Fatalf("award naming another rank's provider: %v", err)
	}
	dup := g.WithRank(0)
	dup.Members[1].Provider = dup.Members[0].Provider
	if err := award("lease-a", dup); !errors.As(err, &rej) || rej.Reason != "bad_gang" {
		t.Fatalf("gang with a provider twice: %v", err)
	}
	if err := award("lease-a", g.WithRank(0)); err != nil {
		t.Fatal(err)
	}
	if s := p0.p.Stats(); s.GangHeld != 1 || len(s.Leases) != 0 || len(p0.cal.Bookings()) != 1 {
		t.Fatalf("held member: %+v, %d bookings", s, len(p0.cal.Bookings()))
	}
	// Another renter cannot commit it.
	other := signtest.New(t)
	otr := m.net.Join(peer.ID(other.ID()))
	d := terms.GangDecision{GangID: "gang-x", JobID: job.ID, Renter: other.ID().String(), Provider: bids[0].Bid.Provider, LeaseID: "lease-a", Commit: true}
	data, err := terms.EncodeGangDecision(other, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p0.p.HandleAward(otr.ID(), data); !errors.As(err, &rej) || rej.Reason != "unknown_gang_member" {
		t.Fatalf("a stranger's commit: %v", err)
	}
	// Uncommitted, the hold expires: booking freed, nothing started.
	m.waitHandled(t, 3*time.Second, "held member freed", func() bool { return p0.p.Stats().GangHeld == 0 })
	if len(p0.cal.Bookings()) != 0 || len(p0.p.Stats().Leases) != 0 {
		t.Fatal("an expired gang hold left a booking or a lease")
	}
	// A commit after the expiry is declined.
	d.Renter = job.Owner
	data, _ = terms.EncodeGangDecision(r.cfg.Signer, d)
	reply, err := p0.p.HandleAward(tr.ID(), data)
	if err != nil {
		t.Fatal(err)
	}
	if c, _, err := terms.DecodeConfirm(reply); err != nil || c.Accepted {
		t.Fatalf("late commit answered %+v %v", c, err)
	}
}

// TestGangCancelledWhileHeld: a gang cancelled while its members are
// being awarded is never committed: every held member is aborted, nothing
// stays booked and nothing starts.
func TestGangCancelledWhileHeld(t *testing.T) {
	t.Parallel()
	m := newMarket(t, fourOneGPU())
	r, _ := m.renter(t, RenterConfig{Directory: hooks{expected: m.expectAll}})
	j := gangJob(m.now(), 2, 1)
	j.ID = terms.NewID("job")
	var once sync.Once
	started := 0
	var mu sync.Mutex
	for _, tp := range m.provs {
		tp.p.cfg.Runtime = runtimeHooks{lease: func(terms.Lease, terms.Job, []string) {
			mu.Lock()
			started++
			mu.Unlock()
		}}
		tp.t.Handle(auctiontest.MemHandlers{OnCall: tp.p.HandleCall, OnGossipedCall: tp.p.HandleGossipedCall, OnAward: func(from peer.ID, data []byte) ([]byte, error) {
			if _, err := terms.DecodeAward(data); err == nil {
				once.Do(func() { _ = r.Cancel(j.ID) })
			}
			return tp.p.HandleAward(from, data)
		}})
	}
	if _, err := r.Post(context.Background(), j); !errors.Is(err, ErrCancelled) {
		t.Fatalf("post: %v", err)
	}
	for _, tp := range m.provs {
		if s := tp.p.Stats(); s.GangHeld != 0 || len(s.Leases) != 0 || len(tp.cal.Bookings()) != 0 {
			t.Fatalf("%s after the cancel: %d held, %d leases, %d bookings", tp.spec.name, s.GangHeld, len(s.Leases), len(tp.cal.Bookings()))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if started != 0 {
		t.Fatalf("%d members started", started)
	}
}

// TestPickGang: each member is the closest among the bids within
// GangTieTolerance of the best remaining score (the first: the lowest
// measured RTT; the next: the first's region, then the lowest RTT,
// unmeasured last), and a bid clearly cheaper is taken over a closer one.
func TestPickGang(t *testing.T) {
	t.Parallel()
	bid := func(name, region string, score float64, rtt time.Duration) terms.Ranked {
		return terms.Ranked{Candidate: terms.Candidate{Bid: terms.Bid{Provider: name, Region: region}, RTT: rtt}, Score: score}
	}
	names := func(rs []terms.Ranked) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Bid.Provider)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name   string
		ranked []terms.Ranked
		k      int
		want   string
	}{
		{"same region first", []terms.Ranked{bid("a", "eu-west", 1, time.Millisecond), bid("b", "us-east", 1.01, 2*time.Millisecond), bid("c", "eu-west", 1.04, 0)}, 2, "a,c"},
		{"then lowest rtt", []terms.Ranked{bid("a", "eu-west", 1, time.Millisecond), bid("b", "us-east", 1.01, 0), bid("c", "us-east", 1.02, 40*time.Millisecond),
			bid("d", "us-east", 1.03, 5*time.Millisecond)}, 2, "a,d"},
		{"cheaper beats closer", []terms.Ranked{bid("a", "eu-west", 1, 0), bid("b", "us-east", 1.2, 0), bid("c", "eu-west", 1.5, 0)}, 2, "a,b"},
		{"too few", []terms.Ranked{bid("a", "eu-west", 1, 0)}, 2, "a"},
		{"closest leads", []terms.Ranked{bid("a", "eu-west", 1, 30*time.Millisecond), bid("b", "us-east", 1.01, 5*time.Millisecond),
			bid("c", "eu-west", 1.5, 0)}, 2, "b,a"},
		{"three", []terms.Ranked{bid("a", "eu-west", 1, 0), bid("b", "us-east", 1, 0), bid("c", "eu-west", 1.01, 0), bid("d", "eu-west", 1.02, 0)}, 3, "a,c,d"},
	} {
		if got := names(pickGang(c.ranked, c.k)); got != c.want {
			t.Errorf("%s: picked %s, want %s", c.name, got, c.want)
		}
	}
}

// TestGangMeasuresRTT: the renter measures the round trip to a gang's
// bidders as it does for a latency-sensitive job, and picks the members
// closest among bids alike in price and reliability.
func TestGangMeasuresRTT(t *testing.T) {
	t.Parallel()
	m := newMarket(t, fourOneGPU()[:3])
	rtt := map[string]time.Duration{}
	for _, p := range m.provs {
		rtt[p.s.ID().String()] = map[string]time.Duration{"a": 30 * time.Millisecond, "b": 5 * time.Millisecond, "c": 50 * time.Millisecond}[p.spec.name]
	}
	r, _ := m.renter(t, RenterConfig{Directory: hooks{expected: m.expectAll}, Latency: hooks{measure: func(ctx context.Context, p string) (time.Duration, bool) {
		return rtt[p], true
	}}})
	j, err := r.Post(context.Background(), gangJob(m.now(), 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(j.ID)
	if len(st.Members) != 2 || m.name(st.Members[0].Provider) != "b" || m.name(st.Members[1].Provider) != "a" {
		t.Fatalf("members %s, %s; want the closest, b then a", m.name(st.Members[0].Provider), m.name(st.Members[1].Provider))
	}
}
