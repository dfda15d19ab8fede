package auction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/peer"
)

// waitHandled checks cond after each message a provider of m handled and
// each line one logged, failing t with msg when it does not hold within
// timeout.
func (m *market) waitHandled(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		next := m.handled.Wait()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("%s within %v", msg, timeout)
		}
	}
}

// notifyHandler is a log that keeps nothing and notifies s at each line.
type notifyHandler struct{ s *broadcast.Signal }

func (h notifyHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h notifyHandler) Handle(context.Context, slog.Record) error {
	h.s.Notify()
	return nil
}

func (h notifyHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h notifyHandler) WithGroup(string) slog.Handler      { return h }

// hearCall returns a channel closed when the call of job id is published
// on any of j's topics (heard by a bystander of m's network).
func (m *market) hearCall(t testing.TB, j terms.Job) <-chan struct{} {
	t.Helper()
	heard := make(chan struct{})
	var once sync.Once
	tr := m.net.Join(peer.ID(signtest.New(t).ID()))
	for _, topic := range JobTopics(&j) {
		tr.OnTopic(topic, func(_ peer.ID, data []byte) {
			if c, err := terms.DecodeCall(data); err == nil && c.Job.ID == j.ID {
				once.Do(func() { close(heard) })
			}
		})
	}
	return heard
}

// waitCall waits until heard (hearCall) is closed: the auction is open.
func waitCall(t testing.TB, heard <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-heard:
	case <-time.After(within):
		t.Fatalf("no call published within %v", within)
	}
}

// clock runs from a fixed Monday 10:00 UTC at real speed, so expiry works.
func newClock() func() time.Time {
	base, start := at(0, "10:00"), time.Now()
	return func() time.Time { return base.Add(time.Since(start)) }
}

type provSpec struct {
	name    string
	region  string
	model   string
	vram, n int
	policy  terms.Policy
	rel     float64 // self and renter-verified reliability
}

type testProv struct {
	spec provSpec
	s    *sign.Signer
	t    *auctiontest.MemTransport
	p    *Provider
	cal  *Calendar
	// held is the artifacts the provider's store holds (set before the
	// market runs): what its bids' MissingBytes claims come from.
	held []string
	// capab is its capability record, less held.
	capab terms.Capability
}

// Capability is the provider's record, with what its store holds.
func (tp *testProv) Capability() terms.Capability { c := tp.capab; c.Artifacts = tp.held; return c }
func (tp *testProv) Reliability() float64         { return tp.spec.rel }

type market struct {
	// handled is notified after each message a provider handled and at
	// each line one logs (what its timers do, such as a hold's expiry, is
	// logged).
	handled broadcast.Signal
	net     *auctiontest.MemNetwork
	now     func() time.Time
	provs   []*testProv
	byID    map[string]*testProv
}

func newMarket(t *testing.T, specs []provSpec) *market { return newMarketAt(t, specs, newClock()) }

// newMarketAt is newMarket on the clock now.
func newMarketAt(t *testing.T, specs []provSpec, now func() time.Time) *market {
	m := &market{net: auctiontest.NewMemNetwork(), now: now, byID: map[string]*testProv{}}
	for _, sp := range specs {
		tp := &testProv{spec: sp, s: signtest.New(t), cal: NewCalendar(sp.n)}
		if err := tp.cal.SetSlices(sp.policy.SliceMap()); err != nil {
			t.Fatal(err)
		}
		tp.t = m.net.Join(peer.ID(tp.s.ID()))
		tp.capab = terms.Capability{Peer: tp.s.ID().String(), Region: sp.region, GPUs: gpus(sp.model, sp.vram, sp.n), Policy: sp.policy}
		p, err := NewProvider(ProviderConfig{Signer: tp.s, Transport: tp.t, Self: tp,
			Calendar: tp.cal, Now: m.now, Log: slog.New(notifyHandler{&m.handled})})
		if err != nil {
			t.Fatal(err)
		}
		tp.p = p
		tp.t.Handle(auctiontest.MemHandlers{
			OnCall: func(from peer.ID, data []byte) ([]byte, error) {
				defer m.handled.Notify()
				return p.HandleCall(from, data)
			},
			OnGossipedCall: func(from peer.ID, data []byte) error {
				defer m.handled.Notify()
				return p.HandleGossipedCall(from, data)
			},
			OnAward: func(from peer.ID, data []byte) ([]byte, error) {
				defer m.handled.Notify()
				return p.HandleAward(from, data)
			}})
		tp.t.Subscribe(ProviderTopics(&tp.capab)...)
		m.provs = append(m.provs, tp)
		m.byID[tp.s.ID().String()] = tp
	}
	return m
}

