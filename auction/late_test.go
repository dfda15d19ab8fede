package auction

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// lateMarket is a one-provider market (one GPU) on a clock that the test
// moves ahead: the award of a job comes late, long after its bid.
type lateMarket struct {
	*market
	ahead atomic.Int64 // how far the clock was moved ahead
	prov  *testProv
}

func newLateMarket(t *testing.T) *lateMarket {
	lm := &lateMarket{}
	real := newClock()
	lm.market = newMarketAt(t, []provSpec{{"p", "eu-west", "A100", 80, 1, pol(1), 0.9}},
		func() time.Time { return real().Add(time.Duration(lm.ahead.Load())) })
	lm.prov = lm.provs[0]
	return lm
}

// renter starts a renter whose awards come by late after each bid it
// takes: the clock moves by late as the bid comes in.
func (lm *lateMarket) renter(t *testing.T, late time.Duration, cfg RenterConfig) *Renter {
	r, tr := lm.market.renter(t, cfg)
	tr.Handle(auctiontest.MemHandlers{OnBid: func(from peer.ID, data []byte) error {
		err := r.HandleBid(from, data)
		if err == nil {
			lm.ahead.Add(int64(late))
		}
		return err
	}})
	return r
}

// lateJob is a one-GPU job of ten seconds: its bids stay valid long after
// its span began (DefaultBidGrace).
func lateJob(now time.Time) terms.Job {
	j := euJob(now)
	j.GPUCount, j.Duration, j.BidWindow = 1, 10*time.Second, 200*time.Millisecond
	return j
}

// TestLateAwardIsRetimed: an award that reaches its provider half a
// second before the end of the span its bid named (a long failover, a
// loaded renter: issue 23 saw a job confirmed 0.16 s before its lease's
// end start after it and end expired) is booked from its confirm on, for
// the job's whole length, and the confirm says so: the renter's lease is
// the provider's.
func TestLateAwardIsRetimed(t *testing.T) {
	t.Parallel()
	lm := newLateMarket(t)
	r := lm.renter(t, 9500*time.Millisecond, RenterConfig{})
	posted := lm.now()
	j := lateJob(posted)
	job, err := r.Post(context.Background(), j)
	if err != nil {
		t.Fatalf("late award: %v", err)
	}
	st, _ := r.Status(job.ID)
	l := st.Lease
	if l.End.Sub(l.Start) != j.Duration || l.Start.Before(posted.Add(9500*time.Millisecond)) || l.Start.After(lm.now()) {
		t.Fatalf("lease %s → %s (posted %s): want the job's 10 s from its confirm, 9.5 s after the bid", l.Start, l.End, posted)
	}
	b, ok := lm.prov.cal.Booking(l.ID)
	if !ok || !b.Start.Equal(l.Start) || !b.End.Equal(l.End) {
		t.Fatalf("provider booked %+v, renter holds %s → %s", b, l.Start, l.End)
	}
	if got := lm.prov.p.Stats(); got.Retimed != 1 || len(got.Leases) != 1 || !got.Leases[0].Start.Equal(l.Start) {
		t.Fatalf("provider: %d re-timed, leases %+v", got.Retimed, got.Leases)
	}
	if n := r.Counters()["award_retimed"]; n != 1 {
		t.Fatalf("renter counted %d re-timed awards", n)
	}
}

// TestLateAwardWithoutRoomIsDeclined: a late award whose re-timed span the
// provider's calendar cannot hold (a lease booked after the bid's span) is
// declined, not confirmed over a span nearly over.
func TestLateAwardWithoutRoomIsDeclined(t *testing.T) {
	t.Parallel()
	lm := newLateMarket(t)
	next := lm.now().Add(10500 * time.Millisecond)
	if err := lm.prov.cal.Reserve(Booking{LeaseID: "lease-next", Start: next, End: next.Add(time.Hour), GPUs: 1, Tier: terms.Silver}); err != nil {
		t.Fatal(err)
	}
	r := lm.renter(t, 9500*time.Millisecond, RenterConfig{})
	job, err := r.Post(context.Background(), lateJob(lm.now()))
	if !errors.Is(err, ErrUnplaceable) {
		t.Fatalf("late award without room: %v, want unplaceable", err)
	}
	st, _ := r.Status(job.ID)
	if len(st.Attempts) != 1 || !strings.HasPrefix(st.Attempts[0].Result, "declined: too late: re-timed from now on, capacity:") {
		t.Fatalf("awards %+v: want one declined as too late", st.Attempts)
	}
	if bs := lm.prov.cal.Bookings(); len(bs) != 1 || bs[0].LeaseID != "lease-next" {
		t.Fatalf("provider books %+v", bs)
	}
}

// TestHostileRetimeIsRefused: a provider that re-times a lease against the
// rule (one that was not late, or stretched past the job's length) gets
// its confirm refused, and the lease it booked is released.
func TestHostileRetimeIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		late  time.Duration
		spoil func(c *terms.Confirm, now time.Time)
		why   string
	}{
		{"not late", 0, func(c *terms.Confirm, now time.Time) { c.Start, c.End = now, now.Add(10*time.Second) }, "was not late"},
		{"into the future", 9500 * time.Millisecond, func(c *terms.Confirm, _ time.Time) { c.Start, c.End = c.Start.Add(time.Hour), c.End.Add(time.Hour) }, "is not now"},
		{"stretched", 9500 * time.Millisecond, func(c *terms.Confirm, _ time.Time) { c.End = c.End.Add(time.Hour) }, "is not its start plus its length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lm := newLateMarket(t)
			p := lm.prov
			p.t.Handle(auctiontest.MemHandlers{OnCall: p.p.HandleCall, OnGossipedCall: p.p.HandleGossipedCall, OnAward: func(from peer.ID, data []byte) ([]byte, error) {
				resp, err := p.p.HandleAward(from, data)
				if err != nil {
					return resp, err
				}
				c, _, err := terms.DecodeConfirm(resp)
				if err != nil || !c.Accepted {
					return resp, err
				}
				tc.spoil(&c, lm.now())
				return terms.EncodeConfirm(p.s, c)
			}})
			var mu sync.Mutex
			var released []terms.Lease
			r := lm.renter(t, tc.late, RenterConfig{Release: hooks{release: func(l terms.Lease) { mu.Lock(); released = append(released, l); mu.Unlock() }}})
			job, err := r.Post(context.Background(), lateJob(lm.now()))
			if !errors.Is(err, ErrUnplaceable) {
				t.Fatalf("hostile re-time: %v, want unplaceable", err)
			}
			st, _ := r.Status(job.ID)
			if len(st.Attempts) != 1 || !strings.HasPrefix(st.Attempts[0].Result, callmachine.ConfirmRefused) || !strings.Contains(st.Attempts[0].Result, tc.why) {
				t.Fatalf("awards %+v: want the confirm refused (%s)", st.Attempts, tc.why)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(released) != 1 || released[0].ID != st.Attempts[0].LeaseID {
				t.Fatalf("released %+v, want the refused lease %s", released, st.Attempts[0].LeaseID)
			}
		})
	}
}
