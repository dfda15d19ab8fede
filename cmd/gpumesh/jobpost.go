package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
	"github.com/urfave/cli/v2"
)

// stringList is a repeatable string flag that, unlike cli.StringSliceFlag,
// never splits a value on commas (environment values may contain them).
type stringList []string

func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringList) String() string     { return strings.Join(*s, " ") }

func jobPostFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "file", Usage: "job file: a task file (name, resources, setup, run... see examples/) or a YAML job spec (fields as in terms.Job, package auction/terms); flags given explicitly override it. Also given as the argument: job post task.yaml"},
		&cli.StringFlag{Name: "tier", Value: string(terms.Silver), Usage: "gold, silver or bronze"},
		&cli.Float64Flag{Name: "max-price", DefaultText: "required unless in --file", Usage: "most you pay per GPU-hour, in USD"},
		&cli.StringSliceFlag{Name: "gpu", Usage: "acceptable GPU model, e.g. H100 (repeatable)"},
		&cli.StringFlag{Name: "count", Value: "1", Usage: "number of GPUs, or a fraction of one GPU (0.125, 0.25 or 0.5): a slice of a device other jobs share, priced and billed by its fraction"},
		&cli.IntFlag{Name: "nodes", Value: 1, Usage: fmt.Sprintf("members of a gang job, up to %d: that many providers, --count GPUs each, placed all or nothing and stopped, saved and placed again together", terms.MaxNodes)},
		&cli.StringFlag{Name: "isolation", DefaultText: terms.IsolationAny, Usage: "how a fractional job's slice must be enforced: mig, mps or any (any includes none: declared GPUs, accounting only)"},
		&cli.IntFlag{Name: "min-vram", Usage: "minimum VRAM per GPU (of the slice, with a fractional --count), in GB"},
		&cli.StringFlag{Name: "region", Usage: "residency constraint: a region or region prefix, e.g. eu"},
		nearFlag(), maxRTTFlag(),
		&cli.Float64Flag{Name: "min-reliability", Usage: "minimum provider reliability, 0..1"},
		&cli.BoolFlag{Name: "verified", Usage: "only providers verified for their GPU model (a passed 'gpumesh verify' challenge in this node's book)"},
		&cli.BoolFlag{Name: "preemptible", DefaultText: "true for bronze, false otherwise", Usage: "the job may be interrupted"},
		&cli.DurationFlag{Name: "duration", DefaultText: "required unless in --file", Usage: "how long the job needs the GPUs, e.g. 2h"},
		&cli.StringFlag{Name: "deadline", Usage: "latest start: RFC3339 time or a duration from now, e.g. 30m"},
		&cli.StringSliceFlag{Name: "dataset", Usage: "dataset the job reads (repeatable); providers with it cached are preferred"},
		&cli.StringFlag{Name: "workload", Usage: "workload kind: inference, training, batch, eval, sweep..."},
		&cli.StringFlag{Name: "image", Usage: "container image to run the command in"},
		&cli.GenericFlag{Name: "env", Value: &stringList{}, Usage: "environment variable KEY=VALUE (repeatable)"},
		&cli.GenericFlag{Name: "input", Value: &stringList{}, Usage: "input artifact NAME=ID (repeatable): read-only at $GPUMESH_INPUTS/NAME (/inputs/NAME in containers); this daemon serves it to the provider"},
		&cli.StringFlag{Name: "image-artifact", Usage: "artifact id of a `docker save` of --image (gpumesh artifact add --image): providers without the image load it from there"},
		&cli.StringFlag{Name: "outputs", Usage: "directory, relative to the job's work dir, whose files are returned"},
		&cli.IntFlag{Name: "memory-mb", Usage: "memory cap in MB, where the runtime can enforce it"},
		&cli.DurationFlag{Name: "bid-window", DefaultText: terms.DefaultBidWindow.String(), Usage: "how long to collect bids"},
		maxAttemptsFlag(),
		&cli.DurationFlag{Name: "checkpoint-every", DefaultText: "only when stopped early", Usage: "how often the provider saves $GPUMESH_CHECKPOINT_DIR while the job runs, e.g. 10m (it is also saved when the job is preempted); a later attempt resumes from it"},
		&cli.BoolFlag{Name: "no-persist", Usage: "keep nothing of the job on its provider: its log and outputs come to this node and are deleted from the provider once the lease is settled, no outputs or checkpoints stay there as artifacts, and its memory never swaps; only providers that offer it (policy no_persist) bid, and their receipts must say it held"},
		&cli.DurationFlag{Name: "retain", DefaultText: "7 days", Usage: fmt.Sprintf("how long the provider keeps the job's log and outputs after the lease, %v to %v, e.g. 1h (providers keep them no longer than their own maximum)", terms.MinRetain, terms.MaxRetain)},
		&cli.BoolFlag{Name: "wait", Usage: "wait for the job to finish, streaming its log (not with --json), and print its final status; exit with the job's exit code"},
		&cli.BoolFlag{Name: "queue", Usage: "post it even when no provider this node knows could ever run it (GPU model, region, price...), to wait for providers that may appear"},
		jsonFlag(),
	}
}

