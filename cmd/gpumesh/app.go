package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/testnet/sim/replay"
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
			&cli.StringFlag{Name: "data-dir", Aliases: []string{"d"}, Usage: "daemon data directory", EnvVars: []string{"GPUMESH_HOME"}, Value: config.DefaultDataDir()},
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%v (see `gpumesh %s --help`)", err, c.Command.FullName())
		},
		// run prints the error and exits with its code (cli.Exit's, or 1):
		// urfave/cli's own handler would print it and exit the process.
		ExitErrHandler: func(*cli.Context, error) {},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "gpumesh: unknown command %q (see `gpumesh --help`)\n", name)
			*unknown = true
		},
		Commands: []*cli.Command{
			daemonCommand(),
			statusCommand(),
			peersCommand(),
			providersCommand(),
			countersCommand(),
			versionCommand(),
			jobCommand(),
			serveCommand(),
			bidsCommand(),
			providerCommand(),
			doctorCommand(),
			reputationCommand(),
			verifyCommand(),
			gpuScrubCommand(),
			ledgerCommand(),
			identityCommand(),
			artifactCommand(),
			replay.Command(nil), // gpumesh sim (charts: go run ./testnet/sim): the market replay lives with the simulator
		},
	}
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

// jobArg returns the single ID-like argument of c, with a usage hint when it
// is missing or followed by more arguments.
func jobArg(c *cli.Context, what string) (string, error) {
	usage := commandPath(c)
	if c.Command.ArgsUsage != "" {
		usage += " " + c.Command.ArgsUsage
	}
	args := c.Args().Slice()
	if len(args) == 0 || strings.TrimSpace(args[0]) == "" {
		return "", fmt.Errorf("missing %s (usage: %s)", what, usage)
	}
	if len(args) > 1 {
		return "", fmt.Errorf("unexpected argument %q (usage: %s)", args[1], usage)
	}
	return args[0], nil
}

// commandPath is the full invocation of c's command, e.g. "gpumesh job
// status" (cli.Command.FullName omits the parent commands).
func commandPath(c *cli.Context) string {
	var names []string
	for _, cc := range c.Lineage() {
		if cc.Command != nil && cc.Command.Name != "" {
			names = append(names, cc.Command.Name)
		}
	}
	if n := len(names); n == 0 || names[n-1] != c.App.Name {
		names = append(names, c.App.Name)
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, " ")
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

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// usd formats an amount of money, sign first: -$0.0006.
func usd(v float64) string {
	if v < 0 {
		return "-$" + strconv.FormatFloat(-v, 'f', 4, 64)
	}
	return "$" + strconv.FormatFloat(v, 'f', 4, 64)
}

func countsText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// peerIDPrefix is how every Ed25519 libp2p peer id starts (the multihash
// of an identity key): the characters after it are the ones that tell
// peers apart.
const peerIDPrefix = "12D3KooW"

// shortPeer abbreviates a peer id for tables as Docker shortens container
// ids: the first 12 characters after the prefix every Ed25519 peer id
// shares, or of the id when it has another form. Tables name peers this
// way, every one through peerNames; --no-trunc and --json show them whole.
func shortPeer(id string) string {
	s := strings.TrimPrefix(id, peerIDPrefix)
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}

// noTruncFlag is --no-trunc, on every command whose table names peers.
func noTruncFlag() cli.Flag {
	return &cli.BoolFlag{Name: "no-trunc", Usage: "show peer ids in full (tables shorten them to 12 characters after the common 12D3KooW)"}
}

// peerNames is how c's table names peers: shortPeer, or in full with
// --no-trunc.
func peerNames(c *cli.Context) func(string) string {
	if c.Bool("no-trunc") {
		return func(id string) string { return id }
	}
	return shortPeer
}

// ago is t relative to now for tables, "3m ago" ("in 3m" ahead of now),
// in the largest whole unit up to days; "-" for no time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d, ahead := now.Sub(t), false
	if d < 0 {
		d, ahead = -d, true
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if ahead {
		return "in " + s
	}
	return s + " ago"
}
