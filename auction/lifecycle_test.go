package auction

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestGoldPreemptsBronzeEndToEnd(t *testing.T) {
	t.Parallel()
	p := pol(1)
	p.AllowPreemption = true
	m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, p, 0.9}})
	box := m.provs[0]
	var mu sync.Mutex
	var evictions []string
	box.p.cfg.Runtime = runtimeHooks{lease: func(l terms.Lease, j terms.Job, preempts []string) {
		mu.Lock()
		evictions = append(evictions, preempts...)
		mu.Unlock()
	}}
	r, _ := m.renter(t, RenterConfig{})
	bronze := euJob(m.now())
	bronze.Tier, bronze.Preemptible, bronze.GPUCount = terms.Bronze, true, 2
	bj, err := r.Post(context.Background(), bronze)
	if err != nil {
		t.Fatal(err)
	}
	bst, _ := r.Status(bj.ID)
	gold := euJob(m.now())
	gold.Tier, gold.GPUCount = terms.Gold, 1
	gj, err := r.Post(context.Background(), gold)
	if err != nil {
		t.Fatal(err)
	}
	gst, _ := r.Status(gj.ID)
	if gst.State != terms.JobLeased || len(evictions) != 1 || evictions[0] != bst.Lease.ID {
		t.Fatalf("gold %+v, evictions %v", gst, evictions)
	}
	if _, ok := box.cal.Booking(bst.Lease.ID); ok {
		t.Fatal("bronze booking not evicted")
	}
	checkCalendar(t, "box", box.cal)
	s := box.p.Stats()
	if len(s.Leases) != 2 || s.Leases[0].State != terms.RunPreempted || s.Leases[1].Tier != terms.Gold {
		t.Fatalf("leases %+v", s.Leases)
	}
	// The bronze lease earned only until the gold lease started; the gold
	// one its full hour.
	want := terms.LeaseCost(s.Leases[0].Price, 2, 0, s.Leases[0].End.Sub(s.Leases[0].Start)) + terms.LeaseCost(s.Leases[1].Price, 1, 0, s.Leases[1].End.Sub(s.Leases[1].Start))
	if math.Abs(s.EarningsUSD-want) > 1e-9 || !s.Leases[0].End.Equal(gst.Lease.Start) {
		t.Fatalf("earnings %v, want %v; leases %+v", s.EarningsUSD, want, s.Leases)
	}

	// The gold job finishes early; the preempted bronze job is requeued
	// and fits again. It saved a checkpoint of 10 minutes' work: the next
	// attempt restores it and runs for the rest. (Work no checkpoint saved
	// is lost, so the time the lease ran does not count.)
	if err := box.p.LeaseEnded(gst.Lease.ID, m.now(), terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	ck := terms.Checkpoint{JobID: bj.ID, LeaseID: bst.Lease.ID, Seq: 1, Artifact: strings.Repeat("ab", 32), Bytes: 10, Work: 10 * time.Minute,
		Reason: terms.CheckpointStopped, Provider: bst.Lease.Provider}
	rj, err := r.Requeue(context.Background(), bj.ID, RequeueOptions{Reason: "preempted by gold", Restore: []terms.Checkpoint{ck}})
	if err != nil {
		t.Fatal(err)
	}
	if rj.Attempt != 1 || rj.Duration != bronze.Duration-ck.Work || len(rj.Restore) != 1 || rj.Restore[0] != ck || rj.TotalDuration() != bronze.Duration {
		t.Fatalf("requeued %+v", rj)
	}
	st, _ := r.Status(bj.ID)
	if st.State != terms.JobLeased || st.Lease.Attempt != 1 || st.Lease.GPUCount != 2 || st.Lease.End.Sub(st.Lease.Start) != rj.Duration {
		t.Fatalf("requeued job %+v", st)
	}
	if !strings.Contains(strings.Join(st.Reasons, ";"), "preempted by gold") {
		t.Fatalf("reasons %v", st.Reasons)
	}
	// Requeued again without a checkpoint, it starts over: its whole
	// duration, not what the restored attempt had left.
	if err := box.p.LeaseEnded(st.Lease.ID, m.now(), terms.RunPreempted); err != nil {
		t.Fatal(err)
	}
	rj2, err := r.Requeue(context.Background(), bj.ID, RequeueOptions{Reason: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	if rj2.Attempt != 2 || rj2.Duration != bronze.Duration || len(rj2.Restore) != 0 {
		t.Fatalf("requeued without a checkpoint: %+v", rj2)
	}
}

func TestBronzeBackfillAndRequeue(t *testing.T) {
	t.Parallel()
	now := newClock()()
	p := pol(1)
	p.Reserved = []terms.Interval{{Start: now.Add(20 * time.Minute), End: now.Add(24 * time.Hour)}}
	m := newMarket(t, []provSpec{{"gap", "eu-west", "A100", 80, 2, p, 0.9}})
	r, _ := m.renter(t, RenterConfig{})
	j := euJob(m.now())
	j.Tier, j.Preemptible, j.GPUCount = terms.Bronze, true, 1
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(job.ID)
	if l := st.Lease; l == nil || !l.End.Equal(now.Add(20*time.Minute)) {
		t.Fatalf("bronze lease %+v", st.Lease)
	}
	// A silver job of an hour does not fit the gap.
	s := euJob(m.now())
	if _, err := r.Post(context.Background(), s); !errors.Is(err, ErrUnplaceable) {
		t.Fatalf("silver in a 20-minute gap: %v", err)
	}
	if k := m.provs[0].p.Stats().Ineligible["window"]; k != 1 {
		t.Fatalf("ineligible %v", m.provs[0].p.Stats().Ineligible)
	}
	if _, err := r.Requeue(context.Background(), "job-unknown", RequeueOptions{Reason: "x"}); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("requeue unknown: %v", err)
	}
}

func TestProviderAwardRules(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"p", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	prov := m.provs[0]
	owner := signtest.New(t)
	j := euJob(m.now())
	j.ID, j.Owner, j.CreatedAt = "job-a", owner.ID().String(), m.now()
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
	// The owner's transport collects the bid.
	ot := m.net.Join(peer.ID(owner.ID()))
	bids := make(chan terms.Bid, 4)
	ot.Handle(auctiontest.MemHandlers{OnBid: func(_ peer.ID, data []byte) error {
		b, err := terms.DecodeBid(data)
		if err == nil {
			bids <- b
		}
		return err
	}})
	call, _ := terms.EncodeCall(owner, j, "t")
	answer, err := prov.p.HandleCall(peer.ID(owner.ID()), call)
	if err != nil {
		t.Fatal(err)
	}
	// The same call again (another topic) is not answered twice.
	if again, err := prov.p.HandleCall(peer.ID(owner.ID()), call); err != nil || again != nil {
		t.Fatalf("the call again: %q, %v", again, err)
	}
	// The owner asked on the call's stream: the bid is its answer, not
	// a message of its own.
	b, err := terms.DecodeBid(answer)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case sent := <-bids:
		t.Fatalf("the bid was also sent: %+v", sent)
	default:
	}
	if s := prov.p.Stats(); s.Bids != 1 || s.Duplicates != 1 {
		t.Fatalf("stats %+v", s)
	}
	award := func(leaseID string, mut func(*terms.Award)) (terms.Confirm, error) {
		a := terms.Award{LeaseID: leaseID, JobID: j.ID, Renter: j.Owner, Provider: b.Provider, BidNonce: b.Nonce,
			Price: b.Price, Start: b.Start, End: b.End, GPUCount: j.GPUCount, Job: j, IssuedAt: m.now()}
		if mut != nil {
			mut(&a)
		}
		data, err := terms.EncodeAward(owner, a)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := prov.p.HandleAward(peer.ID(owner.ID()), data)
		if err != nil {
			return terms.Confirm{}, err
		}
		c, signer, err := terms.DecodeConfirm(reply)
		if err != nil || signer != prov.s.ID() || c.LeaseID != leaseID {
			t.Fatalf("confirm %+v from %s: %v", c, signer, err)
		}
		return c, nil
	}
	if c, _ := award("l-cheap", func(a *terms.Award) { a.Price /= 2 }); c.Accepted || !strings.Contains(c.Reason, "terms") {
		t.Fatalf("underpriced award: %+v", c)
	}
	// A whole-GPU bid is not awarded as a slice (billed a quarter).
	if c, _ := award("l-slice", func(a *terms.Award) { a.GPUFraction = 0.25 }); c.Accepted || !strings.Contains(c.Reason, "terms") {
		t.Fatalf("award of a slice for a whole-gpu bid: %+v", c)
	}
	if c, _ := award("l-nonce", func(a *terms.Award) { a.BidNonce = "bid-other" }); c.Accepted || c.Reason != "no such bid" {
		t.Fatalf("unknown nonce: %+v", c)
	}
	c1, err := award("l-1", nil)
	if err != nil || !c1.Accepted {
		t.Fatalf("award: %+v %v", c1, err)
	}
	// Idempotent for the same lease id; a second lease for the same bid is declined.
	if c, _ := award("l-1", nil); !c.Accepted {
		t.Fatal("repeated award not idempotent")
	}
	if c, _ := award("l-2", nil); c.Accepted {
		t.Fatal("one bid awarded twice")
	}
	if n := len(prov.cal.Bookings()); n != 1 {
		t.Fatalf("%d bookings", n)
	}
	// Ending early frees the calendar and cuts earnings.
	full := prov.p.Stats().EarningsUSD
	half := b.Start.Add(b.End.Sub(b.Start) / 2)
	if err := prov.p.LeaseEnded("l-1", half, terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	s := prov.p.Stats()
	if math.Abs(s.EarningsUSD-full/2) > 1e-9 || s.Leases[0].State != terms.RunSucceeded || prov.cal.FreeGPUs(half, b.End) != 2 {
		t.Fatalf("after early end: %+v", s)
	}
	if err := prov.p.LeaseEnded("l-1", b.Start, terms.RunFailed); err != nil || prov.p.Stats().EarningsUSD != s.EarningsUSD {
		t.Fatal("terminal lease changed")
	}
	if err := prov.p.LeaseEnded("nope", half, terms.RunFailed); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("unknown lease: %v", err)
	}
	// Own jobs are skipped.
	mine := j
	mine.ID, mine.Owner = "job-mine", prov.s.ID().String()
	call, _ = terms.EncodeCall(prov.s, mine, "t")
	if answer, err := prov.p.HandleCall(peer.ID(prov.s.ID()), call); err != nil || answer != nil || prov.p.Stats().Calls != 1 {
		t.Fatalf("own job: %q %v %+v", answer, err, prov.p.Stats())
	}
}

