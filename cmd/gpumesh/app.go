package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/urfave/cli/v2"
)

func newApp(stdout, stderr io.Writer, unknown *bool) *cli.App {
	app := &cli.App{
		Name:                 "gpumesh",
		Usage:                "peer-to-peer marketplace for idle GPU time",
		Version:              node.Version,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Aliases: []string{"d"}, Usage: "daemon data directory", EnvVars: []string{"GPUMESH_HOME"}, Value: node.DefaultDataDir()},
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%v (see `gpumesh %s --help`)", err, c.Command.FullName())
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "gpumesh: unknown command %q (see `gpumesh --help`)\n", name)
			*unknown = true
		},
		Commands: []*cli.Command{
			daemonCommand(),
			statusCommand(),
			peersCommand(),
			providersCommand(),
			versionCommand(),
		},
	}
	app.Commands = append(app.Commands, marketCommands()...)
	for _, c := range app.Commands {
		setUsageErrors(c)
	}
	return app
}

func setUsageErrors(c *cli.Command) {
	c.OnUsageError = func(cc *cli.Context, err error, _ bool) error {
		return fmt.Errorf("%v (see `%s --help`)", err, commandPath(cc))
	}
	for _, s := range c.Subcommands {
		setUsageErrors(s)
	}
}

func client(c *cli.Context) *api.Client { return api.NewClient(c.String("data-dir")) }

func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print JSON"} }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see `%s --help`)", c.Args().First(), commandPath(c))
	}
	return nil
}

func daemonCommand() *cli.Command {
	return &cli.Command{
		Name:  "daemon",
		Usage: "run the gpumesh daemon in the foreground",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (YAML); default <data-dir>/config.yaml if present", EnvVars: []string{"GPUMESH_CONFIG"}},
			&cli.StringSliceFlag{Name: "listen", Usage: "libp2p listen multiaddr (repeatable); overrides the config"},
			&cli.StringSliceFlag{Name: "bootstrap", Usage: "bootstrap peer multiaddr ending in /p2p/<id> (repeatable); added to the config's"},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error; overrides the config"},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			dataDir := c.String("data-dir")
			path, must := c.String("config"), true
			if path == "" {
				path, must = node.Paths{Dir: dataDir}.Config(), false
			}
			cfg, err := node.LoadConfig(path, must)
			if err != nil {
				return err
			}
			if l := c.StringSlice("listen"); len(l) > 0 {
				cfg.Listen = l
			}
			cfg.Bootstrap = append(cfg.Bootstrap, c.StringSlice("bootstrap")...)
			if l := c.String("log-level"); l != "" {
				cfg.LogLevel = l
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("config: %w", err)
			}
			log, err := node.NewLogger(c.App.ErrWriter, cfg.LogLevel, c.String("log-format"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			d, err := node.Start(ctx, node.Options{DataDir: dataDir, Config: cfg, Log: log})
			if err != nil {
				return err
			}
			<-ctx.Done()
			log.Info("shutting down")
			return d.Close()
		},
	}
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the local node: peer ID, addresses, peers, GPUs, advertised record",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			var s api.StatusInfo
			if err := client(c).Do(c.Context, http.MethodGet, "/status", nil, nil, &s); err != nil {
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
			fmt.Fprintf(w, "role:      %s\n", role)
			if s.Executor != "" {
				fmt.Fprintf(w, "executor:  %s\n", s.Executor)
			}
			for i, g := range s.GPUs {
				src := "declared"
				if g.Detected {
					src = "detected"
				}
				fmt.Fprintf(w, "gpu %d:     %s %dGB (%s)%s\n", i, g.Model, g.VRAMGB, src, prefixed(" ", g.UUID))
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
			var ps []api.PeerInfo
			if err := client(c).Do(c.Context, http.MethodGet, "/peers", nil, nil, &ps); err != nil {
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

func providersCommand() *cli.Command {
	return &cli.Command{
		Name:  "providers",
		Usage: "discover providers through the DHT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "gpu", Usage: "GPU model, e.g. H100"},
			&cli.StringFlag{Name: "region", Usage: "region or region prefix, e.g. eu"},
			&cli.IntFlag{Name: "min-vram", Usage: "minimum VRAM per GPU in GB"},
			&cli.IntFlag{Name: "count", Usage: "minimum number of matching GPUs"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Int("min-vram") < 0 {
				return fmt.Errorf("--min-vram must be >= 0, got %d", c.Int("min-vram"))
			}
			if c.Int("count") < 0 {
				return fmt.Errorf("--count must be >= 0, got %d", c.Int("count"))
			}
			q := url.Values{}
			for _, k := range []string{"gpu", "region"} {
				if v := c.String(k); v != "" {
					q.Set(k, v)
				}
			}
			if v := c.Int("min-vram"); v > 0 {
				q.Set("min_vram", strconv.Itoa(v))
			}
			if v := c.Int("count"); v > 0 {
				q.Set("count", strconv.Itoa(v))
			}
			var caps []auction.Capability
			if err := client(c).Do(c.Context, http.MethodGet, "/providers", q, nil, &caps); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, caps)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "PEER\tREGION\tGPUS\tFLOOR $/GPU-h\tPREEMPTIBLE\tFINGERPRINT\tEXPIRES")
			for _, cp := range caps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%v\t%s\t%s\n", cp.Peer, orDash(cp.Region), gpuSummary(cp.GPUs),
					cp.Policy.PriceFloor, cp.Policy.AcceptPreemptible, shortHash(cp.Fingerprint), time.Until(cp.ExpiresAt).Round(time.Second))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%d provider(s)\n", len(caps))
			return nil
		},
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the CLI version and, when running, the daemon's",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "gpumesh %s\n", node.Version)
			var v map[string]string
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
			defer cancel()
			if err := client(c).Do(ctx, http.MethodGet, "/version", nil, nil, &v); err == nil {
				fmt.Fprintf(c.App.Writer, "daemon  %s\n", v["version"])
			}
			return nil
		},
	}
}

func gpuSummary(gs []auction.GPU) string {
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

var _ = os.Stdout
