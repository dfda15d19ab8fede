package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/urfave/cli/v2"
)

// Check outcomes. Only fail blocks: doctor exits non-zero when a check fails.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
	checkSkip = "skip"
)

// checkResult is one line of `gpumesh doctor`.
type checkResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	// Fix says what to do about a warn or fail.
	Fix string `json:"fix,omitempty"`
}

// doctorProbes are how doctor looks at the host and the daemon; tests
// replace them with fakes.
type doctorProbes struct {
	NVML      func() (runtime.Inventory, error)
	Docker    func(ctx context.Context) (runtime.DockerStatus, error)
	Cgroups   func() runtime.CgroupStatus
	Namespace func(kind string) error
	// GangNet tries to prepare a gang member's network.
	GangNet   func() error
	FreeSpace func(dir string) (uint64, error)
	// Status and Providers ask the running daemon; an error means none runs.
	Status    func(ctx context.Context) (api.StatusInfo, error)
	Providers func(ctx context.Context) ([]terms.Capability, error)
	// Listen tries to bind network ("tcp", "udp") address.
	Listen func(network, addr string) error
	// Dial tries to reach a bootstrap peer's TCP address.
	Dial func(ctx context.Context, addr string) error
	Now  func() time.Time
}

// newDoctorProbes makes the probes doctor uses (tests swap in fakes).
var newDoctorProbes = hostProbes

func hostProbes(c *api.Client) doctorProbes {
	return doctorProbes{
		NVML:      runtime.ProbeNVML,
		Docker:    func(ctx context.Context) (runtime.DockerStatus, error) { return runtime.ProbeDocker(ctx, "") },
		Cgroups:   runtime.ProbeCgroups,
		Namespace: runtime.ProbeNamespace,
		GangNet:   runtime.ProbeGangNetworks,
		FreeSpace: ledger.FreeSpace,
		Status:    c.Status,
		Providers: func(ctx context.Context) ([]terms.Capability, error) {
			vs, err := c.Providers(ctx, terms.Query{})
			caps := make([]terms.Capability, len(vs))
			for i, v := range vs {
				caps[i] = v.Capability
			}
			return caps, err
		},
		Listen: func(network, addr string) error {
			if network == "udp" {
				l, err := net.ListenPacket("udp", addr)
				if err == nil {
					l.Close()
				}
				return err
			}
			l, err := net.Listen("tcp", addr)
			if err == nil {
				l.Close()
			}
			return err
		},
		Dial: func(ctx context.Context, addr string) error {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			return err
		},
		Now: time.Now,
	}
}

// doctorEnv is what the checks are about.
type doctorEnv struct {
	role    string // "provider" or "renter"
	dataDir string
	cfg     config.Config
	// daemon is the running daemon's status (nil when none answers).
	daemon *api.StatusInfo
}

// maxClockSkew is how far a peer's clock may be from ours before doctor
// warns: signed records, heartbeats and leases carry absolute times.
const maxClockSkew = 30 * time.Second

// diskWarnBytes: below this much free space doctor warns (the ledger's own
// floor, ledger.DefaultMinFreeSpace, fails).
const diskWarnBytes = 1 << 30

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check this host and its configuration for running gpumesh; exits non-zero on a blocking problem",
		Flags: []cli.Flag{
			jsonFlag(),
			&cli.StringFlag{Name: "role", Usage: "provider or renter; default provider when the config enables it, else renter"},
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (YAML); default <data-dir>/config.yaml if present", EnvVars: []string{"GPUMESH_CONFIG"}},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return doctorAction(c, newDoctorProbes(client(c)))
		},
	}
}