// TestProviderAnswersOnlyTheOwnerOnTheCallsStream: a call its owner sends
// is answered on its own stream; the same signed call relayed by another
// peer is not answered to that peer: the bid goes to the owner by itself
// (Transport.SendBid), so a peer replaying someone's call learns nothing
// and the owner is not cut off from the bid.
func TestProviderAnswersOnlyTheOwnerOnTheCallsStream(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"p", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	prov := m.provs[0]
	owner, relay := signtest.New(t), signtest.New(t)
	bids := make(chan terms.Bid, 4)
	m.net.Join(peer.ID(owner.ID())).Handle(auctiontest.MemHandlers{OnBid: func(_ peer.ID, data []byte) error {
		b, err := terms.DecodeBid(data)
		if err == nil {
			bids <- b
		}
		return err
	}})
	for i, from := range []peer.ID{peer.ID(relay.ID()), peer.ID(owner.ID())} {
		j := euJob(m.now())
		j.ID, j.Owner, j.CreatedAt = fmt.Sprintf("job-%d", i), owner.ID().String(), m.now()
		call, err := terms.EncodeCall(owner, j, "t")
		if err != nil {
			t.Fatal(err)
		}
		answer, err := prov.p.HandleCall(from, call)
		if err != nil {
			t.Fatal(err)
		}
		if from == peer.ID(relay.ID()) {
			if answer != nil {
				t.Fatalf("a relayed call was answered to the relay: %q", answer)
			}
			if b := <-bids; b.JobID != j.ID {
				t.Fatalf("the owner got a bid for %s, want %s", b.JobID, j.ID)
			}
			continue
		}
		if b, err := terms.DecodeBid(answer); err != nil || b.JobID != j.ID {
			t.Fatalf("the owner's own call answered %+v, %v", b, err)
		}
	}
	select {
	case b := <-bids:
		t.Fatalf("the owner's own call was also answered apart: %+v", b)
	default:
	}
}

