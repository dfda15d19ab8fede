package node

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

func post(t *testing.T, n *testNode, job terms.Job) api.JobView {
	t.Helper()
	var v api.JobView
	if err := api.NewClient(n.dir).Do(context.Background(), http.MethodPost, "/jobs", nil, api.PostJobRequest{Job: job}, &v); err != nil {
		t.Fatalf("post job: %v", err)
	}
	return v
}

// postQueued posts job with queue set: it is posted even when no known
// provider could run it.
func postQueued(t *testing.T, n *testNode, job terms.Job) api.JobView {
	t.Helper()
	v, err := api.NewClient(n.dir).PostJobRequest(context.Background(), api.PostJobRequest{Job: job, Queue: true})
	if err != nil {
		t.Fatalf("post job --queue: %v", err)
	}
	return v
}

func shJob(tier terms.Tier, maxPrice float64, script string) terms.Job {
	return terms.Job{Tier: tier, MaxPrice: maxPrice, GPUCount: 1, Duration: 10 * time.Minute,
		Preemptible: tier == terms.Bronze, BidWindow: 1500 * time.Millisecond,
		Run: terms.RunSpec{Command: []string{"sh", "-c", script}}}
}

// waitJob waits until the renter's view of a job satisfies cond.
func waitJob(t *testing.T, n *testNode, id string, within time.Duration, what string, cond func(api.JobView) bool) api.JobView {
	t.Helper()
	var v api.JobView
	waitRecords(t, n, within, "job "+id+": "+what, func() bool {
		var err error
		v, err = n.market.tracker.View(id)
		return err == nil && cond(v)
	}, func() string {
		b, _ := json.MarshalIndent(v, "", " ")
		return "last view:\n" + string(b)
	})
	return v
}

// waitRecords waits until cond holds, checking it again at each change of
// a job's record on n's tracker; past within it fails with what and last
// (what cond saw last).
func waitRecords(t *testing.T, n *testNode, within time.Duration, what string, cond func() bool, last func() string) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		next := n.market.tracker.Changed()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("%s: not reached within %s; %s", what, within, last())
		}
	}
}

// leased reports whether the auction leased the job: a fast job may have
// finished by the time its post returns.
func leased(v api.JobView) bool {
	return (v.State == terms.JobLeased || v.State == terms.JobFinished) && v.Lease != nil
}

func fastConfig(cfg config.Config) config.Config {
	cfg.Provider.HeartbeatInterval = 300 * time.Millisecond
	cfg.Provider.PreemptGrace = 2 * time.Second
	return cfg
}

func withPolicy(cfg config.Config, f func(*terms.Policy)) config.Config {
	f(&cfg.Provider.Policy)
	return cfg
}

// waitAdvertised waits until every provider's record is discoverable and
// from knows each provider's subscription to every topic the provider
// hears calls on, so that a call published by from reaches it.
func waitAdvertised(t *testing.T, from *testNode, ns ...*testNode) {
	t.Helper()
	eventuallyProviders(t, from.Daemon, terms.Query{}, idsOf(ns...), 30*time.Second)
	for _, n := range ns {
		waitSubscribed(t, from.Daemon, n.ID(), n.Advertised())
	}
}