// nearFlag is --near, where a job's clients are (terms.Job.Near).
func nearFlag() cli.Flag {
	return &cli.StringFlag{Name: "near", Usage: "where the job's clients are: a region (e.g. eu-west; providers in it rank first, others are allowed) " +
		"or a client location's multiaddr (e.g. /ip4/203.0.113.7); bids are then ranked by the round trip this node measures to each provider " +
		"(libp2p ping): from this node, not from that location, so run it near the clients"}
}

// maxRTTFlag is --max-rtt, a job's bound on the round trip to its
// provider (terms.Job.MaxRTT).
func maxRTTFlag() cli.Flag {
	return &cli.DurationFlag{Name: "max-rtt", Usage: fmt.Sprintf("reject providers whose round trip from this node (libp2p ping) exceeds this, "+
		"%v to %v, e.g. 50ms; one this node cannot measure within the bid window is rejected too; bids rank by it", terms.MinMaxRTT, terms.MaxMaxRTT)}
}

// maxAttemptsFlag is --max-attempts, the job's attempt budget.
func maxAttemptsFlag() cli.Flag {
	return &cli.IntFlag{Name: "max-attempts", DefaultText: fmt.Sprint(terms.DefaultMaxAttempts),
		Usage: fmt.Sprintf("most leases the job may use when its providers are lost or preempt it (1..%d); each retry runs elsewhere", terms.MaxAttempts)}
}

func jobPostCommand() *cli.Command {
	return &cli.Command{
		Name:      "post",
		Usage:     "post a job to the market and run its auction",
		ArgsUsage: "TASK.yaml | -- CMD [ARGS...]",
		Flags:     jobPostFlags(),
		Action:    jobPostAction,
	}
}

// buildJob builds and validates the job described by c's flags, the
// optional --file spec and the command after `--`. Explicitly given flags
// override the file. now is the job's creation time and the origin of a
// relative --deadline.
func buildJob(c *cli.Context, now time.Time) (terms.Job, error) {
	var job terms.Job
	inFile := map[string]bool{}
	path, err := fileArg(c, "job", "job post --wait")
	if err != nil {
		return terms.Job{}, err
	}
	var file *taskfile.File
	if path != "" {
		if file, err = loadJobFile(path, now); err != nil {
			return terms.Job{}, err
		}
		job, inFile = file.Job, file.Set
	}
	set := func(name string) bool { return c.IsSet(name) }

	// Tier first: the preemptible default depends on it.
	tier := string(job.Tier)
	if set("tier") || tier == "" {
		tier = c.String("tier")
	}
	t, terr := terms.ParseTier(tier)
	if terr != nil {
		return terms.Job{}, fmt.Errorf("unknown tier %q (gold, silver, bronze)", tier)
	}
	job.Tier = t

	switch {
	case set("max-price"):
		job.MaxPrice = c.Float64("max-price")
	case !inFile["max_price"]:
		return terms.Job{}, errors.New("--max-price is required (USD per GPU-hour)")
	}

	switch {
	case set("count") || (!inFile["gpu_count"] && !inFile["gpu_fraction"]):
		n, f, err := terms.ParseGPUs(c.String("count"))
		if err != nil {
			return terms.Job{}, fmt.Errorf("invalid --count: %v", err)
		}
		job.GPUCount, job.GPUFraction = n, f
	case !inFile["gpu_count"]:
		job.GPUCount = 1 // the file's gpu_fraction is of one GPU
	}
	switch {
	case set("preemptible"):
		job.Preemptible = c.Bool("preemptible")
	case !inFile["preemptible"]:
		job.Preemptible = job.Tier == terms.Bronze
	}
	switch {
	case set("duration"):
		job.Duration = c.Duration("duration")
	case !inFile["duration"]:
		return terms.Job{}, errors.New("--duration is required (e.g. 2h)")
	}
	if err := applyJobFlags(c, &job, now, path != "" && path != c.String("file")); err != nil {
		return terms.Job{}, err
	}

	job.CreatedAt = now
	if err := job.Validate(); err != nil {
		return terms.Job{}, invalidJob(c, err, file)
	}
	return job, nil
}