func (m *market) reputation(id string) float64 {
	if tp, ok := m.byID[id]; ok {
		return tp.spec.rel
	}
	return terms.NeutralReliability
}

func (m *market) renter(t *testing.T, cfg RenterConfig) (*Renter, *auctiontest.MemTransport) {
	s := signtest.New(t)
	tr := m.net.Join(peer.ID(s.ID()))
	cfg.Signer, cfg.Transport, cfg.Now = s, tr, m.now
	if cfg.Reputation == nil {
		cfg.Reputation = hooks{reliability: m.reputation}
	}
	r, err := NewRenter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.Handle(auctiontest.MemHandlers{OnBid: r.HandleBid})
	return r, tr
}

func (m *market) name(id string) string {
	if tp, ok := m.byID[id]; ok {
		return tp.spec.name
	}
	return id
}

var cheapOpen = terms.Policy{PriceFloor: 1, AcceptPreemptible: true}

func pol(floor float64) terms.Policy { p := cheapOpen; p.PriceFloor = floor; return p }

func euJob(now time.Time) terms.Job {
	return terms.Job{Tier: terms.Silver, MaxPrice: 3, GPUCount: 2, MinVRAMGB: 40, Region: "eu", Duration: time.Hour,
		Deadline: now.Add(time.Hour), MinReliability: 0.3, BidWindow: 500 * time.Millisecond, Run: terms.RunSpec{Command: []string{"train"}}}
}

func eightProviders() []provSpec {
	night := pol(0.5)
	night.Availability = []terms.Window{{From: "22:00", To: "06:00"}}
	return []provSpec{
		{"eu-good", "eu-west", "A100", 80, 4, pol(1.0), 0.9},         // score 1.11: winner
		{"eu-cheap-new", "eu-central", "A100", 80, 8, pol(0.8), 0.5}, // score 1.60
		{"us-cheapest", "us-east", "A100", 80, 4, pol(0.3), 0.9},     // outside EU
		{"eu-small-vram", "eu-north", "RTX4090", 24, 4, pol(0.4), 0.9},
		{"eu-pricey", "eu-west", "A100", 80, 4, pol(5), 0.9},
		{"eu-nights", "eu-west", "A100", 80, 4, night, 0.9}, // closed until 22:00, deadline 11:00
		{"europe-trap", "europe-x", "A100", 80, 4, pol(0.2), 0.9},
		{"eu-h100", "eu-south", "H100", 80, 2, pol(1.2), 0.95}, // score 1.26
	}
}

