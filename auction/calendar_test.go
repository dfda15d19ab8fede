package auction

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// maxBooked is a brute-force check: GPUs booked at every minute boundary.
func maxBooked(bs []Booking, from, to time.Time) int {
	peak := 0
	for t := from; t.Before(to); t = t.Add(time.Minute) {
		n := 0
		for _, b := range bs {
			if !t.Before(b.Start) && t.Before(b.End) {
				n += b.GPUs
			}
		}
		if n > peak {
			peak = n
		}
	}
	return peak
}

func TestCalendarOverbookingProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(42))
	for round := 0; round < 30; round++ {
		capacity := 1 + rng.Intn(8)
		c := NewCalendar(capacity)
		accepted, refused := 0, 0
		for i := 0; i < 60; i++ {
			start := monday.Add(time.Duration(rng.Intn(600)) * time.Minute)
			b := Booking{LeaseID: fmt.Sprintf("l%d", i), Start: start,
				End: start.Add(time.Duration(1+rng.Intn(120)) * time.Minute), GPUs: 1 + rng.Intn(capacity+1)}
			before := c.Bookings()
			// Brute-force expectation: the booking fits iff b.GPUs devices
			// are held by no overlapping booking.
			held := map[int]bool{}
			for _, o := range before {
				if o.Start.Before(b.End) && o.End.After(b.Start) {
					for _, d := range o.Devices {
						held[d] = true
					}
				}
			}
			fits := capacity-len(held) >= b.GPUs
			err := c.Reserve(b)
			if fits != (err == nil) {
				t.Fatalf("round %d: Reserve(%+v) = %v, brute force fits=%v", round, b, err, fits)
			}
			if err != nil {
				if !errors.Is(err, ErrOverbooked) {
					t.Fatalf("unexpected error %v", err)
				}
				refused++
			} else {
				accepted++
			}
			if rng.Intn(10) == 0 {
				bs := c.Bookings()
				if len(bs) > 0 {
					v := bs[rng.Intn(len(bs))]
					c.Truncate(v.LeaseID, v.Start.Add(v.End.Sub(v.Start)/2))
				}
			}
		}
		if got := maxBooked(c.Bookings(), monday, monday.Add(13*time.Hour)); got > capacity {
			t.Fatalf("round %d: %d gpus booked > capacity %d", round, got, capacity)
		}
		// No device is ever held by two overlapping bookings.
		bs := c.Bookings()
		for i, a := range bs {
			if len(a.Devices) != a.GPUs {
				t.Fatalf("round %d: booking %s holds devices %v for %d gpus", round, a.LeaseID, a.Devices, a.GPUs)
			}
			for _, o := range bs[i+1:] {
				if !a.Start.Before(o.End) || !o.Start.Before(a.End) {
					continue
				}
				for _, d := range a.Devices {
					for _, e := range o.Devices {
						if d == e {
							t.Fatalf("round %d: device %d held by overlapping %s and %s", round, d, a.LeaseID, o.LeaseID)
						}
					}
				}
			}
		}
		if accepted == 0 || refused == 0 {
			t.Logf("round %d: accepted %d refused %d", round, accepted, refused)
		}
	}
}