func doctorAction(c *cli.Context, p doctorProbes) error {
	dataDir := c.String("data-dir")
	path, must := c.String("config"), true
	if path == "" {
		path, must = config.Paths{Dir: dataDir}.Config(), false
	}
	env := doctorEnv{dataDir: dataDir}
	var results []checkResult
	cfg, err := config.LoadConfig(path, must)
	if err != nil {
		results = append(results, checkResult{Name: "config", Status: checkFail, Detail: err.Error(), Fix: "fix the file, or write one with `gpumesh provider init`"})
		cfg = config.DefaultConfig()
	} else {
		detail := path
		if _, serr := os.Stat(path); serr != nil {
			detail = "no " + path + "; using the defaults"
		}
		results = append(results, checkResult{Name: "config", Status: checkOK, Detail: detail})
	}
	env.cfg = cfg
	switch r := c.String("role"); r {
	case "":
		env.role = "renter"
		if cfg.Provider.Enabled {
			env.role = "provider"
		}
	case "provider", "renter":
		env.role = r
	default:
		return fmt.Errorf("--role must be provider or renter, got %q", r)
	}
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
	if st, err := p.Status(ctx); err == nil {
		env.daemon = &st
	}
	cancel()
	results = append(results, runChecks(c.Context, env, p)...)
	failed := 0
	for _, r := range results {
		if r.Status == checkFail {
			failed++
		}
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, map[string]any{"role": env.role, "checks": results, "ok": failed == 0}); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			line := fmt.Sprintf("%-5s %-14s %s", strings.ToUpper(r.Status), r.Name, r.Detail)
			if r.Fix != "" && (r.Status == checkWarn || r.Status == checkFail) {
				line += " -- fix: " + r.Fix
			}
			fmt.Fprintln(c.App.Writer, line)
		}
	}
	if failed > 0 {
		return fmt.Errorf("doctor: %d blocking problem(s) for the %s role", failed, env.role)
	}
	return nil
}

// runChecks runs every check in order.
func runChecks(ctx context.Context, env doctorEnv, p doctorProbes) []checkResult {
	return []checkResult{
		checkGPU(env, p),
		checkContainers(ctx, env, p),
		checkCgroups(env, p),
		checkNamespaces(env, p),
		checkGangNet(env, p),
		checkDisk(env, p),
		checkClock(ctx, env, p),
		checkPorts(env, p),
		checkReachability(env),
		checkBootstrap(ctx, env, p),
	}
}

func checkGPU(env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "gpu"}
	src := env.cfg.Provider.GPUSource
	declared := len(env.cfg.Provider.GPUs)
	inv, err := p.NVML()
	switch {
	case err == nil && len(inv.GPUs) > 0:
		r.Status = checkOK
		r.Detail = fmt.Sprintf("%d GPU(s) through NVML (%s), driver %s, CUDA %s; %s", len(inv.GPUs), gpuModels(inv.GPUs), orDash(inv.Driver), orDash(inv.CUDA), migSummary(inv.GPUs))
		if src == runtime.GPUSourceDeclared {
			r.Status, r.Fix = checkWarn, "gpu_source is declared: the daemon ignores the driver; set it to auto to sell what the driver sees"
		}
	case env.role == "renter":
		r.Status, r.Detail = checkSkip, "renter role needs no GPU"
		if err != nil {
			r.Detail += " (NVML: " + err.Error() + ")"
		}
	case src == runtime.GPUSourceNVML:
		r.Status, r.Detail = checkFail, "gpu_source is nvml but NVML finds no GPU"
		if err != nil {
			r.Detail += ": " + err.Error()
		}
		r.Fix = "install the NVIDIA driver (nvidia-smi must work), or set provider.gpu_source: declared with provider.gpus"
	case declared > 0:
		r.Status = checkWarn
		r.Detail = fmt.Sprintf("no NVIDIA driver; selling %d declared GPU(s) (%s) that renters see as undetected", declared, gpuModels(env.cfg.Provider.GPUs))
		r.Fix = "install the NVIDIA driver so the GPUs are detected and telemetry is real"
	default:
		r.Status, r.Detail = checkFail, "no GPU: NVML is unavailable and provider.gpus declares none"
		if err != nil {
			r.Detail += " (" + err.Error() + ")"
		}
		r.Fix = "install the NVIDIA driver, or declare the GPUs (`gpumesh provider init --gpu MODEL:VRAM_GB`)"
	}
	return r
}