func TestAuctionGoesToRankWinner(t *testing.T) {
	t.Parallel()
	m := newMarket(t, eightProviders())
	var leased []terms.Lease
	r, _ := m.renter(t, RenterConfig{Listener: hooks{lease: func(l terms.Lease, _ terms.Job) { leased = append(leased, l) }}})
	ej := euJob(m.now())
	// europe-trap also listens on the EU topic: its own evaluation must
	// still refuse; us-cheapest never hears the call (topic routing).
	m.provs[6].t.Subscribe(JobTopics(&ej)...)
	job, err := r.Post(context.Background(), ej)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := r.Status(job.ID)
	if !ok || st.State != terms.JobLeased || st.Lease == nil || len(leased) != 1 {
		t.Fatalf("status %+v", st)
	}
	var bidders []string
	for _, b := range st.Bids {
		bidders = append(bidders, m.name(b.Bid.Provider))
	}
	sort.Strings(bidders)
	if want := []string{"eu-cheap-new", "eu-good", "eu-h100"}; fmt.Sprint(bidders) != fmt.Sprint(want) {
		t.Fatalf("bidders %v, want only the eligible %v", bidders, want)
	}
	// The lease goes to whoever Rank puts first, re-ranked independently.
	var cands []terms.Candidate
	for _, b := range st.Bids {
		cands = append(cands, terms.Candidate{Bid: b.Bid, Reliability: m.reputation(b.Bid.Provider)})
	}
	top := RankAt(&job, cands, job.CreatedAt)[0].Bid.Provider
	if st.Winner != top || m.name(top) != "eu-good" || st.Lease.Provider != top {
		t.Fatalf("winner %s, rank top %s", m.name(st.Winner), m.name(top))
	}
	winner := m.byID[top]
	if b, ok := winner.cal.Booking(st.Lease.ID); !ok || b.GPUs != 2 || !regionSatisfies("eu", winner.spec.region) {
		t.Fatalf("winner calendar: %+v %v", b, ok)
	}
	if ws := winner.p.Stats(); ws.Won != 1 || ws.EarningsUSD != 2*1.0*1 {
		t.Fatalf("winner stats %+v", ws)
	}
	if s := m.provs[2].p.Stats(); s.Calls != 0 || s.Bids != 0 {
		t.Errorf("us-cheapest heard an EU call: %+v", s)
	}
	wantKind := map[string]string{"europe-trap": "region", "eu-small-vram": "vram",
		"eu-pricey": "price", "eu-nights": "availability"}
	for _, tp := range m.provs {
		s := tp.p.Stats()
		if k, ok := wantKind[tp.spec.name]; ok {
			if s.Ineligible[k] != 1 || s.Bids != 0 {
				t.Errorf("%s: stats %+v, want ineligible %s", tp.spec.name, s, k)
			}
		} else if s.Bids != 1 && tp.spec.name != "us-cheapest" {
			t.Errorf("%s: %d bids", tp.spec.name, s.Bids)
		}
		if tp != winner && len(tp.cal.Bookings()) != 0 {
			t.Errorf("%s booked without winning", tp.spec.name)
		}
	}
	if ex := Explain(st.Bids, st.Winner, st.Attempts); ex.Winner != winner.s.ID().String() || ex.Rank != 1 || ex.Rule != terms.RuleBestScore {
		t.Fatalf("explain: %+v", ex)
	}
}

// bidGate forwards bids to the renter and signals once n have been accepted.
func bidGate(r *Renter, tr *auctiontest.MemTransport, n int) <-chan struct{} {
	return bidGateFree(nil, nil, r, tr, n, true)
}