func TestCalendarOperations(t *testing.T) {
	t.Parallel()
	c := NewCalendar(4)
	t0 := monday
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Reserve(Booking{LeaseID: "a", Start: t0, End: t0.Add(2 * time.Hour), GPUs: 3}))
	must(c.Reserve(Booking{LeaseID: "b", Start: t0.Add(2 * time.Hour), End: t0.Add(3 * time.Hour), GPUs: 4})) // back to back
	if err := c.Reserve(Booking{LeaseID: "a", Start: t0.Add(5 * time.Hour), End: t0.Add(6 * time.Hour), GPUs: 1}); !errors.Is(err, ErrDuplicateLease) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := c.Reserve(Booking{LeaseID: "c", Start: t0.Add(time.Hour), End: t0.Add(90 * time.Minute), GPUs: 2}); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("overbook: %v", err)
	}
	for name, bad := range map[string]Booking{
		"no lease id": {Start: t0, End: t0.Add(time.Hour), GPUs: 1},
		"empty span":  {LeaseID: "x", Start: t0, End: t0, GPUs: 1},
		"no gpus":     {LeaseID: "x", Start: t0, End: t0.Add(time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			if err := c.Reserve(bad); !errors.Is(err, ErrBadBooking) {
				t.Fatalf("Reserve(%+v) = %v, want ErrBadBooking", bad, err)
			}
		})
	}
	if got := c.FreeGPUs(t0, t0.Add(3*time.Hour)); got != 0 {
		t.Fatalf("FreeGPUs = %d", got)
	}
	if got := c.FreeGPUs(t0, t0.Add(2*time.Hour)); got != 1 {
		t.Fatalf("FreeGPUs first two hours = %d", got)
	}
	if got := c.Occupancy(t0.Add(time.Hour)); got != 0.75 {
		t.Fatalf("Occupancy = %v", got)
	}
	if !c.Truncate("a", t0.Add(time.Hour)) || c.Truncate("a", t0.Add(4*time.Hour)) {
		t.Fatal("Truncate shortens only")
	}
	must(c.Reserve(Booking{LeaseID: "c", Start: t0.Add(time.Hour), End: t0.Add(90 * time.Minute), GPUs: 2}))
	if !c.Release("c") || c.Release("c") {
		t.Fatal("Release reports existence")
	}
	c.Prune(t0.Add(time.Hour)) // drops a (ended at t0+1h)
	if bs := c.Bookings(); len(bs) != 1 || bs[0].LeaseID != "b" {
		t.Fatalf("after prune: %+v", bs)
	}
}

func TestReserveEvicting(t *testing.T) {
	t.Parallel()
	c := NewCalendar(2)
	t0 := monday
	_ = c.Reserve(Booking{LeaseID: "bronze", Start: t0, End: t0.Add(4 * time.Hour), GPUs: 2, Tier: terms.Bronze, Preemptible: true})
	_ = c.Reserve(Booking{LeaseID: "silver", Start: t0.Add(5 * time.Hour), End: t0.Add(6 * time.Hour), GPUs: 1, Tier: terms.Silver})
	gold := Booking{LeaseID: "gold", Start: t0.Add(time.Hour), End: t0.Add(6 * time.Hour), GPUs: 2, Tier: terms.Gold}
	// Even evicting bronze, the silver booking is in the way: nothing changes.
	if _, err := c.ReserveEvicting(gold, []string{"bronze", "silver"}); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("want overbooked, got %v", err)
	}
	if len(c.Bookings()) != 2 {
		t.Fatal("failed ReserveEvicting changed the calendar")
	}
	gold.End = t0.Add(5 * time.Hour)
	ev, err := c.ReserveEvicting(gold, []string{"bronze"})
	if err != nil || len(ev) != 1 || ev[0].LeaseID != "bronze" {
		t.Fatalf("ReserveEvicting = %v, %v", ev, err)
	}
	if _, ok := c.Booking("bronze"); ok {
		t.Fatal("bronze still booked")
	}
}

// ReserveThenEvict evicts only when the booking does not fit without it.
func TestReserveThenEvict(t *testing.T) {
	t.Parallel()
	t0 := monday
	c := NewCalendar(2)
	_ = c.Reserve(Booking{LeaseID: "bronze", Start: t0, End: t0.Add(4 * time.Hour), GPUs: 1, Tier: terms.Bronze, Preemptible: true})
	// One GPU is free: the planned eviction is no longer needed.
	ev, err := c.ReserveThenEvict(Booking{LeaseID: "g1", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Tier: terms.Gold}, []string{"bronze"})
	if err != nil || len(ev) != 0 {
		t.Fatalf("fitting booking: evicted %v, err %v; want none, nil", ev, err)
	}
	if _, ok := c.Booking("bronze"); !ok {
		t.Fatal("bronze evicted although the booking fit")
	}
	// Now it does not fit without evicting bronze.
	ev, err = c.ReserveThenEvict(Booking{LeaseID: "g2", Start: t0.Add(2 * time.Hour), End: t0.Add(3 * time.Hour), GPUs: 2, Tier: terms.Gold}, []string{"bronze"})
	if err != nil || len(ev) != 1 || ev[0].LeaseID != "bronze" {
		t.Fatalf("ReserveThenEvict = %v, %v; want bronze evicted", ev, err)
	}
	// No planned evictions: overbooked, nothing changes.
	before := c.Bookings()
	if _, err := c.ReserveThenEvict(Booking{LeaseID: "g3", Start: t0.Add(2 * time.Hour), End: t0.Add(3 * time.Hour), GPUs: 1}, nil); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("want overbooked, got %v", err)
	}
	if after := c.Bookings(); len(after) != len(before) {
		t.Fatalf("failed ReserveThenEvict changed the calendar: %v -> %v", before, after)
	}
}

