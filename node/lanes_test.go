package node

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestGoldPreemptsBronze: a bronze job runs on the cheap H100; a gold job
// that needs that H100 arrives; the bronze job is stopped within the grace
// period, re-leased elsewhere and finishes; the gold job runs; the bronze
// renter pays only for the time the first lease actually ran.
func TestGoldPreemptsBronze(t *testing.T) {
	t.Parallel()
	a := fastConfig(providerConfig("eu-west", 0.5, h100))
	a.Provider.Policy.AllowPreemption = true
	b := fastConfig(providerConfig("eu-west", 0.8, a100))
	// Both bids count: a quiet spell after the A100's must not close the
	// bronze job's window before the cheaper H100's, which a loaded
	// machine delays.
	rc := renterConfig()
	rc.BidQuietClose = -1
	boot, ns := startNetWith(t, rc, a, b)
	pa, pb := ns[0], ns[1]
	waitAdvertised(t, boot, ns...)

	bronze := shJob(terms.Bronze, 1.0, `trap 'echo checkpoint; exit 0' TERM; echo started; sleep 12 & wait; echo done`)
	bronze.Duration = time.Minute
	// The renter wants it running within two minutes, so when it is requeued
	// the H100 node (busy with gold for 10 minutes) cannot take it back.
	bronze.Deadline = time.Now().Add(2 * time.Minute)
	bv := post(t, boot, bronze)
	if bv.State != terms.JobLeased || bv.Winner != pa.ID().String() {
		t.Fatalf("bronze job should go to the cheaper H100 node: %s winner %s", bv.State, bv.Winner)
	}
	waitJob(t, boot, bv.Job.ID, 20*time.Second, "bronze running", func(v api.JobView) bool { return v.Run == terms.RunRunning })

	gold := shJob(terms.Gold, 5, "sleep 6; echo gold-done")
	gold.GPUModels = []string{"H100"}
	gv := post(t, boot, gold)
	goldLeased := time.Now()
	if gv.State != terms.JobLeased || gv.Winner != pa.ID().String() {
		t.Fatalf("gold job not leased on the H100 node: %s %v", gv.State, gv.Reasons)
	}
	gv = waitJob(t, boot, gv.Job.ID, 30*time.Second, "gold settled", func(v api.JobView) bool { return v.Receipt != nil })
	if gv.Run != terms.RunSucceeded {
		t.Fatalf("gold run %s (%s)", gv.Run, gv.Detail)
	}
	bv = waitJob(t, boot, bv.Job.ID, 60*time.Second, "bronze finished on its second lease", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Lease.ID != v.History[0].Lease.ID && v.Receipt != nil && v.Run.Terminal()
	})
	first := bv.History[0]
	if first.Run != terms.RunPreempted || first.Lease.Provider != pa.ID().String() || !first.Receipt {
		t.Fatalf("first bronze lease: %+v", first)
	}
	grace := a.Provider.PreemptGrace
	if stopped := first.Ended.Sub(goldLeased); stopped > grace+time.Second {
		t.Fatalf("bronze stopped %s after the gold lease, grace is %s", stopped, grace)
	}
	if bv.Lease.Provider != pb.ID().String() || bv.Job.Attempt != 1 || bv.Run != terms.RunSucceeded {
		t.Fatalf("requeued bronze: provider %s attempt %d run %s (%s)", bv.Lease.Provider, bv.Job.Attempt, bv.Run, bv.Detail)
	}
	// Billing: the preempted lease is paid for the time it ran, not its span.
	used := first.Ended.Sub(first.Started)
	want := used.Hours() * first.Lease.Price * float64(first.Lease.GPUCount)
	if used <= 0 || used > 30*time.Second || absf(first.CostUSD-want) > 1e-9 {
		t.Fatalf("preempted lease billed %.9f for %s used, want %.9f", first.CostUSD, used, want)
	}
	if bv.CostUSD <= first.CostUSD {
		t.Fatalf("total bronze cost %.9f should add the second lease to the first %.9f", bv.CostUSD, first.CostUSD)
	}
}

