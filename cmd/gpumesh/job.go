package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/urfave/cli/v2"
)

func jobCommand() *cli.Command {
	return &cli.Command{
		Name:  "job",
		Usage: "post and follow jobs (the renter side of the market)",
		Subcommands: []*cli.Command{
			jobPostCommand(),
			{
				Name:      "status",
				Usage:     "show one job: auction, lease, run, telemetry, cost, receipt, history",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{noTruncFlag(), jsonFlag()},
				Action:    jobStatusAction,
			},
			{
				Name:  "list",
				Usage: "list this node's jobs, newest first",
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "state", Usage: "only jobs in state S: an auction state (" + joinStates(terms.JobStates()) +
						") or their run's (" + joinStates(terms.RunStates()) + "); repeatable, or a comma list"},
					&cli.IntFlag{Name: "limit", Value: 20, Usage: "show the newest N jobs (0: all)"},
					noTruncFlag(), jsonFlag()},
				Action: jobListAction,
			},
			{
				Name:      "cancel",
				Usage:     "cancel a job (its auction, or its running lease)",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{jsonFlag()},
				Action:    jobCancelAction,
			},
			{
				Name:      "logs",
				Usage:     "print a job's stdout and stderr",
				ArgsUsage: "ID",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming until the job ends"},
					&cli.BoolFlag{Name: "raw", Usage: "print control characters and escape sequences as the job wrote them (by default they are made visible, e.g. ESC as ^[)"},
					&cli.IntFlag{Name: "attempt", Usage: "the log of attempt N (its Nth lease, as numbered in job status; default: the last)"},
					&cli.BoolFlag{Name: "all-attempts", Usage: "the logs of every attempt, oldest first, each under a header line"}},
				Action: jobLogsAction,
			},
			jobExecCommand(),
			jobPortForwardCommand(),
			{
				Name:      "fetch",
				Usage:     "download a job's output files into DIR, verifying their checksums",
				ArgsUsage: "ID DIR",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "overwrite existing files in DIR"},
					&cli.StringFlag{Name: "max-size", Value: "10GiB", Usage: "refuse outputs larger than this in total (bytes, or with KiB, MiB, GiB, TiB)"},
					jsonFlag()},
				Action: jobFetchAction,
			},
		},
	}
}