// migSummary is how the detected devices stand with MIG: each one that
// has it, with its instances' profiles in MIG mode, or "MIG: absent".
func migSummary(gs []terms.GPU) string {
	var parts []string
	for i, g := range gs {
		if g.MIG == nil || !g.Detected {
			continue
		}
		p := fmt.Sprintf("gpu %d %s", i, migMode(g))
		var profiles []string
		for _, in := range migInstances(g) {
			profiles = append(profiles, orDash(in.Profile))
		}
		if len(profiles) > 0 {
			p += " (" + strings.Join(profiles, ", ") + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "MIG: absent"
	}
	return strings.Join(parts, "; ")
}

func gpuModels(gs []terms.GPU) string {
	count := map[string]int{}
	var order []string
	for _, g := range gs {
		if count[g.Model] == 0 {
			order = append(order, g.Model)
		}
		count[g.Model]++
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%dx %s", count[m], m)
	}
	return strings.Join(parts, ", ")
}

func checkContainers(ctx context.Context, env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "containers"}
	st, err := p.Docker(ctx)
	if err != nil {
		r.Detail = "no Docker engine answers (" + err.Error() + "); jobs run in the process sandbox and image jobs are refused"
		r.Status, r.Fix = checkWarn, "install Docker (and the NVIDIA container toolkit) to run image jobs"
		if env.role == "renter" {
			r.Status, r.Detail = checkSkip, "renter role needs no container engine"
		}
		return r
	}
	runtimes := strings.Join(st.Runtimes, ",")
	switch st.GPU {
	case "nvidia", "cdi":
		r.Status, r.Detail = checkOK, fmt.Sprintf("Docker answers; GPUs reach containers through %s (runtimes %s)", st.GPU, runtimes)
	default:
		r.Status = checkWarn
		r.Detail = fmt.Sprintf("Docker answers but has no NVIDIA runtime or CDI GPU devices (runtimes %s): image jobs run without GPUs only", runtimes)
		r.Fix = "install nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`, then restart Docker"
		if env.role == "renter" {
			r.Status = checkOK
			r.Detail = "Docker answers (runtimes " + runtimes + "); GPU passthrough is a provider concern"
			r.Fix = ""
		}
	}
	return r
}

func checkCgroups(env doctorEnv, p doctorProbes) checkResult {
	st := p.Cgroups()
	r := checkResult{Name: "cgroups"}
	if st.Version == 0 {
		r.Status, r.Detail, r.Fix = checkWarn, st.Detail, "mount a cgroup file system at /sys/fs/cgroup so jobs can be limited and killed as a group"
		if env.role == "renter" {
			r.Status = checkSkip
		}
		return r
	}
	have := map[string]bool{}
	for _, c := range st.Controllers {
		have[c] = true
	}
	var missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	r.Detail = fmt.Sprintf("cgroup v%d, controllers %s", st.Version, strings.Join(st.Controllers, ","))
	if st.Detail != "" {
		r.Detail += "; sandbox: " + st.Detail
	}
	switch {
	case env.role == "renter":
		r.Status = checkOK
	case !st.Usable:
		r.Status, r.Fix = checkWarn, "run the daemon as root (or with a delegated cgroup) so jobs get their own cgroup"
	case len(missing) > 0:
		r.Status, r.Fix = checkWarn, "enable the "+strings.Join(missing, ", ")+" controller(s) so job limits hold"
	default:
		r.Status = checkOK
	}
	return r
}

func checkNamespaces(env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "namespaces"}
	var ok, bad []string
	for _, k := range []string{runtime.NamespaceNet, runtime.NamespaceMount, runtime.NamespaceUser} {
		if err := p.Namespace(k); err != nil {
			bad = append(bad, k+" ("+err.Error()+")")
		} else {
			ok = append(ok, k)
		}
	}
	r.Detail = "can create: " + orDash(strings.Join(ok, ","))
	if len(bad) > 0 {
		r.Detail += "; cannot: " + strings.Join(bad, ", ")
	}
	switch {
	case env.role == "renter":
		r.Status = checkSkip
		r.Detail = "renter role runs no jobs; " + r.Detail
	case len(bad) > 0:
		r.Status, r.Fix = checkWarn, "run as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), for stronger job isolation"
	default:
		r.Status = checkOK
	}
	return r
}

