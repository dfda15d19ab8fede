package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/urfave/cli/v2"
)

func bidsCommand() *cli.Command {
	return &cli.Command{
		Name:      "bids",
		Usage:     "show a job's ranked bids and why the winner won",
		ArgsUsage: "ID",
		Flags:     []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			id, err := jobArg(c, "job ID")
			if err != nil {
				return err
			}
			v, err := client(c).Bids(c.Context, id)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, v)
			}
			w := c.App.Writer
			tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "RANK\tPROVIDER\tPRICE\tRELIABILITY\tSCORE\tSTART\tCACHED DATASETS\tINPUT FETCH\tREJECTED")
			rank := 0
			for _, b := range v.Bids {
				r, score := "-", "-"
				if b.Rejected == "" {
					rank++
					r, score = strconv.Itoa(rank), fmt.Sprintf("%.4g", b.Score)
				}
				fmt.Fprintf(tw, "%s\t%s\t$%.4g\t%.3f\t%s\t%s\t%s\t%s\t%s\n", r, b.Bid.Provider, b.Bid.Price, b.Reliability, score,
					fmtTime(b.Bid.Start), orDash(strings.Join(b.Bid.Datasets, ",")), fetchText(b.Bid.MissingBytes, b.Missing, b.Transfer), orDash(b.Rejected))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(w, "%d bid(s) for job %s\n", len(v.Bids), orDash(v.JobID))
			if len(v.Declines) > 0 {
				fmt.Fprintln(w, auction.DeclinesText(v.Declines))
			}
			if v.Explain != "" {
				fmt.Fprintln(w)
				fmt.Fprintln(w, strings.TrimRight(v.Explain, "\n"))
			}
			return nil
		},
	}
}

// fetchText shows what a bidder lacks of the job's inputs and the
// renter's estimate of the time to fetch it; a claim the provider's
// advertised holdings do not back shows what was charged instead.
func fetchText(claimed, charged int64, est time.Duration) string {
	if charged <= 0 {
		return "-"
	}
	s := fmt.Sprintf("%s ~%s", fmtBytes(charged), est.Round(100*time.Millisecond))
	if claimed < charged {
		s += fmt.Sprintf(" (claimed %s, not advertised)", fmtBytes(claimed))
	}
	return s
}
