package replay

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// ChartWriter draws a report's utilisation chart to a file (package
// testnet/sim/replay/chart has one).
type ChartWriter func(r *Report, path string) error

// Command is the "sim" subcommand: replay a trace and print the report.
// With chart, it draws the utilisation chart too (--chart); without, it
// has no --chart flag (the gpumesh binary: go run ./testnet/sim draws it).
func Command(chart ChartWriter) *cli.Command {
	cmd := &cli.Command{
		Name:  "sim",
		Usage: "replay a GPU-cluster job trace through the market on a virtual clock",
		Description: "Replays a trace (job_id,submission_time,duration,num_gpu[,num_nodes], or an Alibaba\n" +
			"cluster-trace-gpu-v2023 pod list) against a seeded provider population under the market's auction,\n" +
			"a FIFO first-fit baseline and an upper bound, and reports fill rate, cost, waits, SLA violations,\n" +
			"preemptions and provider earnings. Fractions of a GPU are sold as slices of a device and jobs on\n" +
			"several machines run as gangs across providers; --flat replays the market without either.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace CSV file", Value: "../shared/traces/itp/cluster04.csv"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed for every random draw", Value: 1},
			&cli.IntFlag{Name: "providers", Usage: "number of providers", Value: DefaultSupply().Count},
			&cli.StringFlag{Name: "provider-mix", Usage: "provider kinds (nights, racks, always)", Value: DefaultSupply().Kinds.String()},
			&cli.StringFlag{Name: "tier-mix", Usage: "job tiers (gold, silver, bronze)", Value: DefaultDemand().Tiers.String()},
			&cli.StringFlag{Name: "region-mix", Usage: "job residency (any, eu, us, ap)", Value: DefaultDemand().Regions.String()},
			&cli.Float64Flag{Name: "price-scale", Usage: "multiplier on renters' price caps", Value: 1},
			&cli.DurationFlag{Name: "drain", Usage: "how long to run past the last submission", Value: 7 * 24 * time.Hour},
			&cli.StringSliceFlag{Name: "policy", Usage: "policies to compare (auction, fifo); default both"},
			&cli.BoolFlag{Name: "flat", Usage: "without the two shapes: round fractions of a GPU up to whole GPUs and place multi-machine jobs on one provider"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON instead of tables"},
			&cli.BoolFlag{Name: "progress", Usage: "show progress on stderr even when it is not a terminal"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("sim: unexpected arguments %q", c.Args().Slice())
			}
			cfg, err := configFromFlags(c)
			if err != nil {
				return err
			}
			rep, err := Run(cfg)
			if err != nil {
				return err
			}
			out := c.App.Writer
			if out == nil {
				out = os.Stdout
			}
			if c.Bool("json") {
				err = rep.WriteJSON(out)
			} else {
				err = rep.WriteTable(out)
			}
			if err != nil {
				return err
			}
			if path := c.String("chart"); chart != nil && path != "" {
				if err := chart(rep, path); err != nil {
					return err
				}
				fmt.Fprintf(errWriter(c), "chart written to %s\n", path)
			}
			return nil
		},
	}
	if chart != nil {
		cmd.Flags = append(cmd.Flags, &cli.StringFlag{Name: "chart", Usage: "utilisation chart file (.png, .svg or .pdf); empty to skip", Value: "sim-utilization.png"})
	} else {
		cmd.Description += "\nThe utilisation chart is drawn by the standalone simulator: go run ./testnet/sim --chart FILE."
	}
	return cmd
}

func errWriter(c *cli.Context) io.Writer {
	if c.App.ErrWriter != nil {
		return c.App.ErrWriter
	}
	return os.Stderr
}

func configFromFlags(c *cli.Context) (Config, error) {
	cfg := Config{
		TracePath: c.String("trace"),
		Seed:      c.Uint64("seed"),
		Demand:    DefaultDemand(),
		Supply:    DefaultSupply(),
		Drain:     c.Duration("drain"),
		Policies:  c.StringSlice("policy"),
		Flat:      c.Bool("flat"),
	}
	var err error
	if cfg.Supply.Kinds, err = ParseMix(c.String("provider-mix"), kindNames...); err != nil {
		return cfg, fmt.Errorf("sim: --provider-mix: %w", err)
	}
	if cfg.Demand.Tiers, err = ParseMix(c.String("tier-mix"), tierNames...); err != nil {
		return cfg, fmt.Errorf("sim: --tier-mix: %w", err)
	}
	if cfg.Demand.Regions, err = ParseMix(c.String("region-mix"), demandRegionSet...); err != nil {
		return cfg, fmt.Errorf("sim: --region-mix: %w", err)
	}
	if n := c.Int("providers"); n < 1 || n > 1_000_000 {
		return cfg, fmt.Errorf("sim: --providers %d out of range 1..1000000", n)
	} else {
		cfg.Supply.Count = n
	}
	if ps := c.Float64("price-scale"); ps <= 0 || ps > 1000 {
		return cfg, fmt.Errorf("sim: --price-scale %v must be in (0, 1000]", ps)
	} else {
		cfg.Demand.PriceScale = ps
	}
	if cfg.Drain <= 0 {
		return cfg, fmt.Errorf("sim: --drain %v must be positive", cfg.Drain)
	}
	for i, p := range cfg.Policies {
		cfg.Policies[i] = strings.ToLower(strings.TrimSpace(p))
	}
	if c.Bool("progress") || isTerminal(os.Stderr) {
		cfg.Progress = errWriter(c)
	}
	return cfg, nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