func TestAuctionFailover(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		spoil  func(m *market, w *testProv, release <-chan struct{})
		result string
	}{
		{"winner drops off the network", func(m *market, w *testProv, _ <-chan struct{}) { m.net.Drop(peer.ID(w.s.ID())) }, "error:"},
		{"winner declines (capacity gone)", func(m *market, w *testProv, _ <-chan struct{}) {
			now := m.now()
			_ = w.cal.Reserve(Booking{LeaseID: "local", Start: now.Add(-time.Hour), End: now.Add(5 * time.Hour), GPUs: 4})
		}, "declined: capacity"},
		{"winner hangs past the confirm timeout", func(m *market, w *testProv, release <-chan struct{}) {
			w.t.Handle(auctiontest.MemHandlers{OnAward: func(from peer.ID, data []byte) ([]byte, error) {
				<-release
				return nil, errors.New("too late")
			}})
		}, "timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMarket(t, eightProviders())
			r, tr := m.renter(t, RenterConfig{ConfirmTimeout: 100 * time.Millisecond})
			gate := bidGate(r, tr, 3)
			release := make(chan struct{})
			defer close(release)
			type res struct {
				job terms.Job
				err error
			}
			done := make(chan res, 1)
			go func() {
				j, err := r.Post(context.Background(), euJob(m.now()))
				done <- res{j, err}
			}()
			select {
			case <-gate:
			case <-time.After(10 * time.Second):
				t.Fatal("bids did not arrive")
			}
			winner := m.provs[0] // eu-good, the rank winner
			c.spoil(m, winner, release)
			out := <-done
			if out.err != nil {
				t.Fatal(out.err)
			}
			st, _ := r.Status(out.job.ID)
			if st.State != terms.JobLeased || m.name(st.Winner) != "eu-h100" {
				t.Fatalf("runner-up did not get the lease: %+v", st)
			}
			if len(st.Attempts) != 2 || m.name(st.Attempts[0].Provider) != "eu-good" || !strings.HasPrefix(st.Attempts[0].Result, c.result) ||
				st.Attempts[1].Result != "confirmed" {
				t.Fatalf("attempts %+v", st.Attempts)
			}
			if _, ok := winner.cal.Booking(st.Attempts[0].LeaseID); ok {
				t.Fatal("failed winner holds the lease")
			}
			if _, ok := m.provs[7].cal.Booking(st.Lease.ID); !ok {
				t.Fatal("runner-up calendar lacks the lease")
			}
		})
	}
}

// checkCalendar verifies that at every booking start the booked GPUs fit.
// checkCalendar fails when c holds more than its capacity at some
// instant, or two overlapping bookings share a device other than on
// distinct slices of it.
func checkCalendar(t *testing.T, name string, c *Calendar) {
	t.Helper()
	bs := c.Bookings()
	for i, b := range bs {
		n := 0.0
		for _, o := range bs {
			if !b.Start.Before(o.Start) && b.Start.Before(o.End) {
				n += o.billed()
			}
		}
		if n > float64(c.Capacity()) {
			t.Errorf("%s overbooked: %v of %d gpus at %s", name, n, c.Capacity(), b.Start)
		}
		for _, o := range bs[i+1:] {
			if !b.Start.Before(o.End) || !o.Start.Before(b.End) {
				continue
			}
			for _, d := range b.Devices {
				if !slices.Contains(o.Devices, d) {
					continue
				}
				if b.Fraction == 0 || o.Fraction == 0 || slices.ContainsFunc(b.Slices, func(s int) bool { return slices.Contains(o.Slices, s) }) {
					t.Errorf("%s: leases %s (slices %v) and %s (slices %v) overlap on device %d", name, b.LeaseID, b.Slices, o.LeaseID, o.Slices, d)
				}
			}
		}
	}
}

