package scale

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Main runs the scale measurement from command-line arguments and prints a
// table (or JSON): one row per network size and number of eligible
// providers.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	nodes := fs.String("nodes", "100,500", "network sizes (comma-separated)")
	eligible := fs.String("eligible", "5,25,100", "eligible providers per network (comma-separated; sizes too small for one are skipped)")
	jobs := fs.Int("jobs", 5, "jobs measured per network")
	window := fs.Duration("bid-window", 300*time.Millisecond, "bid window of each job")
	latency := fs.Duration("latency", 0, "one-way link latency")
	asJSON := fs.Bool("json", false, "print JSON reports")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, err := ints(*nodes)
	if err != nil {
		return fmt.Errorf("-nodes: %w", err)
	}
	es, err := ints(*eligible)
	if err != nil {
		return fmt.Errorf("-eligible: %w", err)
	}
	var reps []*Report
	row := "%6v %9v %16v %13v %10v %6v %7v %15v %8v %9v\n"
	if !*asJSON {
		fmt.Fprintf(stdout, row, "nodes", "eligible", "gossip msgs/job", "per eligible", "receivers", "bids", "leased", "post→lease p50", "p95", "setup")
	}
	for _, n := range ns {
		for _, e := range es {
			if e > n-1 {
				continue
			}
			r, err := Run(ctx, Config{Nodes: n, Eligible: e, Jobs: *jobs, BidWindow: *window, Latency: *latency})
			if err != nil {
				return fmt.Errorf("%d nodes, %d eligible: %w", n, e, err)
			}
			reps = append(reps, r)
			if !*asJSON {
				fmt.Fprintf(stdout, row, n, e, fmt.Sprintf("%.1f", r.Gossip), fmt.Sprintf("%.1f", r.Gossip/float64(e)),
					fmt.Sprintf("%.1f", r.Receivers), fmt.Sprintf("%.1f", r.Bids), fmt.Sprintf("%d/%d", r.Leased, len(r.Jobs)),
					r.P50.Round(time.Millisecond), r.P95.Round(time.Millisecond), r.Setup.Round(time.Millisecond))
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reps)
	}
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}
