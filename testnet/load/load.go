// Package load measures the market's throughput end to end: it starts N
// daemons on loopback in this process (node.Start; the first Renters of
// them are renters, the others providers with declared GPUs and the
// sandboxed process executor, or none: ExecNoop), keeps InFlight jobs in
// flight through the renters' control APIs, each a command that runs for
// JobDuration, and reports finished jobs per second, the success rate,
// the post → finished latency and the CPU time the run took per job. Or,
// as users run the market (Config.Testnet), it drives the separate daemon
// processes of a running testnet (testnet/up.sh) over their sockets, and
// reads their CPU from /proc.
package load

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/runtime"
)

// Config is one load run.
type Config struct {
	// Nodes is the number of daemons (>= 2); Renters of them post jobs
	// (default 2, at most Nodes-1), the others are providers.
	Nodes   int
	Renters int
	// GPUs is each provider's GPU count (default 4).
	GPUs int
	// InFlight is how many jobs are kept in flight (default 20); Jobs is
	// how many are posted in all (default 5 × InFlight).
	InFlight int
	Jobs     int
	// JobDuration is how long each job's command runs (default 1s).
	JobDuration time.Duration
	// BidWindow is each job's bid window (default 500ms).
	BidWindow time.Duration
	// Timeout bounds one job, post to finish (default 30s plus
	// JobDuration): a job not finished by then counts as lost.
	Timeout time.Duration
	// Dir holds the daemons' data dirs (default: a temporary dir, removed
	// afterwards).
	Dir string
	// Executor runs the providers' jobs: ExecProcess (the default) or
	// ExecNoop.
	Executor string
	// Testnet, when set, is the dir of a running testnet (testnet/up.sh's
	// GPUMESH_TESTNET_DIR, with its pids file): the run starts no daemon
	// but drives that testnet's, separate processes as users run them,
	// over their control sockets. Its first Renters nodes (default 1) post
	// the jobs, having listed no provider first; Nodes is read from the
	// pids file, and GPUs and Executor are the testnet's own. CPU is then
	// every daemon's (read from /proc, with the job processes they
	// reaped) and this load generator's.
	Testnet string
}

func (c *Config) defaults() error {
	if c.Testnet != "" {
		nodes, _, err := testnetPids(c.Testnet)
		if err != nil {
			return err
		}
		c.Nodes = nodes
		if c.Renters == 0 {
			c.Renters = 1
		}
	}
	if c.Nodes < 2 {
		return fmt.Errorf("load: nodes must be at least 2, got %d", c.Nodes)
	}
	if c.Renters == 0 {
		c.Renters = min(2, c.Nodes-1)
	}
	if c.Renters < 1 || c.Renters > c.Nodes-1 {
		return fmt.Errorf("load: renters must be in [1, %d], got %d", c.Nodes-1, c.Renters)
	}
	if c.GPUs == 0 {
		c.GPUs = 4
	}
	if c.InFlight == 0 {
		c.InFlight = 20
	}
	if c.Jobs == 0 {
		c.Jobs = 5 * c.InFlight
	}
	if c.JobDuration == 0 {
		c.JobDuration = time.Second
	}
	if c.BidWindow == 0 {
		c.BidWindow = 500 * time.Millisecond
	}
	if c.Timeout == 0 {
		c.Timeout = 30*time.Second + c.JobDuration
	}
	if c.Executor == "" {
		c.Executor = ExecProcess
	}
	if c.Executor != ExecProcess && c.Executor != ExecNoop {
		return fmt.Errorf("load: executor %q: want %s or %s", c.Executor, ExecProcess, ExecNoop)
	}
	if c.GPUs < 1 || c.InFlight < 1 || c.Jobs < 1 || c.JobDuration < 0 || c.BidWindow < 0 || c.Timeout < 0 {
		return errors.New("load: gpus, in-flight and jobs must be positive; durations must not be negative")
	}
	return nil
}

