package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/runtime"
)

var errProbe = errors.New("probe says no")

// healthyProbes describe a GPU host where everything works and no daemon runs.
func healthyProbes() doctorProbes {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return doctorProbes{
		NVML: func() (runtime.Inventory, error) {
			return runtime.Inventory{GPUs: []terms.GPU{{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, Detected: true}}, Driver: "550.54", CUDA: "12.4", Source: "nvml"}, nil
		},
		Docker: func(context.Context) (runtime.DockerStatus, error) {
			return runtime.DockerStatus{Runtimes: []string{"nvidia", "runc"}, GPU: "nvidia", CgroupVersion: "2"}, nil
		},
		Cgroups: func() runtime.CgroupStatus {
			return runtime.CgroupStatus{Version: 2, Controllers: []string{"cpu", "io", "memory", "pids"}, Usable: true, Detail: "cgroup v2 memory at /x"}
		},
		Namespace: func(string) error { return nil },
		GangNet:   func() error { return nil },
		FreeSpace: func(string) (uint64, error) { return 100 << 30, nil },
		Status:    func(context.Context) (api.StatusInfo, error) { return api.StatusInfo{}, errProbe },
		Providers: func(context.Context) ([]terms.Capability, error) { return nil, errProbe },
		Listen:    func(string, string) error { return nil },
		Dial:      func(context.Context, string) error { return nil },
		Now:       func() time.Time { return now },
	}
}

const bootPeer = "/ip4/192.0.2.1/tcp/4001/p2p/12D3KooWGRYZDHBembyGJQqQ6WgLqJWbJ4eTGnV8aEvG6E3Q9Eqh"

