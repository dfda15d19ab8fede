package auction

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ownedJob is a valid eu job of owner with id.
func ownedJob(t *testing.T, m *market, ownerID peer.ID, id string) terms.Job {
	t.Helper()
	j := euJob(m.now())
	j.ID, j.Owner, j.CreatedAt = id, ownerID.String(), m.now()
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	return j
}

// bidCollector joins id to the market and returns a channel of the bids it
// receives.
func bidCollector(m *market, id peer.ID) (*auctiontest.MemTransport, <-chan terms.Bid) {
	tr := m.net.Join(id)
	bids := make(chan terms.Bid, 64)
	tr.Handle(auctiontest.MemHandlers{OnBid: func(_ peer.ID, data []byte) error {
		b, err := terms.DecodeBid(data)
		if err == nil {
			bids <- b
		}
		return err
	}})
	return tr, bids
}

// nextBid waits up to 5 s for a bid on bids.
func nextBid(t *testing.T, bids <-chan terms.Bid) terms.Bid {
	t.Helper()
	select {
	case b := <-bids:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no bid within 5 s")
		return terms.Bid{}
	}
}

func isRejection(err error, reason string) bool {
	var rej *Rejection
	return errors.As(err, &rej) && rej.Reason == reason
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"job id", "job-3f9c0a", true},
		{"dots and underscores", "a.b_c-1", true},
		{"max length", strings.Repeat("a", terms.MaxIDLen), true},
		{"empty", "", false},
		{"too long", strings.Repeat("a", terms.MaxIDLen+1), false},
		{"path traversal", "../../../../tmp/x/evil", false},
		{"slash", "a/b", false},
		{"backslash", `a\b`, false},
		{"dot dot inside", "a..b", false},
		{"dot", ".", false},
		{"leading dash", "-rf", false},
		{"leading dot", ".hidden", false},
		{"space", "a b", false},
		{"nul", "a\x00b", false},
		{"unicode", "jöb", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := terms.ValidID(c.id)
			if (err == nil) != c.ok || (err != nil && !errors.Is(err, terms.ErrBadID)) {
				t.Fatalf("ValidID(%q) = %v, want ok=%v", c.id, err, c.ok)
			}
		})
	}
	for _, prefix := range []string{"", "job", "lease", "bid", "m", "../x", "a b", strings.Repeat("p", 200)} {
		if id := terms.NewID(prefix); terms.ValidID(id) != nil {
			t.Errorf("NewID(%q) = %q breaks ValidID", prefix, id)
		}
	}
	j := validJob()
	j.ID = "../evil"
	if err := j.Validate(); err == nil {
		t.Error("a job with a traversal id validated")
	}
}

