package history

import (
	"slices"
	"testing"
	"time"
)

// TestRingSamplesOncePerPeriodAndKeepsTheNewest: a sample is taken on the
// first call and then on the first call of each later minute, however far
// into it; a full ring drops its oldest; a clock that went back adds
// nothing.
func TestRingSamplesOncePerPeriodAndKeepsTheNewest(t *testing.T) {
	r := New[int](3)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := 0
	take := func(v int) func() int { return func() int { calls++; return v } }
	steps := []struct {
		at   time.Duration
		v    int
		took bool
	}{
		{10 * time.Second, 1, true},
		{30 * time.Second, 2, false},
		{Every - time.Nanosecond, 3, false},
		{Every, 4, true}, // 50 s after the last, but a new minute
		{2*Every + 59*time.Second, 5, true},
		{3*Every + time.Second, 6, true}, // 2 s after the last
		{2 * Every, 7, false},            // the clock went back
		{4*Every - time.Second, 8, false},
		{4 * Every, 9, true},
	}
	for _, s := range steps {
		if got := r.Sample(t0.Add(s.at), take(s.v)); got != s.took {
			t.Errorf("Sample at +%s = %v, want %v", s.at, got, s.took)
		}
	}
	if calls != 5 {
		t.Errorf("take called %d times for 5 samples", calls)
	}
	if got, want := r.All(), []int{5, 6, 9}; !slices.Equal(got, want) {
		t.Errorf("All() = %v, want %v (the newest 3, oldest first)", got, want)
	}
	if got := New[int](0); len(got.buf) != Keep {
		t.Errorf("New(0) holds %d, want Keep (%d)", len(got.buf), Keep)
	}
	if got := New[int](5).All(); got == nil || len(got) != 0 {
		t.Errorf("an empty ring's All() = %#v, want an empty slice", got)
	}
}

func TestNextIsTheNextPeriod(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for at, want := range map[time.Duration]time.Duration{0: Every, time.Second: Every - time.Second, Every - time.Millisecond: time.Millisecond} {
		if got := Next(t0.Add(at)); got != want {
			t.Errorf("Next(+%s) = %s, want %s", at, got, want)
		}
	}
}