func TestDoctorChecks(t *testing.T) {
	provider := config.DefaultConfig()
	provider.Provider.Enabled = true
	provider.Bootstrap = []string{bootPeer}
	daemon := &api.StatusInfo{PeerID: "self", Peers: 3, Addrs: []string{"/ip4/10.0.0.5/tcp/4001", "/ip4/127.0.0.1/tcp/4001"}}
	publicDaemon := &api.StatusInfo{PeerID: "self", Peers: 3, Addrs: []string{"/ip4/1.2.3.4/tcp/4001"}}
	declared := provider
	declared.Provider.GPUs = []terms.GPU{{Model: "RTX 4090", VRAMGB: 24}}
	nvmlOnly := provider
	nvmlOnly.Provider.GPUSource = runtime.GPUSourceNVML
	busyMetrics := provider
	busyMetrics.MetricsAddr = "127.0.0.1:9464"
	noBoot := provider
	noBoot.Bootstrap = nil
	noNVML := func(p *doctorProbes) {
		p.NVML = func() (runtime.Inventory, error) { return runtime.Inventory{}, errProbe }
	}
	// Device 0 in MIG mode with two instances, device 1 with MIG off.
	mig := func(p *doctorProbes) {
		p.NVML = func() (runtime.Inventory, error) {
			in := terms.MIGInstance{UUID: "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", Profile: "3g.40gb", MemoryMB: 40192}
			return runtime.Inventory{GPUs: []terms.GPU{
				{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, Detected: true, MIG: &terms.MIG{Enabled: true, Pending: true, Instances: []terms.MIGInstance{in, in}}},
				{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, Detected: true, MIG: &terms.MIG{}},
			}, Source: "nvml"}, nil
		}
	}
	cases := []struct {
		name   string
		role   string
		cfg    config.Config
		daemon *api.StatusInfo
		fake   func(*doctorProbes)
		check  func(context.Context, doctorEnv, doctorProbes) checkResult
		want   string
		detail string
	}{
		{"gpu detected", "provider", provider, nil, nil, gpuCheck, checkOK, "1 GPU(s) through NVML (1x NVIDIA A100-SXM4-80GB), driver 550.54, CUDA 12.4; MIG: absent"},
		{"gpu mig", "provider", provider, nil, mig, gpuCheck, checkOK, "; gpu 0 MIG: enabled, 2 instances (3g.40gb, 3g.40gb); gpu 1 MIG: disabled"},
		{"gpu none", "provider", provider, nil, noNVML, gpuCheck, checkFail, "no GPU"},
		{"gpu declared only", "provider", declared, nil, noNVML, gpuCheck, checkWarn, "1 declared GPU(s) (1x RTX 4090)"},
		{"gpu nvml required", "provider", nvmlOnly, nil, noNVML, gpuCheck, checkFail, "gpu_source is nvml"},
		{"gpu renter", "renter", provider, nil, noNVML, gpuCheck, checkSkip, "renter role needs no GPU"},
		{"docker nvidia", "provider", provider, nil, nil, checkContainers, checkOK, "through nvidia"},
		{"docker no nvidia", "provider", provider, nil, func(p *doctorProbes) {
			p.Docker = func(context.Context) (runtime.DockerStatus, error) {
				return runtime.DockerStatus{Runtimes: []string{"runc"}}, nil
			}
		}, checkContainers, checkWarn, "no NVIDIA runtime"},
		{"docker absent", "provider", provider, nil, func(p *doctorProbes) {
			p.Docker = func(context.Context) (runtime.DockerStatus, error) { return runtime.DockerStatus{}, errProbe }
		}, checkContainers, checkWarn, "no Docker engine answers"},
		{"cgroups v2", "provider", provider, nil, nil, cgroupCheck, checkOK, "cgroup v2, controllers cpu,io,memory,pids"},
		{"cgroups v1 no pids", "provider", provider, nil, func(p *doctorProbes) {
			p.Cgroups = func() runtime.CgroupStatus {
				return runtime.CgroupStatus{Version: 1, Controllers: []string{"cpu", "memory"}, Usable: true}
			}
		}, cgroupCheck, checkWarn, "cgroup v1"},
		{"cgroups unusable", "provider", provider, nil, func(p *doctorProbes) {
			p.Cgroups = func() runtime.CgroupStatus {
				return runtime.CgroupStatus{Version: 2, Controllers: []string{"cpu", "memory", "pids"}, Detail: "cgroup v2 not writable"}
			}
		}, cgroupCheck, checkWarn, "not writable"},
		{"namespaces all", "provider", provider, nil, nil, nsCheck, checkOK, "can create: net,mount,user"},
		{"namespaces user denied", "provider", provider, nil, func(p *doctorProbes) {
			p.Namespace = func(k string) error {
				if k == runtime.NamespaceUser {
					return errProbe
				}
				return nil
			}
		}, nsCheck, checkWarn, "cannot: user (probe says no)"},
		{"gang network", "provider", provider, nil, nil, gangCheck, checkOK, "private network"},
		{"gang network without iptables", "provider", provider, nil, func(p *doctorProbes) {
			p.GangNet = func() error { return errProbe }
		}, gangCheck, checkWarn, "probe says no"},
		{"gang network renter", "renter", provider, nil, nil, gangCheck, checkSkip, "runs no jobs"},
		{"disk plenty", "provider", provider, nil, nil, diskCheck, checkOK, "102400 MiB free"},
		{"disk low", "provider", provider, nil, func(p *doctorProbes) {
			p.FreeSpace = func(string) (uint64, error) { return 512 << 20, nil }
		}, diskCheck, checkWarn, "512 MiB free"},
		{"disk below ledger floor", "renter", provider, nil, func(p *doctorProbes) {
			p.FreeSpace = func(string) (uint64, error) { return ledger.DefaultMinFreeSpace - 1, nil }
		}, diskCheck, checkFail, "ledger refuses writes"},
		{"clock no daemon", "provider", provider, nil, nil, checkClock, checkSkip, "no daemon running"},
		{"clock in sync", "provider", provider, daemon, func(p *doctorProbes) {
			p.Providers = func(context.Context) ([]terms.Capability, error) {
				return []terms.Capability{{Peer: "a", IssuedAt: p.Now().Add(-time.Minute)}, {Peer: "self", IssuedAt: p.Now().Add(time.Hour)}}, nil
			}
		}, checkClock, checkOK, "1 peer(s)"},
		{"clock skewed", "provider", provider, daemon, func(p *doctorProbes) {
			p.Providers = func(context.Context) ([]terms.Capability, error) {
				return []terms.Capability{{Peer: "fast", IssuedAt: p.Now().Add(5 * time.Minute)}}, nil
			}
		}, checkClock, checkWarn, "5m0s ahead"},
		{"ports free", "provider", busyMetrics, nil, nil, portsCheck, checkOK, "metrics 127.0.0.1:9464"},
		{"port busy", "provider", busyMetrics, nil, func(p *doctorProbes) {
			p.Listen = func(network, addr string) error {
				if addr == "127.0.0.1:9464" {
					return errProbe
				}
				return nil
			}
		}, portsCheck, checkFail, "in use: metrics 127.0.0.1:9464"},
		{"ports daemon", "provider", provider, daemon, nil, portsCheck, checkSkip, "daemon holds"},
		{"reach public", "provider", provider, publicDaemon, nil, reachCheck, checkOK, "1 public"},
		{"reach nat provider", "provider", provider, daemon, nil, reachCheck, checkWarn, "behind NAT: 0 public, 1 private"},
		{"reach nat renter", "renter", provider, daemon, nil, reachCheck, checkOK, "behind NAT"},
		{"reach no daemon", "provider", provider, nil, nil, reachCheck, checkSkip, "no daemon running"},
		{"bootstrap reachable", "provider", provider, nil, nil, checkBootstrap, checkOK, "1 of 1 reachable"},
		{"bootstrap unreachable", "provider", provider, nil, func(p *doctorProbes) {
			p.Dial = func(context.Context, string) error { return errProbe }
		}, checkBootstrap, checkFail, "0 of 1 reachable"},
		{"bootstrap none", "provider", noBoot, nil, nil, checkBootstrap, checkWarn, "no bootstrap peers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := healthyProbes()
			if tc.fake != nil {
				tc.fake(&p)
			}
			env := doctorEnv{role: tc.role, dataDir: t.TempDir(), cfg: tc.cfg, daemon: tc.daemon}
			r := tc.check(context.Background(), env, p)
			if r.Status != tc.want || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q", r.Status, r.Detail, tc.want, tc.detail)
			}
			if (r.Status == checkWarn || r.Status == checkFail) && r.Fix == "" {
				t.Errorf("%s without a fix hint", r.Status)
			}
		})
	}
}

