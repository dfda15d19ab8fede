package adversary

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestUnsolicitedCapacityNotice: a peer that never declined a queued job
// sends its renter a signed capacity notice naming it. The renter refuses
// it (renter.unsolicited_notice) and the job stays queued, not offered
// again.
func TestUnsolicitedCapacityNotice(t *testing.T) {
	t.Parallel()
	renter, _ := network(t, 1.0)
	p := adversary(t, renter)
	job := honestJob()
	job.GPUModels = []string{"B200"} // no provider has one: the job waits
	v, err := renter.api.PostJobRequest(context.Background(), api.PostJobRequest{Job: job, Queue: true})
	if err != nil {
		t.Fatalf("post --queue: %v", err)
	}
	if v.State != terms.JobQueued {
		t.Fatalf("job %s %v: want queued", v.State, v.Reasons)
	}
	before := counters(t, renter)
	a := UnsolicitedNotice(context.Background(), p, renter.ID(), []string{v.Job.ID})
	t.Logf("%s: %s", a.What, orAccepted(a.Err))
	if a.Err == "" || !strings.Contains(a.Err, "declined") {
		t.Fatalf("the renter took a capacity notice from a peer that never declined the job (answer %q)", a.Err)
	}
	d := diff(before, counters(t, renter))
	if d["renter.unsolicited_notice"] != 1 || d["renter.queued_woken"] != 0 || d["renter.capacity_notice"] != 0 {
		t.Fatalf("counted %v: want renter.unsolicited_notice once, no notice taken, nothing woken", d)
	}
	if got := view(t, renter, v.Job.ID); got.State != terms.JobQueued || got.Offers != v.Offers {
		t.Fatalf("job after the notice: %s, offered %d times (was %d)", got.State, got.Offers, v.Offers)
	}
}

// TestLeaseMoveIntoThePast: the provider of a pending lease tells its
// renter the lease moved to begin an hour ago. The renter refuses the move
// (renter.move_refused) and keeps the lease where it was; the same
// provider's move by one second earlier, which the rule allows, is taken
// (so the refusal was the move's).
func TestLeaseMoveIntoThePast(t *testing.T) {
	t.Parallel()
	renter, _ := network(t)
	fake := adversary(t, renter)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	type result struct {
		rep MoveReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := MoveIntoPast(ctx, fake, BidderConfig{}, time.Hour)
		done <- result{rep, err}
	}()
	job := honestJob()
	job.Run.Command = []string{"sleep", "3600"}
	v := postUntilLeased(t, renter, job, 20*time.Second)
	if v.Lease.Provider != fake.ID().String() {
		t.Fatalf("lease went to %s, not the hostile provider %s", v.Lease.Provider, fake.ID())
	}
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the hostile provider did not finish")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	rep := res.rep
	t.Logf("%s: %s; %s: %s", rep.Past.What, orAccepted(rep.Past.Err), rep.Control.What, orAccepted(rep.Control.Err))
	if rep.Past.Err == "" || !strings.Contains(rep.Past.Err, "in the past") {
		t.Errorf("the renter took a lease move an hour into the past (answer %q)", rep.Past.Err)
	}
	if rep.Control.Err != "" {
		t.Errorf("the renter refused a move by one second earlier, which the rule allows: %s", rep.Control.Err)
	}
	c := counters(t, renter)
	if c["renter.move_refused"] != 1 || c["renter.lease_moved"] != 1 {
		t.Errorf("renter.move_refused %d, renter.lease_moved %d: want 1 and 1", c["renter.move_refused"], c["renter.lease_moved"])
	}
	if got := view(t, renter, v.Job.ID); got.Lease == nil || !got.Lease.Start.Equal(rep.Lease.Start.Add(-time.Second)) {
		t.Errorf("renter's lease %+v; want it to start one second before %s", got.Lease, rep.Lease.Start)
	}
}

