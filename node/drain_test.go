package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestDrainFinishesShortHandsBackLong: a provider drained with a grace
// runs its lease that ends within the grace to its end and hands the
// longer one back at once; the renter requeues that (non-preemptible,
// silver) job as a preemption on the other provider. While draining the
// provider declines new calls with the reason "draining"; undrained, it
// bids again.
func TestDrainFinishesShortHandsBackLong(t *testing.T) {
	t.Parallel()
	a := fastConfig(providerConfig("eu-west", 0.5, h100, h100))
	b := fastConfig(providerConfig("eu-west", 0.8, a100))
	boot, ns := startNet(t, a, b)
	pa, pb := ns[0], ns[1]
	waitAdvertised(t, boot, ns...)

	short := shJob(terms.Silver, 2, "sleep 3; echo short-done")
	short.Duration = 10 * time.Second
	sv := post(t, boot, short)
	long := shJob(terms.Silver, 2, "echo long-started; sleep 600")
	lv := post(t, boot, long)
	for _, v := range []api.JobView{sv, lv} {
		if v.State != terms.JobLeased || v.Winner != pa.ID().String() {
			t.Fatalf("job %s should be leased on the cheaper provider: %s winner %s %v", v.Job.ID, v.State, v.Winner, v.Reasons)
		}
	}
	waitJob(t, boot, lv.Job.ID, 20*time.Second, "long running", func(v api.JobView) bool { return v.Run == terms.RunRunning })

	cl := api.NewClient(pa.dir)
	dv, err := cl.Drain(context.Background(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]string{}
	for _, l := range dv.Leases {
		actions[l.JobID] = l.Action
	}
	if !dv.Draining || actions[sv.Job.ID] != api.DrainFinish || actions[lv.Job.ID] != api.DrainHandBack {
		t.Fatalf("drain plan %+v, want the short lease to finish and the long one handed back", dv)
	}

	lv = waitJob(t, boot, lv.Job.ID, 30*time.Second, "long job requeued on the other provider", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Lease.Provider == pb.ID().String() && v.Run == terms.RunRunning
	})
	first := lv.History[0]
	if first.Run != terms.RunPreempted || first.Detail != terms.HandBackDetail || first.Fault != terms.FaultNone ||
		first.Lease.Provider != pa.ID().String() {
		t.Fatalf("handed-back lease: run %s detail %q fault %q provider %s", first.Run, first.Detail, first.Fault, first.Lease.Provider)
	}
	if lv.Job.Attempt != 1 || lv.Job.Tier != terms.Silver {
		t.Fatalf("requeued job: attempt %d tier %s", lv.Job.Attempt, lv.Job.Tier)
	}
	sv = waitJob(t, boot, sv.Job.ID, 30*time.Second, "short job settled", func(v api.JobView) bool { return v.Receipt != nil })
	if sv.Run != terms.RunSucceeded || sv.Lease.Provider != pa.ID().String() || len(sv.History) != 0 {
		t.Fatalf("short job: run %s (%s) on %s, %d earlier attempts", sv.Run, sv.Detail, sv.Lease.Provider, len(sv.History))
	}
	// The supervisor's own wait: it looks again at each change of its
	// leases and of the drain. The API then says the same.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	dv, err = pa.market.sup.DrainWait(wctx)
	wcancel()
	if err != nil {
		t.Fatalf("%v: %+v", err, dv)
	}
	if dv, err = cl.DrainStatus(context.Background()); err != nil || !dv.Done {
		t.Fatalf("drain status after the drain: %+v %v", dv, err)
	}
	// The drain's long poll answers a done drain at once, and refuses a
	// wait past its bound in one line.
	start := time.Now()
	if dv, err = cl.DrainChange(context.Background(), time.Minute); err != nil || !dv.Done || !dv.Draining || time.Since(start) > 30*time.Second {
		t.Fatalf("drain long poll after the drain: %+v %v after %v", dv, err, time.Since(start))
	}
	if _, err := cl.DrainChange(context.Background(), 2*time.Minute); err == nil || !strings.Contains(err.Error(), "wait: want a duration") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a drain long poll of 2m: %v", err)
	}
	st, err := cl.ProviderStats(context.Background())
	if err != nil || !st.Draining || st.Drain == nil || !st.Drain.Done {
		t.Fatalf("provider stats while drained: draining %v drain %+v err %v", st.Draining, st.Drain, err)
	}
	if !pa.Status().Draining {
		t.Fatal("status does not say the provider is draining")
	}

	// (c) A call only the drained provider could take is declined with
	// the reason "draining".
	h := shJob(terms.Silver, 2, "true")
	h.GPUModels = []string{"H100"}
	hv := post(t, boot, h)
	if hv.State == terms.JobLeased {
		t.Fatalf("a draining provider took a job: winner %s", hv.Winner)
	}
	bids, err := api.NewClient(boot.dir).Bids(context.Background(), hv.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bids.Declines[auction.KindDraining] != 1 {
		t.Fatalf("declines %v, want one %q", bids.Declines, auction.KindDraining)
	}

	if _, err := cl.Undrain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := cl.ProviderStats(context.Background()); st.Draining || pa.Status().Draining {
		t.Fatal("still draining after undrain")
	}
	h2 := shJob(terms.Silver, 2, "true")
	h2.GPUModels = []string{"H100"}
	if v := post(t, boot, h2); !leased(v) || v.Winner != pa.ID().String() {
		t.Fatalf("undrained provider did not take the job: %s winner %s %v", v.State, v.Winner, v.Reasons)
	}
}

