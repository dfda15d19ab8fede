package auction

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
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
	LeaseID     string     `json:"lease_id"`
	Start       time.Time  `json:"start"`
	End         time.Time  `json:"end"`
	GPUs        int        `json:"gpus"`
	Tier        terms.Tier `json:"tier"`
	Preemptible bool       `json:"preemptible"`
	// Devices are the device indices (0..capacity-1) the booking holds. On
	// Reserve they name the devices the booking may take, in order of
	// preference (empty: any device); the calendar books the first GPUs of
	// them that are free throughout the span, and the stored booking holds
	// exactly those.
	Devices []int `json:"devices,omitempty"`
	// Fraction is the share of one device a slice booking holds (one of
	// GPUFractions, with GPUs 1); 0 for whole devices. A slice booking
	// holds Slices of a device the calendar cuts into slices (SetSlices):
	// as many as its fraction of them, which the calendar picks as it
	// picks devices.
	Fraction float64 `json:"fraction,omitempty"`
	Slices   []int   `json:"slices,omitempty"`
}

// billed is the GPUs the booking counts for: a slice booking its fraction
// of one.
func (b *Booking) billed() float64 { return terms.BilledGPUs(b.GPUs, b.Fraction) }

// Calendar is a provider's lease book: the only authority on capacity. It
// books devices, indexed 0..capacity-1: no device is ever held by two
// overlapping bookings (so at no instant may the GPUs of overlapping
// bookings exceed its capacity), except the slices of a device cut into
// slices (SetSlices): overlapping slice bookings share such a device, each
// on its own slices, and a whole-device booking never overlaps a slice
// booking of its device. It is safe for concurrent use.
type Calendar struct {
	mu       sync.Mutex
	capacity int
	slices   []int // device -> slice count; 0 (or nil): sold whole
	books    map[string]Booking
	holds    map[string]hold  // key (a bid's nonce) -> tentative booking
	changed  broadcast.Signal // at each change of the bookings
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

// SetSlices cuts devices into slices, device index → slice count (one of
// SliceCounts), as the provider's policy says (Policy.SliceMap): slice
// bookings (Booking.Fraction) go only on such devices, whole-device
// bookings on any device. It fails, changing nothing, for a device outside
// the calendar or a count not in SliceCounts.
func (c *Calendar) SetSlices(m map[int]int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lay := make([]int, c.capacity)
	for d, n := range m {
		switch {
		case d < 0 || d >= c.capacity:
			return fmt.Errorf("%w: sliced device %d is not one of the %d gpus", ErrBadBooking, d, c.capacity)
		case !slices.Contains(terms.SliceCounts, n):
			return fmt.Errorf("%w: device %d cut into %d slices, want 2, 4 or 8", ErrBadBooking, d, n)
		}
		lay[d] = n
	}
	c.slices = lay
	return nil
}

// Slices is how many slices device d is cut into: 0 when it is booked
// whole only.
func (c *Calendar) Slices(d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sliceCount(c.slices, d)
}

// layout is how the calendar cuts each device (see SetSlices): the slice
// counts, by device index; nil when it sells every device whole.
func (c *Calendar) layout() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slices
}

func sliceCount(lay []int, d int) int {
	if d < 0 || d >= len(lay) {
		return 0
	}
	return lay[d]
}

// slicesFor is how many of a device's n slices a booking of fraction
// takes: 0 when its slices are larger than the fraction (or it is not
// sliced), so that a slice never holds more than its lease pays for.
func slicesFor(fraction float64, n int) int {
	k := fraction * float64(n)
	if n <= 0 || k < 1 || k != math.Trunc(k) {
		return 0
	}
	return int(k)
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
	delete(c.holds, key)
	if b.Fraction > 0 {
		// A slice hold holds the slices its award would take: those of
		// its first device free throughout (none: it holds that device
		// whole, see deviceUses).
		b.Slices = nil
		if len(b.Devices) > 0 {
			bs := c.list()
			for _, h := range c.holds {
				bs = append(bs, h.b)
			}
			scanFree(bs, c.slices, c.capacity, b.Start, b.End, nil, b.Devices[:1], b.Fraction, func(_ int, sl []int) bool {
				b.Slices = append([]int(nil), sl...)
				return false
			})
		}
	}
	c.holds[key] = hold{b: b, owner: owner, until: until}
}

