package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
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
				&cli.BoolFlag{Name: "public", Usage: "plain, and served to any peer (default: private, and so sealed: encrypted end to end, holders keep ciphertext, a job's provider gets the key for its lease only, and the job's checkpoints and outputs come back sealed to you)"},
				&cli.BoolFlag{Name: "sealed", Usage: "what a private file or tree always is (kept for scripts; not with --public or --image)"}},
			Action: artifactAddAction,
		}, {
			Name:  "ls",
			Usage: "list the artifacts this node holds, with the job each belongs to",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "checkpoints", Usage: "also list the periodic checkpoints kept for jobs, grouped by job (job status shows a job's latest)"},
				noTruncFlag(), jsonFlag()},
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
	req := api.ArtifactAddRequest{Image: c.String("image"), Public: c.Bool("public"), Sealed: c.Bool("sealed")}
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
	// Periodic checkpoints pile up (a job keeps several): they are listed
	// with --checkpoints only.
	var shown, periodic []api.ArtifactView
	for _, a := range list {
		if a.Checkpoint != nil && a.Checkpoint.Reason == terms.CheckpointPeriodic {
			periodic = append(periodic, a)
		} else {
			shown = append(shown, a)
		}
	}
	withCheckpoints := c.Bool("checkpoints")
	if c.Bool("json") {
		if withCheckpoints {
			return printJSON(c.App.Writer, list)
		}
		return printJSON(c.App.Writer, orEmpty(shown))
	}
	w, peer := c.App.Writer, peerNames(c)
	if withCheckpoints {
		// Every checkpoint goes under its job, below the other artifacts.
		shown = slices.DeleteFunc(shown, func(a api.ArtifactView) bool { return a.Checkpoint != nil })
	}
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tJOB\tSIZE\tFILES\tOWNER\tACCESS\tSTATE\tLAST USED")
	for _, in := range shown {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", in.ID, artifactName(in), orDash(in.Job), fmtBytes(in.Size), in.Files,
			orDash(peer(in.Owner)), artifactAccess(in), artifactState(in), fmtTime(in.LastUsed))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !withCheckpoints {
		if len(periodic) > 0 {
			jobs := map[string]bool{}
			for _, a := range periodic {
				jobs[a.Job] = true
			}
			fmt.Fprintf(w, "%d periodic checkpoint(s) of %d job(s) not listed: --checkpoints lists them; `gpumesh job status ID` shows a job's latest\n",
				len(periodic), len(jobs))
		}
		return nil
	}
	return printCheckpoints(w, list)
}

// printCheckpoints lists the checkpoints among list under their job, jobs
// in id order, each job's newest first.
func printCheckpoints(w io.Writer, list []api.ArtifactView) error {
	byJob := map[string][]api.ArtifactView{}
	for _, a := range list {
		if a.Checkpoint != nil {
			byJob[a.Job] = append(byJob[a.Job], a)
		}
	}
	for _, job := range slices.Sorted(maps.Keys(byJob)) {
		cks := byJob[job]
		slices.SortFunc(cks, func(a, b api.ArtifactView) int { return b.Checkpoint.TakenAt.Compare(a.Checkpoint.TakenAt) })
		fmt.Fprintf(w, "\ncheckpoints of job %s (newest first):\n", job)
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tATTEMPT\tSEQ\tREASON\tWORK SAVED\tSIZE\tTAKEN")
		for _, a := range cks {
			ck := a.Checkpoint
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\t%s\t%s\n", a.ID, ck.Attempt, ck.Seq, ck.Reason, ck.Work.Round(time.Second),
				fmtBytes(a.Size), fmtTime(ck.TakenAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// artifactName is an artifact's name, and what it is to its job.
func artifactName(a api.ArtifactView) string {
	switch {
	case a.Checkpoint != nil:
		return fmt.Sprintf("%s (%s checkpoint)", a.Name, a.Checkpoint.Reason)
	case a.Use != "":
		return fmt.Sprintf("%s (%s)", a.Name, a.Use)
	}
	return a.Name
}

func artifactAccess(a api.ArtifactView) string {
	if a.Sealed {
		return "sealed"
	}
	if a.Private {
		return "private"
	}
	return "public"
}

func artifactState(a api.ArtifactView) string {
	state := "complete"
	if !a.Complete {
		state = "partial"
	}
	if a.Pins > 0 {
		state += fmt.Sprintf(", in use by %d", a.Pins)
	}
	return state
}

// orEmpty is s, or an empty list rather than nil (JSON [] rather than
// null).
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
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