func TestAuctionConcurrentJobs(t *testing.T) {
	t.Parallel()
	specs := []provSpec{
		{"a", "eu-west", "A100", 80, 2, pol(1), 0.9}, {"b", "eu-west", "A100", 80, 3, pol(1.1), 0.8},
		{"c", "eu-central", "A100", 80, 4, pol(0.9), 0.7}, {"d", "us-east", "A100", 80, 2, pol(1), 0.9},
		{"e", "us-west", "A100", 80, 3, pol(1.2), 0.95}, {"f", "eu-north", "A100", 80, 2, pol(0.7), 0.6},
	}
	m := newMarket(t, specs)
	var renters []*Renter
	for i := 0; i < 5; i++ {
		r, _ := m.renter(t, RenterConfig{ConfirmTimeout: 5 * time.Second})
		renters = append(renters, r)
	}
	type res struct {
		r   *Renter
		job terms.Job
		err error
	}
	out := make(chan res, 50)
	for i := 0; i < 50; i++ {
		r := renters[i%len(renters)]
		j := euJob(m.now())
		j.GPUCount = 1 + i%2
		j.MinVRAMGB = 0
		j.Deadline = m.now().Add(10 * time.Minute) // no queueing behind an hour-long lease
		if i%3 == 0 {
			j.Region = ""
		}
		go func() {
			job, err := r.Post(context.Background(), j)
			out <- res{r, job, err}
		}()
	}
	leased := 0
	leaseIDs := map[string]string{}
	attempts := map[string]terms.AwardAttempt{}
	for i := 0; i < 50; i++ {
		o := <-out
		st, ok := o.r.Status(o.job.ID)
		if !ok {
			t.Fatalf("job %s unknown", o.job.ID)
		}
		for _, a := range st.Attempts {
			attempts[a.LeaseID] = a
		}
		switch st.State {
		case terms.JobLeased:
			if o.err != nil {
				t.Errorf("leased with error %v", o.err)
			}
			leased++
			leaseIDs[st.Lease.ID] = st.Winner
			if o.job.Region == "eu" && !regionSatisfies("eu", m.byID[st.Winner].spec.region) {
				t.Errorf("EU job leased in %s", m.byID[st.Winner].spec.region)
			}
		case terms.JobUnplaceable:
			if !errors.Is(o.err, ErrUnplaceable) || len(st.Reasons) == 0 || st.Reasons[len(st.Reasons)-1] == "" {
				t.Errorf("unplaceable without reason: %+v %v", st, o.err)
			}
		default:
			t.Errorf("job %s ended %s", o.job.ID, st.State)
		}
	}
	booked, orphans := 0, 0
	for _, tp := range m.provs {
		checkCalendar(t, tp.spec.name, tp.cal)
		for _, b := range tp.cal.Bookings() {
			a, sent := attempts[b.LeaseID]
			switch {
			case leaseIDs[b.LeaseID] == tp.s.ID().String():
				booked++
			case sent && a.Provider == tp.s.ID().String() && a.Result == "timeout":
				// Confirmed after the renter gave up: an orphan reservation
				// the runtime expires when no job claims it.
				orphans++
			default:
				t.Errorf("%s holds lease %s it did not win (%+v)", tp.spec.name, b.LeaseID, a)
			}
		}
	}
	// 16 GPUs total, jobs of 1-2 GPUs: capacity must run out.
	if booked != leased || leased == 0 || leased == 50 {
		t.Fatalf("leased %d, booked %d", leased, booked)
	}
	t.Logf("%d of 50 jobs leased, %d orphaned by confirm timeouts", leased, orphans)
}

