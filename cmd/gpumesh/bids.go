package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/urfave/cli/v2"
)

func bidsCommand() *cli.Command {
	return &cli.Command{
		Name:      "bids",
		Usage:     "show a job's ranked bids and why the winner won",
		ArgsUsage: "ID",
		Flags:     []cli.Flag{noTruncFlag(), jsonFlag()},
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
			w, peer := c.App.Writer, peerNames(c)
			tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "RANK\tPROVIDER\tPRICE\tRELIABILITY\tRTT\tSCORE\tSTART\tCACHED DATASETS\tINPUT FETCH\tREJECTED")
			rank := 0
			for _, b := range v.Bids {
				r, score := "-", "-"
				if b.Rejected == "" {
					rank++
					r, score = strconv.Itoa(rank), fmt.Sprintf("%.4g", b.Score)
					if b.Bid.Provider == v.Explain.Winner {
						r += " (lease)"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t$%.4g\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\n", r, peer(b.Bid.Provider), b.Bid.Price, b.Reliability, rttText(b.RTT), score,
					fmtTime(b.Bid.Start), orDash(strings.Join(b.Bid.Datasets, ",")), fetchText(b.Bid.MissingBytes, b.Missing, b.Transfer), orDash(b.Rejected))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(w, "%d bid(s) for job %s\n", len(v.Bids), orDash(v.JobID))
			if len(v.Declines) > 0 {
				fmt.Fprintln(w, callmachine.DeclinesText(v.Declines))
			}
			fmt.Fprintln(w, explanationText(v.Explain, peer))
			return nil
		},
	}
}

// explanationText is auction.Explain's verdict in words, one line, peers
// named by peer.
func explanationText(e terms.Explanation, peer func(string) string) string {
	why := ""
	switch e.Rule {
	case terms.RuleNoBids:
		return "no bids"
	case terms.RuleNoneEligible:
		return "no eligible bid: all rejected"
	case terms.RuleNotAwarded:
		return "no bid holds the lease: " + passedText(e.Passed, peer)
	case terms.RuleUnranked:
		return fmt.Sprintf("lease held by %s, from an earlier auction than these bids", peer(e.Winner))
	case terms.RuleOnlyEligible:
		why = "the only eligible bid"
	case terms.RuleNearer:
		why = fmt.Sprintf("in or nearer the job's --near region than runner-up %s", peer(e.RunnerUp))
	case terms.RuleBestScore:
		why = fmt.Sprintf("best score, %.1f%% below runner-up %s (%.4f)", 100*(e.RunnerUpScore-e.Score)/e.RunnerUpScore, peer(e.RunnerUp), e.RunnerUpScore)
	case terms.RuleTieBreak:
		why = fmt.Sprintf("tied within %.0f%% with %s (%.4f), won on %s", 100*auction.TieTolerance, peer(e.RunnerUp), e.RunnerUpScore, e.TieBreak)
	case terms.RulePassedOver:
		why = "the bids ranked ahead did not get it: " + passedText(e.Passed, peer)
	default:
		why = e.Rule
	}
	rtt := ""
	if e.RTT > 0 {
		rtt = ", rtt " + auction.FormatRTT(e.RTT)
	}
	return fmt.Sprintf("winner %s (rank %d): score %.4f = price %.4f / reliability %.2f%s; %s", peer(e.Winner), e.Rank, e.Score, e.Price, e.Reliability, rtt, why)
}

// rttText is a bid's measured round trip, or "-" when unmeasured.
func rttText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return auction.FormatRTT(d)
}

func passedText(ps []terms.PassedBid, peer func(string) string) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = peer(p.Provider) + " " + p.Reason
	}
	return strings.Join(parts, "; ")
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