// Adapters giving every check the same shape for the table.
func gpuCheck(_ context.Context, e doctorEnv, p doctorProbes) checkResult { return checkGPU(e, p) }
func cgroupCheck(_ context.Context, e doctorEnv, p doctorProbes) checkResult {
	return checkCgroups(e, p)
}
func nsCheck(_ context.Context, e doctorEnv, p doctorProbes) checkResult {
	return checkNamespaces(e, p)
}
func gangCheck(_ context.Context, e doctorEnv, p doctorProbes) checkResult  { return checkGangNet(e, p) }
func diskCheck(_ context.Context, e doctorEnv, p doctorProbes) checkResult  { return checkDisk(e, p) }
func portsCheck(_ context.Context, e doctorEnv, p doctorProbes) checkResult { return checkPorts(e, p) }
func reachCheck(_ context.Context, e doctorEnv, _ doctorProbes) checkResult {
	return checkReachability(e)
}

func withProbes(t *testing.T, p doctorProbes) {
	t.Helper()
	old := newDoctorProbes
	newDoctorProbes = func(*api.Client) doctorProbes { return p }
	t.Cleanup(func() { newDoctorProbes = old })
}

// TestDoctorCommand: one line per check, exit status by blocking problems,
// --json, and the role taken from the config.
func TestDoctorCommand(t *testing.T) {
	withProbes(t, healthyProbes())
	cfg := writeConfig(t, "provider:\n  enabled: true\n  policy:\n    price_floor: 1.5\nbootstrap: [\""+bootPeer+"\"]\n")
	code, out, errOut := runCLI(t, "-d", t.TempDir(), "doctor", "-c", cfg)
	if code != 0 {
		t.Fatalf("healthy host: exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 11 || !strings.HasPrefix(lines[1], "OK    gpu ") {
		t.Fatalf("want 11 check lines with gpu second:\n%s", out)
	}

	p := healthyProbes()
	p.NVML = func() (runtime.Inventory, error) { return runtime.Inventory{}, errProbe }
	withProbes(t, p)
	code, out, errOut = runCLI(t, "-d", t.TempDir(), "doctor", "-c", cfg, "--json")
	if code == 0 || !strings.Contains(errOut, "1 blocking problem(s) for the provider role") {
		t.Fatalf("no GPU for a provider: exit %d, stderr %q", code, errOut)
	}
	var rep struct {
		Role   string        `json:"role"`
		OK     bool          `json:"ok"`
		Checks []checkResult `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if rep.Role != "provider" || rep.OK || rep.Checks[1].Name != "gpu" || rep.Checks[1].Status != checkFail {
		t.Fatalf("json report: %+v", rep)
	}
	// The same host is fine for a renter.
	if code, out, errOut := runCLI(t, "-d", t.TempDir(), "doctor", "-c", cfg, "--role", "renter"); code != 0 {
		t.Fatalf("renter on a GPU-less host: exit %d\n%s%s", code, out, errOut)
	}
	oneLineError(t, "--role must be provider or renter", "-d", t.TempDir(), "doctor", "--role", "miner")
	bad := writeConfig(t, "log_level: loud\n")
	code, out, _ = runCLI(t, "-d", t.TempDir(), "doctor", "-c", bad)
	if code == 0 || !strings.Contains(out, "FAIL  config") {
		t.Fatalf("bad config: exit %d\n%s", code, out)
	}
}

// TestDoctorOnThisHost runs the real probes and compares what doctor says
// with what the host says through other means: the NVIDIA device nodes, the
// docker CLI's runtimes and the cgroup file system.
func TestDoctorOnThisHost(t *testing.T) {
	code, out, _ := runCLI(t, "-d", t.TempDir(), "doctor", "--role", "provider", "--json")
	var rep struct {
		Checks []checkResult `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	got := map[string]checkResult{}
	for _, c := range rep.Checks {
		got[c.Name] = c
	}
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		if g := got["gpu"]; g.Status != checkFail || code == 0 {
			t.Errorf("no NVIDIA device on this host, but doctor says %+v (exit %d)", g, code)
		}
	} else if got["gpu"].Status != checkOK {
		t.Errorf("NVIDIA device present, but doctor says %+v", got["gpu"])
	}
	if docker, err := exec.LookPath("docker"); err == nil {
		b, err := exec.Command(docker, "info", "--format", "{{json .Runtimes}}").Output()
		if err == nil {
			c := got["containers"]
			nvidia := strings.Contains(string(b), `"nvidia"`)
			if nvidia != (c.Status == checkOK) {
				t.Errorf("docker runtimes %s, but doctor says %+v", b, c)
			}
		}
	}
	v2 := false
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		v2 = true
	}
	want := "cgroup v1"
	if v2 {
		want = "cgroup v2"
	}
	if c := got["cgroups"]; !strings.Contains(c.Detail, want) {
		t.Errorf("host has %s, doctor says %+v", want, c)
	}
	t.Logf("doctor on this host:\n%s", out)
}
