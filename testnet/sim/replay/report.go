package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON (without wall-clock data, so
// that a seed's output is byte-identical).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("replay: write json: %w", err)
	}
	return nil
}

// WriteTable writes the report as aligned text tables with an explanatory
// footer.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	trace := r.Trace
	if trace == "" {
		trace = "(in-memory)"
	}
	fmt.Fprintf(&b, "trace %s  seed %d  %s .. %s (%.1f days)\n", trace, r.Seed, r.Start.Format("2006-01-02"), r.End.Format("2006-01-02 15:04"), r.End.Sub(r.Start).Hours()/24)
	fmt.Fprintf(&b, "jobs %d (%d unplaceable, %.0f GPU-h)  demand %.0f GPU-h  providers %d  GPUs %d  offered idle %.0f GPU-h\n",
		r.Jobs, r.Unplaceable, r.UnplaceableGPUHours, r.DemandGPUHours, r.Providers, r.GPUs, r.OfferedGPUHours)
	shapes := "shapes: fractions sold as slices of a device, multi-machine jobs as gangs across providers"
	if r.Flat {
		shapes = "flat: fractions rounded up to whole GPUs, multi-machine jobs on one provider"
	}
	fmt.Fprintf(&b, "%s (%d fractional, %d multi-machine jobs", shapes, r.FractionalJobs, r.GangJobs)
	if r.TraceSkipped > 0 {
		fmt.Fprintf(&b, "; %d trace rows without GPU work left out", r.TraceSkipped)
	}
	b.WriteString(")\n")
	fmt.Fprintf(&b, "upper bound: fluid %.0f GPU-h (fill %.2f%%), simple min(offered, placeable demand) %.0f GPU-h\n\n",
		r.Bound.Fluid, 100*r.Bound.FillRate, r.Bound.Simple)

	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tfill %\tfilled GPU-h\tlost GPU-h\tidle billed GPU-h\t$/GPU-h\tdone\tnever\tSLA viol\tpreempt gold\tpreempt gap\tfailures\t")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.0f\t%.0f\t%.3f\t%d\t%d\t%d\t%d\t%d\t%d\t\n", p.Policy, 100*p.FillRate, p.FilledGPUHours, p.LostGPUHours,
			p.IdleBilledGPUHours, p.CostPerGPUHour, p.Completed, p.NeverStarted, p.SLAViolations, p.PreemptGold, p.PreemptGap, p.Failures)
	}
	fmt.Fprintf(tw, "bound\t%.2f\t%.0f\t\t\t\t\t\t\t\t\t\t\n", 100*r.Bound.FillRate, r.Bound.Fluid)
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\ttier\tjobs\tdone\t$/GPU-h\twait p50 h\twait p95 h\twait p99 h\tSLA viol\t")
	for _, p := range r.Policies {
		for _, t := range p.Tiers {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.2f\t%.2f\t%.2f\t%d\t\n", p.Policy, t.Tier, t.Jobs, t.Completed, t.CostPerGPUHour, t.WaitP50, t.WaitP95, t.WaitP99, t.SLAViolations)
		}
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tearned $\tp50 $\tp90 $\tp99 $\tmax $\tzero %\tgini\t")
	for _, p := range r.Policies {
		e := p.Earnings
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t%.3f\t\n", p.Policy, e.Total, e.P50, e.P90, e.P99, e.Max, 100*e.ZeroShare, e.Gini)
	}
	tw.Flush()
	if r.Perf.Wall > 0 {
		fmt.Fprintf(&b, "\nreplay: %d events in %v (%.0f events/s), peak RSS %.0f MB\n", r.Perf.Events, r.Perf.Wall.Round(1e6), r.Perf.EventsPerSec, r.Perf.PeakRSSMB)
	}
	b.WriteString(footer)
	_, err := io.WriteString(w, b.String())
	return err
}

const footer = `
fill % = delivered lease GPU-hours / idle GPU-hours offered (sum over providers of sellable spans x GPUs);
a slice lease counts its fraction of a GPU, a gang every member's GPUs.
lost = GPU-hours of leases that failed (work lost, not paid). idle billed = filled GPU-hours the jobs did
not ask for (a fraction rounded up to its slice, or to a whole GPU when flat). $/GPU-h = what renters
paid per GPU-hour they asked for. Job counts, waits and SLA cover placeable
jobs only. Waits: submission to first start; jobs that never start are censored at the replay end.
SLA: start within 15 min (gold), 2 h (silver), 24 h (bronze) and finish within the replay.
auction = auction.Evaluate bids + auction.RankAt award (price / observed reliability), bronze backfill
into short gaps, gold preempting bronze, waiting jobs retried gold > silver > bronze; renters ask for an
immediate start first, then (gold, silver) for a reservation within their SLA target.
fifo = arrival order, no lanes: each job on the first provider whose auction.Evaluate offer starts now
for the whole job without preemption.
gangs (both policies) start all members at once on distinct providers or wait: the auction awards the
best members auction.RankAt ranks, fifo the first that fit; a member's loss stops the gang.
bound (fluid) = work may run on any idle GPU, split and paused freely, but not before it arrives: serving
the arrived backlog at the offered idle capacity maximises work done by every instant, so no schedule
fills more; gang work only while enough providers with enough GPUs are for sale at once. Unplaceable
jobs (no provider, or too few for a gang, has enough GPUs/VRAM in the region at a floor under the cap)
are excluded from it and from the job statistics.
`
