package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/urfave/cli/v2"
)

func artifactCommand() *cli.Command {
	return &cli.Command{
		Name:  "artifact",
		Usage: "content-addressed files and directories (datasets, models) shared over the network",
		Subcommands: []*cli.Command{{
			Name:      "add",
			Usage:     "import a file or directory (or, with --image, a container image) into this node's artifact store and print its id",
			ArgsUsage: "PATH | --image REF",
			Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "image", Usage: "save this container image of the local engine (docker save) as the artifact; run it with job post --image REF --image-artifact ID"},
				&cli.BoolFlag{Name: "public", Usage: "serve it to any peer (default: only to providers leasing a job that names it, and peers it is shared with)"}},
			Action: artifactAddAction,
		}, {
			Name:   "ls",
			Usage:  "list the artifacts this node holds",
			Flags:  []cli.Flag{noTruncFlag(), jsonFlag()},
			Action: artifactLsAction,
		}, {
			Name:      "rm",
			Usage:     "remove an artifact from this node's store",
			ArgsUsage: "ID",
			Flags:     []cli.Flag{jsonFlag()},
			Action:    artifactRmAction,
		}, {
			Name:      "share",
			Usage:     "let a peer fetch one of your private artifacts",
			ArgsUsage: "ID PEER",
			Flags:     []cli.Flag{jsonFlag()},
			Action:    artifactShareAction,
		}, {
			Name:      "get",
			Usage:     "fetch an artifact from the peers that hold it and write it to DEST (a file, or a directory for a tree)",
			ArgsUsage: "ID DEST",
			Flags: []cli.Flag{jsonFlag(),
				&cli.StringSliceFlag{Name: "peer", Usage: "multiaddr (with /p2p/ID) of a peer that holds it (repeatable); the DHT is searched too"}},
			Action: artifactGetAction,
		}, {
			Name:      "warm",
			Usage:     "pre-stage an artifact this node holds on providers (cache warming), so that they bid for jobs reading it without a fetch",
			ArgsUsage: "ID",
			Flags: []cli.Flag{jsonFlag(),
				&cli.IntFlag{Name: "providers", Value: 1, Usage: "how many of the best-ranked providers (by price and verified reliability) should hold it; ones that already do count"},
				&cli.StringSliceFlag{Name: "provider", Usage: "warm this provider instead (peer id, or multiaddr with /p2p/ID; repeatable)"},
				&cli.BoolFlag{Name: "no-wait", Usage: "return once the providers accepted, without waiting for them to advertise it"},
				&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "how long to wait for the providers to hold it"}},
			Action: artifactWarmAction,
		}},
	}
}

func twoArgs(c *cli.Context, what1, what2 string) (string, string, error) {
	usage := commandPath(c) + " " + c.Command.ArgsUsage
	args := c.Args().Slice()
	if len(args) < 2 {
		return "", "", fmt.Errorf("missing %s (usage: %s)", map[bool]string{true: what1, false: what2}[len(args) == 0], usage)
	}
	if len(args) > 2 {
		return "", "", fmt.Errorf("unexpected argument %q (usage: %s)", args[2], usage)
	}
	return args[0], args[1], nil
}

func artifactAddAction(c *cli.Context) error {
	req := api.ArtifactAddRequest{Image: c.String("image"), Public: c.Bool("public")}
	if req.Image != "" {
		if err := noArgs(c); err != nil {
			return err
		}
	} else {
		p, err := jobArg(c, "path")
		if err != nil {
			return err
		}
		if req.Path, err = filepath.Abs(p); err != nil {
			return err
		}
	}
	in, err := client(c).AddArtifact(c.Context, req)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, in)
	}
	fmt.Fprintln(c.App.Writer, in.ID)
	return nil
}

func artifactLsAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	list, err := client(c).Artifacts(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, list)
	}
	peer := peerNames(c)
	tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSIZE\tFILES\tOWNER\tACCESS\tSTATE\tLAST USED")
	for _, in := range list {
		access := "public"
		if in.Private {
			access = "private"
		}
		state := "complete"
		if !in.Complete {
			state = "partial"
		}
		if in.Pins > 0 {
			state += fmt.Sprintf(", in use by %d", in.Pins)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", in.ID, in.Name, fmtBytes(in.Size), in.Files, orDash(peer(in.Owner)), access, state,
			fmtTime(in.LastUsed))
	}
	return tw.Flush()
}

func artifactRmAction(c *cli.Context) error {
	id, err := jobArg(c, "artifact id")
	if err != nil {
		return err
	}
	if err := client(c).RemoveArtifact(c.Context, id); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]string{"removed": id})
	}
	fmt.Fprintf(c.App.Writer, "removed %s\n", id)
	return nil
}

func artifactShareAction(c *cli.Context) error {
	id, p, err := twoArgs(c, "artifact id", "peer id")
	if err != nil {
		return err
	}
	in, err := client(c).ShareArtifact(c.Context, id, p)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, in)
	}
	fmt.Fprintf(c.App.Writer, "%s shared with %s\n", id, p)
	return nil
}

func artifactGetAction(c *cli.Context) error {
	id, dest, err := twoArgs(c, "artifact id", "destination")
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return err
	}
	var peers []string
	for _, p := range c.StringSlice("peer") {
		peers = append(peers, strings.TrimSpace(p))
	}
	w := c.App.ErrWriter
	shown := false
	progress := func(p api.ArtifactProgress) {
		if c.Bool("json") || p.Total == 0 {
			return
		}
		shown = true
		fmt.Fprintf(w, "\r%s / %s (%.0f%%)", fmtBytes(p.Done), fmtBytes(p.Total), 100*float64(p.Done)/float64(p.Total))
	}
	res, err := client(c).GetArtifact(c.Context, id, api.ArtifactGetRequest{Dest: abs, Peers: peers}, progress)
	if shown {
		fmt.Fprintln(w)
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	fmt.Fprintf(c.App.Writer, "%s written to %s (%s, %s transferred from %d peer(s))\n", id, abs, fmtBytes(res.Size), fmtBytes(res.Fetched), len(res.FromPeer))
	return nil
}

func artifactWarmAction(c *cli.Context) error {
	id, err := jobArg(c, "artifact id")
	if err != nil {
		return err
	}
	if n := c.Int("providers"); n < 1 {
		return fmt.Errorf("--providers must be at least 1, got %d", n)
	}
	if c.Duration("timeout") <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", c.Duration("timeout"))
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	res, err := client(c).WarmArtifact(ctx, id, api.ArtifactWarmRequest{Providers: c.StringSlice("provider"),
		Count: c.Int("providers"), Wait: !c.Bool("no-wait")})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "PROVIDER\tSTATE\tFETCHING")
		for _, r := range res.Results {
			state := "accepted"
			switch {
			case r.Error != "":
				state = "failed: " + r.Error
			case r.Held:
				state = "already held"
			case r.Advertised:
				state = "holds it"
			}
			fetching := "-"
			if r.Fetching > 0 {
				fetching = fmt.Sprintf("%s of %s", fmtBytes(r.Fetching), fmtBytes(r.Size))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Provider, state, fetching)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	failed := 0
	for _, r := range res.Results {
		if r.Error != "" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d provider(s) not warmed", failed, len(res.Results))
	}
	return nil
}

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
