package adversary

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// The tests run each attack against in-process daemons on loopback: a
// renter (the bootstrap node) and honest providers started with
// node.Start, exactly as gpumesh runs them.

var h100 = terms.GPU{Model: "H100", VRAMGB: 80}

func testLog() *slog.Logger {
	if os.Getenv("GPUMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// daemon is one in-process node and its control API.
type daemon struct {
	*node.Daemon
	dir string
	api *api.Client
}

// addr is the daemon's first multiaddr with its /p2p/ id.
func (d *daemon) addr() string { return d.Addrs()[0] }

func renterConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	return cfg
}

func providerConfig(floor float64) config.Config {
	cfg := renterConfig()
	cfg.Region = "eu-west"
	cfg.Provider.Enabled = true
	cfg.Provider.GPUs = []terms.GPU{h100}
	cfg.Provider.GPUSource = "declared" // never the host's real GPUs
	cfg.Provider.AdvertiseTTL = 30 * time.Second
	cfg.Provider.Policy = terms.Policy{PriceFloor: floor, AcceptPreemptible: true}
	cfg.Provider.Executor = "process"
	cfg.Provider.HeartbeatInterval = time.Second
	return cfg
}

func start(t *testing.T, cfg config.Config, boot *daemon) *daemon {
	t.Helper()
	if boot != nil {
		cfg.Bootstrap = []string{boot.addr()}
	}
	dir := t.TempDir()
	d, err := node.Start(context.Background(), node.Options{DataDir: dir, Config: cfg, Log: testLog()})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return &daemon{Daemon: d, dir: dir, api: api.NewClient(dir)}
}

// network starts a renter and one provider per price floor.
func network(t *testing.T, floors ...float64) (renter *daemon, provs []*daemon) {
	t.Helper()
	return networkOf(t, renterConfig(), floors...)
}

// networkOf is network with the renter's config.
func networkOf(t *testing.T, rc config.Config, floors ...float64) (renter *daemon, provs []*daemon) {
	t.Helper()
	renter = start(t, rc, nil)
	for _, f := range floors {
		provs = append(provs, start(t, providerConfig(f), renter))
	}
	return renter, provs
}

// adversary starts a hostile peer joined through the given daemons.
func adversary(t *testing.T, via ...*daemon) *Peer {
	t.Helper()
	var boot []string
	for _, d := range via {
		boot = append(boot, d.addr())
	}
	p, err := NewPeer(context.Background(), PeerConfig{Bootstrap: boot, Log: testLog()})
	if err != nil {
		t.Fatalf("adversary: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

const bidWindow = 2 * time.Second

// honestJob is a short job an honest provider runs to completion.
func honestJob() terms.Job {
	return terms.Job{Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, Duration: time.Hour, Region: "eu",
		BidWindow: bidWindow, Run: terms.RunSpec{Command: []string{"true"}}}
}

func post(t *testing.T, d *daemon, job terms.Job) (api.JobView, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	v, err := d.api.PostJob(ctx, job)
	if err != nil {
		t.Fatalf("post job: %v", err)
	}
	return v, time.Since(t0)
}

// postWatched posts the job and, while its auction runs, polls the
// renter's view of it: it returns the final view, how long after posting
// the renter first showed a lease (zero if never) and how long the post
// took (the auction returns once every outstanding award has been
// answered or timed out, after the lease already holds).
func postWatched(t *testing.T, d *daemon, job terms.Job) (v api.JobView, leased, returned time.Duration) {
	t.Helper()
	if job.ID == "" {
		job.ID = terms.NewID("job")
	}
	t0 := time.Now()
	stop := make(chan struct{})
	seen := make(chan time.Duration, 1)
	go func() {
		defer close(seen)
		for {
			if jv, err := d.api.Job(context.Background(), job.ID); err == nil && jv.Lease != nil {
				seen <- time.Since(t0)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	v, returned = post(t, d, job)
	close(stop)
	leased = <-seen
	if leased == 0 && v.Lease != nil {
		leased = returned // leased between the last poll and the post's return
	}
	return v, leased, returned
}

// postUntilLeased posts the job until it is leased (the gossip mesh forms
// while the first calls are made), failing after within.
func postUntilLeased(t *testing.T, d *daemon, job terms.Job, within time.Duration) api.JobView {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, _ := post(t, d, job)
		if v.Lease != nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("job never leased: %s %v", v.State, v.Reasons)
		}
	}
}

// waitFor polls cond until it holds, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond) // daemons read through their control API: gossip and DHT over real sockets, nothing here is told
	}
}

func counters(t *testing.T, d *daemon) map[string]int {
	t.Helper()
	c, err := d.api.Counters(context.Background())
	if err != nil {
		t.Fatalf("counters: %v", err)
	}
	return c
}

func entries(t *testing.T, d *daemon, kind record.Kind, leaseID string) []record.Entry {
	t.Helper()
	es, err := d.api.Ledger(context.Background(), record.Filter{Kind: kind, LeaseID: leaseID})
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	return es
}

func view(t *testing.T, d *daemon, jobID string) api.JobView {
	t.Helper()
	v, err := d.api.Job(context.Background(), jobID)
	if err != nil {
		t.Fatalf("job %s: %v", jobID, err)
	}
	return v
}

// TestFakeProvider: a provider that bids lowest, wins, runs nothing, fakes
// heartbeats, reports a run ending hours in the future and sends receipts
// for the whole lease (three times, before and after its final report and
// after settling) gets countersigned at most what the renter observed, and
// the renter's ledger holds at most one settlement of the lease.
func TestFakeProvider(t *testing.T) {
	t.Parallel()
	renter, _ := network(t)
	fake := adversary(t, renter)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	type result struct {
		rep FakeProviderReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := FakeProvider(ctx, fake, FakeProviderConfig{Receipts: 3})
		done <- result{rep, err}
	}()
	job := honestJob()
	job.Run.Command = []string{"sleep", "3600"}
	v := postUntilLeased(t, renter, job, 20*time.Second)
	if v.Lease.Provider != fake.ID().String() {
		t.Fatalf("lease went to %s, not the fake provider %s", v.Lease.Provider, fake.ID())
	}
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("fake provider did not finish")
	}
	rep := res.rep
	if res.err != nil {
		t.Fatalf("fake provider: %v (answers %+v)", res.err, rep.Answers)
	}
	for _, a := range rep.Answers {
		t.Logf("%-50s %s", a.What, orAccepted(a.Err))
	}
	lease := rep.Lease
	leaseSecs := lease.End.Sub(lease.Start).Seconds() * float64(lease.GPUCount)
	if rep.ClaimedGPUSeconds < leaseSecs {
		t.Fatalf("the attack claimed %.0f GPU-seconds, less than the lease's %.0f", rep.ClaimedGPUSeconds, leaseSecs)
	}
	// Every whole-lease receipt and the future end were refused.
	for _, a := range rep.Answers {
		if a.What != "succeeded event ending now" && a.What != "receipt for the observed span" && a.Err == "" {
			t.Errorf("renter accepted %q", a.What)
		}
	}
	// What was countersigned is at most what the renter could observe.
	var signed float64
	for _, r := range rep.Countersigned {
		signed += r.GPUSeconds
	}
	if len(rep.Countersigned) > 1 {
		t.Errorf("renter countersigned %d different receipts for one lease", len(rep.Countersigned))
	}
	if observed := rep.Observable.Seconds() + 1; signed > observed {
		t.Errorf("renter countersigned %.1f GPU-seconds; it could observe the fake for %.1f s", signed, rep.Observable.Seconds())
	}
	receipts := entries(t, renter, record.KindReceipt, lease.ID)
	owed := entries(t, renter, record.KindPaymentOwed, lease.ID)
	if len(receipts) > 1 || len(owed) > 1 {
		t.Fatalf("renter's ledger holds %d receipts and %d payments for lease %s", len(receipts), len(owed), lease.ID)
	}
	var paid float64
	for _, e := range owed {
		paid += e.Amount
	}
	if max := attestAmount(rep.Observable.Seconds()+1, lease.Price); paid > max {
		t.Errorf("renter owes %.6f USD for lease %s; at most %.6f was observable", paid, lease.ID, max)
	}
	if rep.HeartbeatsAccepted != rep.HeartbeatsSent-1 {
		t.Errorf("%d of %d heartbeats accepted: the NVML one naming a device without a fingerprint must be refused, the rest taken",
			rep.HeartbeatsAccepted, rep.HeartbeatsSent)
	}
	c := counters(t, renter)
	for _, k := range []string{"renter.event_bad_time", "renter.receipt_mismatch", "renter.receipt_overbilled", "renter.receipt_duplicate"} {
		if c[k] == 0 {
			t.Errorf("counter %s not raised (counters %v)", k, c)
		}
	}
	if jv := view(t, renter, v.Job.ID); jv.Receipt != nil && jv.Receipt.GPUSeconds > rep.Observable.Seconds()+1 {
		t.Errorf("job's receipt bills %.1f GPU-seconds", jv.Receipt.GPUSeconds)
	}
	t.Logf("fake provider: lease %.0f GPU-s claimed %.0f GPU-s ×%d; heartbeats %d sent %d accepted; %d of %d messages refused; "+
		"countersigned %.2f GPU-s (%.6f USD); lease held %.2f s, observable %.2f s; ledger: %d receipt(s), %d payment(s)",
		leaseSecs, rep.ClaimedGPUSeconds, 3, rep.HeartbeatsSent, rep.HeartbeatsAccepted, rep.Refused(), len(rep.Answers),
		signed, paid, rep.Ran.Seconds(), rep.Observable.Seconds(), len(receipts), len(owed))
}

func orAccepted(err string) string {
	if err == "" {
		return "accepted"
	}
	return "refused: " + err
}

func attestAmount(gpuSeconds, price float64) float64 { return gpuSeconds / 3600 * price }

// (acceptance 3) TestHonestJobsUnderFloodAndNonConfirmers: while a peer
// floods calls for bids from owners that never accept a bid and eight fresh
// identities bid lowest on every call and never confirm, honest jobs are
// still leased, by honest providers, within two bid windows of being posted.
func TestHonestJobsUnderFloodAndNonConfirmers(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	// The renter asks every provider: with calls sampled (max_bidders),
	// its established honest providers are asked by name and answer first,
	// and the attack would seldom engage.
	rc := renterConfig()
	rc.MaxBidders = -1
	renter, provs := networkOf(t, rc, 1.0, 1.5)
	// Two windows leave room for one round of award timeouts (the renter
	// awards up to auction.DefaultMaxParallelAwards (8) bids at once and
	// fails over after auction.DefaultConfirmTimeout (1s)) and for a
	// heavily loaded test machine: a lease is due about a second after the
	// window closes.
	window := 4 * time.Second
	job := func() terms.Job {
		j := honestJob()
		j.BidWindow = window
		return j
	}
	postUntilLeased(t, renter, honestJob(), 20*time.Second) // the honest market works
	_, base, _ := postWatched(t, renter, job())
	t.Logf("without attack: leased %v after posting (bid window %v)", base.Round(time.Millisecond), window)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flooder := adversary(t, renter, provs[0], provs[1])
	var fr FloodReport
	// flood floods calls until the returned stop is called, once the
	// flood has reached the honest providers (they drop it, per owner):
	// 300 calls/s from one owner, over its token bucket at every provider
	// (auction.DefaultCallRate 200/s, burst 200). It runs while a job is
	// posted, not while a round's bidders join and announce themselves:
	// on 2 cores the flood's load (every bidder bids on every flood call)
	// would hold their DHT announcements past any deadline, and joining
	// is not what the test measures.
	flood := func() (stop func()) {
		dropped := func() int {
			c := counters(t, provs[0])
			return c["provider.rate_limited"] + c["provider.owner_inflight"]
		}
		before := dropped()
		fctx, fcancel := context.WithCancel(ctx)
		done := make(chan FloodReport, 1)
		go func() {
			rep, _ := CallFlood(fctx, flooder, FloodConfig{Owners: 1, Rate: 300})
			done <- rep
		}()
		waitFor(t, 15*time.Second, "the flood reaching the providers", func() bool { return dropped() > before })
		return func() {
			fcancel()
			rep := <-done
			fr.Calls += rep.Calls
			fr.BidsHeld += rep.BidsHeld
		}
	}

	const jobs, nBidders = 2, 8
	honest := map[string]bool{provs[0].ID().String(): true, provs[1].ID().String(): true}
	for i := 0; i < jobs; i++ {
		// Fresh identities for every job: the renter's memory of bidders
		// that did not confirm does not help against new ones.
		// They advertise records as honest providers do, and the renter
		// lists the market first: it then expects them to answer, so its
		// windows wait for their bids (a renter that knows only the honest
		// providers closes once those have answered, which the bidders
		// may or may not beat).
		bidders, err := NonConfirmingBidders(ctx, nBidders, PeerConfig{Bootstrap: []string{renter.addr()}, Log: testLog()},
			BidderConfig{Advertise: true})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the renter listing every non-confirming bidder", func() bool {
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			defer lcancel()
			caps, err := renter.api.Providers(lctx, terms.Query{})
			if err != nil {
				return false
			}
			listed := map[string]bool{}
			for _, c := range caps {
				listed[c.Peer] = true
			}
			for _, p := range bidders.Peers {
				if !listed[p.ID().String()] {
					return false
				}
			}
			return true
		})
		stopFlood := flood()
		v, took, returned := postWatched(t, renter, job())
		stopFlood()
		bidders.Close()
		if v.Lease == nil {
			t.Fatalf("job %d not leased under attack: %s %v (attempts %+v)", i, v.State, v.Reasons, v.Attempts)
		}
		if !honest[v.Lease.Provider] {
			t.Fatalf("job %d leased to %s, not an honest provider", i, v.Lease.Provider)
		}
		hostile := 0
		for _, a := range v.Attempts {
			if !honest[a.Provider] {
				hostile++
			}
		}
		if hostile == 0 {
			t.Fatalf("job %d: no award went to a non-confirming bidder (bids %d, attempts %+v): the attack did not engage", i, len(v.Bids), v.Attempts)
		}
		t.Logf("job %d leased %v after posting (bid window %v, limit %v; the post returned after %v): %d bids, %d awards to non-confirmers",
			i, took.Round(time.Millisecond), window, 2*window, returned.Round(time.Millisecond), len(v.Bids), hostile)
		if took == 0 || took > 2*window {
			t.Errorf("job %d took %v to lease, more than two bid windows (%v); attempts %+v", i, took, 2*window, v.Attempts)
		}
	}
	c0, c1 := counters(t, provs[0]), counters(t, provs[1])
	t.Logf("flood: %d calls published, %d bids held by the flooder; provider drops: rate_limited %d/%d, owner_inflight %d/%d, send_queue_full %d/%d",
		fr.Calls, fr.BidsHeld, c0["provider.rate_limited"], c1["provider.rate_limited"],
		c0["provider.owner_inflight"], c1["provider.owner_inflight"], c0["provider.send_queue_full"], c1["provider.send_queue_full"])
}

