package main

import (
	"fmt"

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
			return nil
		},
	}
}
