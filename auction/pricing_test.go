package auction

import (
	"math"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// 2026-12-07 is a Monday.
var monday = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

// at is monday plus day days, at hhmm ("HH:MM", "24:00" allowed).
func at(day int, hhmm string) time.Time {
	h, m, err := clock(hhmm)
	if err != nil {
		panic(err)
	}
	return monday.AddDate(0, 0, day).Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
}

func clock(hhmm string) (h, m int, err error) {
	t, err := time.Parse("15:04", hhmm)
	if hhmm == "24:00" {
		return 24, 0, nil
	}
	return t.Hour(), t.Minute(), err
}

func validJob() terms.Job {
	return terms.Job{Tier: terms.Silver, MaxPrice: 2, GPUCount: 1, Duration: time.Hour, Run: terms.RunSpec{Command: []string{"python", "train.py"}}}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	p := terms.Policy{PriceFloor: 2, PeakWindows: []terms.Window{{From: "09:00", To: "17:00"}}, PeakMultiplier: 2, OccupancySurcharge: 0.5}
	cases := []struct {
		name  string
		p     terms.Policy
		start time.Time
		d     time.Duration
		occ   float64
		want  float64
	}{
		{"off peak idle", p, at(0, "18:00"), 2 * time.Hour, 0, 2},
		{"all peak", p, at(0, "10:00"), 2 * time.Hour, 0, 4},
		{"half peak", p, at(0, "16:00"), 2 * time.Hour, 0, 3},
		{"quarter peak", p, at(0, "08:00"), 4 * time.Hour, 0, 2 * (1 + 0.75)},
		{"full occupancy", p, at(0, "18:00"), time.Hour, 1, 3},
		{"half occupancy, all peak", p, at(0, "10:00"), time.Hour, 0.5, 4 * 1.25},
		{"occupancy clamped", p, at(0, "18:00"), time.Hour, 7, 3},
		{"default multiplier", terms.Policy{PriceFloor: 2, PeakWindows: p.PeakWindows}, at(0, "10:00"), time.Hour, 0, 3},
		{"instant quote at peak", p, at(0, "10:00"), 0, 0, 4},
	}
	for _, c := range cases {
		if got := Quote(c.p, c.start, c.d, c.occ, false); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Quote = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRegionSatisfies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		want, have string
		ok         bool
	}{
		{"", "us-east", true}, {"eu", "eu", true}, {"eu", "eu-west", true}, {"EU", "eu-central", true},
		{"eu", "europe-x", false}, {"eu-west", "eu-central", false}, {"eu-west", "eu", false}, {"us", "", false},
	}
	for _, c := range cases {
		if got := regionSatisfies(c.want, c.have); got != c.ok {
			t.Errorf("regionSatisfies(%q, %q) = %v", c.want, c.have, got)
		}
	}
}