func TestMain(m *testing.M) {
	fmt.Fprint(os.Stderr, "")
	os.Exit(m.Run())
}

func total(c map[string]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// diff lists the counters that grew from a to b.
func diff(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range b {
		if v > a[k] {
			out[k] = v - a[k]
		}
	}
	return out
}

// TestMalformedFrames: garbage, empty, oversized, over-long-header,
// truncated, wrong-domain and path-traversal frames on every protocol a
// provider daemon serves, and hostile gossip on the call and reputation
// topics, are each refused and counted; nothing panics (the daemons run in
// this test binary) and the target still leases an honest job afterwards.
func TestMalformedFrames(t *testing.T) {
	t.Parallel()
	renter, provs := network(t, 1.0)
	target := provs[0]
	settled(t, renter, postUntilLeased(t, renter, honestJob(), 20*time.Second)) // no background counting from here on
	p := adversary(t, target)
	cases, err := MalformedCases(p, target.ID())
	if err != nil {
		t.Fatal(err)
	}
	refused, counted := 0, 0
	for _, c := range cases {
		t.Run(string(c.Proto)[len("/gpumesh/"):]+"/"+c.Name, func(t *testing.T) {
			before := counters(t, target)
			o := c.Send(context.Background(), p, target.ID())
			if !o.Refused {
				t.Fatalf("accepted: %s", o.Answer)
			}
			refused++
			// The handler counts before it answers: no wait needed.
			d := diff(before, counters(t, target))
			t.Logf("%s; counted %v", o.Answer, d)
			for k := range d {
				if !strings.HasPrefix(k, "renter.") && !strings.HasPrefix(k, "provider.") {
					delete(d, k)
				}
			}
			if len(d) == 0 {
				t.Fatalf("refused but not counted")
			}
			counted++
		})
	}
	// Hostile gossip: no answer, so wait for the counters.
	before := counters(t, target)
	n, err := MalformedGossip(context.Background(), p, "eu")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "hostile gossip counted", func() bool { return total(counters(t, target))-total(before) >= n })
	t.Logf("gossip: %d hostile messages, counted %v", n, diff(before, counters(t, target)))
	// Still serving: the target wins and runs an honest job.
	v := postUntilLeased(t, renter, honestJob(), 20*time.Second)
	if v.Lease.Provider != target.ID().String() {
		t.Fatalf("job leased to %s, not the target %s", v.Lease.Provider, target.ID())
	}
	settled(t, renter, v)
	t.Logf("%d malformed frames on %d protocols: %d refused, %d counted", len(cases), len(Protocols), refused, counted)
}

