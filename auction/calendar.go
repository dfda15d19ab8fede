package auction

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Calendar errors.
var (
	ErrOverbooked     = errors.New("auction: calendar overbooked")
	ErrDuplicateLease = errors.New("auction: duplicate lease id")
	ErrUnknownLease   = errors.New("auction: unknown lease id")
	ErrBadBooking     = errors.New("auction: invalid booking")
)

// Booking is one lease's hold on a provider's GPUs over [Start, End).
type Booking struct {
	LeaseID     string    `json:"lease_id"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	GPUs        int       `json:"gpus"`
	Tier        Tier      `json:"tier"`
	Preemptible bool      `json:"preemptible"`
	// Devices are the device indices (0..capacity-1) the booking holds. On
	// Reserve they name the devices the booking may take, in order of
	// preference (empty: any device); the calendar books the first GPUs of
	// them that are free throughout the span, and the stored booking holds
	// exactly those.
	Devices []int `json:"devices,omitempty"`
}

// Calendar is a provider's lease book: the only authority on capacity. It
// books devices, indexed 0..capacity-1: no device is ever held by two
// overlapping bookings (so at no instant may the GPUs of overlapping
// bookings exceed its capacity). It is safe for concurrent use.
type Calendar struct {
	mu       sync.Mutex
	capacity int
	books    map[string]Booking
	holds    map[string]hold // key (a bid's nonce) -> tentative booking
}

// hold is a tentative booking: a bid's span, held until its award comes or
// until it expires.
type hold struct {
	b     Booking
	owner string
	until time.Time
}

// NewCalendar returns an empty calendar for capacity GPUs (negative counts
// as zero).
func NewCalendar(capacity int) *Calendar {
	if capacity < 0 {
		capacity = 0
	}
	return &Calendar{capacity: capacity, books: make(map[string]Booking), holds: make(map[string]hold)}
}

// Hold books b tentatively under key (a bid's nonce, for owner's job) until until: the hold
// counts against capacity for new bids (Planned) so that concurrent
// auctions are not offered the same GPUs, but not for Reserve, so an
// award always finds the room its bid saw (DropHold when it comes). A
// later Hold under the same key replaces it.
func (c *Calendar) Hold(key, owner string, b Booking, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.LeaseID = "hold:" + key
	c.holds[key] = hold{b: b, owner: owner, until: until}
}

// HeldBy is the number of GPUs the live holds of one owner's bids hold at
// now.
func (c *Calendar) HeldBy(owner string, now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneHolds(now)
	n := 0
	for _, h := range c.holds {
		if h.owner == owner {
			n += h.b.GPUs
		}
	}
	return n
}

// DropHold releases a tentative booking and reports whether it existed.
func (c *Calendar) DropHold(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.holds[key]
	delete(c.holds, key)
	return ok
}

// Holds is the number of tentative bookings live at now.
func (c *Calendar) Holds(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneHolds(now)
	return len(c.holds)
}

// Planned returns the bookings and the tentative bookings live at now (the
// latter with lease id "hold:<key>"), sorted by start then lease id: what a
// new bid must fit around.
func (c *Calendar) Planned(now time.Time) []Booking {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneHolds(now)
	out := c.list()
	for _, h := range c.holds {
		out = append(out, h.b)
	}
	sortBookings(out)
	return out
}

func (c *Calendar) pruneHolds(now time.Time) {
	for k, h := range c.holds {
		if !now.Before(h.until) {
			delete(c.holds, k)
		}
	}
}

// Capacity is the number of GPUs the calendar books.
func (c *Calendar) Capacity() int { return c.capacity }

func (c *Calendar) check(b Booking) error {
	switch {
	case b.LeaseID == "":
		return fmt.Errorf("%w: empty lease id", ErrBadBooking)
	case !b.End.After(b.Start):
		return fmt.Errorf("%w: lease %s: end %s is not after start %s", ErrBadBooking, b.LeaseID, b.End.Format(time.RFC3339), b.Start.Format(time.RFC3339))
	case b.GPUs < 1:
		return fmt.Errorf("%w: lease %s: gpus %d < 1", ErrBadBooking, b.LeaseID, b.GPUs)
	}
	seen := make(map[int]bool, len(b.Devices))
	for _, d := range b.Devices {
		if d < 0 || d >= c.capacity || seen[d] {
			return fmt.Errorf("%w: lease %s: device %d out of range or repeated (capacity %d)", ErrBadBooking, b.LeaseID, d, c.capacity)
		}
		seen[d] = true
	}
	if _, dup := c.books[b.LeaseID]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicateLease, b.LeaseID)
	}
	return nil
}

// Reserve books b on b.GPUs devices (among b.Devices when set) free
// throughout [b.Start, b.End). It fails with ErrOverbooked if there are not
// that many, with ErrDuplicateLease if b.LeaseID is already booked, and with
// ErrBadBooking for an empty lease id, an empty span, fewer than one GPU or
// a device outside the calendar (or named twice).
func (c *Calendar) Reserve(b Booking) error {
	_, err := c.ReserveEvicting(b, nil)
	return err
}

// ReserveEvicting atomically releases the preemptible bookings named in
// evict (unknown ids and non-preemptible bookings are ignored) and books b;
// if b does not fit even after the evictions, nothing changes. It returns the
// bookings that were evicted.
func (c *Calendar) ReserveEvicting(b Booking, evict []string) ([]Booking, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reserveLocked(b, evict)
}

// ReserveThenEvict is how an award is booked: it books b without evicting
// anybody if b fits, and only if it does not (ErrOverbooked) and evict names
// planned preemptions does it book b evicting them (see ReserveEvicting).
// Both steps happen under one lock. It returns the bookings that were
// evicted: none when the planned preemptions were no longer needed.
func (c *Calendar) ReserveThenEvict(b Booking, evict []string) ([]Booking, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	evicted, err := c.reserveLocked(b, nil)
	if errors.Is(err, ErrOverbooked) && len(evict) > 0 {
		evicted, err = c.reserveLocked(b, evict)
	}
	return evicted, err
}

func (c *Calendar) reserveLocked(b Booking, evict []string) ([]Booking, error) {
	if err := c.check(b); err != nil {
		return nil, err
	}
	skip := make(map[string]bool, len(evict))
	var evicted []Booking
	for _, id := range evict {
		if old, ok := c.books[id]; ok && old.Preemptible && !skip[id] {
			skip[id] = true
			evicted = append(evicted, old)
		}
	}
	bs := c.list()
	free := freeDevices(bs, c.capacity, b.Start, b.End, func(o *Booking) bool { return skip[o.LeaseID] }, b.Devices)
	if len(free) < b.GPUs {
		used := peakUse(bs, b.Start, b.End, func(o *Booking) bool { return skip[o.LeaseID] })
		return nil, fmt.Errorf("%w: lease %s needs %d gpus over [%s, %s), %d free of %d offered (%d of %d booked at peak)", ErrOverbooked,
			b.LeaseID, b.GPUs, b.Start.Format(time.RFC3339), b.End.Format(time.RFC3339), len(free), poolSize(b.Devices, c.capacity), used, c.capacity)
	}
	b.Devices = append([]int(nil), free[:b.GPUs]...)
	for _, e := range evicted {
		delete(c.books, e.LeaseID)
	}
	c.books[b.LeaseID] = b
	return evicted, nil
}

// Release drops a booking and reports whether it existed.
func (c *Calendar) Release(leaseID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.books[leaseID]
	delete(c.books, leaseID)
	return ok
}

// Truncate ends a booking early at end (the job finished early or was
// preempted), freeing the rest of its span; a booking truncated at or before
// its start is dropped. It reports whether the booking existed and was
// shortened; a booking is never extended.
func (c *Calendar) Truncate(leaseID string, end time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.books[leaseID]
	if !ok || !end.Before(b.End) {
		return false
	}
	if !end.After(b.Start) {
		delete(c.books, leaseID)
		return true
	}
	b.End = end
	c.books[leaseID] = b
	return true
}

// Move books a lease's booking over [start, end) instead of its current
// span, on GPUs among pool (any when pool is empty) that no other booking
// and no tentative hold of a bid takes then: how a confirmed lease that
// has not begun moves earlier (Provider, Lease.Moved). It returns the
// booking as moved; on ErrOverbooked (or ErrUnknownLease, ErrBadBooking)
// nothing changes.
func (c *Calendar) Move(leaseID string, start, end time.Time, pool []int) (Booking, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.books[leaseID]
	if !ok {
		return Booking{}, fmt.Errorf("%w: %s", ErrUnknownLease, leaseID)
	}
	if !end.After(start) {
		return Booking{}, fmt.Errorf("%w: lease %s: move to an empty span", ErrBadBooking, leaseID)
	}
	bs := c.list()
	for _, h := range c.holds {
		bs = append(bs, h.b)
	}
	free := freeDevices(bs, c.capacity, start, end, func(o *Booking) bool { return o.LeaseID == leaseID }, pool)
	if len(free) < old.GPUs {
		return Booking{}, fmt.Errorf("%w: lease %s cannot move to [%s, %s): %d of its %d gpus free", ErrOverbooked,
			leaseID, start.Format(time.RFC3339), end.Format(time.RFC3339), len(free), old.GPUs)
	}
	moved := old
	moved.Start, moved.End = start, end
	moved.Devices = append([]int(nil), free[:old.GPUs]...)
	c.books[leaseID] = moved
	moved.Devices = append([]int(nil), moved.Devices...)
	return moved, nil
}

// FreeDevices is the devices (among pool, in its order; all when pool is
// empty) that no booking holds at any instant of [from, to) (at the instant
// from if the span is empty).
func (c *Calendar) FreeDevices(from, to time.Time, pool []int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return freeDevices(c.list(), c.capacity, from, to, nil, pool)
}

// FreeGPUs is the minimum number of free GPUs over [from, to) (at the
// instant from if the span is empty).
func (c *Calendar) FreeGPUs(from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	free := c.capacity - peakUse(c.list(), from, to, nil)
	if free < 0 {
		return 0
	}
	return free
}

// Occupancy is the fraction of the capacity booked at the instant at (1 for
// a calendar without capacity).
func (c *Calendar) Occupancy(at time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capacity == 0 {
		return 1
	}
	return float64(useAt(c.list(), at, nil)) / float64(c.capacity)
}

// Bookings returns a copy of the bookings, sorted by start then lease id.
func (c *Calendar) Bookings() []Booking {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list()
}

// Booking returns the booking for a lease id.
func (c *Calendar) Booking(leaseID string) (Booking, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.books[leaseID]
	b.Devices = append([]int(nil), b.Devices...)
	return b, ok
}

// Prune drops bookings that ended at or before the instant before.
func (c *Calendar) Prune(before time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, b := range c.books {
		if !b.End.After(before) {
			delete(c.books, id)
		}
	}
}

func (c *Calendar) list() []Booking {
	out := make([]Booking, 0, len(c.books))
	for _, b := range c.books {
		b.Devices = append([]int(nil), b.Devices...)
		out = append(out, b)
	}
	sortBookings(out)
	return out
}

func sortBookings(out []Booking) {
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].LeaseID < out[j].LeaseID
	})
}

// useAt is the GPUs booked at the instant at, ignoring bookings for which
// skip returns true.
func useAt(bs []Booking, at time.Time, skip func(*Booking) bool) int {
	n := 0
	for i := range bs {
		b := &bs[i]
		if (skip == nil || !skip(b)) && !at.Before(b.Start) && at.Before(b.End) {
			n += b.GPUs
		}
	}
	return n
}

// peakUse is the maximum number of GPUs booked at any instant of [from, to)
// (at the instant from if the span is empty), ignoring bookings for which
// skip returns true.
func peakUse(bs []Booking, from, to time.Time, skip func(*Booking) bool) int {
	if !to.After(from) {
		return useAt(bs, from, skip)
	}
	type event struct {
		at    time.Time
		delta int
	}
	var ev []event
	for i := range bs {
		b := &bs[i]
		if (skip != nil && skip(b)) || !b.Start.Before(to) || !b.End.After(from) {
			continue
		}
		s := b.Start
		if s.Before(from) {
			s = from
		}
		ev = append(ev, event{s, b.GPUs}, event{b.End, -b.GPUs})
	}
	// Half-open spans: at equal instants, releases come before holds.
	sort.Slice(ev, func(i, j int) bool {
		if !ev[i].at.Equal(ev[j].at) {
			return ev[i].at.Before(ev[j].at)
		}
		return ev[i].delta < ev[j].delta
	})
	cur, peak := 0, 0
	for _, e := range ev {
		cur += e.delta
		if cur > peak {
			peak = cur
		}
	}
	return peak
}

func poolSize(pool []int, capacity int) int {
	if len(pool) == 0 {
		return capacity
	}
	return len(pool)
}

// freeDevices is the devices among pool (0..capacity-1 when pool is empty),
// in pool's order, that no booking of bs overlapping [from, to) holds,
// ignoring bookings for which skip returns true. An empty span is the
// instant from. Devices outside 0..capacity-1 are never free.
func freeDevices(bs []Booking, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int) []int {
	var out []int
	scanFree(bs, capacity, from, to, skip, pool, func(d int) bool {
		out = append(out, d)
		return true
	})
	return out
}

// hasFree reports whether at least n devices of pool are free over
// [from, to) (see freeDevices), without allocating for small hosts.
func hasFree(bs []Booking, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int, n int) bool {
	if n <= 0 {
		return true
	}
	found := 0
	scanFree(bs, capacity, from, to, skip, pool, func(int) bool {
		found++
		return found < n
	})
	return found >= n
}

// scanFree calls yield with each free device of pool, in order, until it
// returns false.
func scanFree(bs []Booking, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int, yield func(int) bool) {
	if !to.After(from) {
		to = from.Add(time.Nanosecond)
	}
	var small [64]bool
	held := small[:]
	if capacity > len(small) {
		held = make([]bool, capacity)
	}
	held = held[:max(capacity, 0)]
	for i := range bs {
		b := &bs[i]
		if !b.Start.Before(to) || !b.End.After(from) || (skip != nil && skip(b)) {
			continue
		}
		for _, d := range b.Devices {
			if d >= 0 && d < capacity {
				held[d] = true
			}
		}
	}
	try := func(d int) bool {
		if d < 0 || d >= capacity || held[d] {
			return true
		}
		held[d] = true // a device named twice in pool counts once
		return yield(d)
	}
	if len(pool) == 0 {
		for d := 0; d < capacity; d++ {
			if !try(d) {
				return
			}
		}
		return
	}
	for _, d := range pool {
		if !try(d) {
			return
		}
	}
}
