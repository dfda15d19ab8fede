package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/urfave/cli/v2"
)

func providerCommand() *cli.Command {
	return &cli.Command{
		Name:  "provider",
		Usage: "the provider side of the market",
		Subcommands: []*cli.Command{{
			Name:   "stats",
			Usage:  "occupancy, bids, earnings, leases, utilisation and reputation of this provider",
			Flags:  []cli.Flag{jsonFlag()},
			Action: providerStatsAction,
		}, providerInitCommand()},
	}
}

func providerStatsAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	s, err := client(c).ProviderStats(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, s)
	}
	w := c.App.Writer
	enabled := "disabled"
	if s.Enabled {
		enabled = "enabled"
	}
	fmt.Fprintf(w, "provider:    %s, %d GPU(s)\n", enabled, s.GPUs)
	fmt.Fprintf(w, "occupancy:   %.0f%%\n", 100*s.Occupancy)
	fmt.Fprintf(w, "calls:       %d (%d duplicate)\n", s.Calls, s.Duplicates)
	fmt.Fprintf(w, "bids:        %d: won %d, lost %d, declined %d\n", s.Bids, s.Won, s.Lost, s.Declined)
	if len(s.Ineligible) > 0 {
		fmt.Fprintf(w, "ineligible:  %s\n", countsText(s.Ineligible))
	}
	if len(s.Rejected) > 0 {
		fmt.Fprintf(w, "rejected:    %s\n", countsText(s.Rejected))
	}
	fmt.Fprintf(w, "earnings:    $%.4f booked (engine), $%.4f settled (ledger)\n", s.EarningsUSD, s.LedgerEarnedUSD)
	fmt.Fprintf(w, "utilisation: %.0f%% mean GPU over running leases\n", s.UtilizationPct)
	fmt.Fprintf(w, "p95 job:     %.1fs\n", s.P95JobSeconds)
	fmt.Fprintf(w, "price:       $%.4g/GPU-h mean settled\n", s.USDPerGPUHour)
	if lim := s.Limits; lim.MaxTempC > 0 || lim.MaxPowerW > 0 || lim.Breaches > 0 {
		state := "within limits"
		if lim.Over != "" {
			state = "OVER " + lim.Over + " limit: not bidding"
		}
		fmt.Fprintf(w, "limits:      %dC / %dW (max %dC / %dW; 0 = none): %s; %d breaches, %d leases preempted\n",
			lim.TempC, lim.PowerW, lim.MaxTempC, lim.MaxPowerW, state, lim.Breaches, lim.Preempted)
	}
	r := s.Reputation
	fmt.Fprintf(w, "reputation:  %.3f (%d receipts: %d completed, %d failed, %d preempted)\n", r.Score, r.Receipts, r.Completed, r.Failed, r.Preempted)
	for _, group := range []struct {
		name   string
		leases []api.ProviderLease
	}{{"running", s.Running}, {"recent", s.Recent}} {
		if len(group.leases) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s leases:\n", group.name)
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "LEASE\tJOB\tRENTER\tTIER\tGPUS\tPRICE\tRUN\tSTARTED\tENDED\tEXIT")
		for _, pl := range group.leases {
			l, exit := pl.Lease, "-"
			if pl.ExitCode != nil {
				exit = strconv.Itoa(*pl.ExitCode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t$%.4g\t%s\t%s\t%s\t%s\n", l.ID, l.JobID, l.Renter, l.Tier, l.GPUCount, l.Price,
				orDash(string(pl.Run)), fmtTime(pl.Started), fmtTime(pl.Ended), exit)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
