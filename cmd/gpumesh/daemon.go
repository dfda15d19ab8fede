package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/urfave/cli/v2"
)

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
				path, must = config.Paths{Dir: dataDir}.Config(), false
			}
			cfg, err := config.LoadConfig(path, must)
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
			log, err := config.NewLogger(c.App.ErrWriter, cfg.LogLevel, c.String("log-format"))
			if err != nil {
				return err
			}
			daemonGC()
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			d, err := node.Start(ctx, node.Options{DataDir: dataDir, Config: cfg, Log: log})
			if err != nil {
				return err
			}
			return shutdown(d, sigs, <-sigs, log)
		},
	}
}

// shutdown stops the daemon after the first signal: a provider drains
// first (no new work; leases that end within provider.drain_grace finish,
// the others are handed back; reservations are kept for the next start),
// unless a second signal comes, which stops it at once.
func shutdown(d *node.Daemon, sigs <-chan os.Signal, sig os.Signal, log *slog.Logger) error {
	grace := d.DrainGrace()
	log.Info("shutting down: draining", "signal", sig, "grace", grace, "hint", "signal again to stop at once")
	dctx, cancel := context.WithTimeout(context.Background(), node.MaxDrainTime(grace))
	defer cancel()
	go func() {
		select {
		case s := <-sigs:
			log.Warn("second signal: stopping at once", "signal", s)
			cancel()
		case <-dctx.Done():
		}
	}()
	v, err := d.Drain(dctx, grace)
	if err != nil {
		log.Warn("drain cut short", "err", err)
	}
	counts := map[string]int{}
	for _, l := range v.Leases {
		counts[l.Action]++
	}
	log.Info("shutting down", "finished", counts[api.DrainFinish], "handed_back", counts[api.DrainHandBack], "reservations_kept", counts[api.DrainKeep])
	return d.Close()
}

// daemonGC makes the garbage collector collect at 200% heap growth instead
// of Go's 100%, unless the operator set GOGC. A daemon's live heap is
// small and a busy one allocates fast (a job's messages, signatures and
// records), so it collected often, each time for little: at 50% (this
// default before) 11 daemons on 2 cores spent 13.0-13.5 ms of CPU a job,
// at 200% 12.6-12.8 (126.6-128.0 jobs/s against 119.9-124.3), at 400% no
// better. The price is memory: after 600 jobs a renter held 126 MiB
// resident at 100% and 210 at 400%, a provider 60 and 80.
func daemonGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(200)
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the CLI version and, when running, the daemon's",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
			defer cancel()
			daemon, err := client(c).Version(ctx)
			if err != nil {
				daemon = ""
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, struct {
					CLI    string `json:"cli"`
					Daemon string `json:"daemon,omitempty"`
				}{node.Version, daemon})
			}
			fmt.Fprintf(c.App.Writer, "gpumesh %s\n", node.Version)
			if daemon != "" {
				fmt.Fprintf(c.App.Writer, "daemon  %s\n", daemon)
			}
			return nil
		},
	}
}