// fileArg is the kind ("job", "service") of file given by --file or as
// the command's argument (gpumesh job post task.yaml): a single argument
// ending in .yaml, .yml or .json is such a file, never a command. example
// is the command with a flag, for the hint that flags go first.
func fileArg(c *cli.Context, kind, example string) (string, error) {
	p := c.String("file")
	args := c.Args().Slice()
	if len(args) == 0 || !isJobFileName(args[0]) {
		return p, nil
	}
	if len(args) > 1 {
		return "", fmt.Errorf("unexpected %q after the %s file %s: flags go before it (e.g. gpumesh %s %s)", args[1], kind, args[0], example, args[0])
	}
	if p != "" {
		return "", fmt.Errorf("two %s files: --file %s and %s; give one", kind, p, args[0])
	}
	return args[0], nil
}

func isJobFileName(s string) bool {
	s = strings.ToLower(s)
	return strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml") || strings.HasSuffix(s, ".json")
}

// applyJobFlags sets the job fields that optional flags name (only those
// given explicitly) and the command after --. job post and serve post share
// it; a flag a command does not define is never set. fileArg: the
// argument is the job file, not a command.
func applyJobFlags(c *cli.Context, job *terms.Job, now time.Time, fileArg bool) error {
	set := c.IsSet
	if set("gpu") {
		job.GPUModels = nil
		for _, m := range c.StringSlice("gpu") {
			job.GPUModels = append(job.GPUModels, strings.TrimSpace(m))
		}
	}
	if set("min-vram") {
		job.MinVRAMGB = c.Int("min-vram")
	}
	if set("nodes") {
		if job.Nodes = c.Int("nodes"); job.Nodes < 1 {
			return fmt.Errorf("invalid --nodes: must be in [1, %d], got %d", terms.MaxNodes, job.Nodes)
		}
	}
	if set("isolation") {
		job.Isolation = strings.ToLower(strings.TrimSpace(c.String("isolation")))
	}
	if set("region") {
		job.Region = strings.TrimSpace(c.String("region"))
	}
	if set("near") {
		job.Near = strings.TrimSpace(c.String("near"))
	}
	if set("max-rtt") {
		job.MaxRTT = c.Duration("max-rtt")
	}
	if set("min-reliability") {
		job.MinReliability = c.Float64("min-reliability")
	}
	if set("verified") {
		job.Verified = c.Bool("verified")
	}
	if set("deadline") {
		d, err := parseDeadline(c.String("deadline"), now)
		if err != nil {
			return err
		}
		job.Deadline = d
	}
	if set("dataset") {
		job.Datasets = nil
		for _, d := range c.StringSlice("dataset") {
			job.Datasets = append(job.Datasets, strings.TrimSpace(d))
		}
	}
	if set("workload") {
		job.Workload = strings.TrimSpace(c.String("workload"))
	}
	if set("image") {
		job.Run.Image = c.String("image")
	}
	if set("env") {
		env, _ := c.Generic("env").(*stringList)
		if job.Run.Env == nil {
			job.Run.Env = map[string]string{}
		}
		for _, kv := range *env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t") {
				return fmt.Errorf("--env must be KEY=VALUE, got %q", kv)
			}
			job.Run.Env[k] = v
		}
	}
	if set("input") {
		in, _ := c.Generic("input").(*stringList)
		if job.Run.Inputs == nil {
			job.Run.Inputs = map[string]string{}
		}
		for _, kv := range *in {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return fmt.Errorf("--input must be NAME=ARTIFACT_ID, got %q", kv)
			}
			job.Run.Inputs[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if set("image-artifact") {
		job.Run.ImageArtifact = strings.TrimSpace(c.String("image-artifact"))
	}
	if set("outputs") {
		job.Run.Outputs = c.String("outputs")
	}
	if set("memory-mb") {
		job.Run.MemoryMB = c.Int("memory-mb")
	}
	if set("bid-window") {
		job.BidWindow = c.Duration("bid-window")
	}
	if set("max-attempts") {
		job.MaxAttempts = c.Int("max-attempts")
	}
	if set("checkpoint-every") {
		job.CheckpointEvery = c.Duration("checkpoint-every")
	}
	if set("no-persist") {
		job.NoPersist = c.Bool("no-persist")
	}
	if set("retain") {
		job.Retain = c.Duration("retain")
	}
	if args := c.Args().Slice(); len(args) > 0 && !fileArg {
		job.Run.Command = args
	}

	return nil
}

// jobFlags names the job post flag that sets each of terms.Job's fields.
var jobFlags = map[string]string{
	"tier": "tier", "max_price": "max-price", "gpu_models": "gpu", "gpu_count": "count", "gpu_fraction": "count", "nodes": "nodes", "isolation": "isolation", "min_vram_gb": "min-vram",
	"region": "region", "near": "near", "max_rtt": "max-rtt", "min_reliability": "min-reliability", "verified": "verified", "preemptible": "preemptible", "duration": "duration",
	"deadline": "deadline", "datasets": "dataset", "workload": "workload", "bid_window": "bid-window", "max_attempts": "max-attempts",
	"checkpoint_every": "checkpoint-every", "no_persist": "no-persist", "retain": "retain",
	"run.image": "image", "run.env": "env", "run.outputs": "outputs", "run.inputs": "input", "run.image_artifact": "image-artifact", "run.memory_mb": "memory-mb",
}

// invalidJob turns terms.Job.Validate's field errors into one line: a
// problem with a value given by a flag names the flag ("invalid
// --max-price: must be a positive number, got 0"), one with a value from
// --file names the spec's field ("invalid job: gpu_count must be in
// [1, 1024], got 0"); an empty command gets the hint where to put it.
//
// A task file's problems name its line ("task.yaml:7:
// resources.accelerators: ...").
func invalidJob(c *cli.Context, err error, file *taskfile.File) error {
	fes := terms.FieldErrors(err)
	if len(fes) == 0 {
		return fmt.Errorf("invalid job: %v", err)
	}
	var flagged, filed []string
	for _, fe := range fes {
		base, _, _ := strings.Cut(fe.Field, "[")
		switch flag, ok := jobFlags[base]; {
		case fe.Field == "run.command":
			flagged = append(flagged, "no command: put it after -- (e.g. gpumesh job post --max-price 2 --duration 1h -- python train.py)")
		case ok && c.IsSet(flag):
			flagged = append(flagged, fmt.Sprintf("invalid --%s: %s", flag, fe.Problem))
		case file != nil && file.Task:
			flagged = append(flagged, file.Explain(fe))
		default:
			filed = append(filed, fe.Error())
		}
	}
	if len(filed) > 0 {
		flagged = append(flagged, "invalid job: "+strings.Join(filed, "; "))
	}
	return errors.New(strings.Join(flagged, "; "))
}

// loadJobFile reads a job file of either shape (taskfile.Parse: a task
// file, or a YAML job spec whose unknown fields are refused). Its Set says
// which fields the file gave, so that defaults apply only to what it left
// out.
func loadJobFile(p string, now time.Time) (*taskfile.File, error) {
	b, err := readJobFile(p, "job")
	if err != nil {
		return nil, err
	}
	f, err := taskfile.Parse(p, b, now)
	if err != nil {
		return nil, fmt.Errorf("job file %w", err)
	}
	return f, nil
}

// readJobFile reads a kind ("job", "service") of file, refusing one larger
// than taskfile.MaxSize.
func readJobFile(p, kind string) ([]byte, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", kind, err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, taskfile.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", kind, err)
	}
	return b, nil
}

