package load

import (
	"context"
	"testing"
	"time"
)

// TestLoadRunsEveryJob: a small network with two jobs in flight runs every
// posted job to success and reports consistent figures.
func TestLoadRunsEveryJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts daemons")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Nodes: 3, Renters: 1, GPUs: 2, InFlight: 2, Jobs: 4, JobDuration: 200 * time.Millisecond,
		BidWindow: 200 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *r)
	if r.Posted != 4 || r.Succeeded != 4 || r.SuccessRate() != 100 || r.Leased != 4 || r.LeasedPct() != 100 || r.LeasedRate < r.Throughput {
		t.Fatalf("posted %d, succeeded %d (reasons %v), want 4 of 4", r.Posted, r.Succeeded, r.Reasons)
	}
	if r.FinishedP50 < 200*time.Millisecond || r.FinishedP95 < r.FinishedP50 || r.FinishedMax < r.FinishedP95 || r.LeasedP50 > r.FinishedP50 {
		t.Fatalf("latencies out of order: leased p50 %v, finished p50 %v, p95 %v, max %v (a job runs 200ms)",
			r.LeasedP50, r.FinishedP50, r.FinishedP95, r.FinishedMax)
	}
	// Four jobs of 200ms two at a time: the slowest finished in the wall time.
	if r.FinishedMax > r.Wall {
		t.Fatalf("slowest job %v, longer than the run %v", r.FinishedMax, r.Wall)
	}
	// Two at a time, four jobs of 200ms take at least 400ms.
	if r.Wall < 400*time.Millisecond || r.Throughput <= 0 || r.Throughput > 2/0.2 {
		t.Fatalf("throughput %.2f jobs/s for %d jobs in %v", r.Throughput, r.Succeeded, r.Wall)
	}
}
