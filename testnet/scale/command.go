package scale

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
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
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	if !*asJSON {
		fmt.Fprintln(tw, "nodes\teligible\tgossip msgs/job\tper eligible\treceivers\tbids\tleased\tpost→lease p50\tp95\tsetup\t")
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
				fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%d/%d\t%v\t%v\t%v\t\n", n, e, r.Gossip, r.Gossip/float64(e), r.Receivers, r.Bids,
					r.Leased, len(r.Jobs), r.P50.Round(time.Millisecond), r.P95.Round(time.Millisecond), r.Setup.Round(time.Millisecond))
				_ = tw.Flush()
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reps)
	}
	return tw.Flush()
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