// TestNetworkIDsAreValidated: every message that carries an id is refused,
// and counted as bad_id, when the id breaks ValidID; in particular a lease id
// that is a path never becomes a booking or a lease.
func TestNetworkIDsAreValidated(t *testing.T) {
	t.Parallel()
	const evil = "../../../../tmp/x/evil"
	m := newMarket(t, []provSpec{{"p", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	prov := m.provs[0]
	var leases []terms.Lease
	prov.p.cfg.Runtime = runtimeHooks{lease: func(l terms.Lease, _ terms.Job, _ []string) { leases = append(leases, l) }}
	owner := signtest.New(t)
	_, bids := bidCollector(m, peer.ID(owner.ID()))

	t.Run("call with a traversal job id", func(t *testing.T) {
		j := euJob(m.now())
		j.ID, j.Owner, j.CreatedAt = evil, owner.ID().String(), m.now()
		call, err := terms.EncodeCall(owner, j, "t")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := prov.p.HandleCall(peer.ID(owner.ID()), call); !isRejection(err, "bad_id") {
			t.Fatalf("HandleCall: %v, want bad_id", err)
		}
		if s := prov.p.Stats(); s.Bids != 0 || s.Rejected["bad_id"] != 1 {
			t.Fatalf("stats %+v", s)
		}
	})

	j := ownedJob(t, m, peer.ID(owner.ID()), "job-good")
	call, _ := terms.EncodeCall(owner, j, "t")
	answer, err := prov.p.HandleCall(peer.ID(owner.ID()), call)
	if err != nil {
		t.Fatal(err)
	}
	b := answeredBid(t, answer, bids)
	award := terms.Award{LeaseID: "lease-ok", JobID: j.ID, Renter: j.Owner, Provider: b.Provider, BidNonce: b.Nonce,
		Price: b.Price, Start: b.Start, End: b.End, GPUCount: j.GPUCount, Job: j, IssuedAt: m.now()}
	for _, c := range []struct {
		name string
		mut  func(*terms.Award)
	}{
		{"award with a traversal lease id", func(a *terms.Award) { a.LeaseID = evil }},
		{"award with a traversal job id", func(a *terms.Award) { a.JobID = evil }},
		{"award whose job has a traversal id", func(a *terms.Award) { a.Job.ID = evil }},
		{"award with a slash in its nonce", func(a *terms.Award) { a.BidNonce = "x/" + b.Nonce }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := award
			c.mut(&a)
			data, err := terms.EncodeAward(owner, a)
			if err != nil {
				t.Fatal(err)
			}
			before := prov.p.Stats().Rejected["bad_id"]
			if reply, err := prov.p.HandleAward(peer.ID(owner.ID()), data); reply != nil || !isRejection(err, "bad_id") {
				t.Fatalf("HandleAward: %v, want bad_id", err)
			}
			if got := prov.p.Stats().Rejected["bad_id"]; got != before+1 {
				t.Fatalf("bad_id counted %d times, want %d", got, before+1)
			}
		})
	}
	if len(prov.cal.Bookings()) != 0 || len(leases) != 0 {
		t.Fatalf("a bad id reached the calendar %v or a lease %v", prov.cal.Bookings(), leases)
	}

	t.Run("bid with a traversal job id", func(t *testing.T) {
		r, _ := m.renter(t, RenterConfig{})
		bad := b
		bad.JobID, bad.Provider = evil, owner.ID().String()
		data, err := terms.EncodeBid(owner, bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.HandleBid(peer.ID(owner.ID()), data); !isRejection(err, "bad_id") || r.Counters()["bad_id"] != 1 {
			t.Fatalf("HandleBid: %v, counters %v", err, r.Counters())
		}
	})
	t.Run("confirm with a traversal lease id", func(t *testing.T) {
		data, err := terms.EncodeConfirm(owner, terms.Confirm{LeaseID: evil, Accepted: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := terms.DecodeConfirm(data); !errors.Is(err, terms.ErrBadID) {
			t.Fatalf("DecodeConfirm: %v", err)
		}
	})
	// The valid award still works.
	data, _ := terms.EncodeAward(owner, award)
	reply, err := prov.p.HandleAward(peer.ID(owner.ID()), data)
	if c, _, derr := terms.DecodeConfirm(reply); err != nil || derr != nil || !c.Accepted || len(leases) != 1 {
		t.Fatalf("valid award: %+v %v %v", c, err, derr)
	}
}

// TestCallSquatting: a stranger who publishes a call with someone else's job
// id, or with the next attempt of a requeued job, does not stop the real
// owner's call from being answered.
func TestCallSquatting(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"p", "eu-west", "A100", 80, 8, pol(1), 0.9}})
	prov := m.provs[0]
	owner, squatter := signtest.New(t), signtest.New(t)
	_, ownerBids := bidCollector(m, peer.ID(owner.ID()))
	_, squatBids := bidCollector(m, peer.ID(squatter.ID()))
	for _, attempt := range []int{0, 1} {
		t.Run(fmt.Sprintf("attempt %d", attempt), func(t *testing.T) {
			sq := ownedJob(t, m, peer.ID(squatter.ID()), "job-victim")
			sq.Attempt = attempt
			call, _ := terms.EncodeCall(squatter, sq, "t")
			answer, err := prov.p.HandleCall(peer.ID(squatter.ID()), call)
			if err != nil {
				t.Fatal(err)
			}
			if b := answeredBid(t, answer, squatBids); b.JobID != sq.ID || b.Attempt != attempt {
				t.Fatalf("squatter's bid %+v", b)
			}
			j := ownedJob(t, m, peer.ID(owner.ID()), "job-victim")
			j.Attempt = attempt
			call, _ = terms.EncodeCall(owner, j, "t")
			answer, err = prov.p.HandleCall(peer.ID(owner.ID()), call)
			if err != nil {
				t.Fatal(err)
			}
			// The real owner's call is answered, not taken for a duplicate.
			if b := answeredBid(t, answer, ownerBids); b.JobID != j.ID || b.Attempt != attempt {
				t.Fatalf("owner's bid %+v", b)
			}
			// A repeat of the owner's call still is a duplicate.
			if again, err := prov.p.HandleCall(peer.ID(owner.ID()), call); err != nil || again != nil {
				t.Fatalf("the call again: %q, %v", again, err)
			}
		})
	}
	if s := prov.p.Stats(); s.Bids != 4 || s.Duplicates != 2 {
		t.Fatalf("stats: %d bids, %d duplicates; want 4 and 2", s.Bids, s.Duplicates)
	}
}

// TestCapabilityTTLBounded: a record valid for more than MaxCapabilityTTL is
// refused by the DHT validator (and cannot be sealed).
func TestCapabilityTTLBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := terms.CapabilityValidator{Now: func() time.Time { return now }}
	prov := signtest.New(t)
	key := terms.CapabilityKey(prov.ID())
	for _, c := range []struct {
		name string
		cap  terms.Capability
		ok   bool
	}{
		{"exactly 24 h", testCap(prov, now, terms.MaxCapabilityTTL), true},
		{"a week", testCap(prov, now, 7*terms.MaxCapabilityTTL), false},
		{"24 h and a second", testCap(prov, now, terms.MaxCapabilityTTL+time.Second), false},
		{"issued long ago, expiring far ahead", testCap(prov, now.Add(-48*time.Hour), 72*time.Hour), false},
		{"no issue time", func() terms.Capability { c := testCap(prov, now, time.Hour); c.IssuedAt = time.Time{}; return c }(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Sealed directly, as an attacker would, bypassing SealCapability.
			env, err := sign.Seal(prov, sign.DomainCapability, c.cap)
			if err != nil {
				t.Fatal(err)
			}
			err = v.Validate(key, mustMarshal(env))
			if (err == nil) != c.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, c.ok)
			}
			if _, err := v.Select(key, [][]byte{mustMarshal(env)}); (err == nil) != c.ok {
				t.Fatalf("Select = %v, want ok=%v", err, c.ok)
			}
			if _, err := terms.SealCapability(prov, c.cap); (err == nil) != c.ok {
				t.Fatalf("SealCapability = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// TestDetectedFlagGivesNoAdvantage: GPU.Detected is declared by the provider
// itself, so nothing in placement may depend on it. The same provider with
// Detected true or false gets the same offer, the same discovery keys and
// query matches, and (bids carry no such flag) the same rank.
func TestDetectedFlagGivesNoAdvantage(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	mk := func(detected bool) terms.Capability {
		gs := gpus("A100", 80, 4)
		for i := range gs {
			gs[i].Detected = detected
		}
		return terms.Capability{Peer: "p", Region: "eu-west", GPUs: gs, Policy: pol(1)}
	}
	declared, detected := mk(false), mk(true)
	for _, j := range []*terms.Job{evalJob(), func() *terms.Job { j := evalJob(); j.GPUModels = []string{"a100"}; j.MinVRAMGB = 80; return j }()} {
		o1, err1 := Evaluate(ProviderState{Cap: &declared, Cal: NewCalendar(4), Reliability: 0.5}, j, now)
		o2, err2 := Evaluate(ProviderState{Cap: &detected, Cal: NewCalendar(4), Reliability: 0.5}, j, now)
		if fmt.Sprint(o1, err1) != fmt.Sprint(o2, err2) {
			t.Fatalf("Detected changes the offer: %+v %v vs %+v %v", o1, err1, o2, err2)
		}
		if err1 != nil {
			t.Fatalf("job not eligible, the comparison proves nothing: %v", err1)
		}
	}
	if a, b := terms.DiscoveryKeys(declared), terms.DiscoveryKeys(detected); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("discovery keys differ: %v vs %v", a, b)
	}
	for _, q := range []terms.Query{{}, {GPU: "A100", GPUCount: 4}, {Region: "eu", MinVRAM: 80}, {GPUCount: 5}} {
		if declared.Matches(q) != detected.Matches(q) {
			t.Fatalf("query %+v matches differently", q)
		}
	}
	if a, b := ProviderTopics(&declared), ProviderTopics(&detected); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("topics differ: %v vs %v", a, b)
	}
}

// TestGossipNeverBlocksOnBids: an owner that never answers bids floods calls
// heard on gossip or relayed by others (handled one after another, like a
// gossip subscription loop; a call its owner sends itself is answered on
// its own stream instead). HandleCall
// returns without waiting for the network, the owner holds at most
// MaxOwnerInflight sends and gets rate limited, and an honest renter's job
// meanwhile gets its bid and a lease within its window.
func TestGossipNeverBlocksOnBids(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	m := newMarket(t, []provSpec{{"p", "eu-west", "A100", 80, 8, pol(1), 0.9}})
	prov := m.provs[0]
	attacker, relay := signtest.New(t), signtest.New(t)
	atr := m.net.Join(peer.ID(attacker.ID()))
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	hung := 0
	atr.Handle(auctiontest.MemHandlers{OnBid: func(peer.ID, []byte) error {
		mu.Lock()
		hung++
		mu.Unlock()
		<-release // never answers while the test runs
		return nil
	}})
	const flood = 60
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < flood; i++ {
			j := ownedJob(t, m, peer.ID(attacker.ID()), fmt.Sprintf("job-flood-%d", i))
			j.BidWindow = terms.MaxBidWindow
			call, _ := terms.EncodeCall(attacker, j, "t")
			_, _ = prov.p.HandleCall(peer.ID(relay.ID()), call)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call loop is stuck sending bids to an owner that never answers")
	}
	s := prov.p.Stats()
	if s.Bids > DefaultMaxOwnerInflight || s.Rejected["owner_inflight"] == 0 || s.Rejected["rate_limited"] < flood-DefaultCallBurst {
		t.Fatalf("flood not bounded: %d bids, rejected %v", s.Bids, s.Rejected)
	}

	// An honest renter's job is bid on and leased within its window.
	var got []terms.Lease
	r, _ := m.renter(t, RenterConfig{Listener: hooks{lease: func(l terms.Lease, _ terms.Job) { got = append(got, l) }}})
	start := time.Now()
	job, err := r.Post(context.Background(), euJob(m.now()))
	if err != nil {
		t.Fatalf("honest job not placed during the flood: %v", err)
	}
	st, _ := r.Status(job.ID)
	if len(st.Bids) != 1 || len(got) != 1 || time.Since(start) > job.BidWindow+2*time.Second {
		t.Fatalf("honest job: %d bids, %d leases after %v", len(st.Bids), len(got), time.Since(start))
	}
	mu.Lock()
	defer mu.Unlock()
	if hung > DefaultMaxOwnerInflight {
		t.Fatalf("%d sends to the silent owner, cap %d", hung, DefaultMaxOwnerInflight)
	}
}

// TestFakeBiddersCannotBlockPlacement: eight identities bid lowest and never
// confirm an award. The renter hedges past them and leases the job to an
// honest provider within two bid windows, releases every extra confirm, and
// ranks the fakes last on its next job.
func TestFakeBiddersCannotBlockPlacement(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	var specs []provSpec
	for i := 0; i < 8; i++ {
		specs = append(specs, provSpec{fmt.Sprintf("fake-%d", i), "eu-west", "A100", 80, 8, pol(0.3 + float64(i)/100), 0.9})
	}
	specs = append(specs, provSpec{"honest-a", "eu-west", "A100", 80, 8, pol(1), 0.9}, provSpec{"honest-b", "eu-central", "A100", 80, 8, pol(1.1), 0.9})
	m := newMarket(t, specs)
	release := make(chan struct{})
	defer close(release)
	fakes := map[string]bool{}
	for _, tp := range m.provs[:8] {
		fakes[tp.s.ID().String()] = true
		tp.t.Handle(auctiontest.MemHandlers{OnCall: tp.p.HandleCall, OnGossipedCall: tp.p.HandleGossipedCall, OnAward: func(peer.ID, []byte) ([]byte, error) {
			<-release // never confirms
			return nil, errors.New("gone")
		}})
	}
	var mu sync.Mutex
	var leasedAt []time.Duration
	var released []terms.Lease
	var start time.Time
	r, _ := m.renter(t, RenterConfig{
		Listener: hooks{lease: func(terms.Lease, terms.Job) {
			mu.Lock()
			leasedAt = append(leasedAt, time.Since(start))
			mu.Unlock()
		}},
		Release: hooks{release: func(l terms.Lease) {
			mu.Lock()
			released = append(released, l)
			mu.Unlock()
			if fakes[l.Provider] {
				return // a timed-out award released: the fake booked nothing
			}
			// What the daemon's cancel request does on the provider.
			if err := m.byID[l.Provider].p.LeaseEnded(l.ID, m.now(), terms.RunCancelled); err != nil {
				t.Errorf("release %s: %v", l.ID, err)
			}
		}}})
	pendingAtReturn := 0
	post := func() terms.JobStatus {
		t.Helper()
		j := euJob(m.now())
		j.BidWindow = 2 * time.Second
		start = time.Now()
		job, err := r.Post(context.Background(), j)
		if err != nil {
			t.Fatalf("job not placed: %v", err)
		}
		// Post returned once the lease was won: the fakes' awards, each
		// waiting out its confirm deadline, are still outstanding.
		if st, _ := r.Status(job.ID); st.State == terms.JobLeased {
			for _, a := range st.Attempts {
				if fakes[a.Provider] && a.Result == "pending" {
					pendingAtReturn++
				}
			}
		}
		r.Wait() // the awards outstanding when the lease was won
		st, _ := r.Status(job.ID)
		if fakes[st.Winner] || st.State != terms.JobLeased {
			t.Fatalf("state %s, winner %s", st.State, m.name(st.Winner))
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("leased after %v", leasedAt[len(leasedAt)-1])
		if took := leasedAt[len(leasedAt)-1]; took > 2*j.BidWindow {
			t.Fatalf("leased after %v, more than two bid windows (%v)", took, 2*j.BidWindow)
		}
		return st
	}

	st := post()
	tried := 0
	for _, a := range st.Attempts {
		if fakes[a.Provider] {
			tried++
			if a.Result != "timeout" {
				t.Errorf("fake %s: %s", m.name(a.Provider), a.Result)
			}
		}
	}
	if tried == 0 || len(st.Bids) != 10 {
		t.Fatalf("the fakes were not in the way: %d bids, attempts %+v", len(st.Bids), st.Attempts)
	}
	if pendingAtReturn == 0 {
		t.Fatal("Post waited for the fakes' awards to time out after the lease was won")
	}
	// No honest provider holds a live lease but the winner's.
	for _, tp := range m.provs[8:] {
		for _, l := range tp.p.Stats().Leases {
			if !l.State.Terminal() && l.ID != st.Lease.ID {
				t.Errorf("%s holds lease %s the renter does not use (released %v)", tp.spec.name, l.ID, released)
			}
		}
	}

	// The next job goes to an honest provider on the first award.
	st = post()
	if len(st.Attempts) == 0 || fakes[st.Attempts[0].Provider] || st.Attempts[0].Result != "confirmed" {
		t.Fatalf("fakes not ranked down: %+v", st.Attempts)
	}
}

// TestLateConfirmIsReleased: the best bidder confirms only after the hedged
// award to the runner-up did; the runner-up keeps the lease and the late
// confirm is released, so the best bidder holds no live lease.
func TestLateConfirmIsReleased(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"slow", "eu-west", "A100", 80, 4, pol(0.5), 0.9}, {"quick", "eu-west", "A100", 80, 4, pol(1), 0.9}})
	slow, quick := m.provs[0], m.provs[1]
	const jobID = "job-late"
	// quickWon is closed once the renter recorded the lease to quick
	// (OnLease follows the record).
	quickWon := make(chan struct{})
	var wonOnce sync.Once
	slow.t.Handle(auctiontest.MemHandlers{OnCall: slow.p.HandleCall, OnGossipedCall: slow.p.HandleGossipedCall, OnAward: func(from peer.ID, data []byte) ([]byte, error) {
		// Confirms late: once the hedged award to quick won, within the
		// confirm deadline.
		select {
		case <-quickWon:
		case <-time.After(5 * time.Second):
		}
		return slow.p.HandleAward(from, data)
	}})
	var mu sync.Mutex
	var released []terms.Lease
	r, _ := m.renter(t, RenterConfig{ConfirmTimeout: 2 * time.Second, Listener: hooks{lease: func(l terms.Lease, _ terms.Job) {
		if l.Provider == quick.s.ID().String() {
			wonOnce.Do(func() { close(quickWon) })
		}
	}}, Release: hooks{release: func(l terms.Lease) {
		mu.Lock()
		released = append(released, l)
		mu.Unlock()
		if err := m.byID[l.Provider].p.LeaseEnded(l.ID, m.now(), terms.RunCancelled); err != nil {
			t.Errorf("release: %v", err)
		}
	}}})
	j := euJob(m.now())
	j.ID = jobID
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	r.Wait() // the late confirm comes after the auction ended
	st, _ := r.Status(job.ID)
	if st.Winner != quick.s.ID().String() || len(st.Attempts) != 2 || m.name(st.Attempts[0].Provider) != "slow" ||
		!strings.HasPrefix(st.Attempts[0].Result, "confirmed, released") {
		t.Fatalf("winner %s, attempts %+v", m.name(st.Winner), st.Attempts)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(released) != 1 || released[0].ID != st.Attempts[0].LeaseID {
		t.Fatalf("released %+v", released)
	}
	for _, l := range slow.p.Stats().Leases {
		if !l.State.Terminal() {
			t.Fatalf("slow provider still holds lease %+v", l)
		}
	}
}

// TestBidSendQueueBounded: with one send worker and a queue of one, bids to
// owners that never answer are dropped and counted once the queue is full,
// and HandleCall still returns at once.
func TestBidSendQueueBounded(t *testing.T) {
	t.Parallel()
	m := newMarket(t, nil)
	s := signtest.New(t)
	capab := terms.Capability{Peer: s.ID().String(), Region: "eu-west", GPUs: gpus("A100", 80, 8), Policy: pol(1)}
	p, err := NewProvider(ProviderConfig{Signer: s, Transport: m.net.Join(peer.ID(s.ID())), Self: fixedSelf(capab),
		Calendar: NewCalendar(8), Now: m.now, SendWorkers: 1, SendQueue: 1})
	if err != nil {
		t.Fatal(err)
	}
	relay := signtest.New(t)
	release := make(chan struct{})
	defer close(release)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 3; i++ {
			owner := signtest.New(t)
			m.net.Join(peer.ID(owner.ID())).Handle(auctiontest.MemHandlers{OnBid: func(peer.ID, []byte) error { <-release; return nil }})
			j := ownedJob(t, m, peer.ID(owner.ID()), fmt.Sprintf("job-q-%d", i))
			j.BidWindow = terms.MaxBidWindow
			call, _ := terms.EncodeCall(owner, j, "t")
			// Relayed, so that the bid goes through the send queue.
			_, _ = p.HandleCall(peer.ID(relay.ID()), call)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("HandleCall blocked")
	}
	// One worker and one queue slot hold at most two bids.
	if st := p.Stats(); st.Rejected["send_queue_full"] < 1 || st.Bids+st.Rejected["send_queue_full"] != 3 {
		t.Fatalf("stats: %d bids, rejected %v", st.Bids, st.Rejected)
	}
}

// fixedSelf is a provider's capability record, the same at every call, and
// a neutral reliability.
type fixedSelf terms.Capability

func (c fixedSelf) Capability() terms.Capability { return terms.Capability(c) }
func (fixedSelf) Reliability() float64           { return terms.NeutralReliability }

// answeredBid is the bid a provider answered a call with on its stream,
// checking that it was not also sent apart (on bids).
func answeredBid(t *testing.T, answer []byte, bids <-chan terms.Bid) terms.Bid {
	t.Helper()
	b, err := terms.DecodeBid(answer)
	if err != nil {
		t.Fatalf("the call's answer: %v", err)
	}
	select {
	case sent := <-bids:
		t.Fatalf("a bid was also sent apart: %+v", sent)
	default:
	}
	return b
}