func TestCalendarConcurrent(t *testing.T) {
	t.Parallel()
	c := NewCalendar(3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if c.Reserve(Booking{LeaseID: fmt.Sprint(i), Start: monday, End: monday.Add(time.Hour), GPUs: 1}) == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if ok != 3 {
		t.Fatalf("%d concurrent reservations succeeded on 3 gpus", ok)
	}
}

// Changed is closed by every change of the bookings (and only by one), and
// NextEdge names the next instant a booking starts or ends: between the
// two, FreeGPUs at an instant does not change.
func TestCalendarChangedAndNextEdge(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewCalendar(4)
	changes := func(what string, want bool, op func()) {
		t.Helper()
		ch := c.Changed()
		op()
		select {
		case <-ch:
			if !want {
				t.Fatalf("%s closed Changed", what)
			}
		default:
			if want {
				t.Fatalf("%s did not close Changed", what)
			}
		}
	}
	if e := c.NextEdge(t0); !e.IsZero() {
		t.Fatalf("an empty calendar's next edge: %v", e)
	}
	b := Booking{LeaseID: "a", Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour), GPUs: 2, Preemptible: true}
	changes("Reserve", true, func() { _ = c.Reserve(b) })
	changes("a failed Reserve", false, func() { _ = c.Reserve(b) })
	changes("a read", false, func() { _ = c.FreeGPUs(t0, t0); _ = c.NextEdge(t0) })
	changes("a hold", false, func() { c.Hold("n", "o", Booking{Start: t0, End: t0.Add(time.Hour), GPUs: 1}, t0.Add(time.Minute)) })
	for _, e := range []struct{ at, want time.Time }{
		{t0, t0.Add(time.Hour)},
		{t0.Add(time.Hour), t0.Add(3 * time.Hour)},
		{t0.Add(2 * time.Hour), t0.Add(3 * time.Hour)},
		{t0.Add(3 * time.Hour), time.Time{}},
	} {
		if got := c.NextEdge(e.at); !got.Equal(e.want) {
			t.Fatalf("NextEdge(%v) = %v, want %v", e.at, got, e.want)
		}
	}
	if c.FreeGPUs(t0, t0) != 4 || c.FreeGPUs(t0.Add(time.Hour), t0.Add(time.Hour)) != 2 {
		t.Fatal("free GPUs before and at the booking's start")
	}
	changes("Move", true, func() {
		if _, err := c.Move("a", t0.Add(30*time.Minute), t0.Add(2*time.Hour), nil); err != nil {
			t.Fatal(err)
		}
	})
	if got := c.NextEdge(t0); !got.Equal(t0.Add(30 * time.Minute)) {
		t.Fatalf("NextEdge after the move: %v", got)
	}
	changes("Truncate", true, func() { c.Truncate("a", t0.Add(time.Hour)) })
	changes("a Truncate that extends", false, func() { c.Truncate("a", t0.Add(5*time.Hour)) })
	changes("ReserveEvicting", true, func() {
		if _, err := c.ReserveEvicting(Booking{LeaseID: "b", Start: t0, End: t0.Add(time.Hour), GPUs: 4}, []string{"a"}); err != nil {
			t.Fatal(err)
		}
	})
	changes("Prune of nothing ended", false, func() { c.Prune(t0) })
	changes("Prune", true, func() { c.Prune(t0.Add(time.Hour)) })
	changes("Release of an unknown lease", false, func() { c.Release("b") })
	_ = c.Reserve(Booking{LeaseID: "c", Start: t0, End: t0.Add(time.Hour), GPUs: 1})
	changes("Release", true, func() { c.Release("c") })
}
