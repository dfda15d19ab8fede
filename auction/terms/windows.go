package terms

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxSpanRange bounds how far ahead window calendars are expanded.
const maxSpanRange = 400 * 24 * time.Hour

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "sunday": time.Sunday,
	"mon": time.Monday, "monday": time.Monday,
	"tue": time.Tuesday, "tues": time.Tuesday, "tuesday": time.Tuesday,
	"wed": time.Wednesday, "wednesday": time.Wednesday,
	"thu": time.Thursday, "thurs": time.Thursday, "thursday": time.Thursday,
	"fri": time.Friday, "friday": time.Friday,
	"sat": time.Saturday, "saturday": time.Saturday,
}

// parsedWindow is a Window in minutes of the day.
type parsedWindow struct {
	from, to int // minutes since midnight; to may be 24*60
	days     uint8
}

func parseClock(s string, allow24 bool) (int, error) {
	if len(s) != 5 || s[2] != ':' || !isDigits(s[:2]) || !isDigits(s[3:]) {
		return 0, fmt.Errorf("time %q: want HH:MM", s)
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[3]-'0')*10 + int(s[4]-'0')
	if m < 0 || m > 59 || h < 0 || h > 24 || (h == 24 && (m != 0 || !allow24)) {
		return 0, fmt.Errorf("time %q out of range", s)
	}
	return h*60 + m, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func parseWindow(w Window) (parsedWindow, error) {
	var pw parsedWindow
	var err error
	if pw.from, err = parseClock(w.From, false); err != nil {
		return pw, fmt.Errorf("from: %w", err)
	}
	if pw.to, err = parseClock(w.To, true); err != nil {
		return pw, fmt.Errorf("to: %w", err)
	}
	for _, d := range w.Days {
		wd, ok := dayNames[strings.ToLower(strings.TrimSpace(d))]
		if !ok {
			return pw, fmt.Errorf("unknown day %q (want mon..sun)", d)
		}
		pw.days |= 1 << uint(wd)
	}
	if pw.days == 0 {
		pw.days = 0x7f
	}
	return pw, nil
}

// spans appends the occurrences of w that intersect [from, to), clipped.
func (w parsedWindow) spans(dst []Interval, loc *time.Location, from, to time.Time) []Interval {
	lf := from.In(loc)
	day := time.Date(lf.Year(), lf.Month(), lf.Day()-1, 0, 0, 0, 0, loc)
	for !day.After(to) {
		if w.days&(1<<uint(day.Weekday())) != 0 {
			y, mo, d := day.Date()
			s := time.Date(y, mo, d, 0, w.from, 0, 0, loc)
			var e time.Time
			if w.to > w.from {
				e = time.Date(y, mo, d, 0, w.to, 0, 0, loc)
			} else {
				e = time.Date(y, mo, d+1, 0, w.to, 0, 0, loc)
			}
			if e.After(from) && s.Before(to) {
				dst = append(dst, clip(Interval{Start: s, End: e}, from, to))
			}
		}
		y, mo, d := day.Date()
		day = time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
	}
	return dst
}

func clip(iv Interval, from, to time.Time) Interval {
	if iv.Start.Before(from) {
		iv.Start = from
	}
	if iv.End.After(to) {
		iv.End = to
	}
	return iv
}

// mergeIntervals sorts and merges overlapping or touching intervals in
// place, dropping empty ones.
func mergeIntervals(ivs []Interval) []Interval {
	sort.Slice(ivs, func(a, b int) bool { return ivs[a].Start.Before(ivs[b].Start) })
	out := ivs[:0]
	for _, iv := range ivs {
		if !iv.End.After(iv.Start) {
			continue
		}
		if n := len(out); n > 0 && !iv.Start.After(out[n-1].End) {
			if iv.End.After(out[n-1].End) {
				out[n-1].End = iv.End
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

var zoneCache sync.Map // string -> *time.Location

func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := zoneCache.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zoneCache.Store(name, l)
	return l, nil
}

// location is the policy's zone, UTC if it is empty or unknown (Validate
// reports unknown zones).
func (p Policy) location() *time.Location {
	l, err := loadZone(p.Timezone)
	if err != nil {
		return time.UTC
	}
	return l
}

// Validate checks a policy: windows are "HH:MM" (To may be "24:00") with
// known day names, PriceFloor is a finite number >= 0, PeakMultiplier is 0
// (default 1.5) or >= 1, OccupancySurcharge >= 0, the time zone is known,
// reserved spans are non-empty, limits are not negative,
// InterruptibleDiscount is in [0, 1) and each slice rule cuts devices it
// alone names into 2, 4 or 8 slices.
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if math.IsNaN(p.PriceFloor) || math.IsInf(p.PriceFloor, 0) || p.PriceFloor < 0 {
		bad("price_floor must be a finite number >= 0, got %v", p.PriceFloor)
	}
	if math.IsNaN(p.PeakMultiplier) || math.IsInf(p.PeakMultiplier, 0) || (p.PeakMultiplier != 0 && p.PeakMultiplier < 1) {
		bad("peak_multiplier must be >= 1 (or 0 for the default 1.5), got %v", p.PeakMultiplier)
	}
	if math.IsNaN(p.OccupancySurcharge) || math.IsInf(p.OccupancySurcharge, 0) || p.OccupancySurcharge < 0 {
		bad("occupancy_surcharge must be a finite number >= 0, got %v", p.OccupancySurcharge)
	}
	for i, w := range p.PeakWindows {
		if _, err := parseWindow(w); err != nil {
			bad("peak_windows[%d]: %w", i, err)
		}
	}
	for i, w := range p.Availability {
		if _, err := parseWindow(w); err != nil {
			bad("availability[%d]: %w", i, err)
		}
	}
	for i, r := range p.Reserved {
		if !r.End.After(r.Start) {
			bad("reserved[%d]: end %s is not after start %s", i, r.End.Format(time.RFC3339), r.Start.Format(time.RFC3339))
		}
	}
	if _, err := loadZone(p.Timezone); err != nil {
		bad("timezone %q: %w", p.Timezone, err)
	}
	if p.MaxTempC < 0 || p.MaxPowerW < 0 || p.MaxLease < 0 {
		bad("max_temp_c, max_power_w and max_lease must not be negative")
	}
	switch p.NoPersist {
	case "", NoPersistOffer, NoPersistRequire:
	default:
		bad("no_persist must be %s, %s or empty (no-persist jobs not taken), got %q", NoPersistOffer, NoPersistRequire, p.NoPersist)
	}
	if d := p.InterruptibleDiscount; math.IsNaN(d) || d < 0 || d >= 1 {
		bad("interruptible_discount must be in [0, 1) (0.3: 30 %% off interruptible jobs), got %v", d)
	}
	sliced := map[int]bool{}
	for i, r := range p.Slices {
		if !slices.Contains(SliceCounts, r.Count) {
			bad("slices[%d]: count must be 2, 4 or 8, got %d", i, r.Count)
		}
		if len(r.Devices) == 0 {
			bad("slices[%d]: devices must name at least one device index", i)
		}
		for _, d := range r.Devices {
			if d < 0 || sliced[d] {
				bad("slices[%d]: device %d is negative or sliced twice", i, d)
			}
			sliced[d] = true
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("auction: invalid policy: %w", errors.Join(errs...))
}

// windowSpans expands windows over [from, to), merged and sorted. Windows
// that do not parse are ignored (Validate reports them).
func windowSpans(ws []Window, loc *time.Location, from, to time.Time) []Interval {
	if !to.After(from) {
		return nil
	}
	if to.Sub(from) > maxSpanRange {
		to = from.Add(maxSpanRange)
	}
	var out []Interval
	for _, w := range ws {
		pw, err := parseWindow(w)
		if err != nil {
			continue
		}
		out = pw.spans(out, loc, from, to)
	}
	return mergeIntervals(out)
}

func inWindows(ws []Window, loc *time.Location, at time.Time) bool {
	for _, w := range ws {
		pw, err := parseWindow(w)
		if err != nil {
			continue
		}
		if len(pw.spans(nil, loc, at, at.Add(time.Nanosecond))) > 0 {
			return true
		}
	}
	return false
}

// Available reports whether the machine is for sale at the instant at: it is
// inside an availability window (or the policy declares none) and not inside
// a Reserved span. Windows are evaluated in the policy's time zone.
func (p Policy) Available(at time.Time) bool {
	for _, r := range p.Reserved {
		if !at.Before(r.Start) && at.Before(r.End) {
			return false
		}
	}
	return len(p.Availability) == 0 || inWindows(p.Availability, p.location(), at)
}

// IsPeak reports whether at falls inside a peak window.
func (p Policy) IsPeak(at time.Time) bool {
	return inWindows(p.PeakWindows, p.location(), at)
}

// FreeSpans returns the sellable spans within [from, to): availability
// windows (or all of it when none are declared) minus Reserved spans,
// merged and sorted. Gaps between reservations are sold as backfill. The
// range is expanded at most 400 days ahead.
func (p Policy) FreeSpans(from, to time.Time) []Interval {
	if !to.After(from) {
		return nil
	}
	if to.Sub(from) > maxSpanRange {
		to = from.Add(maxSpanRange)
	}
	var free []Interval
	if len(p.Availability) == 0 {
		free = []Interval{{Start: from, End: to}}
	} else {
		free = windowSpans(p.Availability, p.location(), from, to)
	}
	for _, r := range p.Reserved {
		if !r.End.After(r.Start) {
			continue
		}
		next := free[:0:0]
		for _, f := range free {
			if !r.Start.Before(f.End) || !r.End.After(f.Start) {
				next = append(next, f)
				continue
			}
			if r.Start.After(f.Start) {
				next = append(next, Interval{Start: f.Start, End: r.Start})
			}
			if r.End.Before(f.End) {
				next = append(next, Interval{Start: r.End, End: f.End})
			}
		}
		free = next
	}
	return mergeIntervals(free)
}

// PeakSpans are the spans of [from, to) inside the policy's peak windows
// (PeakWindows, in its time zone), in order.
func (p Policy) PeakSpans(from, to time.Time) []Interval {
	return windowSpans(p.PeakWindows, p.location(), from, to)
}