// TestAwardReusingAnotherRentersLeaseID: a hostile renter awards its own
// job to a provider under the lease id of another renter's settled lease
// there (lease ids are gossiped in receipts): while the provider runs
// (its auction remembers the confirm: provider.lease_id_in_use) and after
// it restarted (its memory of confirms gone: the lease's record, receipt
// and files refuse it, provider.lease_id_reused). Every such award is
// refused and the hostile job is not leased; the same hostile renter's
// award under its own fresh lease id is confirmed (so the refusal was the
// id's).
func TestAwardReusingAnotherRentersLeaseID(t *testing.T) {
	t.Parallel()
	renter, provs := network(t, 1.0)
	prov := provs[0]
	victim := settled(t, renter, postUntilLeased(t, renter, honestJob(), 20*time.Second))
	p := adversary(t, renter, prov)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	reuse := func(leaseID, counter string) ReuseReport {
		t.Helper()
		before := counters(t, prov)
		var rep ReuseReport
		// Until the hostile renter's call reaches the provider (its
		// gossip mesh forms meanwhile).
		waitFor(t, 20*time.Second, "an award reaching the provider", func() bool {
			var err error
			rep, err = ReuseLeaseID(ctx, p, leaseID, honestJob())
			if err != nil && !strings.Contains(err.Error(), "no award") {
				t.Fatal(err)
			}
			return rep.Awards > 0
		})
		if leaseID == "" {
			return rep
		}
		t.Logf("%d award(s) under lease id %s: %s", rep.Awards, leaseID, rep.Err)
		if rep.Job.Lease != nil || rep.Err == "" {
			t.Fatalf("the hostile renter's job was leased under another renter's lease id: %+v", rep.Job.Lease)
		}
		for _, a := range rep.Job.Attempts {
			if a.Result == "confirmed" {
				t.Fatalf("the provider confirmed an award reusing lease id %s: %+v", leaseID, a)
			}
		}
		if d := diff(before, counters(t, prov)); d[counter] == 0 {
			t.Fatalf("%s not counted (counted %v)", counter, d)
		}
		return rep
	}
	reuse(victim.Lease.ID, "provider.lease_id_in_use")

	// The provider restarts: its auction's memory of confirms is gone.
	cfg := providerConfig(1.0)
	cfg.Bootstrap = []string{renter.addr()}
	prov.Close()
	d, err := node.Start(context.Background(), node.Options{DataDir: prov.dir, Config: cfg, Log: testLog()})
	if err != nil {
		t.Fatalf("restart provider: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	prov = &daemon{Daemon: d, dir: prov.dir, api: api.NewClient(prov.dir)}
	if _, err := p.Connect(ctx, prov.addr()); err != nil {
		t.Fatal(err)
	}
	reuse(victim.Lease.ID, "provider.lease_id_reused")

	// Control: its own, fresh, lease id is confirmed.
	fresh := reuse("", "")
	if fresh.Job.Lease == nil || fresh.Job.Lease.Provider != prov.ID().String() {
		t.Fatalf("the hostile renter's award under its own lease id: %+v %s (attempts %+v)", fresh.Job.Lease, fresh.Err, fresh.Job.Attempts)
	}
}

// TestCallNamingAddrsNotDialled: a call from an owner that never joined
// the network names a loopback listener this test holds as the owner's
// address. The provider bids and, unable to reach the owner through
// anything it learned itself, gives the bid up (undelivered) without ever
// connecting to the listener.
func TestCallNamingAddrsNotDialled(t *testing.T) {
	t.Parallel()
	_, provs := network(t, 1.0)
	prov := provs[0]
	victim, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	addr := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", victim.Addr().(*net.TCPAddr).Port)
	p := adversary(t, prov)
	stats := func() terms.ProviderStats {
		s, err := prov.api.ProviderStats(context.Background())
		if err != nil {
			t.Fatalf("provider stats: %v", err)
		}
		return s.ProviderStats
	}
	before := stats()
	// Gossip may not carry a call while the mesh forms: a fresh call
	// (gossip drops a copy it has seen) every two seconds until the
	// provider has bid on one.
	var calls []string
	next := time.Now()
	waitFor(t, 30*time.Second, "the provider bidding on a call naming the listener", func() bool {
		if time.Now().After(next) {
			job, err := CallNamingAddrs(context.Background(), p, honestJob(), []string{addr})
			if err != nil {
				t.Fatalf("call naming %s: %v", addr, err)
			}
			calls = append(calls, job.ID)
			next = time.Now().Add(2 * time.Second)
		}
		return stats().Bids > before.Bids
	})
	// Its decision about the owner's address: the bid given up.
	waitFor(t, 20*time.Second, "the provider giving up the bid", func() bool { return stats().Undelivered > before.Undelivered })
	// A dial the provider made is in the listener's queue by now; the
	// deadline only bounds the look.
	_ = victim.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
	if c, err := victim.Accept(); err == nil {
		c.Close()
		t.Fatalf("the provider connected to %s, the address a stranger's call named", addr)
	} else if ne := (net.Error)(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatal(err)
	}
	after := stats()
	t.Logf("%d call(s) naming %s: %d bid(s), %d undelivered, no connection", len(calls), addr,
		after.Bids-before.Bids, after.Undelivered-before.Undelivered)
}
