package main

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/urfave/cli/v2"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the local node: peer ID, addresses, peers, GPUs, advertised record",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			s, err := client(c).Status(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, s)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "peer id:   %s\n", s.PeerID)
			fmt.Fprintf(w, "version:   %s (up %s)\n", s.Version, s.Uptime)
			fmt.Fprintf(w, "data dir:  %s\n", s.DataDir)
			fmt.Fprintf(w, "region:    %s\n", orDash(s.Region))
			fmt.Fprintf(w, "peers:     %d\n", s.Peers)
			fmt.Fprintf(w, "reachable: %s\n", orDash(s.Reachability))
			for _, a := range s.Addrs {
				fmt.Fprintf(w, "addr:      %s\n", a)
			}
			role := "renter"
			if s.Provider {
				role = "provider + renter"
			}
			if s.Draining {
				role += " (draining: not bidding; `gpumesh provider undrain` bids again)"
			}
			fmt.Fprintf(w, "role:      %s\n", role)
			if s.Executor != "" {
				fmt.Fprintf(w, "executor:  %s\n", s.Executor)
			}
			for i, g := range s.GPUs {
				src := "declared"
				if g.Detected {
					src = "detected"
				}
				fmt.Fprintf(w, "gpu %d:     %s %dGB (%s)%s%s\n", i, g.Model, g.VRAMGB, src, prefixed(" ", g.UUID), prefixed(", ", migMode(g)))
				for k, in := range migInstances(g) {
					fmt.Fprintf(w, "  mig %d.%d:  %s %dMB %s\n", i, k, orDash(in.Profile), in.MemoryMB, in.UUID)
				}
			}
			if s.Advertised != nil {
				fmt.Fprintf(w, "advertised: seq %d, expires %s, price floor $%.2f/GPU-h\n", s.Advertised.Seq,
					s.Advertised.ExpiresAt.Format(time.RFC3339), s.Advertised.Policy.PriceFloor)
			} else if s.Provider {
				fmt.Fprintln(w, "advertised: not yet")
			}
			return nil
		},
	}
}

func peersCommand() *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "list connected peers",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			ps, err := client(c).Peers(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, ps)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "PEER\tADDRESS")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\n", p.ID, strings.Join(p.Addrs, ","))
			}
			return tw.Flush()
		},
	}
}

// queryFlags names the providers flag that sets each of terms.Query's
// fields.
var queryFlags = map[string]string{"gpu": "gpu", "region": "region", "min_vram": "min-vram", "gpu_count": "count"}

func providersCommand() *cli.Command {
	return &cli.Command{
		Name:  "providers",
		Usage: "discover providers through the DHT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "gpu", Usage: "GPU model, e.g. H100"},
			&cli.StringFlag{Name: "region", Usage: "region or region prefix, e.g. eu"},
			&cli.IntFlag{Name: "min-vram", Usage: "minimum VRAM per GPU in GB"},
			&cli.IntFlag{Name: "count", Usage: "minimum number of matching GPUs"},
			noTruncFlag(),
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			q := terms.Query{GPU: c.String("gpu"), Region: c.String("region"), MinVRAM: c.Int("min-vram"), GPUCount: c.Int("count")}
			if err := q.Validate(); err != nil {
				var parts []string
				for _, fe := range terms.FieldErrors(err) {
					parts = append(parts, fmt.Sprintf("invalid --%s: %s", queryFlags[fe.Field], fe.Problem))
				}
				return errors.New(strings.Join(parts, "; "))
			}
			ps, err := client(c).Providers(c.Context, q)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, ps)
			}
			peer := peerNames(c)
			tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "PEER\tREGION\tGPUS\tAVAILABLE\tPRICE $/GPU-h\tFLOOR $/GPU-h\tRELIABILITY\tPREEMPTIBLE\tFINGERPRINT\tEXPIRES")
			for _, p := range ps {
				free := "-"
				if p.FreeGPUs != nil {
					free = strconv.Itoa(*p.FreeGPUs)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%d\t%.2f\t%.2f\t%.3f\t%v\t%s\t%s\n", peer(p.Peer), orDash(p.Region), gpuSummary(p.GPUs),
					free, len(p.GPUs), p.PriceNow, p.Policy.PriceFloor, p.Reliability, p.Policy.AcceptPreemptible, shortHash(p.Fingerprint),
					time.Until(p.ExpiresAt).Round(time.Second))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%d provider(s)\n", len(ps))
			return nil
		},
	}
}

func countersCommand() *cli.Command {
	return &cli.Command{
		Name:  "counters",
		Usage: "show the market's event counters (bids, rejections by reason, ...)",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			m, err := client(c).Counters(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, m)
			}
			names := make([]string, 0, len(m))
			for k := range m {
				names = append(names, k)
			}
			sort.Strings(names)
			tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "COUNTER\tCOUNT")
			for _, k := range names {
				fmt.Fprintf(tw, "%s\t%d\n", k, m[k])
			}
			return tw.Flush()
		},
	}
}

func gpuSummary(gs []terms.GPU) string {
	type key struct {
		m string
		v int
	}
	counts := map[key]int{}
	var order []key
	for _, g := range gs {
		k := key{g.Model, g.VRAMGB}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%dx%s/%dGB", counts[k], k.m, k.v))
	}
	return strings.Join(parts, ",")
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return orDash(h)
}

// migMode is how a detected device stands with MIG ("MIG: enabled, 2
// instances", "MIG: disabled", "MIG: absent"); empty for a declared one,
// which the driver has not been asked about.
func migMode(g terms.GPU) string {
	m := g.MIG
	switch {
	case !g.Detected:
		return ""
	case m == nil:
		return "MIG: absent"
	case !m.Enabled && m.Pending:
		return "MIG: disabled (enabled after the next GPU reset)"
	case !m.Enabled:
		return "MIG: disabled"
	}
	s := fmt.Sprintf("MIG: enabled, %d instance", len(m.Instances))
	if len(m.Instances) != 1 {
		s += "s"
	}
	if !m.Pending {
		s += " (disabled after the next GPU reset)"
	}
	return s
}

// migInstances is a device's MIG instances while it is in MIG mode.
func migInstances(g terms.GPU) []terms.MIGInstance {
	if !g.MIG.Partitioned() {
		return nil
	}
	return g.MIG.Instances
}