// waitSubscribed waits until from has seen provider id subscribe to each
// call topic of its capability c.
func waitSubscribed(t *testing.T, from *Daemon, id peer.ID, c *terms.Capability) {
	t.Helper()
	if c == nil {
		t.Fatalf("provider %s has advertised no capability", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, name := range auction.ProviderTopics(c) {
		topic, err := from.net.Topic(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p2p.WaitTopicPeer(ctx, topic, from.net.Links, func(p peer.ID) bool { return p == id }); err != nil {
			t.Fatalf("%s never saw provider %s subscribe to %s: %v", from.ID(), id, name, err)
		}
	}
}

// TestAuctionOnTestnet: on a loopback network of 9 providers with varied
// prices, GPUs, regions and policies, only eligible providers bid and the
// job goes to the provider the scoring rule picks.
func TestAuctionOnTestnet(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	later := terms.Window{From: now.Add(2 * time.Hour).Format("15:04"), To: now.Add(3 * time.Hour).Format("15:04")}
	// The renter asks every provider whose hardware fits (six): a sampled
	// call (max_bidders) would ask four, and might leave out an eligible
	// one, which is not what this test is about.
	rc := renterConfig()
	rc.MaxBidders = -1
	// Nor may a quiet spell after the first bids close the window before
	// the last eligible one's bid, which a loaded machine delays: the
	// window waits for every provider asked (or its end).
	rc.BidQuietClose = -1
	boot, ns := startNetWith(t, rc,
		providerConfig("eu-west", 2.0, h100),                                // 0: over the price cap
		providerConfig("eu-central", 1.1, a100),                             // 1: eligible
		providerConfig("eu-west", 1.3, a100b),                               // 2: eligible
		providerConfig("us-east", 0.9, a100b),                               // 3: cheapest, but not in the EU
		providerConfig("eu-north", 0.4, r4090),                              // 4: too little VRAM
		providerConfig("eu-west", 1.6, terms.GPU{Model: "L40", VRAMGB: 48}), // 5: over the cap
		withPolicy(providerConfig("eu-central", 1.0, a100), func(p *terms.Policy) { p.Availability = []terms.Window{later} }), // 6: outside its window
		providerConfig("ap-south", 0.8, h100), // 7: not in the EU
		withPolicy(providerConfig("eu-south", 1.05, a100), func(p *terms.Policy) { p.AcceptPreemptible = false }), // 8: eligible, cheapest in the EU
	)
	waitAdvertised(t, boot, ns...)
	job := shJob(terms.Silver, 1.5, "echo hi")
	job.Region, job.MinVRAMGB = "eu", 40
	v := post(t, boot, job)
	if !leased(v) {
		t.Fatalf("job not leased: %s %v", v.State, v.Reasons)
	}
	var bidders []string
	var cands []terms.Candidate
	for _, r := range v.Bids {
		bidders = append(bidders, r.Bid.Provider)
		cands = append(cands, r.Candidate)
	}
	if want := idsOf(ns[1], ns[2], ns[8]); !slices.Equal(slices.Sorted(slices.Values(bidders)), want) {
		t.Fatalf("bidders %v, want exactly the eligible %v", bidders, want)
	}
	ranked := auction.Rank(&v.Job, cands)
	if v.Winner != ranked[0].Bid.Provider || v.Winner != ns[8].ID().String() {
		t.Fatalf("winner %s; scoring rule picks %s (expected the cheapest eligible, %s)", v.Winner, ranked[0].Bid.Provider, ns[8].ID())
	}
	if v.Lease.Provider != ns[8].ID().String() || v.Lease.Price > job.MaxPrice {
		t.Fatalf("lease %+v breaks the price cap", v.Lease)
	}
	// The provider sees the lease and its occupancy at once.
	st := ns[8].market.provider.Stats()
	if st.Won != 1 || len(st.Leases) != 1 {
		t.Fatalf("winner's stats: %+v", st)
	}
	for _, i := range []int{0, 3, 4, 5, 6, 7} {
		if s := ns[i].market.provider.Stats(); s.Bids != 0 {
			t.Errorf("ineligible provider %d bid %d times", i, s.Bids)
		}
	}
}

// TestFailoverToRunnerUp: the winner bids and is then unreachable for its
// award; the lease goes to the runner-up. The cheap provider stops taking
// awards (its award protocol is gone) before the job is posted, so the
// order is fixed whatever the bid window does: it still hears the call
// and bids (the cheapest, so it is awarded first), and its award fails.
func TestFailoverToRunnerUp(t *testing.T) {
	boot, ns := startNet(t, providerConfig("eu-west", 0.5, a100), providerConfig("eu-west", 0.9, a100))
	waitAdvertised(t, boot, ns...)
	ns[0].net.Host.RemoveStreamHandler(wire.ProtoAward)
	job := shJob(terms.Silver, 2, "echo hi")
	v := post(t, boot, job)
	if !leased(v) || v.Winner != ns[1].ID().String() {
		t.Fatalf("state %s winner %s, want the runner-up %s (attempts %+v)", v.State, v.Winner, ns[1].ID(), v.Attempts)
	}
	if len(v.Attempts) < 2 || v.Attempts[0].Provider != ns[0].ID().String() || v.Attempts[0].Result == "confirmed" {
		t.Fatalf("award attempts %+v: first should have failed on the unreachable winner", v.Attempts)
	}
	if st := ns[0].market.provider.Stats(); st.Bids == 0 || st.Won != 0 {
		t.Fatalf("the cheap provider's stats %+v: it should have bid and won nothing", st)
	}
}

// TestJobRunsEndToEnd: a job runs on the winner, the renter sees its output
// and results, both sides hold the two-party receipt in their ledgers, the
// renter's own book lifts the provider, and a third node that only heard
// the gossip counts the receipt but, the renter being new to it, does not
// lift the provider above the prior.
func TestJobRunsEndToEnd(t *testing.T) {
	t.Parallel()
	third := renterConfig()
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), third)
	prov, observer := ns[0], ns[1]
	waitAdvertised(t, boot, prov)
	before := observer.market.book.Score(prov.ID().String())

	job := shJob(terms.Silver, 2, `echo 42; mkdir -p out; echo result > out/r.txt; sleep 1`)
	job.Run.Outputs = "out"
	v := post(t, boot, job)
	if v.State != terms.JobLeased {
		t.Fatalf("not leased: %v", v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	if v.Run != terms.RunSucceeded || v.ExitCode == nil || *v.ExitCode != 0 {
		t.Fatalf("run %s exit %v detail %q", v.Run, v.ExitCode, v.Detail)
	}
	if v.State != terms.JobFinished || v.Lease.State != terms.RunSucceeded {
		t.Fatalf("a finished job's state is %s, its lease's %s", v.State, v.Lease.State)
	}
	// Logs.
	resp, err := api.NewClient(boot.dir).Raw(context.Background(), http.MethodGet, "/jobs/"+v.Job.ID+"/logs", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(logs)) != "42" {
		t.Fatalf("logs %q, want 42", logs)
	}
	// Outputs, with their checksums.
	resp, err = api.NewClient(boot.dir).Raw(context.Background(), http.MethodGet, "/jobs/"+v.Job.ID+"/outputs", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var man []terms.OutputFile
	if err := json.Unmarshal([]byte(resp.Header.Get("X-Gpumesh-Manifest")), &man); err != nil || len(man) != 1 || man[0].Path != "r.txt" {
		t.Fatalf("manifest %v (%v)", man, err)
	}
	tr := tar.NewReader(resp.Body)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "r.txt" {
		t.Fatalf("tar: %v %v", hdr, err)
	}
	body, _ := io.ReadAll(tr)
	resp.Body.Close()
	if string(body) != "result\n" {
		t.Fatalf("output %q", body)
	}
	// Receipt in both ledgers, amounts matching.
	r := v.Receipt
	if r.Renter != boot.ID().String() || r.Provider != prov.ID().String() || r.Outcome != "succeeded" || r.Amount <= 0 {
		t.Fatalf("receipt %+v", r)
	}
	// Paid on evidence: the renter fetched the log over the logs stream
	// and found the digest the provider reported and signed.
	if r.LogDigest == "" || r.LogDigest != v.LogDigest || v.LogBytes == 0 || !strings.HasPrefix(v.Evidence, "log verified") {
		t.Fatalf("receipt's log digest %q, reported %q (%d bytes), evidence %q", r.LogDigest, v.LogDigest, v.LogBytes, v.Evidence)
	}
	// The provider records the receipt once the renter's countersignature
	// reaches it, just after the renter recorded it: wait for that.
	var owed, earned, rr, pr []record.Entry
	waitChange(t, 10*time.Second, "the provider records the receipt", func() bool {
		owed, _ = boot.db.List(record.Filter{Kind: record.KindPaymentOwed, LeaseID: r.LeaseID})
		earned, _ = prov.db.List(record.Filter{Kind: record.KindPaymentEarned, LeaseID: r.LeaseID})
		rr, _ = boot.db.List(record.Filter{Kind: record.KindReceipt, LeaseID: r.LeaseID})
		pr, _ = prov.db.List(record.Filter{Kind: record.KindReceipt, LeaseID: r.LeaseID})
		return len(pr) > 0 && len(earned) > 0
	}, prov.market.receipts.Changed)
	if len(owed) != 1 || len(earned) != 1 || len(rr) != 1 || len(pr) != 1 || owed[0].Amount != r.Amount || earned[0].Amount != r.Amount {
		t.Fatalf("ledgers: owed %v earned %v receipts %d/%d", owed, earned, len(rr), len(pr))
	}
	for _, n := range []*testNode{boot, prov} {
		if _, err := n.db.Verify(); err != nil {
			t.Fatalf("ledger verify: %v", err)
		}
	}
	if bytesOf(rr[0].Data) != bytesOf(pr[0].Data) {
		t.Fatal("the two ledgers hold different receipts")
	}
	// The observer only heard the gossip.
	waitChange(t, 15*time.Second, "the observer verifies the gossiped receipt", func() bool {
		return observer.market.book.Stats(prov.ID().String()).Receipts == 1
	}, observer.market.receipts.Changed)
	if after := observer.market.book.Stats(prov.ID().String()); after.Weight <= 0 || math.Abs(after.Score-before) > 1e-9 {
		t.Fatalf("observer's view of the provider after a newcomer's receipt: %.3f -> %+v, want counted at %.3f", before, after, before)
	}
	if own := boot.market.book.Score(prov.ID().String()); own <= attest.Prior {
		t.Fatalf("the renter's own book scores the provider %.3f after its lease succeeded: not above the prior", own)
	}
	if st := prov.market.provider.Stats(); st.EarningsUSD <= 0 || st.Won != 1 {
		t.Fatalf("provider stats %+v", st)
	}
}

func bytesOf(b []byte) string { return string(b) }

// TestFailedJobIsReportedFailed: a non-zero exit is a failed run with its
// exit code, and still settles with a receipt for the time used.
func TestFailedJobIsReportedFailed(t *testing.T) {
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns...)
	v := post(t, boot, shJob(terms.Silver, 2, "echo oops >&2; exit 3"))
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	if v.Run != terms.RunFailed || v.ExitCode == nil || *v.ExitCode != 3 || v.Receipt.Outcome != "failed" {
		t.Fatalf("run %s exit %v outcome %s", v.Run, v.ExitCode, v.Receipt.Outcome)
	}
}

// TestJobUnderStrictUmask: a provider daemon run with umask 077 (a service
// unit's UMask=0077, or testnet/up.sh) still gives its sandboxed jobs a work
// dir their uid can reach.
func TestJobUnderStrictUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns[0])
	v := post(t, boot, shJob(terms.Silver, 2, `echo reached`))
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("job under umask 077: run %s detail %q", v.Run, v.Detail)
	}
}