// parseDeadline accepts an RFC3339 time or a positive duration from now.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	// A time before the job's creation is refused by terms.Job.Validate.
	t, ok := taskfile.ParseDeadline(s, now)
	if !ok {
		return time.Time{}, fmt.Errorf("--deadline must be an RFC3339 time or a positive duration from now, got %q", s)
	}
	return t, nil
}

// waitInterval bounds each long poll of a job's view (`job post --wait`,
// `job port-forward`; a daemon without the long poll is asked once per
// interval) and is how often `provider drain` polls the drain's progress
// (a variable so tests can shorten it).
var waitInterval = time.Second

func jobPostAction(c *cli.Context) error {
	job, err := buildJob(c, time.Now())
	if err != nil {
		return err
	}
	w := c.App.Writer
	pr := newProgress(w, c.Bool("json"))
	pr.show(fmt.Sprintf("job posted; collecting bids for %s", orDefault(job.BidWindow, terms.DefaultBidWindow)))
	v, err := client(c).PostJobRequest(c.Context, api.PostJobRequest{Job: job, Queue: c.Bool("queue")})
	pr.clear()
	if err != nil {
		return err
	}
	if v.State == terms.JobQueued {
		// No provider could take it yet: it waits on the daemon, offered
		// again as capacity frees, until its start deadline.
		if !c.Bool("wait") {
			if c.Bool("json") {
				return printJSON(w, v)
			}
			fmt.Fprintf(w, "job %s %s\n", v.Job.ID, lastReason(v.Reasons))
			return nil
		}
		if !c.Bool("json") {
			fmt.Fprintf(w, "job %s %s; waiting\n", v.Job.ID, lastReason(v.Reasons))
		}
		if v, err = waitLeased(c, v.Job.ID); err != nil {
			return err
		}
	}
	if v.State != terms.JobLeased && v.State != terms.JobFinished {
		if c.Bool("json") {
			if err := printJSON(w, v); err != nil {
				return err
			}
		}
		return fmt.Errorf("job %s %s: %s", v.Job.ID, v.State, reasonsText(v.Reasons))
	}
	if !c.Bool("wait") {
		if c.Bool("json") {
			return printJSON(w, v)
		}
		printPosted(w, &v)
		return nil
	}
	if !c.Bool("json") {
		printPosted(w, &v)
	}
	final, err := waitJob(c, v.Job.ID, v.Run, pr)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := printJSON(w, final); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w)
		printJobView(w, &final, shortPeer)
	}
	return jobExit(&final)
}