// HeldBy is the number of GPUs the live holds of one owner's bids hold at
// now (a slice hold counting its fraction).
func (c *Calendar) HeldBy(owner string, now time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneHolds(now)
	n := 0.0
	for _, h := range c.holds {
		if h.owner == owner {
			n += h.b.billed()
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
	case b.Fraction != 0 && (!slices.Contains(terms.GPUFractions, b.Fraction) || b.GPUs != 1):
		return fmt.Errorf("%w: lease %s: fraction %v of %d gpus (want 0.125, 0.25 or 0.5 of one)", ErrBadBooking, b.LeaseID, b.Fraction, b.GPUs)
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
// throughout [b.Start, b.End); a slice booking (b.Fraction) on the slices
// of one sliced device that are free throughout, as many as its fraction
// of them, on a device no whole-device booking holds then. It fails with
// ErrOverbooked if there is no such room, with ErrDuplicateLease if
// b.LeaseID is already booked, and with ErrBadBooking for an empty lease
// id, an empty span, fewer than one GPU, a fraction that is not one of
// GPUFractions of one GPU, or a device outside the calendar (or named
// twice).
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
	devs, sl := pickRoom(bs, c.slices, c.capacity, b.Start, b.End, func(o *Booking) bool { return skip[o.LeaseID] }, b.Devices, b.GPUs, b.Fraction)
	if devs == nil {
		free := len(freeDevices(bs, c.slices, c.capacity, b.Start, b.End, func(o *Booking) bool { return skip[o.LeaseID] }, b.Devices, b.Fraction))
		used := peakUse(bs, b.Start, b.End, func(o *Booking) bool { return skip[o.LeaseID] })
		return nil, fmt.Errorf("%w: lease %s needs %s over [%s, %s), %d free of %d offered (%d of %d booked at peak)", ErrOverbooked,
			b.LeaseID, shapeText(b.GPUs, b.Fraction), b.Start.Format(time.RFC3339), b.End.Format(time.RFC3339), free, poolSize(b.Devices, c.capacity), used, c.capacity)
	}
	b.Devices, b.Slices = devs, sl
	for _, e := range evicted {
		delete(c.books, e.LeaseID)
	}
	c.books[b.LeaseID] = b
	c.changed.Notify()
	return evicted, nil
}

// Release drops a booking and reports whether it existed.
func (c *Calendar) Release(leaseID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.books[leaseID]
	delete(c.books, leaseID)
	if ok {
		c.changed.Notify()
	}
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
	} else {
		b.End = end
		c.books[leaseID] = b
	}
	c.changed.Notify()
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
	devs, sl := pickRoom(bs, c.slices, c.capacity, start, end, func(o *Booking) bool { return o.LeaseID == leaseID }, pool, old.GPUs, old.Fraction)
	if devs == nil {
		return Booking{}, fmt.Errorf("%w: lease %s cannot move to [%s, %s): no room for its %s", ErrOverbooked,
			leaseID, start.Format(time.RFC3339), end.Format(time.RFC3339), shapeText(old.GPUs, old.Fraction))
	}
	moved := old
	moved.Start, moved.End = start, end
	moved.Devices, moved.Slices = devs, sl
	c.books[leaseID] = moved
	c.changed.Notify()
	moved.Devices = append([]int(nil), moved.Devices...)
	moved.Slices = append([]int(nil), moved.Slices...)
	return moved, nil
}

// FreeDevices is the devices (among pool, in its order; all when pool is
// empty) that no booking holds at any instant of [from, to) (at the instant
// from if the span is empty), not even a slice of.
func (c *Calendar) FreeDevices(from, to time.Time, pool []int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return freeDevices(c.list(), c.slices, c.capacity, from, to, nil, pool, 0)
}

// HasRoom reports whether gpus devices at fraction (0: whole devices;
// else the fraction of one device) could be booked over [from, to) now,
// among pool (any device when empty).
func (c *Calendar) HasRoom(from, to time.Time, pool []int, gpus int, fraction float64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return hasFree(c.list(), c.slices, c.capacity, from, to, nil, pool, gpus, fraction)
}

// FreeFraction is the GPU share free at the instant at in the slices of
// devices that slice bookings share then (those FreeDevices leaves out for
// holding slices): room only slice bookings may take.
func (c *Calendar) FreeFraction(at time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	used := deviceUses(c.list(), c.capacity, at, at, nil)
	share := 0.0
	for d, u := range used {
		if n := sliceCount(c.slices, d); n > 0 && !u.whole && u.slices != 0 {
			share += float64(n-bits.OnesCount8(u.slices)) / float64(n)
		}
	}
	return share
}

// FreeGPUs is the minimum number of free GPUs over [from, to) (at the
// instant from if the span is empty): devices no booking holds, a device
// with a slice booked counting as held.
func (c *Calendar) FreeGPUs(from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	free := c.capacity - peakUse(c.list(), from, to, nil)
	if free < 0 {
		return 0
	}
	return free
}

// Changed returns a channel closed at the next change of the bookings (a
// booking made, released, cut short, moved or pruned): take it before
// reading them, so that no change is missed. Between changes, what is
// free changes only as time passes a booking's start or end (NextEdge).
func (c *Calendar) Changed() <-chan struct{} { return c.changed.Wait() }

// NextEdge is the first instant after at when a booking starts or ends:
// until then, and until the bookings change (Changed), FreeGPUs(t, t)
// answers for every t in [at, NextEdge) what it answers at at. It is the
// zero time when no booking starts or ends after at.
func (c *Calendar) NextEdge(at time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, b := range c.books {
		for _, t := range [2]time.Time{b.Start, b.End} {
			if t.After(at) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

// Occupancy is the fraction of the capacity booked at the instant at (1 for
// a calendar without capacity), a slice booking counting its fraction.
func (c *Calendar) Occupancy(at time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capacity == 0 {
		return 1
	}
	return billedAt(c.list(), at) / float64(c.capacity)
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
	b.Slices = append([]int(nil), b.Slices...)
	return b, ok
}

// Sharers is the other leases holding a slice of lease id's device at the
// instant at (none for a whole-device or unknown lease): while they run,
// the device is not the lease's alone to clear or test.
func (c *Calendar) Sharers(leaseID string, at time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.books[leaseID]
	if !ok || b.Fraction == 0 {
		return nil
	}
	var out []string
	for _, o := range c.list() {
		if o.LeaseID != leaseID && !at.Before(o.Start) && at.Before(o.End) && slices.ContainsFunc(o.Devices, func(d int) bool { return slices.Contains(b.Devices, d) }) {
			out = append(out, o.LeaseID)
		}
	}
	return out
}

// Prune drops bookings that ended at or before the instant before.
func (c *Calendar) Prune(before time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, b := range c.books {
		if !b.End.After(before) {
			delete(c.books, id)
			c.changed.Notify()
		}
	}
}

func (c *Calendar) list() []Booking {
	out := make([]Booking, 0, len(c.books))
	for _, b := range c.books {
		b.Devices = append([]int(nil), b.Devices...)
		b.Slices = append([]int(nil), b.Slices...)
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

// billedAt is the GPUs booked at the instant at, a slice booking counting
// its fraction.
func billedAt(bs []Booking, at time.Time) float64 {
	n := 0.0
	for i := range bs {
		if b := &bs[i]; !at.Before(b.Start) && at.Before(b.End) {
			n += b.billed()
		}
	}
	return n
}

// peakUse is the maximum number of devices booked at any instant of
// [from, to) (at the instant from if the span is empty), ignoring bookings
// for which skip returns true: a device counts once however many slice
// bookings share it, and a booking that names no devices counts its GPUs.
func peakUse(bs []Booking, from, to time.Time, skip func(*Booking) bool) int {
	if !to.After(from) {
		to = from.Add(time.Nanosecond)
	}
	type event struct {
		at  time.Time
		b   *Booking
		add bool
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
		ev = append(ev, event{s, b, true}, event{b.End, b, false})
	}
	// Half-open spans: at equal instants, releases come before holds.
	sort.Slice(ev, func(i, j int) bool {
		if !ev[i].at.Equal(ev[j].at) {
			return ev[i].at.Before(ev[j].at)
		}
		return !ev[i].add && ev[j].add
	})
	holders := map[int]int{} // device -> bookings holding it
	anonymous, peak := 0, 0
	for _, e := range ev {
		delta := 1
		if !e.add {
			delta = -1
		}
		if len(e.b.Devices) == 0 {
			anonymous += delta * e.b.GPUs
		}
		for _, d := range e.b.Devices {
			if holders[d] += delta; holders[d] <= 0 {
				delete(holders, d)
			}
		}
		peak = max(peak, anonymous+len(holders))
	}
	return peak
}

func poolSize(pool []int, capacity int) int {
	if len(pool) == 0 {
		return capacity
	}
	return len(pool)
}

// shapeText names what a booking asks for: "2 gpus", "0.25 of a gpu".
func shapeText(gpus int, fraction float64) string {
	if fraction > 0 {
		return strconv.FormatFloat(fraction, 'g', -1, 64) + " of a gpu"
	}
	return strconv.Itoa(gpus) + " gpus"
}

// freeDevices is the devices among pool (0..capacity-1 when pool is
// empty), in pool's order, with room over [from, to) for a booking of
// fraction (0: the whole device; see scanFree), ignoring bookings for
// which skip returns true. An empty span is the instant from. Devices
// outside 0..capacity-1 are never free.
func freeDevices(bs []Booking, lay []int, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int, fraction float64) []int {
	var out []int
	scanFree(bs, lay, capacity, from, to, skip, pool, fraction, func(d int, _ []int) bool {
		out = append(out, d)
		return true
	})
	return out
}

// hasFree reports whether gpus devices of pool have room for fraction
// over [from, to) (see freeDevices), without allocating for small hosts.
func hasFree(bs []Booking, lay []int, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int, gpus int, fraction float64) bool {
	if gpus <= 0 {
		return true
	}
	found := 0
	scanFree(bs, lay, capacity, from, to, skip, pool, fraction, func(int, []int) bool {
		found++
		return found < gpus
	})
	return found >= gpus
}

// pickRoom is the devices (and, for a slice booking, the slices of its
// one device) that a booking of gpus devices at fraction takes among pool
// over [from, to): the first with room; nil when there are not enough.
func pickRoom(bs []Booking, lay []int, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int, gpus int, fraction float64) ([]int, []int) {
	var devs, sl []int
	scanFree(bs, lay, capacity, from, to, skip, pool, fraction, func(d int, s []int) bool {
		devs = append(devs, d)
		sl = append(sl[:0], s...)
		return len(devs) < gpus
	})
	if len(devs) < gpus || gpus < 1 {
		return nil, nil
	}
	if fraction == 0 {
		sl = nil
	}
	return devs, sl
}

// deviceUse is what the bookings overlapping a span hold of one device:
// all of it, or the slices set in a bit mask (a device has at most 8).
type deviceUse struct {
	whole  bool
	slices uint8
}

// deviceUses is what the bookings of bs overlapping [from, to) (the
// instant from when the span is empty) hold of each device, ignoring
// bookings for which skip returns true. A slice booking that names no
// slices (a hold that found none) holds its device whole.
func deviceUses(bs []Booking, capacity int, from, to time.Time, skip func(*Booking) bool) []deviceUse {
	return fillUses(make([]deviceUse, 0, max(capacity, 0)), bs, capacity, from, to, skip)
}

// fillUses is deviceUses, in used's storage (a zero-length slice with room
// for capacity devices).
func fillUses(used []deviceUse, bs []Booking, capacity int, from, to time.Time, skip func(*Booking) bool) []deviceUse {
	if !to.After(from) {
		to = from.Add(time.Nanosecond)
	}
	used = used[:max(capacity, 0)]
	for i := range bs {
		b := &bs[i]
		if !b.Start.Before(to) || !b.End.After(from) || (skip != nil && skip(b)) {
			continue
		}
		for _, d := range b.Devices {
			if d < 0 || d >= capacity {
				continue
			}
			if b.Fraction == 0 || len(b.Slices) == 0 {
				used[d].whole = true
				continue
			}
			for _, s := range b.Slices {
				if s >= 0 && s < 8 {
					used[d].slices |= 1 << s
				}
			}
		}
	}
	return used
}

// scanFree calls yield with each device of pool (0..capacity-1 when pool
// is empty), in order, that has room over [from, to) for a booking of
// fraction, until it returns false: for a whole-device booking (fraction
// 0) a device no booking holds, not even a slice of; for a slice booking
// a device cut into slices (lay) no larger than the fraction that no
// whole-device booking holds, with the slices it would take (its lowest
// free ones; valid during the call only). A device named twice in pool
// counts once.
func scanFree(bs []Booking, lay []int, capacity int, from, to time.Time, skip func(*Booking) bool, pool []int, fraction float64, yield func(d int, slices []int) bool) {
	var small [64]deviceUse
	used := small[:0]
	if capacity > len(small) {
		used = make([]deviceUse, 0, capacity)
	}
	used = fillUses(used, bs, capacity, from, to, skip)
	var picked [8]int
	try := func(d int) bool {
		if d < 0 || d >= capacity || used[d].whole {
			return true
		}
		if fraction == 0 {
			if used[d].slices != 0 {
				return true
			}
			used[d].whole = true
			return yield(d, nil)
		}
		n := sliceCount(lay, d)
		need := slicesFor(fraction, n)
		got := picked[:0]
		for s := 0; s < n && len(got) < need; s++ {
			if used[d].slices&(1<<s) == 0 {
				got = append(got, s)
			}
		}
		if need == 0 || len(got) < need {
			return true
		}
		used[d].whole = true
		return yield(d, got)
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
