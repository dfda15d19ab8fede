package load

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"time"
)

// Main runs a load measurement from command-line arguments and prints its
// figures (or JSON).
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	var c Config
	fs.IntVar(&c.Nodes, "nodes", 11, "daemons on loopback, renters included")
	fs.IntVar(&c.Renters, "renters", 0, "renters among them (default 2, or 1 with -testnet)")
	fs.IntVar(&c.GPUs, "gpus", 4, "GPUs per provider")
	fs.IntVar(&c.InFlight, "inflight", 20, "jobs kept in flight (1: sequential)")
	fs.IntVar(&c.Jobs, "jobs", 0, "jobs posted in all (default 5 × inflight)")
	fs.DurationVar(&c.JobDuration, "duration", time.Second, "how long each job runs")
	fs.DurationVar(&c.BidWindow, "bid-window", 500*time.Millisecond, "bid window of each job")
	fs.DurationVar(&c.Timeout, "timeout", 0, "how long one job may take, post to finish, before it counts as lost (default 30s + duration)")
	fs.StringVar(&c.Dir, "dir", "", "data dirs (default: a temporary dir)")
	fs.StringVar(&c.Testnet, "testnet", "", "drive a running testnet's daemons (testnet/up.sh's dir) over their sockets instead of starting any: -nodes, -gpus and -executor are the testnet's, -renters its first nodes (default 1)")
	fs.StringVar(&c.Executor, "executor", ExecProcess, "what runs the jobs: "+ExecProcess+" (the sandboxed process executor) or "+ExecNoop+" (no process: the market's own cost)")
	asJSON := fs.Bool("json", false, "print a JSON report")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (every daemon) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := Run(ctx, c)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	c = r.Config
	if c.Testnet != "" {
		fmt.Fprintf(stdout, "testnet %s: %d daemons (%d renters), %d in flight, %d jobs of %v, bid window %v\n",
			c.Testnet, c.Nodes, c.Renters, c.InFlight, c.Jobs, c.JobDuration, c.BidWindow)
	} else {
		fmt.Fprintf(stdout, "%d nodes (%d renters, %d providers × %d GPUs), %d in flight, %d jobs of %v (%s executor), bid window %v\n",
			c.Nodes, c.Renters, c.Nodes-c.Renters, c.GPUs, c.InFlight, c.Jobs, c.JobDuration, c.Executor, c.BidWindow)
	}
	fmt.Fprintf(stdout, "finished: %d/%d (%.1f%%) in %v: %.2f jobs/s\n", r.Succeeded, r.Posted, r.SuccessRate(),
		r.Wall.Round(time.Millisecond), r.Throughput)
	fmt.Fprintf(stdout, "leased: %d/%d (%.1f%%): %.2f leased jobs/s\n", r.Leased, r.Posted, r.LeasedPct(), r.LeasedRate)
	fmt.Fprintf(stdout, "post → finished: p50 %v, p95 %v, max %v; post → leased: p50 %v, p95 %v\n",
		r.FinishedP50.Round(time.Millisecond), r.FinishedP95.Round(time.Millisecond), r.FinishedMax.Round(time.Millisecond),
		r.LeasedP50.Round(time.Millisecond), r.LeasedP95.Round(time.Millisecond))
	if c.Testnet != "" {
		fmt.Fprintf(stdout, "CPU: %.2f s, %.1f ms per job (every daemon %.2f s, the jobs' processes they reaped %.2f s of it; this load generator %.2f s)\n",
			r.CPU.Seconds(), float64(r.CPUPerJob())/float64(time.Millisecond), (r.CPU - r.DriverCPU).Seconds(), r.JobCPU.Seconds(), r.DriverCPU.Seconds())
	} else {
		fmt.Fprintf(stdout, "CPU: %.2f s, %.1f ms per job (every daemon, this load generator and the jobs' processes, which took %.2f s)\n",
			r.CPU.Seconds(), float64(r.CPUPerJob())/float64(time.Millisecond), r.JobCPU.Seconds())
	}
	var reasons []string
	for k := range r.Reasons {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(stdout, "  not finished: %d × %s\n", r.Reasons[k], k)
	}
	return nil
}