// settled waits until the job's lease ran to success and was settled.
func settled(t *testing.T, renter *daemon, v api.JobView) api.JobView {
	t.Helper()
	var jv api.JobView
	waitFor(t, 20*time.Second, "job "+v.Job.ID+" succeeding and settling", func() bool {
		jv = view(t, renter, v.Job.ID)
		return jv.Run == terms.RunSucceeded && jv.Receipt != nil
	})
	return jv
}

// TestReceiptReplayAndSybils: replaying a gossiped two-party receipt (as
// gossip, and to the renter as if it were the replayer's own) changes no
// one's reputation and settles nothing twice; receipts for a fake provider
// signed by sybil renters (fresh identities with no standing) weigh no
// more than attest.DefaultNewcomerCap together and never lift it above the
// prior.
func TestReceiptReplayAndSybils(t *testing.T) {
	t.Parallel()
	renter, provs := network(t, 1.0)
	prov := provs[0]
	p := adversary(t, renter, prov)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	captured := make(chan []byte, 1)
	go func() {
		b, _ := CaptureReceipt(ctx, p)
		captured <- b
	}()
	jv := settled(t, renter, postUntilLeased(t, renter, honestJob(), 20*time.Second))
	data := <-captured
	if data == nil {
		t.Fatal("no receipt gossiped")
	}
	rep0, err := renter.api.Reputation(ctx, prov.ID().String())
	if err != nil {
		t.Fatal(err)
	}
	before := counters(t, renter)
	const replays = 5
	rr, err := ReplayReceipts(ctx, p, renter.ID(), data, replays)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range rr.DirectErr {
		if e == "" {
			t.Errorf("replay %d: the renter countersigned a replayed receipt", i)
		}
	}
	waitFor(t, 10*time.Second, "replays seen as duplicates", func() bool {
		return counters(t, renter)["reputation.duplicate"]-before["reputation.duplicate"] >= replays
	})
	rep1, err := renter.api.Reputation(ctx, prov.ID().String())
	if err != nil {
		t.Fatal(err)
	}
	// (Only the receipts' age decay may move the score meanwhile.)
	if rep1.Rep.Receipts != rep0.Rep.Receipts || math.Abs(rep1.Rep.Score-rep0.Rep.Score) > 1e-6 {
		t.Errorf("replays moved the provider's reputation: %+v → %+v", rep0.Rep, rep1.Rep)
	}
	if n := len(entries(t, renter, record.KindReceipt, jv.Lease.ID)); n != 1 {
		t.Errorf("renter's ledger holds %d receipts for lease %s after the replays", n, jv.Lease.ID)
	}
	t.Logf("replay: %d gossiped + %d direct; reputation of %s stays %.4f over %d receipt(s); counted %v",
		rr.Gossiped, len(rr.DirectErr), prov.ID(), rep1.Rep.Score, rep1.Rep.Receipts, diff(before, counters(t, renter)))

	// Sybils.
	cfg := SybilConfig{Renters: 20, PerRenter: 3, Amount: 50}
	sr, err := SybilReceipts(ctx, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var rep api.ReputationView
	// Gossip may drop messages of a burst under load; the sybils re-gossip
	// (duplicates are free) until all of theirs have arrived, each round
	// padded anew: gossip drops a byte-identical copy of a message it has
	// seen (p2p.MessageID), the publisher's own included.
	regossip, round := time.Now().Add(2*time.Second), 0
	waitFor(t, 20*time.Second, "sybil receipts reaching the renter's book", func() bool {
		rep, err = renter.api.Reputation(ctx, sr.Provider)
		if err == nil && rep.Rep.Receipts == sr.Receipts {
			return true
		}
		if time.Now().After(regossip) {
			round++
			for _, b := range sr.Data {
				msg, err := wire.EncodeReceiptBatch([][]byte{b})
				if err != nil {
					t.Fatal(err)
				}
				_ = p.Node.Publish(ctx, wire.ReputationTopic, padded(msg, round))
			}
			regossip = time.Now().Add(2 * time.Second)
		}
		return false
	})
	// All the sybils together weigh at most attest.DefaultNewcomerCap (one
	// receipt), and what renters without standing report counts at most at
	// the prior: the fake provider stays there.
	const maxWeight, maxScore = attest.DefaultNewcomerCap, attest.Prior
	if rep.Rep.Weight > maxWeight+1e-9 || rep.Rep.Score > maxScore+1e-9 {
		t.Errorf("%d sybil receipts from %d renters: weight %.3f, score %.4f (want ≤ %.1f, ≤ %.2f)",
			sr.Receipts, cfg.Renters, rep.Rep.Weight, rep.Rep.Score, maxWeight, maxScore)
	}
	t.Logf("sybils: %d receipts (%.0f USD claimed) from %d renters for %s: score %.4f (prior 0.5), weight %.3f, renters %d",
		sr.Receipts, float64(sr.Receipts)*cfg.Amount, cfg.Renters, sr.Provider, rep.Rep.Score, rep.Rep.Weight, rep.Rep.Renters)
}

// TestSybilCapabilityRecords: a renter has one established provider (its
// own lease with it settled, so its book scores it above the prior). A
// peer then publishes capability records for 120 fresh identities that
// fit the renter's jobs, and the renter lists them all: its calls sample
// 16 of 121 providers. Each call still asks the established provider
// (invited by name) and places the job there; drawn at random it would be
// asked in about one call of eight.
func TestSybilCapabilityRecords(t *testing.T) {
	t.Parallel()
	renter, provs := network(t, 1.0)
	honest := provs[0]
	hid := honest.ID().String()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	settled(t, renter, postUntilLeased(t, renter, honestJob(), 20*time.Second))
	waitFor(t, 10*time.Second, "the renter's book scoring its provider above the prior", func() bool {
		rep, err := renter.api.Reputation(ctx, hid)
		return err == nil && rep.Rep.Score > attest.Prior
	})
	p := adversary(t, renter, honest)
	const sybils = 120
	sr, err := SybilRecords(ctx, p, sybils, BidderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the renter listing every sybil record", func() bool {
		caps, err := renter.api.Providers(ctx, terms.Query{})
		if err != nil {
			return false
		}
		listed := map[string]bool{}
		for _, c := range caps {
			listed[c.Peer] = true
		}
		for _, id := range sr.Identities {
			if !listed[id] {
				return false
			}
		}
		return listed[hid]
	})
	stats := func() terms.ProviderStats {
		s, err := honest.api.ProviderStats(ctx)
		if err != nil {
			t.Fatalf("provider stats: %v", err)
		}
		return s.ProviderStats
	}
	before := stats()
	const jobs = 3
	for i := range jobs {
		v, _ := post(t, renter, honestJob())
		if v.Lease == nil || v.Lease.Provider != hid {
			t.Fatalf("job %d among %d sybil records: %s %v, lease %+v: not placed on the established provider %s",
				i, sybils, v.State, v.Reasons, v.Lease, hid)
		}
		settled(t, renter, v)
	}
	after := stats()
	if n := after.Ineligible["not_sampled"] - before.Ineligible["not_sampled"]; n != 0 {
		t.Fatalf("%d of %d calls did not ask the established provider", n, jobs)
	}
	t.Logf("%d sybil records: %d jobs, each asked of and leased to the established provider (%d bids)",
		len(sr.Identities), jobs, after.Bids-before.Bids)
}

