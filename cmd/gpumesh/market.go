package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet/sim/replay"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// manifestHeader carries the JSON []auction.OutputFile of GET /jobs/{id}/outputs.
const manifestHeader = "X-Gpumesh-Manifest"

// waitInterval is how often `job post --wait` polls the job's status (a
// variable so tests can shorten it).
var waitInterval = time.Second

func marketCommands() []*cli.Command {
	return []*cli.Command{
		jobCommand(),
		bidsCommand(),
		providerCommand(),
		reputationCommand(),
		ledgerCommand(),
		replay.Command(),
	}
}

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
				Flags:     []cli.Flag{jsonFlag()},
				Action:    jobStatusAction,
			},
			{
				Name:   "list",
				Usage:  "list this node's jobs, newest first",
				Flags:  []cli.Flag{jsonFlag()},
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
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming until the job ends"}},
				Action:    jobLogsAction,
			},
			{
				Name:      "fetch",
				Usage:     "download a job's output files into DIR, verifying their checksums",
				ArgsUsage: "ID DIR",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "overwrite existing files in DIR"}},
				Action:    jobFetchAction,
			},
		},
	}
}

// jobArg returns the single ID-like argument of c, with a usage hint when it
// is missing or followed by more arguments.
func jobArg(c *cli.Context, what string) (string, error) {
	usage := commandPath(c)
	if c.Command.ArgsUsage != "" {
		usage += " " + c.Command.ArgsUsage
	}
	args := c.Args().Slice()
	if len(args) == 0 || strings.TrimSpace(args[0]) == "" {
		return "", fmt.Errorf("missing %s (usage: %s)", what, usage)
	}
	if len(args) > 1 {
		return "", fmt.Errorf("unexpected argument %q (usage: %s)", args[1], usage)
	}
	return args[0], nil
}

// commandPath is the full invocation of c's command, e.g. "gpumesh job
// status" (cli.Command.FullName omits the parent commands).
func commandPath(c *cli.Context) string {
	var names []string
	for _, cc := range c.Lineage() {
		if cc.Command != nil && cc.Command.Name != "" {
			names = append(names, cc.Command.Name)
		}
	}
	if n := len(names); n == 0 || names[n-1] != c.App.Name {
		names = append(names, c.App.Name)
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, " ")
}

// noExtraArgs is noArgs with the full command path in its hint.
func noExtraArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see `%s --help`)", c.Args().First(), commandPath(c))
	}
	return nil
}

func jobPath(id string, suffix ...string) string {
	return "/jobs/" + url.PathEscape(id) + strings.Join(suffix, "")
}

// ---- job post ----

// stringList is a repeatable string flag that, unlike cli.StringSliceFlag,
// never splits a value on commas (environment values may contain them).
type stringList []string

func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringList) String() string     { return strings.Join(*s, " ") }

func jobPostFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "file", Usage: "YAML job spec (fields as in auction.Job); flags given explicitly override it"},
		&cli.StringFlag{Name: "tier", Value: string(auction.Silver), Usage: "gold, silver or bronze"},
		&cli.Float64Flag{Name: "max-price", DefaultText: "required unless in --file", Usage: "most you pay per GPU-hour, in USD"},
		&cli.StringSliceFlag{Name: "gpu", Usage: "acceptable GPU model, e.g. H100 (repeatable)"},
		&cli.IntFlag{Name: "count", Value: 1, Usage: "number of GPUs"},
		&cli.IntFlag{Name: "min-vram", Usage: "minimum VRAM per GPU, in GB"},
		&cli.StringFlag{Name: "region", Usage: "residency constraint: a region or region prefix, e.g. eu"},
		&cli.Float64Flag{Name: "min-reliability", Usage: "minimum provider reliability, 0..1"},
		&cli.BoolFlag{Name: "preemptible", DefaultText: "true for bronze, false otherwise", Usage: "the job may be interrupted"},
		&cli.DurationFlag{Name: "duration", DefaultText: "required unless in --file", Usage: "how long the job needs the GPUs, e.g. 2h"},
		&cli.StringFlag{Name: "deadline", Usage: "latest start: RFC3339 time or a duration from now, e.g. 30m"},
		&cli.StringSliceFlag{Name: "dataset", Usage: "dataset the job reads (repeatable); providers with it cached are preferred"},
		&cli.StringFlag{Name: "workload", Usage: "workload kind: inference, training, batch, eval, sweep..."},
		&cli.StringFlag{Name: "image", Usage: "container image to run the command in"},
		&cli.GenericFlag{Name: "env", Value: &stringList{}, Usage: "environment variable KEY=VALUE (repeatable)"},
		&cli.StringFlag{Name: "outputs", Usage: "directory, relative to the job's work dir, whose files are returned"},
		&cli.IntFlag{Name: "memory-mb", Usage: "memory cap in MB, where the runtime can enforce it"},
		&cli.DurationFlag{Name: "bid-window", DefaultText: auction.DefaultBidWindow.String(), Usage: "how long to collect bids"},
		&cli.BoolFlag{Name: "wait", Usage: "wait for the job to finish and print its final status; fail unless it succeeded"},
		jsonFlag(),
	}
}