// checkGangNet says whether this provider can run members of gang jobs
// (one job across providers), whose private network needs a network
// namespace per job and nat rules in it.
func checkGangNet(env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "gang network"}
	switch err := p.GangNet(); {
	case env.role == "renter":
		r.Status, r.Detail = checkSkip, "renter role runs no jobs"
	case err != nil:
		r.Status, r.Detail = checkWarn, err.Error()
		r.Fix = "run the daemon as root with iptables installed to host members of gang jobs (--nodes)"
	default:
		r.Status, r.Detail = checkOK, "gang members' jobs get a private network (own namespace, nat rules)"
	}
	return r
}

func checkDisk(env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "disk"}
	dir := env.dataDir
	// The data dir may not exist yet: measure the nearest existing parent.
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" || dir == "." {
			break
		}
		parent := dirOf(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	free, err := p.FreeSpace(dir)
	if err != nil {
		r.Status, r.Detail, r.Fix = checkFail, "cannot read free space of "+dir+": "+err.Error(), "make the data dir's file system readable, or choose another with --data-dir"
		return r
	}
	mib := func(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
	r.Detail = fmt.Sprintf("%s free at %s (ledger refuses writes below %s)", mib(free), dir, mib(ledger.DefaultMinFreeSpace))
	switch {
	case free < ledger.DefaultMinFreeSpace:
		r.Status, r.Fix = checkFail, "free space on the data dir's file system: the ledger cannot record payments"
	case free < diskWarnBytes:
		r.Status, r.Fix = checkWarn, "keep at least 1 GiB free for the ledger, job outputs and logs"
	default:
		r.Status = checkOK
	}
	return r
}

func dirOf(p string) string {
	i := strings.LastIndex(strings.TrimRight(p, "/"), "/")
	switch {
	case i < 0:
		return "."
	case i == 0:
		return "/"
	}
	return p[:i]
}

// checkClock compares our clock with the clocks of the providers whose
// signed capability records the daemon can see: a record issued "in the
// future" by more than maxClockSkew means that peer's clock runs ahead of
// ours (or ours behind). It is a one-sided bound (a record's IssuedAt is
// at most its TTL old), said so in the detail.
func checkClock(ctx context.Context, env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "clock"}
	if env.daemon == nil {
		r.Status, r.Detail = checkSkip, "no daemon running: no peers to compare clocks with"
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	caps, err := p.Providers(ctx)
	if err != nil {
		r.Status, r.Detail = checkSkip, "cannot list peers' records: "+err.Error()
		return r
	}
	now := p.Now()
	var n int
	var worst time.Duration
	var worstPeer string
	for _, c := range caps {
		if c.Peer == env.daemon.PeerID || c.IssuedAt.IsZero() {
			continue
		}
		n++
		if ahead := c.IssuedAt.Sub(now); ahead > worst {
			worst, worstPeer = ahead, c.Peer
		}
	}
	if n == 0 {
		r.Status, r.Detail = checkSkip, "no other peer's signed record seen yet to compare clocks with"
		return r
	}
	if worst > maxClockSkew {
		r.Status = checkWarn
		r.Detail = fmt.Sprintf("peer %s signed a record %s ahead of our clock (%d peers compared)", shortPeer(worstPeer), worst.Round(time.Second), n)
		r.Fix = "synchronise the clock (systemd-timesyncd, chrony or ntpd); leases and heartbeats carry absolute times"
		return r
	}
	r.Status = checkOK
	r.Detail = fmt.Sprintf("no record of %d peer(s) issued more than %s ahead of our clock (a lower bound on skew)", n, maxClockSkew)
	return r
}

// checkPorts tries to bind the configured listen and metrics addresses. With
// a daemon running they are its own, so the check is skipped.
func checkPorts(env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "ports"}
	if env.daemon != nil {
		r.Status, r.Detail = checkSkip, "the running daemon holds its ports"
		return r
	}
	var free, busy []string
	try := func(network, addr, label string) {
		if err := p.Listen(network, addr); err != nil {
			busy = append(busy, label+" ("+shortErr(err)+")")
		} else {
			free = append(free, label)
		}
	}
	for _, s := range env.cfg.Listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			continue
		}
		network, addr, err := manet.DialArgs(a)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(network, "tcp"):
			try("tcp", addr, s)
		case strings.HasPrefix(network, "udp"):
			try("udp", addr, s)
		}
	}
	if env.cfg.MetricsAddr != "" {
		try("tcp", env.cfg.MetricsAddr, "metrics "+env.cfg.MetricsAddr)
	}
	r.Detail = "free: " + orDash(strings.Join(free, " "))
	if len(busy) > 0 {
		r.Detail += "; in use: " + strings.Join(busy, ", ")
		r.Status, r.Fix = checkFail, "stop what holds the port, or change listen/metrics_addr in the config"
		return r
	}
	r.Status = checkOK
	return r
}