// TestSigtermDrainsAndKeepsReservations: a provider daemon with a short
// lease, a long one and a confirmed reservation that starts later is
// stopped with SIGTERM. It takes no new work, runs the short lease (which
// ends within provider.drain_grace) to its end there, hands the long one
// back at once (its renter requeues it on another provider), keeps the
// reservation pending and stops. After the restart its calendar holds the
// reservation again (a new job is offered only the time after it) and the
// reserved job runs there at its start.
func TestSigtermDrainsAndKeepsReservations(t *testing.T) {
	t.Parallel()
	bin := buildDaemon(t)
	root := t.TempDir()
	boot := startNode(t, root+"/boot", fastConfig(renterConfig()), nil)
	t.Cleanup(func() { boot.Close() })
	dir := filepath.Join(root, "prov")
	cfg := fastConfig(providerConfig("eu-west", 1.0, a100, a100))
	cfg.Provider.DrainGrace = time.Minute
	proc, st := startProviderProcessWith(t, bin, dir, boot, cfg)
	other := startNode(t, root+"/other", fastConfig(providerConfig("eu-west", 1.5, h100)), boot.Daemon)
	t.Cleanup(func() { other.Close() })
	eventuallyProviders(t, boot.Daemon, terms.Query{}, sortedIDs(st.PeerID, other.ID().String()), 30*time.Second)
	waitSubscribed(t, boot.Daemon, other.ID(), other.Advertised())

	// The long job counts (for 100 s) with its counter in its checkpoint
	// dir; it saves no periodic checkpoint: only the one the hand-back
	// takes as it stops.
	long := shJob(terms.Silver, 2, counterScript(400))
	lv := post(t, boot, long)
	short := shJob(terms.Silver, 2, "sleep 8; echo short-done")
	short.GPUModels, short.Duration = []string{"A100"}, 40*time.Second
	sv := post(t, boot, short)
	reserved := shJob(terms.Silver, 2, "echo reserved-ran")
	reserved.GPUModels, reserved.Duration = []string{"A100"}, 5*time.Second
	rv := post(t, boot, reserved)
	for _, v := range []api.JobView{lv, sv, rv} {
		if v.State != terms.JobLeased || v.Lease.Provider != st.PeerID {
			t.Fatalf("job %s not leased on the cheaper provider: %s %v", v.Job.ID, v.State, v.Reasons)
		}
	}
	if !rv.Lease.Start.After(time.Now().Add(25 * time.Second)) {
		t.Fatalf("the third lease should be a reservation after the short one: starts %s", rv.Lease.Start)
	}
	waitJob(t, boot, sv.Job.ID, 20*time.Second, "short running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	jobsDir := filepath.Join(dir, "jobs")
	waitLogIn(t, jobsDir, lv.Lease.ID, regexp.MustCompile(`(?m)^step 2$`), 20*time.Second)

	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { _, err := proc.Process.Wait(); exited <- err }()
	select {
	case <-exited:
	case <-time.After(40 * time.Second):
		t.Fatal("the provider did not stop within 40s of SIGTERM")
	}
	lv = waitJob(t, boot, lv.Job.ID, 30*time.Second, "long job requeued on the other provider", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Lease.Provider == other.ID().String() && v.Run == terms.RunRunning
	})
	h := lv.History[0]
	if h.Run != terms.RunPreempted || h.Detail != terms.HandBackDetail || h.Lease.Provider != st.PeerID {
		t.Fatalf("long job's first lease: run %s detail %q provider %s", h.Run, h.Detail, h.Lease.Provider)
	}
	// It resumes there from the checkpoint the hand-back took as it
	// stopped the job, which the stopping daemon delivered before exiting.
	saved := waitLogIn(t, jobsDir, h.Lease.ID, regexp.MustCompile(`stopped, saved (\d+)\n`), time.Second)[1]
	if h.Checkpoint == nil || h.Checkpoint.Reason != terms.CheckpointStopped || lv.Restored == nil || lv.Restored.Artifact != h.Checkpoint.Artifact {
		t.Fatalf("long job: first lease's checkpoint %+v, second restored %+v", h.Checkpoint, lv.Restored)
	}
	n, _ := strconv.Atoi(saved)
	if n < 2 || readCheckpointCount(t, boot, h.Checkpoint.Artifact) != saved {
		t.Fatalf("the hand-back's checkpoint should hold the count %s the job saved (at least 2)", saved)
	}
	resumed := waitLog(t, other, lv.Lease.ID, regexp.MustCompile(`(?m)^(resumed from \d+|fresh start)$`), 10*time.Second)[1]
	if resumed != "resumed from "+saved {
		t.Fatalf("long job's second attempt: %q, want it to resume from %s", resumed, saved)
	}
	waitLog(t, other, lv.Lease.ID, regexp.MustCompile(`(?m)^step `+strconv.Itoa(n+1)+`$`), 10*time.Second)
	t.Logf("long job handed back at count %d, resumed from it on the other provider", n)
	sv = waitJob(t, boot, sv.Job.ID, 10*time.Second, "short job succeeded", func(v api.JobView) bool { return v.Run.Terminal() })
	if sv.Run != terms.RunSucceeded || len(sv.History) != 0 {
		t.Fatalf("short job: run %s (%s), %d earlier attempts", sv.Run, sv.Detail, len(sv.History))
	}
	if v, _ := boot.market.tracker.View(rv.Job.ID); v.Run.Terminal() || v.Lease == nil || v.Lease.ID != rv.Lease.ID {
		t.Fatalf("the reservation ended with its provider's stop: run %s (%s)", v.Run, v.Detail)
	}

	startDaemonProcess(t, bin, dir)
	pid, _ := peer.Decode(st.PeerID)
	var adv api.StatusInfo
	deadline := time.Now().Add(30 * time.Second)
	for adv.Advertised == nil || !adv.Advertised.IssuedAt.After(st.Advertised.IssuedAt) {
		if time.Now().After(deadline) {
			t.Fatal("restarted provider never advertised")
		}
		time.Sleep(200 * time.Millisecond) // a real daemon process restarting: nothing here is notified
		_ = api.NewClient(dir).Do(context.Background(), "GET", "/status", nil, nil, &adv)
	}
	waitSubscribed(t, boot.Daemon, pid, adv.Advertised)
	if time.Now().After(rv.Lease.Start) {
		t.Fatalf("restart took until after the reservation's start %s: the test cannot check the calendar", rv.Lease.Start)
	}
	// The rebooked calendar offers a job that needs both A100s only the
	// time after the reservation.
	later := shJob(terms.Silver, 2, "echo later")
	later.GPUModels, later.GPUCount, later.Duration = []string{"A100"}, 2, time.Minute
	lj := post(t, boot, later)
	if lj.State != terms.JobLeased || lj.Lease.Provider != st.PeerID {
		t.Fatalf("later job not leased: %s %v", lj.State, lj.Reasons)
	}
	// It never overlaps the reservation. Both may move earlier (the GPUs
	// are free now: the reservation first, the later job behind it), and
	// the reservation, once it ran, holds its GPUs only until its run
	// ended (a few ms for an echo: the later job then moves up to that
	// end). The renter hears of each move and end on its own, so the
	// check waits a moment for the records to settle; a calendar that
	// forgot the reservation booked the later job over it, and that stays.
	var rcur, lcur api.JobView
	waitRecords(t, boot, 5*time.Second, "the later job off the reservation", func() bool {
		rcur, _ = boot.market.tracker.View(rv.Job.ID)
		lcur, _ = boot.market.tracker.View(lj.Job.ID)
		r, l := rcur.Lease, lcur.Lease
		rEnd := r.End
		if rcur.Run.Terminal() && !rcur.Ended.IsZero() {
			rEnd = rcur.Ended
		}
		return !l.Start.Before(rEnd) || !r.Start.Before(l.End)
	}, func() string {
		return fmt.Sprintf("later job booked over [%s, %s), the reservation is at [%s, %s) (booked [%s, %s)), run %s ended %s: the restart forgot it",
			lcur.Lease.Start, lcur.Lease.End, rcur.Lease.Start, rcur.Lease.End, rv.Lease.Start, rv.Lease.End, rcur.Run, rcur.Ended)
	})

	rv = waitJob(t, boot, rv.Job.ID, time.Until(rv.Lease.Start)+30*time.Second, "reservation ran", func(v api.JobView) bool {
		return v.Receipt != nil
	})
	if rv.Run != terms.RunSucceeded || len(rv.History) != 0 || rv.Lease.Provider != st.PeerID {
		t.Fatalf("reservation: run %s (%s), %d earlier attempts, provider %s", rv.Run, rv.Detail, len(rv.History), rv.Lease.Provider)
	}
	if rv.Started.Before(rv.Lease.Start) {
		t.Fatalf("reservation started %s, before its start %s", rv.Started, rv.Lease.Start)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
	for _, want := range []string{"shutting down: draining", "reservation restored"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("the provider's log does not say %q", want)
		}
	}
}

func sortedIDs(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
