package config

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestTightenDataDir: an existing data dir left open to other users (job
// uids) is made private at start, with its config file and daemon log.
func TestTightenDataDir(t *testing.T) {
	p := Paths{Dir: filepath.Join(t.TempDir(), "data")}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p.Config(), p.DaemonLog()} {
		if err := os.WriteFile(f, []byte("x: 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Tighten(); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{p.Dir: 0o700, p.Config(): 0o600, p.DaemonLog(): 0o600}
	for f, mode := range want {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", f, fi.Mode().Perm(), err, mode)
		}
	}
	// A fresh data dir is created private.
	fresh := Paths{Dir: filepath.Join(t.TempDir(), "fresh")}
	if err := fresh.Tighten(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("fresh data dir mode %v (%v)", fi.Mode().Perm(), err)
	}
}

// TestEmptyConfig: an empty or comments-only config file is an error that
// names it.
func TestEmptyConfig(t *testing.T) {
	for name, body := range map[string]string{"empty": "", "comments": "# listen: []\n\n#provider:\n", "blank": "\n  \n"} {
		t.Run(name, func(t *testing.T) {
			p := writeTestConfig(t, body)
			for _, must := range []bool{true, false} {
				if _, err := LoadConfig(p, must); err == nil || !strings.Contains(err.Error(), p+" is empty") {
					t.Fatalf("LoadConfig(must=%v) = %v", must, err)
				}
			}
		})
	}
}

func writeTestConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigUnknownKeys: an unknown key is named with its place in the
// file, its line and the key probably meant.
func TestConfigUnknownKeys(t *testing.T) {
	cases := []struct{ body, want string }{
		{"lisen: []\n", "unknown config key 'lisen' (line 1); did you mean 'listen'?"},
		{"region: eu\nLog_Level: info\n", "unknown config key 'Log_Level' (line 2); did you mean 'log_level'?"},
		{"provider:\n  enabled: true\n  pricefloor: 1\n", "unknown config key 'provider.pricefloor' (line 3); did you mean 'provider.policy.price_floor'?"},
		{"provider:\n  policy:\n    price_flor: 2\n", "unknown config key 'provider.policy.price_flor' (line 3); did you mean 'provider.policy.price_floor'?"},
		{"provider:\n  policy:\n    peak_windows: [{dayz: [mon]}]\n", "unknown config key 'dayz' (line 3); did you mean 'days'?"},
		{"price_floor: 1\n", "unknown config key 'price_floor' (line 1); did you mean 'provider.policy.price_floor'?"},
		{"frobnicate: 1\n", "unknown config key 'frobnicate' (line 1)"},
		{"lisen: []\nregoin: eu\n", "unknown config key 'lisen' (line 1); did you mean 'listen'?; unknown config key 'regoin' (line 2); did you mean 'region'?"},
	}
	for _, c := range cases {
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(p, true)
		if err == nil || err.Error() != "config "+p+": "+c.want {
			t.Errorf("%q: %v\nwant config %s: %s", c.body, err, p, c.want)
		}
	}
}

// TestMetricsAddrMustBeLoopback: metrics_addr is parsed, not matched by
// prefix: only a loopback IP or exactly localhost, with a port, passes.
func TestMetricsAddrMustBeLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9464": true, "127.0.0.2:9464": true, "[::1]:9464": true, "localhost:9464": true,
		"127.0.0.1.example.com:9464": false, "127.evil.example:9464": false, "localhost.example.com:9464": false,
		"0.0.0.0:9999": false, ":9464": false, "[::]:9464": false, "10.0.0.1:9464": false, "[::ffff:10.0.0.1]:9464": false,
		"127.0.0.1": false, "127.0.0.1:": false, "127.0.0.1:http": false, "127.0.0.1:99999": false, "127.0.0.1:0": false,
		"localhost": false, "LOCALHOST.:9464": false,
	} {
		cfg := DefaultConfig()
		cfg.MetricsAddr = addr
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("metrics_addr %q: Validate() = %v, want ok=%v", addr, err, ok)
		} else if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("metrics_addr %q: a multi-line error %q", addr, err)
		}
	}
	cfg := DefaultConfig()
	cfg.MetricsPprof = true
	if err := cfg.Validate(); err == nil {
		t.Error("metrics_pprof without metrics_addr was accepted")
	}
}