// Report is one run's figures.
type Report struct {
	Config Config `json:"config"`
	// Posted, Succeeded and Failed count jobs (Failed: unplaceable, failed
	// runs and timeouts, by reason in Reasons).
	Posted    int            `json:"posted"`
	Succeeded int            `json:"succeeded"`
	Failed    int            `json:"failed"`
	Reasons   map[string]int `json:"reasons,omitempty"`
	// Leased counts the jobs that got a lease (at their post or later,
	// after waiting queued), whatever became of them.
	Leased int `json:"leased"`
	// Wall is from the first post to the last job's end; Throughput is
	// succeeded jobs per second over it, LeasedRate leased jobs per second.
	Wall       time.Duration `json:"wall"`
	Throughput float64       `json:"jobs_per_s"`
	LeasedRate float64       `json:"leased_per_s"`
	// Post → finished and post → leased percentiles, over succeeded jobs,
	// and the slowest job (a few slow jobs stretch the wall time).
	FinishedP50 time.Duration `json:"finished_p50"`
	FinishedP95 time.Duration `json:"finished_p95"`
	FinishedMax time.Duration `json:"finished_max"`
	LeasedP50   time.Duration `json:"leased_p50"`
	LeasedP95   time.Duration `json:"leased_p95"`
	// CPU is the CPU time (user and system) this process and the job
	// processes it reaped took from the first post to the last job's end:
	// every daemon, the jobs and the load generator's own polling; JobCPU
	// is the job processes' share (none with ExecNoop). Against a running
	// testnet (Config.Testnet), CPU is its daemons' and the job processes
	// they reaped, plus DriverCPU, this load generator's own.
	CPU       time.Duration `json:"cpu"`
	JobCPU    time.Duration `json:"job_cpu"`
	DriverCPU time.Duration `json:"driver_cpu,omitempty"`
}

// CPUPerJob is CPU / posted jobs (0 before any post).
func (r *Report) CPUPerJob() time.Duration {
	if r.Posted == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Posted)
}

// LeasedPct is leased / posted, in percent.
func (r *Report) LeasedPct() float64 { return r.ofPosted(r.Leased) }

// SuccessRate is succeeded / posted, in percent.
func (r *Report) SuccessRate() float64 { return r.ofPosted(r.Succeeded) }

// ofPosted is n / posted, in percent (0 before any post).
func (r *Report) ofPosted(n int) float64 {
	if r.Posted == 0 {
		return 0
	}
	return 100 * float64(n) / float64(r.Posted)
}