func jobPostCommand() *cli.Command {
	return &cli.Command{
		Name:      "post",
		Usage:     "post a job to the market and run its auction",
		ArgsUsage: "-- CMD [ARGS...]",
		Flags:     jobPostFlags(),
		Action:    jobPostAction,
	}
}

// buildJob builds and validates the job described by c's flags, the
// optional --file spec and the command after `--`. Explicitly given flags
// override the file. now is the job's creation time and the origin of a
// relative --deadline.
func buildJob(c *cli.Context, now time.Time) (auction.Job, error) {
	var job auction.Job
	inFile := map[string]bool{}
	if p := c.String("file"); p != "" {
		var err error
		if job, inFile, err = loadJobFile(p); err != nil {
			return auction.Job{}, err
		}
	}
	set := func(name string) bool { return c.IsSet(name) }

	// Tier first: the preemptible default depends on it.
	tier := string(job.Tier)
	if set("tier") || tier == "" {
		tier = c.String("tier")
	}
	t, err := auction.ParseTier(tier)
	if err != nil {
		return auction.Job{}, fmt.Errorf("unknown tier %q (gold, silver, bronze)", tier)
	}
	job.Tier = t

	switch {
	case set("max-price"):
		v := c.Float64("max-price")
		if !(v > 0) || math.IsInf(v, 0) {
			return auction.Job{}, fmt.Errorf("--max-price must be > 0, got %v", v)
		}
		job.MaxPrice = v
	case !inFile["max_price"]:
		return auction.Job{}, errors.New("--max-price is required (USD per GPU-hour)")
	}

	if set("gpu") {
		job.GPUModels = nil
		for _, m := range c.StringSlice("gpu") {
			if m = strings.TrimSpace(m); m == "" {
				return auction.Job{}, errors.New("--gpu must not be empty")
			}
			job.GPUModels = append(job.GPUModels, m)
		}
	}
	if set("count") || !inFile["gpu_count"] {
		v := c.Int("count")
		if v < 1 || v > auction.MaxGPUCount {
			return auction.Job{}, fmt.Errorf("--count must be in [1, %d], got %d", auction.MaxGPUCount, v)
		}
		job.GPUCount = v
	}
	if set("min-vram") {
		if v := c.Int("min-vram"); v < 0 {
			return auction.Job{}, fmt.Errorf("--min-vram must be >= 0, got %d", v)
		}
		job.MinVRAMGB = c.Int("min-vram")
	}
	if set("region") {
		job.Region = strings.TrimSpace(c.String("region"))
	}
	if set("min-reliability") {
		v := c.Float64("min-reliability")
		if !(v >= 0 && v <= 1) {
			return auction.Job{}, fmt.Errorf("--min-reliability must be in [0, 1], got %v", v)
		}
		job.MinReliability = v
	}
	switch {
	case set("preemptible"):
		job.Preemptible = c.Bool("preemptible")
		if job.Preemptible && job.Tier == auction.Gold {
			return auction.Job{}, errors.New("--preemptible cannot be used with --tier gold (gold work is never preempted)")
		}
	case !inFile["preemptible"]:
		job.Preemptible = job.Tier == auction.Bronze
	}
	switch {
	case set("duration"):
		if v := c.Duration("duration"); v <= 0 {
			return auction.Job{}, fmt.Errorf("--duration must be > 0, got %v", v)
		}
		job.Duration = c.Duration("duration")
	case !inFile["duration"]:
		return auction.Job{}, errors.New("--duration is required (e.g. 2h)")
	}
	if set("deadline") {
		d, err := parseDeadline(c.String("deadline"), now)
		if err != nil {
			return auction.Job{}, err
		}
		job.Deadline = d
	}
	if set("dataset") {
		job.Datasets = nil
		for _, d := range c.StringSlice("dataset") {
			if d = strings.TrimSpace(d); d == "" {
				return auction.Job{}, errors.New("--dataset must not be empty")
			}
			job.Datasets = append(job.Datasets, d)
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
				return auction.Job{}, fmt.Errorf("--env must be KEY=VALUE, got %q", kv)
			}
			job.Run.Env[k] = v
		}
	}
	if set("outputs") {
		job.Run.Outputs = c.String("outputs")
	}
	if set("memory-mb") {
		if v := c.Int("memory-mb"); v < 0 {
			return auction.Job{}, fmt.Errorf("--memory-mb must be >= 0, got %d", v)
		}
		job.Run.MemoryMB = c.Int("memory-mb")
	}
	if set("bid-window") {
		v := c.Duration("bid-window")
		if v < auction.MinBidWindow || v > auction.MaxBidWindow {
			return auction.Job{}, fmt.Errorf("--bid-window must be in [%v, %v], got %v", auction.MinBidWindow, auction.MaxBidWindow, v)
		}
		job.BidWindow = v
	}
	if args := c.Args().Slice(); len(args) > 0 {
		job.Run.Command = args
	}
	if len(job.Run.Command) == 0 || strings.TrimSpace(job.Run.Command[0]) == "" {
		return auction.Job{}, errors.New("no command: put it after -- (e.g. gpumesh job post --max-price 2 --duration 1h -- python train.py)")
	}

	job.CreatedAt = now
	if err := job.Validate(); err != nil {
		return auction.Job{}, fmt.Errorf("invalid job: %s", validationMessage(err))
	}
	return job, nil
}

