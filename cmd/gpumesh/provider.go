package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
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
		}, {
			Name:  "drain",
			Usage: "stop taking new work: leases that end within the grace finish, the others are handed back to their renters",
			Description: "The provider stops bidding at once (calls are declined with the reason \"draining\"). Running leases that end\n" +
				"within --grace run to their end; the others are stopped and handed back: their renters requeue them\n" +
				"elsewhere, whatever their tier. Confirmed reservations that have not started are kept. The command\n" +
				"waits until every lease to finish or hand back has ended (--no-wait returns at once);\n" +
				"`gpumesh provider undrain` makes the provider bid again.",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "grace", Value: 5 * time.Minute, Usage: "how long running leases may run on"},
				&cli.BoolFlag{Name: "no-wait", Usage: "return once the drain started, without waiting for it"},
				&cli.BoolFlag{Name: "cancel", Usage: "stop draining: the same as `gpumesh provider undrain`"},
				jsonFlag(),
			},
			Action: providerDrainAction,
		}, {
			Name:   "undrain",
			Usage:  "bid again after a drain",
			Flags:  []cli.Flag{jsonFlag()},
			Action: providerUndrainAction,
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
	if s.Draining {
		enabled += ", DRAINING (not bidding)"
	}
	fmt.Fprintf(w, "provider:    %s, %d GPU(s)\n", enabled, s.GPUs)
	if s.Drain != nil {
		fmt.Fprintf(w, "drain:       %s\n", drainSummary(*s.Drain))
	}
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t$%.4g\t%s\t%s\t%s\t%s\n", l.ID, l.JobID, l.Renter, l.Tier, gpusColumn(l), l.Price,
				orDash(string(pl.Run)), fmtTime(pl.Started), fmtTime(pl.Ended), exit)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func providerDrainAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	if c.Bool("cancel") {
		return providerUndrainAction(c)
	}
	grace := c.Duration("grace")
	if grace < 0 {
		return fmt.Errorf("--grace must not be negative, got %s", grace)
	}
	cl := client(c)
	v, err := cl.Drain(c.Context, grace)
	if err != nil {
		return err
	}
	w, asJSON := c.App.Writer, c.Bool("json")
	if !asJSON {
		fmt.Fprintf(w, "draining: not bidding; grace %s\n", grace)
		printDrainLeases(w, v)
	}
	last := drainSummary(v)
	if !asJSON {
		fmt.Fprintln(w, last)
	}
	for !v.Done && !c.Bool("no-wait") {
		if v, err = nextDrainView(c.Context, cl, v); err != nil {
			return err
		}
		if now := drainSummary(v); now != last && !asJSON {
			fmt.Fprintln(w, now)
			last = now
		}
	}
	if asJSON {
		return printJSON(w, v)
	}
	if v.Done {
		fmt.Fprintln(w, "drained: no lease of this provider runs past the grace; `gpumesh provider undrain` bids again")
	}
	return nil
}

func providerUndrainAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	v, err := client(c).Undrain(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	fmt.Fprintln(c.App.Writer, "not draining: bidding again")
	return nil
}

// drainSummary is one line of a drain's progress.
func drainSummary(v api.DrainView) string {
	var finish, finished, back, backDone, keep int
	for _, l := range v.Leases {
		switch l.Action {
		case api.DrainFinish:
			finish++
			if l.Run.Terminal() {
				finished++
			}
		case api.DrainHandBack:
			back++
			if l.Run.Terminal() {
				backDone++
			}
		case api.DrainKeep:
			keep++
		}
	}
	state := "in progress"
	if v.Done {
		state = "done"
	}
	return fmt.Sprintf("%s: %d/%d finishing leases ended, %d/%d handed back, %d reservation(s) kept", state, finished, finish, backDone, back, keep)
}

func printDrainLeases(w io.Writer, v api.DrainView) {
	if len(v.Leases) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tJOB\tTIER\tSTART\tEND\tACTION\tRUN")
	for _, l := range v.Leases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.LeaseID, l.JobID, l.Tier, fmtTime(l.Start), fmtTime(l.End), l.Action, l.Run)
	}
	_ = tw.Flush()
}

// gpusColumn is a lease's GPUS column: its GPU count, or the fraction of
// one GPU a slice lease holds.
func gpusColumn(l terms.Lease) string {
	if l.GPUFraction > 0 {
		return strconv.FormatFloat(l.GPUFraction, 'g', -1, 64)
	}
	return strconv.Itoa(l.GPUCount)
}

// nextDrainView is the drain's view at its next change after prev, or
// after waitInterval when it has not changed (GET
// /v1/provider/drain?wait=D).
func nextDrainView(ctx context.Context, cl *api.Client, prev api.DrainView) (api.DrainView, error) {
	return nextView(ctx, prev, cl.DrainChange)
}
