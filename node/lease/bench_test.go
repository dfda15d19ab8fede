package lease

import (
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestMarketFigures measures the market on the in-memory harness (10
// one-GPU providers, 10 ms jobs on 2 s leases that must start within 30 s,
// 500 ms bid windows): the sequential
// post→finished latency and the finished jobs per second with 20 jobs in
// flight from 4 renters. It is a measurement, run only with
// GPUMESH_MARKET_FIGURES=1; every job must still succeed.
func TestMarketFigures(t *testing.T) {
	t.Parallel()
	if os.Getenv("GPUMESH_MARKET_FIGURES") == "" {
		t.Skip("set GPUMESH_MARKET_FIGURES=1 to measure")
	}
	h := newHarness(t)
	var providers []*node
	for i := 0; i < 10; i++ {
		p := h.provider(provSpec{model: "A100", price: 1})
		providers = append(providers, p)
	}
	renters := []*node{h.renter(), h.renter(), h.renter(), h.renter()}
	mk := func() terms.Job {
		j := job(terms.Silver, 5, 2*time.Second, "run", "10", "0")
		j.BidWindow = 500 * time.Millisecond
		j.Deadline = time.Now().Add(30 * time.Second)
		return j
	}
	// run posts j on r and waits for it to finish; it returns how long
	// that took, or fails the test.
	run := func(r *node, j terms.Job) time.Duration {
		start := time.Now()
		v, err := r.tracker.Post(j)
		if err != nil {
			t.Errorf("post: %v", err)
			return 0
		}
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
	wait:
		for {
			next := h.changed.Wait()
			v, _ = r.tracker.View(v.Job.ID)
			if v.State == terms.JobFinished || v.State == terms.JobUnplaceable || v.State == terms.JobFailed {
				break
			}
			select {
			case <-next:
			case <-deadline.C:
				break wait
			}
		}
		if v.Run != terms.RunSucceeded {
			t.Errorf("job %s: state %s run %s %v", v.Job.ID, v.State, v.Run, v.Reasons)
		}
		return time.Since(start)
	}
	var lat []time.Duration
	for i := 0; i < 20; i++ {
		lat = append(lat, run(renters[0], mk()))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("sequential post→finished: p50 %v, p90 %v (%d jobs)", lat[len(lat)/2], lat[len(lat)*9/10], len(lat))

	const jobs, inFlight = 200, 20
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < jobs; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(r *node) {
			defer wg.Done()
			defer func() { <-sem }()
			run(r, mk())
		}(renters[i%len(renters)])
	}
	wg.Wait()
	took := time.Since(start)
	rejected, succeeded := 0, 0
	for _, r := range renters {
		for _, v := range r.tracker.List() {
			if v.State == terms.JobUnplaceable {
				rejected++
			}
			if v.Run == terms.RunSucceeded {
				succeeded++
			}
		}
	}
	succeeded -= len(lat) // the sequential ones
	t.Logf("%d jobs, %d in flight on 10 providers, %v: %d succeeded (%.1f/s), %d unplaceable", jobs, inFlight,
		took.Round(time.Millisecond), succeeded, float64(succeeded)/took.Seconds(), rejected)
	for _, r := range renters {
		t.Logf("renter counters %v, refused bids %v", r.counters.Snapshot(), r.tracker.Auction().Counters())
	}
	for _, p := range providers {
		s := p.provider.Stats()
		t.Logf("provider: calls %d bids %d won %d lost %d declined %d ineligible %v rejected %v", s.Calls, s.Bids, s.Won, s.Lost,
			s.Declined, s.Ineligible, s.Rejected)
	}
}