func TestHostileInput(t *testing.T) {
	t.Parallel()
	m := newMarket(t, eightProviders()[:1])
	prov := m.provs[0]
	r, tr := m.renter(t, RenterConfig{})
	renterID := tr.ID()
	j := euJob(m.now())
	j.BidWindow = 2 * time.Second
	j.ID = "job-hostile"
	heard := m.hearCall(t, j)
	go func() { _, _ = r.Post(context.Background(), j) }()
	waitCall(t, heard, 5*time.Second)
	defer func() { _ = r.Cancel(j.ID) }()

	attacker, victim := signtest.Pair(t)
	now := m.now()
	mkBid := func(s *sign.Signer, provider, jobID, nonce string) terms.Bid {
		return terms.Bid{JobID: jobID, Provider: provider, Region: "eu-west", Price: 1, Start: now, End: now.Add(time.Hour),
			Nonce: nonce, IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	}
	good, _ := terms.EncodeBid(attacker, mkBid(attacker, attacker.ID().String(), j.ID, "n1"))
	forgedEnv, _ := sign.Seal(attacker, sign.DomainBid, mkBid(attacker, victim.ID().String(), j.ID, "n2"))
	forged, _ := forgedEnv.Marshal()
	unsignedEnv := *forgedEnv
	unsignedEnv.Sig = nil
	unsigned, _ := unsignedEnv.Marshal()
	tampered := *forgedEnv
	tampered.Signer = victim.ID().String()
	tamperedB, _ := tampered.Marshal()
	unknown, _ := terms.EncodeBid(attacker, mkBid(attacker, attacker.ID().String(), "job-nope", "n3"))
	expiredBid := mkBid(attacker, attacker.ID().String(), j.ID, "n4")
	expiredBid.ExpiresAt = now.Add(-time.Second)
	expired, _ := terms.EncodeBid(attacker, expiredBid)
	awardEnv, _ := sign.Seal(attacker, sign.DomainAward, terms.Award{LeaseID: "l"})

	cases := []struct {
		name   string
		from   peer.ID
		data   []byte
		reason string
	}{
		{"malformed json", peer.ID(attacker.ID()), []byte("{not json"), "malformed"},
		{"empty", peer.ID(attacker.ID()), nil, "malformed"},
		{"oversized", peer.ID(attacker.ID()), make([]byte, terms.MaxMessageSize+1), "oversized"},
		{"unsigned", peer.ID(attacker.ID()), unsigned, "malformed"},
		{"claims another provider", peer.ID(victim.ID()), forged, "signer_mismatch"},
		{"tampered signer", peer.ID(victim.ID()), tamperedB, "bad_signature"},
		{"wrong domain", peer.ID(attacker.ID()), mustMarshal(awardEnv), "wrong_domain"},
		{"sent by someone else", peer.ID(victim.ID()), good, "sender_mismatch"},
		{"unknown job", peer.ID(attacker.ID()), unknown, "unknown_job"},
		{"expired", peer.ID(attacker.ID()), expired, "expired"},
		{"first is fine", peer.ID(attacker.ID()), good, ""},
		{"replayed nonce", peer.ID(attacker.ID()), good, "replayed_nonce"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := r.HandleBid(c.from, c.data)
			var rej *Rejection
			if c.reason == "" {
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
				return
			}
			if !errors.As(err, &rej) || rej.Reason != c.reason {
				t.Errorf("%s: got %v, want %s", c.name, err, c.reason)
			}
		})
	}
	counters := r.Counters()
	for _, c := range cases {
		if c.reason != "" && counters[c.reason] == 0 {
			t.Errorf("counter %s not incremented: %v", c.reason, counters)
		}
	}

	// The provider saw the real call and bid; an award for that bid signed
	// by anyone but the job's owner is refused.
	var sb *sentBid
	m.waitHandled(t, 5*time.Second, "provider did not bid", func() bool {
		prov.p.mu.Lock()
		defer prov.p.mu.Unlock()
		for _, b := range prov.p.bids {
			sb = b
		}
		return sb != nil
	})
	fake := sb.job
	fake.Owner = attacker.ID().String()
	aw := terms.Award{LeaseID: "lease-x", JobID: fake.ID, Renter: fake.Owner, Provider: prov.s.ID().String(), BidNonce: sb.bid.Nonce,
		Price: sb.bid.Price, Start: sb.bid.Start, End: sb.bid.End, GPUCount: fake.GPUCount, Job: fake}
	data, _ := terms.EncodeAward(attacker, aw)
	if c, err := prov.p.HandleAward(peer.ID(attacker.ID()), data); err == nil || c != nil {
		t.Fatalf("award from non-owner accepted: %v", err)
	}
	if c, err := prov.p.HandleAward(renterID, data); err == nil || c != nil {
		t.Fatalf("award relayed by the owner but signed by another accepted: %v", err)
	}
	for _, junk := range [][]byte{nil, []byte("]]"), make([]byte, terms.MaxMessageSize+1), good} {
		if _, err := prov.p.HandleAward(peer.ID(attacker.ID()), junk); err == nil {
			t.Fatal("junk award accepted")
		}
		if _, err := prov.p.HandleCall(peer.ID(attacker.ID()), junk); err == nil {
			t.Fatal("junk call accepted")
		}
	}
	// A call whose job claims another owner than its signer.
	callEnv, _ := sign.Seal(attacker, sign.DomainJob, terms.Job{ID: "x", Owner: victim.ID().String()})
	if _, err := prov.p.HandleCall(peer.ID(attacker.ID()), []byte(`{"topic":"t","job":`+string(mustMarshal(callEnv))+`}`)); err == nil {
		t.Fatal("call with a foreign owner accepted")
	}
	ps := prov.p.Stats()
	if ps.Rejected["not_job_owner"] != 2 || ps.Rejected["oversized"] == 0 || ps.Rejected["signer_mismatch"] == 0 || len(prov.cal.Bookings()) != 0 {
		t.Fatalf("provider stats %+v", ps)
	}
}