// loadJobFile reads a YAML job spec, rejecting unknown fields. It also
// reports which top-level keys the file set, so that defaults apply only
// to what it left out.
func loadJobFile(p string) (auction.Job, map[string]bool, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return auction.Job{}, nil, fmt.Errorf("job file: %w", err)
	}
	var job auction.Job
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&job); err != nil {
		if errors.Is(err, io.EOF) {
			return auction.Job{}, nil, fmt.Errorf("job file %s is empty", p)
		}
		return auction.Job{}, nil, fmt.Errorf("job file %s: %s", p, yamlMessage(err))
	}
	var keys map[string]yaml.Node
	if err := yaml.Unmarshal(b, &keys); err != nil {
		return auction.Job{}, nil, fmt.Errorf("job file %s: %s", p, yamlMessage(err))
	}
	set := make(map[string]bool, len(keys))
	for k := range keys {
		set[k] = true
	}
	return job, set, nil
}

// yamlMessage is a YAML decoding error on one line.
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		parts := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			parts[i] = strings.TrimSpace(e)
		}
		return strings.Join(parts, "; ")
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// parseDeadline accepts an RFC3339 time or a positive duration from now.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return time.Time{}, fmt.Errorf("--deadline %s is in the past", s)
		}
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--deadline must be an RFC3339 time or a positive duration from now, got %q", s)
	}
	return now.Add(d), nil
}

// validationMessage flattens auction.Job.Validate's joined errors into one
// line without its "auction: invalid job" prefix.
func validationMessage(err error) string {
	if inner := errors.Unwrap(err); inner != nil {
		if j, ok := inner.(interface{ Unwrap() []error }); ok {
			var parts []string
			for _, e := range j.Unwrap() {
				parts = append(parts, e.Error())
			}
			return strings.Join(parts, "; ")
		}
	}
	return err.Error()
}

func jobPostAction(c *cli.Context) error {
	job, err := buildJob(c, time.Now())
	if err != nil {
		return err
	}
	cl := client(c)
	var v api.JobView
	if err := cl.Do(c.Context, http.MethodPost, "/jobs", nil, api.PostJobRequest{Job: job}, &v); err != nil {
		return err
	}
	w := c.App.Writer
	if v.State != auction.JobLeased && v.State != auction.JobFinished {
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
	final, err := waitJob(c, v.Job.ID, v.Run)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := printJSON(w, final); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w)
		printJobView(w, &final)
	}
	if final.Run != auction.RunSucceeded {
		return fmt.Errorf("job %s %s", final.Job.ID, runOutcome(&final))
	}
	return nil
}

