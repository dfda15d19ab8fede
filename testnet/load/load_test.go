package load

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/runtime"
)

// TestLoadRunsEveryJob: a small network with two jobs in flight runs every
// posted job to success and reports consistent figures.
func TestLoadRunsEveryJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts daemons")
	}
	for _, exec := range []string{ExecProcess, ExecNoop} {
		t.Run(exec, func(t *testing.T) { loadRunsEveryJob(t, exec) })
	}
}

func loadRunsEveryJob(t *testing.T, exec string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Run(ctx, Config{Nodes: 3, Renters: 1, GPUs: 2, InFlight: 2, Jobs: 4, JobDuration: 200 * time.Millisecond,
		BidWindow: 200 * time.Millisecond, Dir: t.TempDir(), Executor: exec})
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU <= 0 || r.JobCPU < 0 || r.JobCPU > r.CPU || r.CPUPerJob() != r.CPU/4 {
		t.Fatalf("CPU %v (jobs' processes %v), %v per job", r.CPU, r.JobCPU, r.CPUPerJob())
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

// TestNoopExecutor: a no-op job ends as its `sleep` says, exited 0; a
// stop or the deadline ends it early, as a stopped process; anything but
// `sleep SECONDS` is refused.
func TestNoopExecutor(t *testing.T) {
	e := noopExecutor{dir: t.TempDir()}
	h, err := e.Start(context.Background(), runtime.Spec{Command: []string{"sleep", "0.05"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := h.Wait()
	if res.ExitCode != 0 || res.Reason != runtime.ReasonExited || res.Ended.Sub(res.Started) < 50*time.Millisecond || h.WorkDir() != e.dir {
		t.Fatalf("sleep 0.05: %+v in %s", res, h.WorkDir())
	}
	h, err = e.Start(context.Background(), runtime.Spec{Command: []string{"sleep", "3600"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if res := h.Wait(); res.Reason != runtime.ReasonStopped || res.ExitCode != 143 {
		t.Fatalf("stopped: %+v", res)
	}
	h, err = e.Start(context.Background(), runtime.Spec{Command: []string{"sleep", "3600"}, Deadline: time.Now().Add(20 * time.Millisecond)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := h.Wait(); res.Reason != runtime.ReasonDeadline || res.ExitCode != 143 {
		t.Fatalf("at the deadline: %+v", res)
	}
	for _, cmd := range [][]string{{"true"}, {"sleep", "x"}, {"sleep", "-1"}, {"sleep", "1", "2"}} {
		if _, err := e.Start(context.Background(), runtime.Spec{Command: cmd}, nil, nil); err == nil {
			t.Fatalf("%q started", cmd)
		}
	}
	if err := (&Config{Nodes: 3, Executor: "docker"}).defaults(); err == nil {
		t.Fatal("executor docker accepted")
	}
}

// TestLoadDrivesARunningTestnet: against a running testnet's dir (its
// pids file and its nodes' sockets) the run starts no daemon, drives the
// testnet's renter and reads its daemons' CPU. Here the "testnet" is
// three daemons in this process, laid out as testnet/up.sh lays them out.
func TestLoadDrivesARunningTestnet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts daemons")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	net := Config{Nodes: 3, Renters: 1, GPUs: 2, Executor: ExecNoop}
	ds, err := startNetwork(ctx, net, dir)
	defer func() {
		for i := len(ds) - 1; i >= 0; i-- {
			_ = ds[i].Close()
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	var pids strings.Builder
	for i := range ds {
		fmt.Fprintf(&pids, "%d node%d\n", os.Getpid(), i)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids"), []byte(pids.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Run(ctx, Config{Testnet: dir, InFlight: 2, Jobs: 4, JobDuration: 200 * time.Millisecond, BidWindow: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Nodes != 3 || r.Config.Renters != 1 {
		t.Fatalf("testnet read as %d nodes, %d renters; want 3 and 1", r.Config.Nodes, r.Config.Renters)
	}
	if r.Posted != 4 || r.Succeeded != 4 {
		t.Fatalf("posted %d, succeeded %d (reasons %v), want 4 of 4", r.Posted, r.Succeeded, r.Reasons)
	}
	// The daemons are this process, so /proc's count of their CPU (in
	// 10 ms ticks) is the driver's own, read with getrusage.
	daemons := r.CPU - r.DriverCPU
	if r.DriverCPU <= 0 || daemons <= 0 || (daemons-r.DriverCPU).Abs() > 40*time.Millisecond {
		t.Fatalf("CPU %v: the daemons' %v, the driver's %v (the same process)", r.CPU, daemons, r.DriverCPU)
	}
	for _, bad := range []string{"", "x node0\n", "12\n"} {
		if err := os.WriteFile(filepath.Join(dir, "pids"), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Run(ctx, Config{Testnet: dir}); err == nil || !strings.Contains(err.Error(), "pids") {
			t.Errorf("pids file %q: %v, want a pids error", bad, err)
		}
	}
	if _, err := Run(ctx, Config{Testnet: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "testnet/up.sh") {
		t.Errorf("a dir with no testnet: %v", err)
	}
}
