package main

import (
	"fmt"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/node/api"

	"github.com/urfave/cli/v2"
)

func reputationCommand() *cli.Command {
	return &cli.Command{
		Name:      "reputation",
		Usage:     "show a provider's verified reputation",
		ArgsUsage: "PEER",
		Flags:     []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			p, err := jobArg(c, "peer ID")
			if err != nil {
				return err
			}
			v, err := client(c).Reputation(c.Context, p)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, v)
			}
			w, r := c.App.Writer, v.Rep
			fmt.Fprintf(w, "peer:       %s\n", v.Peer)
			fmt.Fprintf(w, "score:      %.3f (weight %.2f)\n", r.Score, r.Weight)
			fmt.Fprintf(w, "components: completion %.3f, coverage %.3f, honesty %.3f\n", r.Completion, r.Coverage, r.Honesty)
			fmt.Fprintf(w, "receipts:   %d from %d renter(s): %d completed, %d failed, %d preempted, %d cancelled\n",
				r.Receipts, r.Renters, r.Completed, r.Failed, r.Preempted, r.Cancelled)
			fmt.Fprintf(w, "penalties:  %d overclaim(s), %d slash(es)\n", r.Overclaims, r.Slashes)
			for _, g := range v.GPU {
				badge := "not verified"
				if g.Verified {
					badge = "VERIFIED"
				}
				fmt.Fprintf(w, "gpu %-7s %s (weight %.2f): %d passed, %d failed, %d unverifiable; last %s %s",
					g.Family+":", badge, g.Weight, g.Passed, g.Failed, g.Unverifiable, g.LastOutcome,
					g.Last.Local().Format("2006-01-02 15:04:05"))
				if g.Rate > 0 {
					fmt.Fprintf(w, ", best %.2f Tops/s", g.Rate/1e12)
				}
				fmt.Fprintln(w)
			}
			return nil
		},
	}
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "challenge a provider's GPUs: a seeded matrix product checked by Freivalds and timed against the claimed model",
		Description: "Each device of PEER's capability record (or --device) computes C = A·B^k of seeded matrices;\n" +
			"the result is checked exactly and its time against the model's expected rate. The verdicts\n" +
			"are signed, gossiped to every node's reputation book, and shown by 'gpumesh reputation PEER'.",
		ArgsUsage: "PEER",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "device", Usage: "one device: its UUID or index in the provider's record"},
			&cli.IntFlag{Name: "n", Usage: "matrix size, a multiple of 128 (diagnostics; default by the device's memory)"},
			&cli.IntFlag{Name: "k", Usage: "products per challenge (diagnostics; with --n)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			p, err := jobArg(c, "peer ID")
			if err != nil {
				return err
			}
			res, err := client(c).Verify(c.Context, api.VerifyRequest{Peer: p, Device: c.String("device"),
				N: c.Int("n"), K: c.Int("k")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, res)
			}
			failed := false
			for _, r := range res {
				switch {
				case r.Verdict != nil:
					fmt.Fprintf(c.App.Writer, "%s\n", r.Verdict)
					failed = failed || r.Verdict.Outcome == gpuproof.Failed
				case r.NoVerdict:
					fmt.Fprintf(c.App.Writer, "%s on %s: no verdict: %s\n", r.Device, r.Model, r.Error)
				default:
					fmt.Fprintf(c.App.Writer, "%s on %s: error: %s\n", r.Device, r.Model, r.Error)
					failed = true
				}
			}
			if failed {
				return cli.Exit("", 1)
			}
			return nil
		},
	}
}