// Run starts the network, runs the load and stops the network.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Testnet != "" {
		return runTestnet(ctx, cfg)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "gpumesh-load-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ds, err := startNetwork(ctx, cfg, dir)
	defer func() {
		for i := len(ds) - 1; i >= 0; i-- {
			_ = ds[i].Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	renters := make([]*api.Client, cfg.Renters)
	for i := range renters {
		renters[i] = api.NewClient(nodeDir(dir, i))
	}
	if err := warmUp(ctx, cfg, renters); err != nil {
		return nil, err
	}
	self0, jobs0, err := cpuTime()
	if err != nil {
		return nil, err
	}
	rep := drive(ctx, cfg, renters)
	self1, jobs1, err := cpuTime()
	if err != nil {
		return nil, err
	}
	rep.JobCPU = jobs1 - jobs0
	rep.CPU = self1 - self0 + rep.JobCPU
	return rep, nil
}

// cpuTime is the user and system CPU time of this process, and of the
// children it has waited for (the jobs' processes).
func cpuTime() (self, children time.Duration, err error) {
	get := func(who int) (time.Duration, error) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			return 0, fmt.Errorf("load: getrusage: %w", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
	}
	if self, err = get(syscall.RUSAGE_SELF); err == nil {
		children, err = get(syscall.RUSAGE_CHILDREN)
	}
	return self, children, err
}

func startNetwork(ctx context.Context, cfg Config, dir string) ([]*node.Daemon, error) {
	var ds []*node.Daemon
	var boot []string
	noopWork := filepath.Join(dir, "noop-work") // every no-op job's (empty) work dir
	if err := os.MkdirAll(noopWork, 0o700); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Nodes; i++ {
		c := config.DefaultConfig()
		c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		c.Bootstrap = boot
		c.Region = "eu-west"
		c.Provider.HeartbeatInterval = time.Second
		var exec runtime.Executor
		if i >= cfg.Renters {
			c.Provider.Enabled = true
			c.Provider.GPUSource = "declared"
			c.Provider.Executor = ExecProcess
			if cfg.Executor == ExecNoop {
				exec = noopExecutor{dir: noopWork}
			}
			for g := 0; g < cfg.GPUs; g++ {
				c.Provider.GPUs = append(c.Provider.GPUs, terms.GPU{Model: "A100", VRAMGB: 80})
			}
			c.Provider.Policy = terms.Policy{PriceFloor: 1, AcceptPreemptible: true}
		}
		d, err := node.Start(ctx, node.Options{DataDir: nodeDir(dir, i), Config: c, Executor: exec})
		if err != nil {
			return ds, fmt.Errorf("load: start node %d: %w", i, err)
		}
		ds = append(ds, d)
		if i == 0 {
			boot = d.Addrs()
		}
	}
	return ds, nil
}

// nodeDir is node i's data dir, named as testnet/up.sh names them.
func nodeDir(dir string, i int) string { return filepath.Join(dir, "node"+strconv.Itoa(i)) }

// runTestnet is Run against a running testnet (Config.Testnet).
func runTestnet(ctx context.Context, cfg Config) (*Report, error) {
	_, pids, err := testnetPids(cfg.Testnet)
	if err != nil {
		return nil, err
	}
	renters := make([]*api.Client, cfg.Renters)
	for i := range renters {
		renters[i] = api.NewClient(nodeDir(cfg.Testnet, i))
	}
	// One job through each renter, as anyone would try one first: no
	// listing of providers, nothing a user would not do.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i, r := range renters {
		if err := r.WaitReady(wctx, 30*time.Second); err != nil {
			return nil, fmt.Errorf("load: renter node%d: %w", i, err)
		}
		for res := runJob(wctx, cfg, r); res.err != ""; res = runJob(wctx, cfg, r) {
			if wctx.Err() != nil {
				return nil, fmt.Errorf("load: renter node%d: warm-up job: %s", i, res.err)
			}
		}
	}
	// The daemons' CPU (with the jobs they reaped) and this process's.
	cpu := func() (daemons, jobs, self time.Duration, err error) {
		if daemons, jobs, err = daemonsCPU(pids); err == nil {
			self, _, err = cpuTime()
		}
		return daemons, jobs, self, err
	}
	d0, j0, self0, err := cpu()
	if err != nil {
		return nil, err
	}
	rep := drive(ctx, cfg, renters)
	d1, j1, self1, err := cpu()
	if err != nil {
		return nil, err
	}
	rep.JobCPU = j1 - j0
	rep.DriverCPU = self1 - self0
	rep.CPU = d1 - d0 + rep.DriverCPU
	return rep, nil
}

// testnetPids reads a testnet's pids file (testnet/up.sh: "PID nodeN" a
// line): how many nodes it lists, and their process ids, each once.
func testnetPids(dir string) (nodes int, pids []int, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		return 0, nil, fmt.Errorf("load: testnet %s: %w (is it running? testnet/up.sh)", dir, err)
	}
	seen := map[int]bool{}
	for n, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		pid := 0
		if len(f) == 2 {
			pid, _ = strconv.Atoi(f[0])
		}
		if pid <= 0 {
			return 0, nil, fmt.Errorf("load: testnet %s: pids line %d: %q is not \"PID nodeN\"", dir, n+1, line)
		}
		nodes++
		if !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return nodes, pids, nil
}

// daemonsCPU is the CPU time (user and system) of the given processes, and
// of the children they reaped (the job processes), from /proc.
func daemonsCPU(pids []int) (total, children time.Duration, err error) {
	for _, pid := range pids {
		own, reaped, err := runtime.ProcessCPU(pid)
		if err != nil {
			return 0, 0, fmt.Errorf("load: daemon %d: %w", pid, err)
		}
		total += own + reaped
		children += reaped
	}
	return total, children, nil
}

func (c Config) job() terms.Job {
	secs := strconv.FormatFloat(c.JobDuration.Seconds(), 'f', 3, 64)
	return terms.Job{Tier: terms.Silver, MaxPrice: 10, GPUCount: 1, Duration: 10*time.Minute + c.JobDuration,
		BidWindow: c.BidWindow, Run: terms.RunSpec{Command: []string{"sleep", secs}}}
}