func jobStatusAction(c *cli.Context) error {
	id, err := jobArg(c, "job ID")
	if err != nil {
		return err
	}
	v, err := client(c).Job(c.Context, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	printJobView(c.App.Writer, &v, peerNames(c))
	return nil
}

// printJobView prints a job's status, peers named by peer.
func printJobView(w io.Writer, v *api.JobView, peer func(string) string) {
	j := &v.Job
	fmt.Fprintf(w, "job:        %s (attempt %d)\n", j.ID, j.Attempt)
	fmt.Fprintf(w, "state:      %s\n", v.State)
	tier := string(j.Tier)
	if j.Preemptible {
		tier += " (preemptible)"
	}
	gpus := terms.GPUsText(j.GPUCount, j.GPUFraction)
	if j.Nodes > 1 {
		gpus = fmt.Sprintf("gang of %d × %s", j.Nodes, gpus)
	}
	fmt.Fprintf(w, "tier:       %s, %s, %s, max $%.4g/GPU-h\n", tier, gpus, j.Duration, j.MaxPrice)
	fmt.Fprintf(w, "command:    %s\n", strings.Join(j.Run.Command, " "))
	if f := jobFilesText(v); f != "" {
		fmt.Fprintf(w, "files:      %s\n", f)
	}
	if len(v.Reasons) > 0 {
		fmt.Fprintf(w, "reasons:    %s\n", reasonsText(v.Reasons))
	}
	if len(v.Declines) > 0 {
		fmt.Fprintf(w, "declines:   %s\n", callmachine.DeclinesText(v.Declines))
	}
	if v.Winner != "" {
		fmt.Fprintf(w, "winner:     %s\n", peer(v.Winner))
	}
	if l := v.Lease; l != nil {
		fmt.Fprintf(w, "lease:      %s %s, $%.4g/GPU-h, %s .. %s\n", l.ID, l.State, l.Price, fmtTime(l.Start), fmtTime(l.End))
	}
	if v.Run != "" {
		fmt.Fprintf(w, "run:        %s\n", runOutcome(v))
	}
	if !v.Started.IsZero() {
		s := "started:    " + fmtTime(v.Started)
		if !v.Ended.IsZero() {
			s += ", ended " + fmtTime(v.Ended) + " (" + v.Ended.Sub(v.Started).Round(time.Millisecond).String() + ")"
		}
		fmt.Fprintln(w, s)
	}
	if t := v.LastTelemetry; t != nil {
		fmt.Fprintf(w, "telemetry:  %s gpu %.0f%%, %d MB, %d°C, %d W, cpu %.1fs, rss %d MB (%s)\n", fmtTime(t.Time),
			t.GPUUtil, t.MemUsedMB, t.TempC, t.PowerW, t.CPUSeconds, t.RSSMB, t.Source)
	}
	if h := v.Heartbeats; h != nil {
		fmt.Fprintf(w, "heartbeats: %d/%d, coverage %.0f%%, %d gap(s), %d rejected\n", h.Count, h.Expected, 100*h.Coverage, len(h.Gaps), h.Rejected)
	}
	fmt.Fprintf(w, "cost:       $%.4f\n", v.CostUSD)
	if r := v.Receipt; r != nil {
		fmt.Fprintf(w, "receipt:    %s, %.0f GPU-s, $%.4f%s\n", r.Outcome, r.GPUSeconds, r.Amount, prefixed(", result ", r.ResultHash))
		if r.NoPersist {
			fmt.Fprintf(w, "no-persist: held, as the provider signed in its receipt (it deletes its copies at settlement)\n")
		}
		if r.Scrub != "" {
			fmt.Fprintf(w, "scrub:      %s\n", scrubText(r.Scrub))
		}
	}
	if v.Dispute != "" {
		fmt.Fprintf(w, "dispute:    settlement given up, %s\n", v.Dispute)
	}
	for _, o := range v.Outputs {
		fmt.Fprintf(w, "output:     %s (%d bytes, sha256 %s)\n", o.Path, o.Size, o.SHA256)
	}
	if more := v.OutputCount - len(v.Outputs); more > 0 {
		fmt.Fprintf(w, "output:     ... and %d more file(s) (job fetch gets them all)\n", more)
	}
	if v.OutputsArtifact != "" {
		fmt.Fprintf(w, "outputs:    artifact %s (gpumesh artifact get %s DIR)\n", v.OutputsArtifact, v.OutputsArtifact)
	}
	if c := v.Checkpoint; c != nil {
		fmt.Fprintf(w, "checkpoint: %s\n", checkpointText(c))
	}
	if c := v.Restored; c != nil {
		fmt.Fprintf(w, "restored:   %s\n", checkpointText(c))
	}
	for _, name := range slices.Sorted(maps.Keys(v.Job.Run.Inputs)) {
		fmt.Fprintf(w, "input:      %s = artifact %s\n", name, v.Job.Run.Inputs[name])
	}
	printGang(w, v, peer)
	printAttempts(w, v, peer)
}

// printGang lists a gang job's members (the lease, run and checkpoint
// fields above are rank 0's): each rank's provider, lease, run, cost and
// newest checkpoint.
func printGang(w io.Writer, v *api.JobView, peer func(string) string) {
	if len(v.Gang) == 0 {
		return
	}
	price := 0.0
	for _, m := range v.Gang {
		price += m.Price
	}
	fmt.Fprintf(w, "members:    %d, $%.4g/h together (the sum of their quotes, each for %s)\n", len(v.Gang), price*v.Job.BilledGPUs(),
		terms.GPUsText(v.Job.GPUCount, v.Job.GPUFraction))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RANK\tPROVIDER\tLEASE\tRUN\tCOST\tCHECKPOINT\tDETAIL")
	for _, m := range v.Gang {
		cost := fmt.Sprintf("$%.4f", m.CostUSD)
		if !m.Settled {
			cost += " (unsettled)"
		}
		ck := "-"
		if c := m.Checkpoint; c != nil {
			ck = fmt.Sprintf("seq %d, %s of work", c.Seq, c.Work.Round(time.Second))
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Rank, peer(m.Provider), m.LeaseID, orDash(string(m.Run)), cost, ck, orDash(m.Detail))
	}
	tw.Flush()
}

// jobFilesText says what becomes of the job's files on its provider: a
// no-persist job's (and where this node keeps them), or how long they are
// kept when the job chose it ("" for the provider's default).
func jobFilesText(v *api.JobView) string {
	switch j := &v.Job; {
	case j.NoPersist && v.Kept != "":
		return "no-persist; the log and outputs are kept by this node in " + v.Kept
	case j.NoPersist:
		return "no-persist: the provider keeps nothing past the lease's settlement, and the job's memory never swaps"
	case j.Retain > 0:
		return fmt.Sprintf("kept by the provider for %s after the lease (at most its own maximum)", j.Retain)
	}
	return ""
}

// scrubText says a receipt's scrub statement (attest.Receipt.Scrub) for
// the renter.
func scrubText(s string) string {
	switch s {
	case attest.ScrubZeroed:
		return s + " (the GPUs' memory was cleared after the lease)"
	case attest.ScrubNoneDeclared:
		return s + " (declared GPUs: no device memory to clear)"
	}
	return s + " (the GPUs' memory may hold what the job left in it)"
}

// printAttempts lists a job's leases, earlier ones (its history) and the
// current one, when it had more than one or lost one: who ran each, how it
// ended and through whose fault, its checkpoint and cost.
func printAttempts(w io.Writer, v *api.JobView, peer func(string) string) {
	if len(v.History) == 0 && len(v.Job.Exclude) == 0 {
		return
	}
	recs := slices.Clone(v.History)
	if l := v.Lease; l != nil {
		cur := api.LeaseRecord{Lease: *l, Run: v.Run, Detail: v.Detail, Fault: v.Fault, Attempt: l.Attempt, Receipt: v.Receipt != nil,
			Restored: v.Restored}
		if c := v.Checkpoint; c != nil && c.LeaseID == l.ID {
			cur.Checkpoint = c
		}
		if v.Receipt != nil {
			cur.CostUSD = v.Receipt.Amount
		}
		recs = append(recs, cur)
	}
	fmt.Fprintf(w, "attempts:   %d of %d", len(recs), v.Job.Attempts())
	if len(v.Job.Exclude) > 0 {
		ex := make([]string, len(v.Job.Exclude))
		for i, p := range v.Job.Exclude {
			ex[i] = peer(p)
		}
		fmt.Fprintf(w, ", excluded %s", strings.Join(ex, ", "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tPROVIDER\tRUN\tFAULT\tCHECKPOINT\tCOST\tDETAIL")
	for i, r := range recs {
		run := string(r.Run)
		if run == "" {
			run = "pending"
		}
		cost := fmt.Sprintf("$%.4f", r.CostUSD)
		if !r.Receipt {
			cost += " (unsettled)"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, peer(r.Lease.Provider), run, orDash(string(r.Fault)),
			attemptCheckpoints(r), cost, orDash(r.Detail))
	}
	tw.Flush()
}

// attemptCheckpoints says what an attempt restored and saved.
func attemptCheckpoints(r api.LeaseRecord) string {
	var parts []string
	if c := r.Restored; c != nil {
		parts = append(parts, fmt.Sprintf("from %s", c.Work.Round(time.Second)))
	}
	if c := r.Checkpoint; c != nil {
		parts = append(parts, fmt.Sprintf("saved %s of work (%s)", c.Work.Round(time.Second), c.Reason))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// checkpointText is one line about a checkpoint: which, how big, how much
// work it saved.
func checkpointText(c *terms.Checkpoint) string {
	return fmt.Sprintf("seq %d of attempt %d (%s), %d bytes, work saved %s, artifact %s", c.Seq, c.Attempt, c.Reason, c.Bytes,
		c.Work.Round(time.Second), c.Artifact)
}

func runOutcome(v *api.JobView) string {
	s := string(v.Run)
	if s == "" {
		s = string(v.State)
	}
	exit := ""
	if v.ExitCode != nil {
		exit = fmt.Sprintf("exit code %d", *v.ExitCode)
		s += " (" + exit + ")"
	}
	if v.Detail != "" && v.Detail != exit {
		s += ": " + v.Detail
	} else if len(v.Reasons) > 0 && v.Run == "" {
		s += ": " + reasonsText(v.Reasons)
	}
	return s
}

func reasonsText(rs []string) string {
	if len(rs) == 0 {
		return "no reason given"
	}
	return strings.Join(rs, "; ")
}

func jobListAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	limit := c.Int("limit")
	if limit < 0 {
		return fmt.Errorf("--limit must be >= 0 (0: all), got %d", limit)
	}
	states, err := stateFilter(c.StringSlice("state"))
	if err != nil {
		return err
	}
	vs, err := client(c).Jobs(c.Context)
	if err != nil {
		return err
	}
	vs = slices.DeleteFunc(vs, func(v api.JobView) bool {
		return len(states) > 0 && !states[string(v.State)] && !states[string(v.Run)]
	})
	slices.SortStableFunc(vs, func(a, b api.JobView) int { return jobCreated(b).Compare(jobCreated(a)) })
	total := len(vs)
	if limit > 0 && len(vs) > limit {
		vs = vs[:limit]
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, vs)
	}
	peer, now := peerNames(c), time.Now()
	tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIER\tSTATE\tRUN\tPROVIDER\tPRICE\tCOST\tCREATED\tSTARTED\tENDED")
	for _, v := range vs {
		provider, price := v.Winner, "-"
		if v.Lease != nil {
			provider, price = v.Lease.Provider, fmt.Sprintf("$%.4g", v.Lease.Price)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t$%.4f\t%s\t%s\t%s\n", v.Job.ID, v.Job.Tier, v.State, orDash(string(v.Run)),
			orDash(peer(provider)), price, v.CostUSD, ago(jobCreated(v), now), ago(v.Started, now), ago(v.Ended, now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(vs) < total {
		fmt.Fprintf(c.App.Writer, "%d of %d job(s), newest first (--limit 0 lists all)\n", len(vs), total)
	} else {
		fmt.Fprintf(c.App.Writer, "%d job(s)\n", len(vs))
	}
	return nil
}

// jobCreated is when a job was created: its CreatedAt, else when this node
// posted it.
func jobCreated(v api.JobView) time.Time {
	if !v.Job.CreatedAt.IsZero() {
		return v.Job.CreatedAt
	}
	return v.PostedAt
}

// stateFilter reads `job list --state`: each a job state or a run state
// (the flag splits comma lists), nil for none.
func stateFilter(given []string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, s := range terms.JobStates() {
		known[string(s)] = true
	}
	for _, s := range terms.RunStates() {
		known[string(s)] = true
	}
	var out map[string]bool
	for _, s := range given {
		s = strings.ToLower(strings.TrimSpace(s))
		if !known[s] {
			return nil, fmt.Errorf("unknown --state %q (job states: %s; run states: %s)", s, joinStates(terms.JobStates()), joinStates(terms.RunStates()))
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[s] = true
	}
	return out, nil
}

func joinStates[S ~string](states []S) string {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

func jobCancelAction(c *cli.Context) error {
	id, err := jobArg(c, "job ID")
	if err != nil {
		return err
	}
	v, err := client(c).CancelJob(c.Context, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	if v.State == terms.JobCancelled || v.Run == terms.RunCancelled {
		fmt.Fprintf(c.App.Writer, "job %s cancelled\n", v.Job.ID)
	} else {
		fmt.Fprintf(c.App.Writer, "job %s: cancellation requested (state %s, run %s)\n", v.Job.ID, v.State, orDash(string(v.Run)))
	}
	return nil
}

func jobLogsAction(c *cli.Context) error {
	id, err := jobArg(c, "job ID")
	if err != nil {
		return err
	}
	attempt, all := c.Int("attempt"), c.Bool("all-attempts")
	switch {
	case attempt < 0 || (c.IsSet("attempt") && attempt == 0):
		return fmt.Errorf("--attempt must be 1 or more, got %d", attempt)
	case all && attempt > 0:
		return errors.New("give --attempt N or --all-attempts, not both")
	}
	cl := client(c)
	v, err := cl.Job(c.Context, id)
	if err != nil {
		return err
	}
	leases := v.Leases()
	n := len(leases)
	if n == 0 {
		return fmt.Errorf("job %s has no lease yet (state %s): no log", id, v.State)
	}
	if attempt > n {
		return fmt.Errorf("job %s has no attempt %d (it had %d)", id, attempt, n)
	}
	first, last := n, n
	switch {
	case all:
		first = 1
	case attempt > 0:
		first, last = attempt, attempt
	}
	w, peer := c.App.Writer, shortPeer
	var failed []string
	for a := first; a <= last; a++ {
		if n > 1 {
			l := leases[a-1]
			fmt.Fprintf(w, "==> attempt %d of %d: lease %s on %s <==\n", a, n, l.ID, peer(l.Provider))
		}
		// Only the last attempt can still be running: earlier ones' logs
		// are whole.
		err := copyLog(c, cl, id, api.LogsOptions{Follow: c.Bool("follow") && a == n, Attempt: a})
		if err != nil && !all {
			return err
		}
		if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "gpumesh: attempt %d: %s\n", a, oneLine(err.Error()))
			failed = append(failed, strconv.Itoa(a))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the logs of attempt(s) %s of job %s are unavailable", strings.Join(failed, ", "), id)
	}
	return nil
}

// copyLog writes one attempt's log, control characters made visible
// unless --raw.
func copyLog(c *cli.Context, cl *api.Client, id string, o api.LogsOptions) error {
	logs, err := cl.Logs(c.Context, id, o)
	if err != nil {
		return err
	}
	defer logs.Close()
	if c.Bool("raw") {
		if _, err := io.Copy(c.App.Writer, logs); err != nil {
			return fmt.Errorf("logs of job %s: %w", id, err)
		}
		return nil
	}
	w := &termSafeWriter{w: c.App.Writer}
	if _, err := io.Copy(w, logs); err != nil {
		return fmt.Errorf("logs of job %s: %w", id, err)
	}
	return w.Flush()
}

// ---- job fetch ----

// fetchedView is `job fetch --json`: the verified files, their paths
// relative to Dir.
type fetchedView struct {
	Job   string             `json:"job"`
	Dir   string             `json:"dir"`
	Files []terms.OutputFile `json:"files"`
}

func jobFetchAction(c *cli.Context) error {
	usage := "usage: " + commandPath(c) + " ID DIR"
	args := c.Args().Slice()
	switch {
	case len(args) == 0 || strings.TrimSpace(args[0]) == "":
		return fmt.Errorf("missing job ID (%s)", usage)
	case len(args) == 1 || strings.TrimSpace(args[1]) == "":
		return fmt.Errorf("missing DIR (%s)", usage)
	case len(args) > 2:
		return fmt.Errorf("unexpected argument %q (%s)", args[2], usage)
	}
	id, dir := args[0], args[1]
	maxSize, err := taskfile.ParseSize(c.String("max-size"))
	if err != nil {
		return fmt.Errorf("--max-size: %w", err)
	}
	// The outputs must be those the two-party receipt names.
	v, err := client(c).Job(c.Context, id)
	if err != nil {
		return err
	}
	if v.Receipt == nil {
		return fmt.Errorf("job %s has no receipt yet (run %s): its outputs cannot be checked; fetch them once it settled", id, orDash(string(v.Run)))
	}
	manifest, bundle, err := client(c).Outputs(c.Context, id)
	if err != nil {
		return err
	}
	defer bundle.Close()
	if got := terms.ManifestHash(manifest); got != v.Receipt.ResultHash {
		return fmt.Errorf("outputs of job %s: the provider's manifest (%d files, hash %q) is not the one its receipt names (%q); refusing them",
			id, len(manifest), got, v.Receipt.ResultHash)
	}
	var total int64
	for _, m := range manifest {
		if m.Size > maxSize-total {
			return fmt.Errorf("outputs of job %s total more than --max-size (%d bytes); raise it to fetch them", id, maxSize)
		}
		total += max(m.Size, 0)
	}
	files, err := wire.ExtractBundle(bundle, manifest, dir, c.Bool("force"))
	if errors.Is(err, wire.ErrExists) {
		return fmt.Errorf("outputs of job %s: %w (use --force to overwrite)", id, err)
	}
	if err != nil {
		return fmt.Errorf("outputs of job %s: %w", id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, fetchedView{Job: id, Dir: dir, Files: files})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tSIZE\tSHA256")
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", filepath.Join(dir, filepath.FromSlash(f.Path)), f.Size, f.SHA256)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%d file(s) verified\n", len(files))
	return nil
}

// ---- bids, provider, reputation ----