func TestRenterCancelAndNoBids(t *testing.T) {
	t.Parallel()
	m := newMarket(t, nil)
	var unplaceable []string
	r, _ := m.renter(t, RenterConfig{Listener: hooks{unplaceable: func(_ terms.Job, reason string) { unplaceable = append(unplaceable, reason) }}})
	j := euJob(m.now())
	if _, err := r.Post(context.Background(), j); !errors.Is(err, ErrUnplaceable) || len(unplaceable) != 1 || unplaceable[0] != "no bids" {
		t.Fatalf("no providers: %v %v", err, unplaceable)
	}
	j.BidWindow = 10 * time.Second
	j.ID = "job-c"
	done := make(chan error, 1)
	heard := m.hearCall(t, j)
	go func() { _, err := r.Post(context.Background(), j); done <- err }()
	waitCall(t, heard, 5*time.Second)
	if err := r.Cancel("job-c"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("Post after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not stop the auction")
	}
	if st, _ := r.Status("job-c"); st.State != terms.JobCancelled {
		t.Fatalf("state %s", st.State)
	}
	if err := r.Cancel("job-c"); err == nil {
		t.Fatal("cancelled twice")
	}
	if len(r.List()) != 2 {
		t.Fatalf("List: %d", len(r.List()))
	}
	if _, err := r.Bids("nope"); !errors.Is(err, ErrUnknownJob) {
		t.Fatal("Bids of unknown job")
	}
	// An invalid job is refused where it enters the daemon (the control
	// API's post, node/lease.Tracker), not by Post: see
	// TestRequeueValidatesTheNewAttempt and TestHandleCallRefusesInvalidJob.
}