func shortErr(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// checkReachability reads the running daemon's advertised addresses: with
// no public one, peers outside this network cannot dial it.
func checkReachability(env doctorEnv) checkResult {
	r := checkResult{Name: "reachability"}
	if env.daemon == nil {
		r.Status, r.Detail = checkSkip, "no daemon running: start it to see which addresses it advertises"
		return r
	}
	var public, private int
	for _, s := range env.daemon.Addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			continue
		}
		switch {
		case manet.IsPublicAddr(a):
			public++
		case !manet.IsIPLoopback(a):
			private++
		}
	}
	r.Detail = fmt.Sprintf("%d public, %d private address(es) advertised; %d peer(s) connected", public, private, env.daemon.Peers)
	switch {
	case public > 0:
		r.Status = checkOK
	case env.role == "provider":
		r.Status = checkWarn
		r.Detail = "behind NAT: " + r.Detail + "; only peers on the same network can dial this provider"
		r.Fix = "forward the listen port (TCP and UDP) to this host, or enable UPnP on the router"
	default:
		r.Status = checkOK
		r.Detail = "behind NAT: " + r.Detail + "; a renter dials out, which suffices"
	}
	return r
}

func checkBootstrap(ctx context.Context, env doctorEnv, p doctorProbes) checkResult {
	r := checkResult{Name: "bootstrap"}
	if len(env.cfg.Bootstrap) == 0 {
		r.Status, r.Detail = checkWarn, "no bootstrap peers configured: this node finds peers only through mDNS or inbound dials"
		if env.cfg.MDNS {
			r.Status = checkOK
			r.Detail = "no bootstrap peers; mDNS finds peers on the local network"
		}
		r.Fix = "add bootstrap multiaddrs (…/p2p/<peer id>) to the config's bootstrap list"
		return r
	}
	infos, err := p2p.ParseAddrInfos(env.cfg.Bootstrap)
	if err != nil {
		r.Status, r.Detail, r.Fix = checkFail, err.Error(), "fix the bootstrap entries in the config"
		return r
	}
	var ok, bad []string
	for _, ai := range infos {
		reached := false
		var why string
		for _, a := range ai.Addrs {
			network, addr, err := manet.DialArgs(a)
			if err != nil || !strings.HasPrefix(network, "tcp") {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err = p.Dial(dctx, addr)
			cancel()
			if err == nil {
				reached = true
				break
			}
			why = shortErr(err)
		}
		name := shortPeer(ai.ID.String())
		switch {
		case reached:
			ok = append(ok, name)
		case why == "":
			bad = append(bad, name+" (no TCP address to try)")
		default:
			bad = append(bad, name+" ("+why+")")
		}
	}
	r.Detail = fmt.Sprintf("%d of %d reachable over TCP", len(ok), len(infos))
	if len(bad) > 0 {
		r.Detail += "; unreachable: " + strings.Join(bad, ", ")
	}
	switch {
	case len(ok) == 0:
		r.Status, r.Fix = checkFail, "check the bootstrap addresses and this host's outbound firewall"
	case len(bad) > 0:
		r.Status, r.Fix = checkWarn, "remove or fix the unreachable bootstrap entries"
	default:
		r.Status = checkOK
	}
	return r
}
