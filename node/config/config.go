// Package config is a gpumesh daemon's configuration file (YAML, read
// over the defaults and validated, with a typo's nearest key named) and
// the layout of its data directory.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	ma "github.com/multiformats/go-multiaddr"
	"gopkg.in/yaml.v3"
)

// Config is the daemon's configuration file (YAML).
type Config struct {
	// Listen are libp2p multiaddrs; default all interfaces, port 4001 TCP+QUIC.
	Listen []string `yaml:"listen"`
	// Bootstrap are multiaddrs ending in /p2p/<peer id>.
	Bootstrap []string `yaml:"bootstrap"`
	// MDNS enables local-network peer discovery (off by default).
	MDNS bool `yaml:"mdns"`
	// Reachability is auto (AutoNAT decides), public or private (e.g. a
	// home machine known to sit behind NAT: it reserves relay slots and
	// runs its DHT as a client straight away). Default auto.
	Reachability string `yaml:"reachability"`
	// Relays are circuit relays (multiaddrs ending in /p2p/<peer id>) on
	// which a node that is not publicly reachable reserves a slot and
	// advertises its /p2p-circuit addresses.
	Relays []string `yaml:"relays"`
	// RelayService makes this node a circuit relay for peers behind NAT,
	// within RelayLimits.
	RelayService bool `yaml:"relay_service"`
	// RelayLimits bounds the relay service (zero fields: libp2p defaults).
	RelayLimits p2p.RelayLimits `yaml:"relay_limits"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// Region is where this node is, e.g. "eu-west" (used by residency rules).
	Region string `yaml:"region"`
	// MetricsAddr, when set, serves Prometheus metrics and the status page
	// there: a loopback IP (127.0.0.1:PORT, [::1]:PORT) or localhost:PORT,
	// nothing else.
	MetricsAddr string `yaml:"metrics_addr"`
	// MetricsPprof adds /debug/pprof/ to the metrics listener (off by
	// default: profiles and the command line are every local user's to read
	// there).
	MetricsPprof bool `yaml:"metrics_pprof"`
	// MetricsTokenFile, when set, names a file holding a secret every
	// request to the metrics listener must carry (Authorization: Bearer,
	// as Prometheus' credentials_file sends it, or ?token=), so that other
	// local users cannot read it.
	MetricsTokenFile string `yaml:"metrics_token_file"`
	// ArtifactBudgetGB caps the artifact store (datasets, images) under
	// the data dir, in GiB; least recently used artifacts are evicted
	// first. Default DefaultArtifactBudgetGB.
	ArtifactBudgetGB float64 `yaml:"artifact_budget_gb"`
	// CheckpointQuotaGBPerHour is each of this renter's jobs' quota of
	// checkpoint bytes its providers may have fetched into the store, in
	// GiB an hour (a bucket of an hour's worth, at least one 4 GiB
	// checkpoint). Default 16.
	CheckpointQuotaGBPerHour float64 `yaml:"checkpoint_quota_gb_per_hour"`
	// MaxBidders is how many of the providers that fit a job its call asks
	// for bids when this renter knows more (the established ones by name,
	// the rest drawn at random; twice as many at each new attempt): 0
	// means auction.DefaultMaxBidders, -1 asks every provider.
	MaxBidders int `yaml:"max_bidders"`
	// BidQuietClose is how long after a call's last bid this renter closes
	// its bid window early, once half the providers it asked answered and
	// the best bid starts now (and, for a provider it awaits whose round
	// trip it measured, after that provider's answer was due: see
	// auction.RenterConfig.QuietClose): 0 means auction.DefaultQuietClose, a
	// negative duration never (a window then waits for every provider it
	// asked, or runs to its end: every bid counts, the job waits longer).
	BidQuietClose time.Duration `yaml:"bid_quiet_close"`
	// Provider configures selling GPU time; absent means renter only.
	Provider ProviderConfig `yaml:"provider"`
}

// DefaultArtifactBudgetGB is the artifact store's default budget.
const DefaultArtifactBudgetGB = 50

// WarmMax is the largest artifact a provider warms at a renter's request,
// in bytes; 0 refuses (renter-only nodes too).
func (c Config) WarmMax() int64 {
	if !c.Provider.Enabled || c.Provider.WarmMaxGB < 0 {
		return 0
	}
	if c.Provider.WarmMaxGB > 0 {
		return int64(c.Provider.WarmMaxGB * (1 << 30))
	}
	budget := c.ArtifactBudgetGB
	if budget == 0 {
		budget = DefaultArtifactBudgetGB
	}
	return int64(budget / 2 * (1 << 30))
}

// DefaultDrainGrace is provider.drain_grace's default.
const DefaultDrainGrace = 2 * time.Minute

// ProviderConfig is the supply side of a node.
type ProviderConfig struct {
	// Enabled makes the node advertise and bid.
	Enabled bool `yaml:"enabled"`
	// GPUs is the declared inventory used where no NVIDIA driver is present
	// (or always, with gpu_source: declared).
	GPUs []terms.GPU `yaml:"gpus"`
	// GPUSource is where the inventory comes from: auto (the driver when
	// there is one, else gpus), nvml (the driver, or fail) or declared
	// (gpus, never the driver). Default auto.
	GPUSource string `yaml:"gpu_source"`
	// Datasets this node holds cached (data-aware placement).
	Datasets []string `yaml:"datasets"`
	// WarmMaxGB is the largest artifact, in GiB, this provider fetches
	// into its store when a renter asks it to (gpumesh artifact warm).
	// Default half of artifact_budget_gb; negative refuses warm requests.
	WarmMaxGB float64 `yaml:"warm_max_gb"`
	// JobFilesMaxGB caps the job logs and collected outputs kept for
	// renters (each for its job's retention) in total, in GiB: past it the
	// oldest leases' files are removed first. Default 10.
	JobFilesMaxGB float64 `yaml:"job_files_max_gb"`
	// JobFilesMaxRetain is the longest a lease's job log and outputs are
	// kept after it ends: a job asking for longer (job post --retain) gets
	// this. Default 7 days (terms.DefaultRetain).
	JobFilesMaxRetain time.Duration `yaml:"job_files_max_retain"`
	// Policy is what is sold and on what terms.
	Policy terms.Policy `yaml:"policy"`
	// AdvertiseTTL is the lifetime of the capability record; it is renewed
	// every third of it. Default 10m.
	AdvertiseTTL time.Duration `yaml:"advertise_ttl"`
	// Executor is auto (container when Docker is reachable and the job names
	// an image, else sandboxed process), process, or docker.
	Executor string `yaml:"executor"`
	// PreemptGrace is how long a preempted job has to checkpoint. Default 10s.
	PreemptGrace time.Duration `yaml:"preempt_grace"`
	// DrainGrace is how long a daemon stopped with SIGTERM (or SIGINT)
	// lets its running leases finish: those that end within it run on,
	// the others are handed back to their renters at once; then it stops.
	// Confirmed reservations that have not started survive the restart.
	// Default 2m; 0 hands every running lease back.
	DrainGrace time.Duration `yaml:"drain_grace"`
	// WorkDir holds the jobs' scratch dirs. Job processes run under their
	// own uids and must be able to reach it, so it defaults to a private
	// directory under the system temp dir rather than inside the data dir.
	WorkDir string `yaml:"work_dir"`
	// HeartbeatInterval is the telemetry period during a lease. It is also
	// what a renter expects from its providers. Default 5s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// AllowJobNetwork lets jobs reach the network: process jobs share the
	// host's network, containers get Docker's bridge network. Default
	// false: each job has no network but its own loopback.
	AllowJobNetwork bool `yaml:"allow_job_network"`
	// JobUIDBase is the first of the 1000 uids jobs run as (one per job)
	// when the daemon runs as root; default 200000. Uids are the host's:
	// two providers on one host need pools that do not overlap, or a job
	// of one could signal (kill -9 -1) the other's jobs.
	JobUIDBase int `yaml:"job_uid_base"`
	// BidHolds makes each bid hold its GPUs tentatively until its award,
	// its release or a short expiry (auction.ProviderConfig.HoldGrace), so
	// that concurrent auctions are not offered the same GPUs. Default
	// false: a caller that never awards nor releases its bids could keep
	// GPUs from being offered to others while its calls last.
	BidHolds bool `yaml:"bid_holds"`
}

// ExecutorOptions are the executors' options from the provider's config:
// jobs get no network (an isolated network namespace, or Docker's "none")
// unless the provider allows it.
func (p ProviderConfig) ExecutorOptions(work string, log *slog.Logger) (runtime.ProcessOptions, runtime.DockerOptions) {
	po := runtime.ProcessOptions{Log: log, AllowNetwork: p.AllowJobNetwork, UIDBase: p.JobUIDBase}
	do := runtime.DockerOptions{Root: work, Log: log, UIDBase: p.JobUIDBase}
	if p.AllowJobNetwork {
		do.Network = "bridge"
	}
	return po, do
}

// HoldGrace is the provider's auction.ProviderConfig.HoldGrace: holds on
// (provider.bid_holds) or off.
func (p ProviderConfig) HoldGrace() time.Duration {
	if p.BidHolds {
		return auction.DefaultHoldGrace
	}
	return 0
}

// RelayServiceLimits is the relay service's limits, nil when it is off.
func (c Config) RelayServiceLimits() *p2p.RelayLimits {
	if !c.RelayService {
		return nil
	}
	l := c.RelayLimits
	return &l
}

// DefaultConfig is the configuration used when no file exists.
func DefaultConfig() Config {
	return Config{
		Listen:   []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"},
		LogLevel: "info",
		Provider: ProviderConfig{
			AdvertiseTTL:      10 * time.Minute,
			Executor:          "auto",
			PreemptGrace:      10 * time.Second,
			DrainGrace:        DefaultDrainGrace,
			HeartbeatInterval: 5 * time.Second,
		},
	}
}

// LoadConfig reads a YAML config file over the defaults. Unknown keys are an
// error, so a typo never silently changes what a provider sells, and so is
// an empty file. A missing file at the default location is not an error
// (mustExist=false).
func LoadConfig(path string, mustExist bool) (Config, error) {
	cfg := DefaultConfig()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !mustExist {
		return cfg, cfg.Validate()
	}
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err == io.EOF {
		// An empty file (or only comments) is a mistake, not a request
		// for a node listening on every interface with the defaults.
		return cfg, fmt.Errorf("config %s is empty: add settings (`gpumesh provider init` writes a provider's) or remove the file to use the defaults", path)
	} else if err != nil {
		return cfg, fmt.Errorf("config %s: %s", path, configErrorText(err))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate checks the configuration's values.
func (c Config) Validate() error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log_level must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.ArtifactBudgetGB < 0 || c.ArtifactBudgetGB != c.ArtifactBudgetGB {
		return fmt.Errorf("artifact_budget_gb must not be negative, got %v", c.ArtifactBudgetGB)
	}
	if c.CheckpointQuotaGBPerHour < 0 || c.CheckpointQuotaGBPerHour != c.CheckpointQuotaGBPerHour || c.CheckpointQuotaGBPerHour > 1<<20 {
		return fmt.Errorf("checkpoint_quota_gb_per_hour must be a positive number of GiB (default 16), got %v", c.CheckpointQuotaGBPerHour)
	}
	if c.BidQuietClose > terms.MaxBidWindow {
		return fmt.Errorf("bid_quiet_close must be at most a bid window's longest, %s, got %s", terms.MaxBidWindow, c.BidQuietClose)
	}
	if c.MaxBidders < -1 || c.MaxBidders > 1024 {
		return fmt.Errorf("max_bidders must be 1..1024, 0 (default %d) or -1 (every provider), got %d", auction.DefaultMaxBidders, c.MaxBidders)
	}
	if b := c.Provider.JobUIDBase; b != 0 && (b < 1000 || b > 1<<30) {
		return fmt.Errorf("provider.job_uid_base must be a uid from 1000 to %d (default 200000), got %d", 1<<30, b)
	}
	if c.Provider.JobFilesMaxGB < 0 || c.Provider.JobFilesMaxGB != c.Provider.JobFilesMaxGB || c.Provider.JobFilesMaxGB > 1<<20 {
		return fmt.Errorf("provider.job_files_max_gb must be a positive number of GiB (default 10), got %v", c.Provider.JobFilesMaxGB)
	}
	if r := c.Provider.JobFilesMaxRetain; r != 0 && (r < terms.MinRetain || r > terms.MaxRetain) {
		return fmt.Errorf("provider.job_files_max_retain must be in [%v, %v] (default %v), got %v", terms.MinRetain, terms.MaxRetain, terms.DefaultRetain, r)
	}
	if c.Provider.WarmMaxGB != c.Provider.WarmMaxGB {
		return fmt.Errorf("provider.warm_max_gb must be a number, got %v", c.Provider.WarmMaxGB)
	}
	for _, a := range c.Listen {
		if _, err := ma.NewMultiaddr(a); err != nil {
			return fmt.Errorf("listen address %q: %v", a, err)
		}
	}
	if _, err := p2p.ParseAddrInfos(c.Bootstrap); err != nil {
		return err
	}
	if err := p2p.ValidateReachability(c.Reachability); err != nil {
		return err
	}
	if _, err := p2p.ParseAddrInfos(c.Relays); err != nil {
		return fmt.Errorf("relays: %w", err)
	}
	if err := c.RelayLimits.Validate(); err != nil {
		return fmt.Errorf("relay_limits: %w", err)
	}
	p := c.Provider
	for i, g := range p.GPUs {
		if strings.TrimSpace(g.Model) == "" {
			return fmt.Errorf("provider.gpus[%d]: model is required", i)
		}
		if g.VRAMGB <= 0 {
			return fmt.Errorf("provider.gpus[%d] (%s): vram_gb must be > 0", i, g.Model)
		}
	}
	if p.Enabled {
		if err := p.Policy.Validate(); err != nil {
			return fmt.Errorf("provider.policy: %w", err)
		}
	}
	switch p.GPUSource {
	case "", runtime.GPUSourceAuto, runtime.GPUSourceNVML, runtime.GPUSourceDeclared:
	default:
		return fmt.Errorf("provider.gpu_source must be auto, nvml or declared, got %q", p.GPUSource)
	}
	if p.DrainGrace < 0 {
		return fmt.Errorf("provider.drain_grace must not be negative, got %s", p.DrainGrace)
	}
	switch p.Executor {
	case "", "auto", "process", "docker":
	default:
		return fmt.Errorf("provider.executor must be auto, process or docker, got %q", p.Executor)
	}
	if p.AdvertiseTTL < 0 || (p.AdvertiseTTL > 0 && p.AdvertiseTTL < time.Second) {
		return fmt.Errorf("provider.advertise_ttl must be at least 1s, got %s", p.AdvertiseTTL)
	}
	if p.AdvertiseTTL > terms.MaxCapabilityTTL {
		return fmt.Errorf("provider.advertise_ttl must be at most %s, got %s", terms.MaxCapabilityTTL, p.AdvertiseTTL)
	}
	if c.MetricsAddr != "" {
		if err := metrics.CheckAddr(c.MetricsAddr); err != nil {
			return fmt.Errorf("metrics_addr %q: %w", c.MetricsAddr, err)
		}
	} else if c.MetricsPprof || c.MetricsTokenFile != "" {
		return errors.New("metrics_pprof and metrics_token_file need metrics_addr")
	}
	return nil
}

// ErrAlreadyRunning is returned when another daemon owns the data dir.
var ErrAlreadyRunning = errors.New("another gpumesh daemon is already running on this data dir")

// Running says whether a daemon answers on the data dir's control socket.
func (p Paths) Running() bool {
	c, err := net.DialTimeout("unix", p.Socket(), 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Paths of the files in a data directory.
type Paths struct{ Dir string }

// Key is the identity key file (0600).
func (p Paths) Key() string { return filepath.Join(p.Dir, "identity.key") }

// KeyNext is the new identity key while a rotation is under way
// (identity.Rotate): written before the ledger records the succession, put
// in Key's place after.
func (p Paths) KeyNext() string { return p.Key() + ".next" }

// KeyRetired is where a rotation keeps the identity key it retired, named
// by the succession's issue time (UTC).
func (p Paths) KeyRetired(issued time.Time) string {
	return p.Key() + ".old-" + issued.UTC().Format("20060102T150405Z")
}

// DB is the Badger directory (ledger and state).
func (p Paths) DB() string { return filepath.Join(p.Dir, "db") }

// Socket is the control API's unix socket (0600).
func (p Paths) Socket() string { return api.SocketPath(p.Dir) }

// Config is the default config file location.
func (p Paths) Config() string { return filepath.Join(p.Dir, "config.yaml") }

// Artifacts holds the artifact store.
func (p Paths) Artifacts() string { return filepath.Join(p.Dir, "artifacts") }

// Jobs holds job work dirs and logs.
func (p Paths) Jobs() string { return filepath.Join(p.Dir, "jobs") }

// Kept holds the logs and outputs of this renter's no-persist leases,
// taken from their providers (lease.TrackerConfig.KeptDir).
func (p Paths) Kept() string { return filepath.Join(p.Dir, "kept") }

// WorkRootRecord records the jobs' scratch root chosen when the default
// one was refused (see WorkRoot).
func (p Paths) WorkRootRecord() string { return filepath.Join(p.Dir, "work-root") }

// DaemonLog is where the daemon's output is written when it runs in the
// background (testnet/up.sh, service units).
func (p Paths) DaemonLog() string { return filepath.Join(p.Dir, "daemon.log") }

// Tighten creates the data dir if needed and makes it readable by this
// user alone, an existing one too: the dir 0700, its config file and
// daemon log 0600. Job processes run under other uids and must read none
// of it.
func (p Paths) Tighten() error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for _, f := range []string{p.Config(), p.DaemonLog(), p.WorkRootRecord()} {
		fi, err := os.Lstat(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(f, fi.Mode().Perm()&0o600); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
		}
	}
	return nil
}

// DefaultDataDir is $GPUMESH_HOME or ~/.gpumesh.
func DefaultDataDir() string {
	if d := os.Getenv("GPUMESH_HOME"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".gpumesh"
	}
	return filepath.Join(home, ".gpumesh")
}

// WorkRoot returns the jobs' scratch root: the configured one, or a
// directory under the system temp dir named after the data dir. Job uids
// must be able to traverse to it (0711), and it must be ours: a directory
// planted there by another user is refused. A planted default root does not
// stop the provider: it falls back to a fresh, unpredictable root under the
// temp dir, recorded in the data dir (WorkRootRecord) so that restarts
// reuse it, and logs where.
func (paths Paths) WorkRoot(configured string, log *slog.Logger) (string, error) {
	if configured != "" {
		if err := ownWorkRoot(configured, true); err != nil {
			return "", err
		}
		return filepath.Join(configured, "work"), nil
	}
	// A fallback chosen by an earlier start.
	if b, err := os.ReadFile(paths.WorkRootRecord()); err == nil {
		root := strings.TrimSpace(string(b))
		if filepath.IsAbs(root) && ownWorkRoot(root, false) == nil {
			return filepath.Join(root, "work"), nil
		}
		log.Warn("recorded work root is unusable; choosing another", "root", root)
	}
	root, err := paths.defaultWorkRoot()
	if err != nil {
		return "", err
	}
	err = ownWorkRoot(root, true)
	if err == nil {
		return filepath.Join(root, "work"), nil
	}
	fresh, ferr := os.MkdirTemp("", "gpumesh-work-")
	if ferr != nil {
		return "", fmt.Errorf("%v; and no fallback: %w", err, ferr)
	}
	if ferr = ownWorkRoot(fresh, false); ferr == nil {
		ferr = os.WriteFile(paths.WorkRootRecord(), []byte(fresh+"\n"), 0o600)
	}
	if ferr != nil {
		_ = os.RemoveAll(fresh)
		return "", fmt.Errorf("%v; and no fallback: %w", err, ferr)
	}
	log.Warn("default work root refused; using a fresh one", "refused", root, "reason", err, "work_root", fresh)
	return filepath.Join(fresh, "work"), nil
}

// defaultWorkRoot is where WorkRoot puts the work root of this data dir
// when none is configured: a dir of the temp dir named by a digest of the
// data dir's path.
func (paths Paths) defaultWorkRoot() (string, error) {
	abs, err := filepath.Abs(paths.Dir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(os.TempDir(), "gpumesh-"+hex.EncodeToString(sum[:6])), nil
}

// DropWorkRoot removes the default work root WorkRoot made in the temp dir
// (not a configured root, nor a fallback the data dir records) when
// nothing is left in it, as a stopping daemon does: a data dir that is
// never opened again (a test's, a testnet's) leaves nothing in the temp
// dir, and the next start makes the root again.
func (paths Paths) DropWorkRoot(configured string) {
	if configured != "" {
		return
	}
	if _, err := os.Lstat(paths.WorkRootRecord()); err == nil {
		return
	}
	root, err := paths.defaultWorkRoot()
	if err != nil {
		return
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return // planted by another user: not ours to remove
	}
	if err := os.Remove(filepath.Join(root, "work")); err == nil || errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(root) // only if empty
	}
}

// ownWorkRoot makes sure root is a directory owned by this user, mode 0711
// (creating it when create is set).
func ownWorkRoot(root string, create bool) error {
	if create {
		if err := os.MkdirAll(root, 0o711); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || (ok && int(st.Uid) != os.Geteuid()) {
		return fmt.Errorf("work dir %s is not a directory owned by this user; refusing to run jobs there", root)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	return nil
}
