package callmachine

import (
	"strconv"
	"testing"
)

// BenchmarkStepBid is what one bid costs the machine: a call of 16
// expected providers taking 16 bids, per bid.
func BenchmarkStepBid(b *testing.B) {
	expected := make([]string, 16)
	bids := make([]BidArrived, 16)
	for i := range expected {
		expected[i] = "p" + strconv.Itoa(i)
		bids[i] = BidArrived{Bid: bid(expected[i], "n"+expected[i])}
	}
	b.ReportAllocs()
	for b.Loop() {
		st, _ := rules.Step(State{}, Opened{Job: job, Expected: expected}, t0)
		for _, ev := range bids {
			st, _ = rules.Step(st, ev, t0)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bids)), "ns/bid")
}