func reasonsText(rs []string) string {
	if len(rs) == 0 {
		return "no reason given"
	}
	return strings.Join(rs, "; ")
}

func printPosted(w io.Writer, v *api.JobView) {
	l := v.Lease
	if l == nil {
		fmt.Fprintf(w, "job %s leased to %s\n", v.Job.ID, orDash(v.Winner))
		return
	}
	fmt.Fprintf(w, "job %s leased to %s at $%.4g/GPU-h (start %s)\n", v.Job.ID, l.Provider, l.Price, fmtTime(l.Start))
	fmt.Fprintf(w, "  lease %s: %s tier, %d GPU(s), until %s\n", l.ID, l.Tier, l.GPUCount, fmtTime(l.End))
	eligible := 0
	for _, b := range v.Bids {
		if b.Rejected == "" {
			eligible++
		}
	}
	fmt.Fprintf(w, "  %d bid(s), %d eligible; max $%.4g/GPU-h; est. cost $%.4f\n", len(v.Bids), eligible, v.Job.MaxPrice,
		l.Price*float64(l.GPUCount)*l.End.Sub(l.Start).Hours())
}

// runTerminal reports whether a job needs no more waiting.
func runTerminal(v *api.JobView) bool {
	switch v.State {
	case auction.JobUnplaceable, auction.JobCancelled, auction.JobFailed, auction.JobFinished:
		return true
	case auction.JobBidding, auction.JobAwarding:
		return false // e.g. a preempted bronze job being requeued
	}
	switch v.Run {
	case auction.RunSucceeded, auction.RunFailed, auction.RunExpired, auction.RunCancelled:
		return true
	case auction.RunPreempted:
		// A preemptible job may be requeued; a preempted lease of a
		// non-preemptible job is final.
		return !v.Job.Preemptible
	}
	return false
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

// waitJob polls the job until runTerminal, printing run-state changes when
// not in JSON mode.
func waitJob(c *cli.Context, id string, last auction.RunState) (api.JobView, error) {
	cl := client(c)
	t := time.NewTicker(waitInterval)
	defer t.Stop()
	for {
		var v api.JobView
		if err := cl.Do(c.Context, http.MethodGet, jobPath(id), nil, nil, &v); err != nil {
			return v, fmt.Errorf("wait for job %s: %w", id, err)
		}
		if v.Run != last && v.Run != "" && !c.Bool("json") {
			fmt.Fprintf(c.App.Writer, "  %s run %s\n", time.Now().Format(time.TimeOnly), v.Run)
		}
		last = v.Run
		if runTerminal(&v) {
			return v, nil
		}
		select {
		case <-c.Context.Done():
			return v, c.Context.Err()
		case <-t.C:
		}
	}
}

// ---- job status / list / cancel / logs ----

func jobStatusAction(c *cli.Context) error {
	id, err := jobArg(c, "job ID")
	if err != nil {
		return err
	}
	var v api.JobView
	if err := client(c).Do(c.Context, http.MethodGet, jobPath(id), nil, nil, &v); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	printJobView(c.App.Writer, &v)
	return nil
}

func printJobView(w io.Writer, v *api.JobView) {
	j := &v.Job
	fmt.Fprintf(w, "job:        %s (attempt %d)\n", j.ID, j.Attempt)
	fmt.Fprintf(w, "state:      %s\n", v.State)
	tier := string(j.Tier)
	if j.Preemptible {
		tier += " (preemptible)"
	}
	fmt.Fprintf(w, "tier:       %s, %d GPU(s), %s, max $%.4g/GPU-h\n", tier, j.GPUCount, j.Duration, j.MaxPrice)
	fmt.Fprintf(w, "command:    %s\n", strings.Join(j.Run.Command, " "))
	if len(v.Reasons) > 0 {
		fmt.Fprintf(w, "reasons:    %s\n", reasonsText(v.Reasons))
	}
	if v.Winner != "" {
		fmt.Fprintf(w, "winner:     %s\n", v.Winner)
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
	}
	for _, o := range v.Outputs {
		fmt.Fprintf(w, "output:     %s (%d bytes, sha256 %s)\n", o.Path, o.Size, o.SHA256)
	}
	for _, h := range v.History {
		fmt.Fprintf(w, "history:    attempt %d lease %s on %s: %s, $%.4f%s\n", h.Attempt, h.Lease.ID, h.Lease.Provider, h.Run, h.CostUSD, prefixed(": ", h.Detail))
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func jobListAction(c *cli.Context) error {
	if err := noExtraArgs(c); err != nil {
		return err
	}
	var vs []api.JobView
	if err := client(c).Do(c.Context, http.MethodGet, "/jobs", nil, nil, &vs); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, vs)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIER\tSTATE\tRUN\tPROVIDER\tPRICE\tCOST")
	for _, v := range vs {
		provider, price := v.Winner, "-"
		if v.Lease != nil {
			provider, price = v.Lease.Provider, fmt.Sprintf("$%.4g", v.Lease.Price)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t$%.4f\n", v.Job.ID, v.Job.Tier, v.State, orDash(string(v.Run)), orDash(provider), price, v.CostUSD)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%d job(s)\n", len(vs))
	return nil
}

func jobCancelAction(c *cli.Context) error {
	id, err := jobArg(c, "job ID")
	if err != nil {
		return err
	}
	var v api.JobView
	if err := client(c).Do(c.Context, http.MethodPost, jobPath(id, "/cancel"), nil, nil, &v); err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	if v.State == auction.JobCancelled || v.Run == auction.RunCancelled {
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
	var q url.Values
	if c.Bool("follow") {
		q = url.Values{"follow": {"1"}}
	}
	resp, err := client(c).Raw(c.Context, http.MethodGet, jobPath(id, "/logs"), q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(c.App.Writer, resp.Body); err != nil {
		return fmt.Errorf("logs of job %s: %w", id, err)
	}
	return nil
}

// ---- job fetch ----

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
	resp, err := client(c).Raw(c.Context, http.MethodGet, jobPath(id, "/outputs"), nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	h := resp.Header.Get(manifestHeader)
	if h == "" {
		return fmt.Errorf("outputs of job %s: the daemon sent no %s header", id, manifestHeader)
	}
	var manifest []auction.OutputFile
	if err := json.Unmarshal([]byte(h), &manifest); err != nil {
		return fmt.Errorf("outputs of job %s: bad manifest: %w", id, err)
	}
	files, err := extractOutputs(resp.Body, manifest, dir, c.Bool("force"))
	if err != nil {
		return fmt.Errorf("outputs of job %s: %w", id, err)
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

// outputName checks that a tar or manifest path names a file inside the
// destination and returns its cleaned slash form.
func outputName(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) || strings.Contains(name, `\`) {
		return "", fmt.Errorf("bad output path %q", name)
	}
	if path.IsAbs(name) || filepath.IsAbs(name) {
		return "", fmt.Errorf("refusing absolute output path %q", name)
	}
	clean := path.Clean(name)
	if !filepath.IsLocal(filepath.FromSlash(clean)) || clean == "." {
		return "", fmt.Errorf("refusing output path %q: it escapes the destination", name)
	}
	return clean, nil
}

// extractOutputs reads a tar stream of job outputs and writes its regular
// files under dir, after checking each against manifest (same set of paths,
// sizes and SHA-256 sums). Directory entries are skipped; absolute paths,
// paths escaping dir, links and any other entry type are refused, as is
// overwriting an existing file unless force is set. Files are staged in a
// temporary directory inside dir and moved into place only once the whole
// archive has verified, so a failed fetch leaves dir as it was. It returns
// the files written, in archive order.
func extractOutputs(r io.Reader, manifest []auction.OutputFile, dir string, force bool) ([]auction.OutputFile, error) {
	want := make(map[string]auction.OutputFile, len(manifest))
	for _, m := range manifest {
		p, err := outputName(m.Path)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if _, dup := want[p]; dup {
			return nil, fmt.Errorf("manifest lists %q twice", p)
		}
		if m.Size < 0 {
			return nil, fmt.Errorf("manifest: negative size for %q", p)
		}
		want[p] = m
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	stagingDir, err := os.MkdirTemp(dir, ".gpumesh-fetch-")
	if err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	defer os.RemoveAll(stagingDir)
	staging := filepath.Base(stagingDir)
	stage, err := root.OpenRoot(staging)
	if err != nil {
		return nil, err
	}
	defer stage.Close()

	var got []auction.OutputFile
	seen := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		name, err := outputName(hdr.Name)
		if err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg, tar.TypeRegA:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fmt.Errorf("refusing %q: links are not extracted", hdr.Name)
		default:
			return nil, fmt.Errorf("refusing %q: not a regular file (type %q)", hdr.Name, hdr.Typeflag)
		}
		m, ok := want[name]
		if !ok {
			return nil, fmt.Errorf("%q is not in the manifest", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q appears twice in the archive", name)
		}
		seen[name] = true
		if hdr.Size != m.Size {
			return nil, fmt.Errorf("%q: archive says %d bytes, manifest %d", name, hdr.Size, m.Size)
		}
		if err := checkFree(root, name, force); err != nil {
			return nil, err
		}
		sum, n, err := stageFile(stage, name, tr, hdr.Mode)
		if err != nil {
			return nil, err
		}
		if n != m.Size {
			return nil, fmt.Errorf("%q: got %d bytes, manifest says %d", name, n, m.Size)
		}
		if !strings.EqualFold(sum, m.SHA256) {
			return nil, fmt.Errorf("checksum mismatch for %q: got sha256 %s, manifest says %s", name, sum, m.SHA256)
		}
		got = append(got, auction.OutputFile{Path: name, Size: n, SHA256: sum})
	}
	var missing []string
	for p := range want {
		if !seen[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("missing from the archive: %s", strings.Join(missing, ", "))
	}
	for _, f := range got {
		if err := checkFree(root, f.Path, force); err != nil {
			return nil, err
		}
		if d := path.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("create %s: %w", d, err)
			}
		}
		if err := root.Rename(path.Join(staging, f.Path), f.Path); err != nil {
			return nil, fmt.Errorf("move %s into place: %w", f.Path, err)
		}
	}
	return got, nil
}

// checkFree fails when name exists under root and may not be overwritten.
func checkFree(root *os.Root, name string, force bool) error {
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("check %s: %w", name, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s exists in the destination and is not a regular file", name)
	case !force:
		return fmt.Errorf("%s already exists in the destination (use --force to overwrite)", name)
	}
	return nil
}

// stageFile writes r to name under stage and returns its hex SHA-256 and
// length.
func stageFile(stage *os.Root, name string, r io.Reader, mode int64) (string, int64, error) {
	if d := path.Dir(name); d != "." {
		if err := stage.MkdirAll(d, 0o755); err != nil {
			return "", 0, fmt.Errorf("stage %s: %w", name, err)
		}
	}
	perm := os.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755
	}
	f, err := stage.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", 0, fmt.Errorf("stage %s: %w", name, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("write %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// ---- bids, provider, reputation ----

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
			var v api.BidsView
			if err := client(c).Do(c.Context, http.MethodGet, jobPath(id, "/bids"), nil, nil, &v); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, v)
			}
			w := c.App.Writer
			tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "RANK\tPROVIDER\tPRICE\tRELIABILITY\tSCORE\tSTART\tCACHED DATASETS\tREJECTED")
			rank := 0
			for _, b := range v.Bids {
				r, score := "-", "-"
				if b.Rejected == "" {
					rank++
					r, score = strconv.Itoa(rank), fmt.Sprintf("%.4g", b.Score)
				}
				fmt.Fprintf(tw, "%s\t%s\t$%.4g\t%.3f\t%s\t%s\t%s\t%s\n", r, b.Bid.Provider, b.Bid.Price, b.Reliability, score,
					fmtTime(b.Bid.Start), orDash(strings.Join(b.Bid.Datasets, ",")), orDash(b.Rejected))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(w, "%d bid(s) for job %s\n", len(v.Bids), orDash(v.JobID))
			if v.Explain != "" {
				fmt.Fprintln(w)
				fmt.Fprintln(w, strings.TrimRight(v.Explain, "\n"))
			}
			return nil
		},
	}
}

func providerCommand() *cli.Command {
	return &cli.Command{
		Name:  "provider",
		Usage: "the provider side of the market",
		Subcommands: []*cli.Command{{
			Name:   "stats",
			Usage:  "occupancy, bids, earnings, leases, utilisation and reputation of this provider",
			Flags:  []cli.Flag{jsonFlag()},
			Action: providerStatsAction,
		}},
	}
}

func providerStatsAction(c *cli.Context) error {
	if err := noExtraArgs(c); err != nil {
		return err
	}
	var s api.ProviderStatsView
	if err := client(c).Do(c.Context, http.MethodGet, "/provider/stats", nil, nil, &s); err != nil {
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

func countsText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

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
			var v api.ReputationView
			if err := client(c).Do(c.Context, http.MethodGet, "/reputation/"+url.PathEscape(p), nil, nil, &v); err != nil {
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