func mustMarshal(e *sign.Envelope) []byte {
	b, err := e.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// runtimeHooks is a provider's runtime in tests: each hook that is set
// sees what the provider hands it; without its hook a move is refused
// (and undone) and every award admitted.
type runtimeHooks struct {
	lease func(terms.Lease, terms.Job, []string)
	move  func(terms.Lease, terms.Job) bool
}

func (h runtimeHooks) OnLease(l terms.Lease, j terms.Job, preempts []string) {
	if h.lease != nil {
		h.lease(l, j, preempts)
	}
}
func (h runtimeHooks) OnMove(l terms.Lease, j terms.Job) bool { return h.move != nil && h.move(l, j) }
func (runtimeHooks) Admit(string, string, string) error       { return nil }

// hooks are a renter's collaborators in tests, each answering from the
// test's hook for it: a Listener and a Releaser tell the hooks set, a
// Directory, Latency, Reputation or Holdings without its hook knows
// nothing (as a nil collaborator does).
type hooks struct {
	lease       func(terms.Lease, terms.Job)
	unplaceable func(terms.Job, string)
	capacity    func(terms.CapacityNotice)
	release     func(terms.Lease)
	expected    func(*terms.Job) []string
	gpus        func(provider string) int
	holdings    func(ctx context.Context, provider string) ([]string, bool)
	rtt         func(provider string) (time.Duration, bool)
	measure     func(ctx context.Context, provider string) (time.Duration, bool)
	reliability func(provider string) float64
}

func (h hooks) OnLease(l terms.Lease, j terms.Job) {
	if h.lease != nil {
		h.lease(l, j)
	}
}

func (h hooks) OnUnplaceable(j terms.Job, reason string) {
	if h.unplaceable != nil {
		h.unplaceable(j, reason)
	}
}

func (h hooks) OnCapacity(n terms.CapacityNotice) {
	if h.capacity != nil {
		h.capacity(n)
	}
}

func (h hooks) Release(l terms.Lease) {
	if h.release != nil {
		h.release(l)
	}
}

func (h hooks) ExpectedBidders(j *terms.Job) []string {
	if h.expected == nil {
		return nil
	}
	return h.expected(j)
}

func (h hooks) GPUs(provider string) int {
	if h.gpus == nil {
		return 0
	}
	return h.gpus(provider)
}

func (h hooks) Holdings(ctx context.Context, provider string) ([]string, bool) {
	if h.holdings == nil {
		return nil, false
	}
	return h.holdings(ctx, provider)
}

func (h hooks) RTT(provider string) (time.Duration, bool) {
	if h.rtt == nil {
		return 0, false
	}
	return h.rtt(provider)
}

func (h hooks) MeasureRTT(ctx context.Context, provider string) (time.Duration, bool) {
	if h.measure == nil {
		return 0, false
	}
	return h.measure(ctx, provider)
}

func (h hooks) Reliability(provider string) float64 {
	if h.reliability == nil {
		return terms.NeutralReliability
	}
	return h.reliability(provider)
}

func (hooks) Verified(string, string) bool { return false }