// jobExit is how `job post --wait` ends for the job's final view v: nil
// when it succeeded; the job's own exit code when its command failed with
// one; else exit 1, each with the outcome on one line.
func jobExit(v *api.JobView) error {
	if v.Run == terms.RunSucceeded {
		return nil
	}
	msg := fmt.Sprintf("job %s %s", v.Job.ID, runOutcome(v))
	if v.Run == terms.RunFailed && v.ExitCode != nil && *v.ExitCode > 0 && *v.ExitCode < 256 {
		return cli.Exit(msg, *v.ExitCode)
	}
	return errors.New(msg)
}

func printPosted(w io.Writer, v *api.JobView) {
	l := v.Lease
	if l == nil {
		fmt.Fprintf(w, "job %s leased to %s\n", v.Job.ID, orDash(v.Winner))
		return
	}
	fmt.Fprintf(w, "job %s leased to %s at $%.4g/GPU-h (start %s)\n", v.Job.ID, l.Provider, l.Price, fmtTime(l.Start))
	fmt.Fprintf(w, "  lease %s: %s tier, %s, until %s\n", l.ID, l.Tier, terms.GPUsText(l.GPUCount, l.GPUFraction), fmtTime(l.End))
	eligible := 0
	for _, b := range v.Bids {
		if b.Rejected == "" {
			eligible++
		}
	}
	fmt.Fprintf(w, "  %d bid(s), %d eligible; max $%.4g/GPU-h; est. cost $%.4f\n", len(v.Bids), eligible, v.Job.MaxPrice,
		terms.LeaseCost(l.Price, l.GPUCount, l.GPUFraction, l.End.Sub(l.Start)))
}

// lastReason is the newest of a job's reasons (a queued job's says why).
func lastReason(rs []string) string {
	if len(rs) == 0 {
		return "queued"
	}
	return rs[len(rs)-1]
}

// waitLeased follows a queued job (long polls) until it is no longer
// queued.
func waitLeased(c *cli.Context, id string) (api.JobView, error) {
	f := followJob(client(c), id)
	v, err := f.next(c.Context)
	for {
		if err != nil {
			return v, fmt.Errorf("wait for job %s: %w", id, err)
		}
		if v.State != terms.JobQueued && v.State != terms.JobBidding && v.State != terms.JobAwarding {
			return v, nil
		}
		v, err = f.next(c.Context)
	}
}

