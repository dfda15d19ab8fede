package attest

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestSilentUntil: a summary extended with silence keeps its heartbeats,
// gains one gap over the silence, and its expected count and coverage
// cover the longer span; an end not after the silence's start changes
// nothing.
func TestSilentUntil(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	from, end := start.Add(10*time.Second), start.Add(40*time.Second)
	s := HeartbeatSummary{Count: 10, Expected: 10, Coverage: 0.9, Gaps: []terms.Interval{{Start: start.Add(2 * time.Second), End: start.Add(3 * time.Second)}}}
	got := s.SilentUntil(start, from, end, time.Second)
	if got.Count != 10 || got.Expected != 40 || got.Coverage < 0.2249 || got.Coverage > 0.2251 || len(got.Gaps) != 2 ||
		!got.Gaps[1].Start.Equal(from) || !got.Gaps[1].End.Equal(end) || len(s.Gaps) != 1 {
		t.Fatalf("extended summary %+v (original %+v)", got, s)
	}
	if same := s.SilentUntil(start, from, from, time.Second); same.Expected != 10 || len(same.Gaps) != 1 {
		t.Fatalf("no silence changed the summary: %+v", same)
	}
	// What a renter bills with it stops at the silence.
	l := terms.Lease{Start: start, End: start.Add(time.Hour)}
	if b := BillableSeconds(l, start, end, end, got); b < 8.99 || b > 9.01 {
		t.Fatalf("billable %.3f s, want the 10 s before the silence less the 1 s gap", b)
	}
}
