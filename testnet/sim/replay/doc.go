// Package replay is the market replay: it drives the market's own rules
// (auction.Evaluate, auction.RankAt, auction.Quote, the auction.Calendar,
// policy windows and backfill/preemption) over a real GPU-cluster job trace
// on a virtual clock, and measures how much offered idle GPU time they fill.
//
// A discrete-event loop (job arrivals, lease ends, a 15-minute retry tick)
// calls the same functions a daemon calls, so months of trace replay in
// seconds. Jobs come from a trace (ReadTrace; trace time zero is Epoch,
// Monday 2021-03-01 00:00 UTC) with their market attributes drawn from a
// seeded Demand; providers come from a seeded Supply (night-and-weekend
// owners, part-time reserved racks, always-on specialists) with a hidden
// failure rate that renters only learn from outcomes (every provider starts
// at reliability 0.5).
//
// Two policies run on identical inputs: the auction (reliability-weighted
// reverse auction with backfill, gold-over-bronze preemption and priority
// lanes) and a FIFO first-fit baseline; a fluid-relaxation upper
// bound says how much any schedule could fill. Run returns a Report that
// prints as tables (WriteTable), JSON (WriteJSON, byte-identical for a
// seed) and the data of a utilisation chart (Utilisation; package chart draws it). Command mounts it all as the
// "sim" subcommand.
//
// A trace may carry fractions of a GPU and jobs on several machines: the
// replay sells fractions as slices of a device (auction's Job.GPUFraction,
// Policy.Slices and the calendar's slice booking) and runs multi-machine
// jobs as gangs, one member per provider, all started at once or none, and
// stopped together. Config.Flat replays the market without these shapes
// (fractions rounded up to whole GPUs, a gang's GPUs on one provider).
// Jobs that fit too few providers are reported as unplaceable for every
// policy and excluded from the bound.
package replay