// warmUp waits until each renter finds every provider in the DHT and gets
// one job through, so that the measured jobs meet a network that is up.
func warmUp(ctx context.Context, cfg Config, renters []*api.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for i, r := range renters {
		if err := r.WaitReady(ctx, 30*time.Second); err != nil {
			return fmt.Errorf("load: renter %d: %w", i, err)
		}
		for {
			caps, err := r.Providers(ctx, terms.Query{})
			if err == nil && len(caps) >= cfg.Nodes-cfg.Renters {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("load: renter %d found %d of %d providers before the deadline", i, len(caps), cfg.Nodes-cfg.Renters)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for {
			res := runJob(ctx, cfg, r)
			if res.err == "" {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("load: renter %d: warm-up job: %s", i, res.err)
			}
		}
	}
	return nil
}

type result struct {
	leased, finished time.Duration
	gotLease         bool   // the job was leased (whether or not it then succeeded)
	err              string // "" on success, else why not
}

// runJob posts one job and follows it until it ended.
func runJob(ctx context.Context, cfg Config, r *api.Client) result {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	v, err := r.PostJob(ctx, cfg.job())
	if err != nil {
		return result{err: "post: " + err.Error()}
	}
	tag, asked := "", false
	var res result
	for {
		if v.Lease != nil && !res.gotLease {
			// Seen leased: at the post's return, or at a later poll of a
			// job that was queued first.
			res.gotLease, res.leased = true, time.Since(start)
		}
		switch {
		case v.Run == terms.RunSucceeded:
			res.finished = time.Since(start)
			return res
		case v.Run.Terminal():
			res.err = "run " + string(v.Run)
			return res
		case v.State == terms.JobUnplaceable || v.State == terms.JobFailed || v.State == terms.JobCancelled:
			res.err = "job " + string(v.State)
			return res
		}
		if ctx.Err() != nil {
			if v.Lease != nil && v.Lease.Start.After(start.Add(time.Second)) {
				res.err = fmt.Sprintf("timeout (job %s on a lease starting %v after the post)", v.State,
					v.Lease.Start.Sub(start).Round(time.Second))
				return res
			}
			res.err = fmt.Sprintf("timeout (job %s, run %q)", v.State, v.Run)
			return res
		}
		// Followed as the CLI follows a job (job post --wait): the
		// view at its next change after the one last seen, a long
		// poll, not asked again and again.
		wait := 10 * time.Second
		if !asked {
			wait, asked = 0, true // the view now, and its tag
		}
		next, nextTag, err := r.JobNext(ctx, v.Job.ID, wait, tag)
		if err != nil {
			if ctx.Err() == nil {
				return result{err: "view: " + err.Error()}
			}
			continue
		}
		v, tag = next, nextTag
	}
}

// drive keeps cfg.InFlight jobs in flight, spread over the renters, until
// cfg.Jobs were posted and all of them ended.
func drive(ctx context.Context, cfg Config, renters []*api.Client) *Report {
	rep := &Report{Config: cfg, Reasons: map[string]int{}}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		next     atomic.Int64
		finished []time.Duration
		leased   []time.Duration
	)
	start := time.Now()
	for w := 0; w < cfg.InFlight; w++ {
		wg.Add(1)
		go func(r *api.Client) {
			defer wg.Done()
			for next.Add(1) <= int64(cfg.Jobs) && ctx.Err() == nil {
				res := runJob(ctx, cfg, r)
				mu.Lock()
				rep.Posted++
				if res.gotLease {
					rep.Leased++
				}
				if res.err == "" {
					rep.Succeeded++
					finished = append(finished, res.finished)
					leased = append(leased, res.leased)
				} else {
					rep.Failed++
					rep.Reasons[res.err]++
				}
				mu.Unlock()
			}
		}(renters[w%len(renters)])
	}
	wg.Wait()
	rep.Wall = time.Since(start)
	if rep.Wall > 0 {
		rep.Throughput = float64(rep.Succeeded) / rep.Wall.Seconds()
		rep.LeasedRate = float64(rep.Leased) / rep.Wall.Seconds()
	}
	rep.FinishedP50, rep.FinishedP95, rep.FinishedMax = percentile(finished, 50), percentile(finished, 95), percentile(finished, 100)
	rep.LeasedP50, rep.LeasedP95 = percentile(leased, 50), percentile(leased, 95)
	return rep
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(i, 1)-1]
}