// TestHandleCallRefusesInvalidJob: a call is where a job enters a
// provider; a call whose job, however well signed, is invalid is refused
// there (counted invalid_job) and never evaluated.
func TestHandleCallRefusesInvalidJob(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"cheap", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	renter := signtest.New(t)
	j := euJob(m.now())
	j.ID, j.Owner, j.GPUCount = "job-bad", renter.ID().String(), 0
	call, err := terms.EncodeCall(renter, j, TopicPrefix+"eu/a100")
	if err != nil {
		t.Fatal(err)
	}
	p := m.provs[0].p
	var rej *Rejection
	if _, err := p.HandleCall(peer.ID(renter.ID()), call); !errors.As(err, &rej) || rej.Reason != "invalid_job" || !errors.Is(err, terms.ErrInvalidJob) {
		t.Fatalf("call of an invalid job: %v, want refused as invalid_job", err)
	}
	st := p.Stats()
	if st.Rejected["invalid_job"] != 1 || st.Bids != 0 || len(st.Ineligible) != 0 {
		t.Fatalf("provider stats after an invalid call: rejected %v, %d bids, ineligible %v", st.Rejected, st.Bids, st.Ineligible)
	}
}

func TestGoldEvictsOnlyWhenStillNeeded(t *testing.T) {
	t.Parallel()
	p := pol(1)
	p.AllowPreemption = true
	m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, p, 0.9}})
	box := m.provs[0]
	now := m.now()
	for _, id := range []string{"bronze-1", "bronze-2"} {
		if err := box.cal.Reserve(Booking{LeaseID: id, Start: now.Add(-time.Minute), End: now.Add(3 * time.Hour), GPUs: 1, Tier: terms.Bronze, Preemptible: true}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	box.p.cfg.Runtime = runtimeHooks{lease: func(_ terms.Lease, _ terms.Job, preempts []string) { got = preempts }}
	// The full window, so that the award comes after the release below (a
	// gold job's window otherwise closes at its first acceptable bid).
	r, tr := m.renter(t, RenterConfig{QuietClose: -1})
	gate := bidGate(r, tr, 1)
	done := make(chan error, 1)
	gold := euJob(m.now())
	gold.Tier, gold.GPUCount = terms.Gold, 1
	go func() { _, err := r.Post(context.Background(), gold); done <- err }()
	<-gate
	// The bid planned to evict one bronze lease; one ends on its own first.
	box.cal.Release("bronze-2")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("evicted %v although a GPU had freed up", got)
	}
	if _, ok := box.cal.Booking("bronze-1"); !ok {
		t.Fatal("bronze-1 evicted")
	}
}

