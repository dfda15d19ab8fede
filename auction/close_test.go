package auction

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBidWindowClosesEarly(t *testing.T) {
	const window = 5 * time.Second
	t.Run("quiet spell after the last bid keeps the best price", func(t *testing.T) {
		m := newMarket(t, eightProviders())
		r, _ := m.renter(t, RenterConfig{QuietClose: 200 * time.Millisecond})
		j := euJob(m.now())
		j.BidWindow = window
		start := time.Now()
		job, err := r.Post(context.Background(), j)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if took >= window/2 {
			t.Fatalf("auction took %v of a %v window: did not close early", took, window)
		}
		st, _ := r.Status(job.ID)
		if len(st.Bids) != 3 || m.name(st.Winner) != "eu-good" {
			t.Fatalf("%d bids, winner %s: want all 3 eligible bids and eu-good", len(st.Bids), m.name(st.Winner))
		}
	})
	t.Run("gold closes at its first acceptable bid", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, pol(1), 0.9}})
		// A quiet spell longer than the window: only the gold rule closes early.
		r, _ := m.renter(t, RenterConfig{QuietClose: 2 * window})
		j := euJob(m.now())
		j.Tier, j.BidWindow = Gold, window
		start := time.Now()
		if _, err := r.Post(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= window/2 {
			t.Fatalf("gold auction took %v of a %v window", took, window)
		}
	})
	t.Run("a bid that starts later does not close the window early", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, pol(1), 0.9}})
		box := m.provs[0]
		if err := box.p.cfg.Calendar.Reserve(Booking{LeaseID: "busy", Start: m.now().Add(-time.Minute), End: m.now().Add(time.Hour), GPUs: 2}); err != nil {
			t.Fatal(err)
		}
		r, _ := m.renter(t, RenterConfig{QuietClose: 50 * time.Millisecond})
		j := euJob(m.now())
		j.Tier, j.BidWindow, j.Deadline = Gold, 600*time.Millisecond, m.now().Add(2*time.Hour)
		start := time.Now()
		job, err := r.Post(context.Background(), j)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := r.Status(job.ID)
		if len(st.Bids) != 1 || !st.Bids[0].Bid.Start.After(m.now().Add(30*time.Minute)) {
			t.Fatalf("bids %+v: want the busy box's one later bid", st.Bids)
		}
		if took < j.BidWindow {
			t.Fatalf("auction closed after %v of its %v window on a bid starting in an hour", took, j.BidWindow)
		}
	})
	t.Run("disabled runs the full window", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"box", "eu-west", "A100", 80, 2, pol(1), 0.9}})
		r, _ := m.renter(t, RenterConfig{QuietClose: -1})
		j := euJob(m.now())
		j.BidWindow = 300 * time.Millisecond
		start := time.Now()
		if _, err := r.Post(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < j.BidWindow {
			t.Fatalf("auction took %v, less than its %v window", took, j.BidWindow)
		}
	})
	t.Run("a window without bids is extended once", func(t *testing.T) {
		m := newMarket(t, []provSpec{{"pricey", "eu-west", "A100", 80, 2, pol(50), 0.9}})
		r, _ := m.renter(t, RenterConfig{QuietClose: 50 * time.Millisecond})
		j := euJob(m.now())
		j.BidWindow = 200 * time.Millisecond
		start := time.Now()
		_, err := r.Post(context.Background(), j)
		took := time.Since(start)
		if !errors.Is(err, ErrUnplaceable) || !strings.Contains(err.Error(), "no bids") {
			t.Fatalf("err %v, want unplaceable: no bids", err)
		}
		if took < 2*j.BidWindow || took > 4*j.BidWindow {
			t.Fatalf("empty auction took %v, want one extension (about %v)", took, 2*j.BidWindow)
		}
	})
}