// runTerminal reports whether a job needs no more waiting.
func runTerminal(v *api.JobView) bool {
	switch v.State {
	case terms.JobUnplaceable, terms.JobCancelled, terms.JobFailed, terms.JobFinished:
		return true
	case terms.JobBidding, terms.JobAwarding, terms.JobQueued:
		return false // e.g. a preempted bronze job being requeued
	}
	switch v.Run {
	case terms.RunSucceeded, terms.RunFailed, terms.RunExpired, terms.RunCancelled:
		return true
	case terms.RunPreempted:
		// A preemptible job may be requeued; a preempted lease of a
		// non-preemptible job is final.
		return !v.Job.Preemptible
	}
	return false
}

// jobFollower follows a job's view with long polls (api.Client.JobNext):
// next answers the view at once the first time, then at its first change
// after the view it last answered (even one that came between two asks,
// which the ETag it names tells the daemon), or after waitInterval when it
// has not changed (nextView).
type jobFollower struct {
	cl    *api.Client
	id    string
	prev  api.JobView
	tag   string // the ETag of prev
	asked bool
}

func followJob(cl *api.Client, id string) *jobFollower { return &jobFollower{cl: cl, id: id} }

// next is the job's view, as jobFollower says.
func (f *jobFollower) next(ctx context.Context) (api.JobView, error) {
	ask := func(ctx context.Context, wait time.Duration) (api.JobView, error) {
		v, tag, err := f.cl.JobNext(ctx, f.id, wait, f.tag)
		if err == nil {
			f.tag = tag
		}
		return v, err
	}
	var v api.JobView
	var err error
	if f.asked {
		v, err = nextView(ctx, f.prev, ask)
	} else {
		v, err = ask(ctx, 0)
	}
	if err == nil {
		f.prev, f.asked = v, true
	}
	return v, err
}

// nextView is what ask answers at its next change after prev, or after
// waitInterval when it has not changed: a long poll (ask's ?wait=D). A
// daemon from before the long poll answers at once: the rest of the turn
// is waited out rather than asking again at once.
func nextView[V any](ctx context.Context, prev V, ask func(ctx context.Context, wait time.Duration) (V, error)) (V, error) {
	asked := time.Now()
	v, err := ask(ctx, waitInterval)
	if err != nil || !reflect.DeepEqual(v, prev) {
		return v, err
	}
	select {
	case <-ctx.Done():
		return v, ctx.Err()
	case <-time.After(waitInterval - time.Since(asked)):
	}
	return v, nil
}

// waitJob polls the job until runTerminal, printing run-state changes and
// streaming the job's log when not in JSON mode.
func waitJob(c *cli.Context, id string, last terms.RunState, pr *progress) (api.JobView, error) {
	defer pr.clear()
	cl := client(c)
	var logs *logFollower
	if !c.Bool("json") {
		logs = newLogFollower(c.Context, cl, id, pr)
		defer logs.stop()
	}
	// Each ask after the first is a long poll: it answers at the job's
	// next change, or after waitInterval to refresh the heartbeat count.
	f := followJob(cl, id)
	v, err := f.next(c.Context)
	for {
		if err != nil {
			return v, fmt.Errorf("wait for job %s: %w", id, err)
		}
		if v.Run != last && v.Run != "" && !c.Bool("json") {
			_ = pr.above([]byte(fmt.Sprintf("  %s run %s\n", time.Now().Format(time.TimeOnly), v.Run)))
		}
		if logs != nil {
			logs.see(&v)
		}
		pr.show(runProgress(&v))
		last = v.Run
		if runTerminal(&v) {
			if logs != nil {
				logs.finish()
			}
			return v, nil
		}
		v, err = f.next(c.Context)
	}
}

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// runProgress is the status line of a job being waited on: its run state
// and, once heartbeats arrive, their count and the last GPU reading.
func runProgress(v *api.JobView) string {
	s := "job " + v.Job.ID + ": " + orDash(string(v.Run))
	if v.Run == "" {
		s = "job " + v.Job.ID + ": " + string(v.State)
	}
	if h := v.Heartbeats; h != nil {
		s += fmt.Sprintf(", %d heartbeat(s)", h.Count)
	}
	if t := v.LastTelemetry; t != nil {
		s += fmt.Sprintf(", GPU %.0f%% %d°C %d W", t.GPUUtil, t.TempC, t.PowerW)
	}
	return s
}

// ---- job status / list / cancel / logs ----