func absf(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestDroppedHeartbeatsCostReputation: a provider that drops half its
// heartbeats ends with a lower score than an honest one and loses the next
// auction at equal price.
func TestDroppedHeartbeatsCostReputation(t *testing.T) {
	t.Parallel()
	honest := fastConfig(providerConfig("eu-west", 1.0, a100))
	flaky := fastConfig(providerConfig("eu-west", 1.0, l4))
	root := t.TempDir()
	rcfg := fastConfig(renterConfig())
	boot := startNode(t, root+"/boot", rcfg, nil)
	t.Cleanup(func() { boot.Close() })
	h := startNode(t, root+"/honest", honest, boot.Daemon)
	t.Cleanup(func() { h.Close() })
	flaky.Bootstrap = boot.Addrs()
	fd, err := Start(t.Context(), Options{DataDir: root + "/flaky", Config: flaky, Log: testLogger(t),
		DropHeartbeats: func(seq uint64) bool { return seq%2 == 0 }})
	if err != nil {
		t.Fatal(err)
	}
	f := &testNode{Daemon: fd, dir: root + "/flaky", cfg: flaky}
	t.Cleanup(func() { f.Close() })
	waitAdvertised(t, boot, h, f)

	run := func(model string) api.JobView {
		j := shJob(terms.Silver, 2, "sleep 3")
		j.GPUModels = []string{model}
		v := post(t, boot, j)
		return waitJob(t, boot, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	}
	hv, fv := run("A100"), run("L4")
	if hv.Receipt.Heartbeats.Coverage <= fv.Receipt.Heartbeats.Coverage+0.2 {
		t.Fatalf("coverage honest %.2f vs flaky %.2f", hv.Receipt.Heartbeats.Coverage, fv.Receipt.Heartbeats.Coverage)
	}
	book := boot.market.book
	if sh, sf := book.Score(h.ID().String()), book.Score(f.ID().String()); sh <= sf {
		t.Fatalf("honest score %.4f not above flaky %.4f", sh, sf)
	}
	// Same price, both eligible: the honest provider wins.
	j := shJob(terms.Silver, 2, "true")
	j.GPUModels = []string{"A100", "L4"}
	v := post(t, boot, j)
	if v.Winner != h.ID().String() || len(v.Bids) != 2 || v.Bids[0].Bid.Price != v.Bids[1].Bid.Price {
		t.Fatalf("winner %s (honest %s), bids %+v", v.Winner, h.ID(), v.Bids)
	}
}

// TestConcurrentJobsNoOverbooking: 50 jobs posted at once against 6 GPUs:
// no provider ever holds more leases at once than it has GPUs, and every job
// is leased, or queued or unplaceable with a reason.
func TestConcurrentJobsNoOverbooking(t *testing.T) {
	boot, ns := startNet(t,
		providerConfig("eu-west", 0.5, a100, a100),
		providerConfig("eu-west", 0.7, a100, a100),
		providerConfig("eu-central", 0.9, a100b, a100b),
	)
	waitAdvertised(t, boot, ns...)
	const jobs = 50
	views := make(chan api.JobView, jobs)
	for i := 0; i < jobs; i++ {
		go func() {
			j := shJob(terms.Silver, 2, "sleep 30")
			j.Duration = time.Hour
			// The renter runs up to 16 of its auctions at once, so they
			// overlap whatever the window; a longer one (3 s) only made
			// each round of them last longer (12.7 s against 4.7).
			j.BidWindow = time.Second
			views <- post(t, boot, j)
		}()
	}
	leased := 0
	for i := 0; i < jobs; i++ {
		v := <-views
		switch v.State {
		case terms.JobLeased:
			leased++
		case terms.JobUnplaceable, terms.JobQueued:
			// Queued: it waits on the renter for capacity, saying why.
			if len(v.Reasons) == 0 {
				t.Errorf("job %s %s without a reason", v.Job.ID, v.State)
			}
		default:
			t.Errorf("job %s ended the auction %s", v.Job.ID, v.State)
		}
	}
	booked := 0
	for _, n := range ns {
		cal := n.market.cal
		bs := cal.Bookings()
		booked += len(bs)
		for _, b := range bs {
			if use := len(overlapping(bs, b.Start)); use > cal.Capacity() {
				t.Fatalf("provider %s overbooked: %d leases at %s, %d GPUs", n.ID(), use, b.Start, cal.Capacity())
			}
		}
	}
	if leased == 0 || leased > 6 || booked < leased {
		t.Fatalf("%d jobs leased, %d bookings on 6 GPUs", leased, booked)
	}
}

func overlapping(bs []auction.Booking, at time.Time) []auction.Booking {
	var out []auction.Booking
	for _, b := range bs {
		if !at.Before(b.Start) && at.Before(b.End) {
			out = append(out, b)
		}
	}
	return out
}