// TestLostLeaseRequeuedElsewhere: a job whose provider was lost goes back
// to auction for its whole duration, with that provider excluded: it
// declines (kind "excluded") and the other provider wins; the start
// window opens again from now.
func TestLostLeaseRequeuedElsewhere(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"cheap", "eu-west", "A100", 80, 2, pol(1), 0.9}, {"dear", "eu-west", "A100", 80, 2, pol(2), 0.9}})
	r, _ := m.renter(t, RenterConfig{})
	j := euJob(m.now())
	j.CreatedAt = m.now().Add(-50 * time.Minute)
	j.Deadline = j.CreatedAt.Add(time.Hour) // ten minutes left to start
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(job.ID)
	if m.name(st.Lease.Provider) != "cheap" {
		t.Fatalf("first lease went to %s", m.name(st.Lease.Provider))
	}
	lost := st.Lease.Provider
	rj, err := r.Requeue(context.Background(), job.ID, RequeueOptions{Reason: "provider lost", Exclude: []string{lost, lost}})
	if err != nil {
		t.Fatal(err)
	}
	if rj.Attempt != 1 || rj.Duration != j.Duration || len(rj.Exclude) != 1 || rj.Exclude[0] != lost {
		t.Fatalf("requeued job: attempt %d duration %v exclude %v", rj.Attempt, rj.Duration, rj.Exclude)
	}
	if min := m.now().Add(59 * time.Minute); rj.Deadline.Before(min) {
		t.Fatalf("start window not renewed: deadline %s, want after %s", rj.Deadline, min)
	}
	st, _ = r.Status(job.ID)
	if st.State != terms.JobLeased || m.name(st.Lease.Provider) != "dear" || st.Lease.End.Sub(st.Lease.Start) != j.Duration {
		t.Fatalf("requeued job %s on %s", st.State, m.name(st.Lease.Provider))
	}
	if n := m.provs[0].p.Stats().Ineligible["excluded"]; n != 1 {
		t.Fatalf("lost provider's ineligible counts %v", m.provs[0].p.Stats().Ineligible)
	}
}

// TestRequeueValidatesTheNewAttempt: Post trusts its job (validated where
// it entered the daemon), but Requeue builds a new attempt itself, from
// what its leases reported (excluded providers, checkpoints): that attempt
// enters the market there and is validated before it is posted. One that
// breaks a bound (more excluded providers than any job may name) is
// refused, and no call for it goes out.
func TestRequeueValidatesTheNewAttempt(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"cheap", "eu-west", "A100", 80, 2, pol(1), 0.9}})
	r, _ := m.renter(t, RenterConfig{})
	job, err := r.Post(context.Background(), euJob(m.now()))
	if err != nil {
		t.Fatal(err)
	}
	calls := m.provs[0].p.Stats().Calls
	exclude := make([]string, terms.MaxAttempts+1)
	for i := range exclude {
		exclude[i] = fmt.Sprintf("lost-%d", i)
	}
	_, err = r.Requeue(context.Background(), job.ID, RequeueOptions{Reason: "lost", Exclude: exclude})
	if !errors.Is(err, terms.ErrInvalidJob) {
		t.Fatalf("requeue naming %d excluded providers: %v, want an invalid job", len(exclude), err)
	}
	if fes := terms.FieldErrors(err); len(fes) != 1 || fes[0].Field != "exclude" {
		t.Fatalf("field errors %v, want one on exclude", fes)
	}
	if st, _ := r.Status(job.ID); st.State != terms.JobLeased || st.Offers != 1 {
		t.Fatalf("after a refused requeue the job is %s after %d offers, want leased after 1", st.State, st.Offers)
	}
	if n := m.provs[0].p.Stats().Calls; n != calls {
		t.Fatalf("provider heard %d calls after the refused requeue", n-calls)
	}
}