// TestHalfSentFramesDoNotExhaustTheDaemon: hostile identities hold many
// streams on a provider's request protocols, each with a header claiming a
// whole frame (1 MiB) and a little of its payload. The provider's memory
// grows by what its protocols' limits allow, not by a megabyte per stream,
// and it still wins and runs an honest job meanwhile.
func TestHalfSentFramesDoNotExhaustTheDaemon(t *testing.T) {
	// Not parallel: it measures this process's heap, which the package's
	// parallel tests would grow.
	renter, provs := network(t, 1.0)
	target := provs[0]
	settled(t, renter, postUntilLeased(t, renter, honestJob(), 20*time.Second))
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const identities, streams = 4, 24
	protos := []protocol.ID{wire.ProtoAward, wire.ProtoCancel}
	opened := 0
	for range identities {
		p := adversary(t, target)
		for _, proto := range protos {
			h := SendHalfFrames(context.Background(), p, target.ID(), proto, streams, 8<<10)
			t.Cleanup(h.Close)
			opened += h.Opened
		}
	}
	// Still serving while the streams are held.
	v := postUntilLeased(t, renter, honestJob(), 20*time.Second)
	if v.Lease.Provider != target.ID().String() {
		t.Fatalf("job leased to %s, not the target %s", v.Lease.Provider, target.ID())
	}
	settled(t, renter, v)
	var during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&during)
	grew := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	claimed := int64(identities * streams * len(protos) * frame.Max)
	t.Logf("%d half-sent frames claiming %d MiB: heap grew %.1f MiB", opened, claimed>>20, float64(grew)/(1<<20))
	if grew > 48<<20 {
		t.Fatalf("heap grew %.1f MiB under %d half-sent frames (claiming %d MiB)", float64(grew)/(1<<20), opened, claimed>>20)
	}
}

// TestReplayedGPUChallengeRefused: a peer's signed GPU challenge is
// answered once; the same signed bytes sent again on a new stream are
// refused as a replay, and the provider counts the refusal.
func TestReplayedGPUChallengeRefused(t *testing.T) {
	t.Parallel()
	renter, provs := network(t, 1.0)
	prov := provs[0]
	p := adversary(t, renter, prov)
	first, replay, err := ChallengeReplay(context.Background(), p, prov.ID(), "0")
	if err != nil {
		t.Fatal(err)
	}
	if first.Refused != "" || first.Backend != gpuproof.BackendCPU {
		t.Fatalf("first challenge answered %+v, want prepared on the declared GPU's CPU path", first)
	}
	if !strings.Contains(replay.Refused, "already seen") {
		t.Fatalf("replayed challenge answered %+v, want refused as a replay", replay)
	}
	waitFor(t, 10*time.Second, "the refusal counted", func() bool {
		return counters(t, prov)["provider.gpu_challenge_refused"] >= 1
	})
}
