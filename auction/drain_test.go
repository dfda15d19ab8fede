package auction

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestDrainingProviderDeclines: a draining provider bids for nothing and
// says why ("draining") when the call asks; the job goes to the next best
// provider; once undrained it wins again.
func TestDrainingProviderDeclines(t *testing.T) {
	t.Parallel()
	m := newMarket(t, eightProviders())
	r, _ := m.renter(t, RenterConfig{})
	good := m.provs[0] // eu-good: the rank winner of euJob
	if !good.p.SetDraining(true) || good.p.SetDraining(true) {
		t.Fatal("SetDraining must report a change once")
	}
	j := euJob(m.now())
	j.WantDeclines = true
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(job.ID)
	if st.State != terms.JobLeased || st.Winner == good.s.ID().String() {
		t.Fatalf("state %s winner %s: the draining provider must not win", st.State, m.name(st.Winner))
	}
	if st.Declines[KindDraining] != 1 {
		t.Fatalf("declines %v, want one %q", st.Declines, KindDraining)
	}
	gs := good.p.Stats()
	if !gs.Draining || gs.Bids != 0 || gs.Ineligible[KindDraining] != 1 || len(good.cal.Bookings()) != 0 {
		t.Fatalf("draining provider stats %+v bookings %v", gs, good.cal.Bookings())
	}

	if !good.p.SetDraining(false) {
		t.Fatal("undrain did not change the state")
	}
	j2 := euJob(m.now())
	job2, err := r.Post(context.Background(), j2)
	if err != nil {
		t.Fatal(err)
	}
	if st2, _ := r.Status(job2.ID); st2.Winner != good.s.ID().String() || good.p.Stats().Draining {
		t.Fatalf("undrained provider should win again: winner %s", m.name(st2.Winner))
	}
}

// TestDrainingProviderDeclinesAwards: an award for a bid made before the
// provider began draining is declined, and nothing is booked.
func TestDrainingProviderDeclinesAwards(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"only", "eu-west", "A100", 80, 4, pol(1.0), 0.9}})
	prov := m.provs[0]
	var drained bool
	r, tr := m.renter(t, RenterConfig{})
	// The bid is delivered; the provider starts draining before the award.
	tr.Handle(auctiontest.MemHandlers{OnBid: func(from peer.ID, data []byte) error {
		err := r.HandleBid(from, data)
		if !drained {
			drained = prov.p.SetDraining(true)
		}
		return err
	}})
	_, err := r.Post(context.Background(), euJob(m.now()))
	if !errors.Is(err, ErrUnplaceable) {
		t.Fatalf("post: %v, want unplaceable", err)
	}
	if s := prov.p.Stats(); !drained || s.Bids != 1 || s.Declined != 1 || s.Won != 0 || len(prov.cal.Bookings()) != 0 {
		t.Fatalf("drained %v stats %+v bookings %v", drained, s, prov.cal.Bookings())
	}
}

// TestRebook: a lease confirmed before a restart holds its devices again,
// so a new call is offered only what is left; a lease of another provider,
// an ended one or one that does not fit is refused.
func TestRebook(t *testing.T) {
	t.Parallel()
	m := newMarket(t, []provSpec{{"only", "eu-west", "A100", 80, 2, pol(1.0), 0.9}})
	prov := m.provs[0]
	now := m.now()
	me := prov.s.ID().String()
	l := terms.Lease{ID: "lease-r1", JobID: "job-r1", Renter: signtest.New(t).ID().String(), Provider: me, Price: 1,
		Start: now.Add(10 * time.Minute), End: now.Add(70 * time.Minute), GPUCount: 2, Tier: terms.Silver, State: terms.RunPending,
		Devices: []int{1, 0}}
	if err := prov.p.Rebook(l, terms.Job{}); err != nil {
		t.Fatal(err)
	}
	b, ok := prov.cal.Booking(l.ID)
	if !ok || !b.Start.Equal(l.Start) || !b.End.Equal(l.End) || b.GPUs != 2 || len(b.Devices) != 2 {
		t.Fatalf("booking %+v %v", b, ok)
	}
	if s := prov.p.Stats(); len(s.Leases) != 1 || s.Leases[0].ID != l.ID || s.EarningsUSD != 2 {
		t.Fatalf("stats %+v", s)
	}
	// A one-hour job cannot start before the rebooked lease ends.
	j := euJob(now)
	j.Deadline = now.Add(3 * time.Hour)
	offer, err := Evaluate(ProviderState{Cap: ptrCap(prov.p.cfg.Self.Capability()), Cal: prov.cal, Reliability: 0.9}, &j, now)
	if err != nil {
		t.Fatal(err)
	}
	if offer.Start.Before(l.End) {
		t.Fatalf("offer starts %s, before the rebooked lease ends %s", offer.Start, l.End)
	}
	other := l
	other.ID, other.Provider = "lease-r2", signtest.New(t).ID().String()
	overlap := l
	overlap.ID, overlap.Devices = "lease-r3", nil
	ended := l
	ended.ID, ended.State = "lease-r4", terms.RunSucceeded
	for name, bad := range map[string]terms.Lease{"another provider's": other, "overlapping": overlap, "ended": ended, "the same again": l} {
		if err := prov.p.Rebook(bad, terms.Job{}); err == nil {
			t.Errorf("rebook of %s lease accepted", name)
		}
	}
	if n := len(prov.cal.Bookings()); n != 1 {
		t.Fatalf("%d bookings after refused rebooks", n)
	}
}

func ptrCap(c terms.Capability) *terms.Capability { return &c }