// TestJobFilesRetainAndNoPersistConfig: provider.job_files_max_retain and
// the policy's no_persist are read from a config file, and values outside
// their ranges are refused naming the key.
func TestJobFilesRetainAndNoPersistConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	load := func(text string) (Config, error) {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return LoadConfig(p, true)
	}
	cfg, err := load("provider:\n  enabled: true\n  job_files_max_retain: 2h\n  policy: {price_floor: 1, no_persist: require}\n")
	if err != nil || cfg.Provider.JobFilesMaxRetain != 2*time.Hour || cfg.Provider.Policy.NoPersist != terms.NoPersistRequire {
		t.Fatalf("config: %+v, %v", cfg.Provider, err)
	}
	for text, want := range map[string]string{
		"provider:\n  job_files_max_retain: 1s\n":                                   "provider.job_files_max_retain must be in [1m0s, 8760h0m0s]",
		"provider:\n  job_files_max_retain: -1h\n":                                  "provider.job_files_max_retain",
		"provider:\n  enabled: true\n  policy: {price_floor: 1, no_persist: yes}\n": `no_persist must be offer, require or empty`,
	} {
		if _, err := load(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", text, err, want)
		}
	}
}

// TestPlantedWorkRoot: another user's directory at the provider's default
// work root does not stop it: it falls back to a fresh root of its own,
// records it in the data dir and reuses it after a restart; a configured
// root planted by another user is still refused.
func TestPlantedWorkRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant a directory owned by another uid")
	}
	paths := Paths{Dir: t.TempDir()}
	abs, _ := filepath.Abs(paths.Dir)
	sum := sha256.Sum256([]byte(abs))
	planted := filepath.Join(os.TempDir(), "gpumesh-"+hex.EncodeToString(sum[:6]))
	if err := os.Mkdir(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(planted) })
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	work, err := paths.WorkRoot("", log)
	if err != nil {
		t.Fatalf("planted default root stops the provider: %v", err)
	}
	root := filepath.Dir(work)
	t.Cleanup(func() { os.RemoveAll(root) })
	fi, err := os.Lstat(root)
	if err != nil || root == planted || strings.HasPrefix(work, planted+"/") || !strings.HasPrefix(root, os.TempDir()) {
		t.Fatalf("fallback work root %s (%v)", root, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() || fi.Mode().Perm() != 0o711 {
		t.Fatalf("fallback root owner %d mode %v", st.Uid, fi.Mode().Perm())
	}
	if b, err := os.ReadFile(paths.WorkRootRecord()); err != nil || strings.TrimSpace(string(b)) != root {
		t.Fatalf("recorded root %q (%v), want %s", b, err, root)
	}
	again, err := paths.WorkRoot("", log)
	if err != nil || again != work {
		t.Fatalf("after a restart: %s (%v), want %s", again, err, work)
	}
	if _, err := paths.WorkRoot(planted, log); err == nil || !strings.Contains(err.Error(), "not a directory owned by this user") {
		t.Fatalf("configured planted root: %v", err)
	}
}

// TestJobNetworkPolicy: jobs get no network unless the provider's config
// allows it, for both backends.
func TestJobNetworkPolicy(t *testing.T) {
	cfg := DefaultConfig()
	po, do := cfg.Provider.ExecutorOptions("/w", nil)
	if po.AllowNetwork || do.Network != "" || do.Root != "/w" {
		t.Fatalf("default: process network %v, docker network %q", po.AllowNetwork, do.Network)
	}
	p := writeTestConfig(t, "provider:\n  allow_job_network: true\n")
	cfg, err := LoadConfig(p, true)
	if err != nil {
		t.Fatal(err)
	}
	po, do = cfg.Provider.ExecutorOptions("/w", nil)
	if !po.AllowNetwork || do.Network != "bridge" {
		t.Fatalf("allowed: process network %v, docker network %q", po.AllowNetwork, do.Network)
	}
}

// TestBidHoldsOptIn: bids hold GPUs only when the provider's config says
// so (provider.bid_holds), with the auction's default hold grace.
func TestBidHoldsOptIn(t *testing.T) {
	if g := DefaultConfig().Provider.HoldGrace(); g != 0 {
		t.Fatalf("default hold grace %v, want none", g)
	}
	cfg, err := LoadConfig(writeTestConfig(t, "provider:\n  bid_holds: true\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Provider.HoldGrace(); g != auction.DefaultHoldGrace {
		t.Fatalf("bid_holds: true gives hold grace %v, want %v", g, auction.DefaultHoldGrace)
	}
}

// TestJobUIDBase: provider.job_uid_base reaches both executors, and an
// out-of-range base is refused with a clear error.
func TestJobUIDBase(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Provider.JobUIDBase = 230000
	po, do := cfg.Provider.ExecutorOptions(t.TempDir(), nil)
	if po.UIDBase != 230000 || do.UIDBase != 230000 {
		t.Fatalf("uid base reached the executors as %d and %d, want 230000", po.UIDBase, do.UIDBase)
	}
	for _, bad := range []int{-1, 999, 1<<30 + 1} {
		cfg.Provider.JobUIDBase = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "job_uid_base") {
			t.Errorf("job_uid_base %d: %v, want an error naming it", bad, err)
		}
	}
}

// TestDropWorkRoot: the default work root goes when nothing is left in
// it, and the next start makes it again; one with a job's files in it, a
// configured one and a recorded fallback stay.
func TestDropWorkRoot(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	paths := Paths{Dir: t.TempDir()}
	work, err := paths.WorkRoot("", log)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(work)
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.MkdirAll(work, 0o711); err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(work, "job-1")
	if err := os.Mkdir(job, 0o700); err != nil {
		t.Fatal(err)
	}
	paths.DropWorkRoot("")
	if _, err := os.Stat(job); err != nil {
		t.Fatalf("a root with a job's dir in it was dropped: %v", err)
	}
	if err := os.Remove(job); err != nil {
		t.Fatal(err)
	}
	configured := t.TempDir()
	paths.DropWorkRoot(configured)
	if _, err := os.Stat(work); err != nil {
		t.Fatalf("a configured root's call dropped the default one: %v", err)
	}
	paths.DropWorkRoot("")
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("the empty default root survived: %v", err)
	}
	if again, err := paths.WorkRoot("", log); err != nil || again != work {
		t.Fatalf("the next start: %s (%v), want %s", again, err, work)
	}
	// A recorded fallback is the data dir's for good: never dropped.
	if err := os.WriteFile(paths.WorkRootRecord(), []byte(root+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	paths.DropWorkRoot("")
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("a recorded root was dropped: %v", err)
	}
}

// TestBidQuietCloseConfig: bid_quiet_close is read as a duration (negative:
// never close early on quiet) and one longer than any bid window is
// refused naming the key.
func TestBidQuietCloseConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	for text, want := range map[string]time.Duration{"bid_quiet_close: 400ms\n": 400 * time.Millisecond, "bid_quiet_close: -1s\n": -time.Second, "region: eu-west\n": 0} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if cfg, err := LoadConfig(p, true); err != nil || cfg.BidQuietClose != want {
			t.Errorf("%q: %v (%v), want %v", text, cfg.BidQuietClose, err, want)
		}
	}
	if err := os.WriteFile(p, []byte("bid_quiet_close: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p, true); err == nil || !strings.Contains(err.Error(), "bid_quiet_close must be at most") {
		t.Errorf("2m: %v", err)
	}
}
