// Package nat tests gpumesh across a NAT: real daemons in network namespaces,
// a provider in a "home" namespace behind a masquerading "router" namespace
// (it can dial out, nothing can dial in), a relay+bootstrap node and a renter
// on the "public" side. It needs root and `ip netns`; otherwise it skips.
//
// All addresses are in 10.231.0.0/16 on veths created inside the test's own
// namespaces: the host's interfaces, routes and firewall are never touched.
package nat

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/api"
)

const (
	relayIP  = "10.231.1.1"
	homeIP   = "10.231.2.1"
	renterIP = "10.231.3.1"
	homeNet  = "10.231.2.0/24"
	// cmdTimeout bounds one setup or CLI command.
	cmdTimeout = 2 * time.Minute
)

// requireNetns skips unless the test can create namespaces and run
// iptables inside them.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	probe := "gmprobe" + randHex(t, 3)
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("network namespaces unavailable: %v: %s", err, strings.TrimSpace(string(out)))
	}
	defer func() { _ = exec.Command("ip", "netns", "del", probe).Run() }()
	if out, err := exec.Command("ip", "netns", "exec", probe, "iptables", "-t", "nat", "-S").CombinedOutput(); err != nil {
		t.Skipf("iptables unusable inside a namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// topology is the test's namespaces.
type topology struct{ router, relay, renter, home string }

// buildTopology creates four namespaces: router forwards between relay
// (10.231.1.0/24), renter (10.231.3.0/24) and home (10.231.2.0/24), and
// masquerades home's traffic; connections into home are dropped unless they
// belong to a flow home started. Everything is removed in t.Cleanup.
func buildTopology(t *testing.T) topology {
	t.Helper()
	p := "gm" + randHex(t, 3)
	tp := topology{router: p + "-rtr", relay: p + "-rly", renter: p + "-rnt", home: p + "-home"}
	for _, ns := range []string{tp.router, tp.relay, tp.renter, tp.home} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			// Deleting a namespace deletes its veths and iptables rules.
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	link := func(leaf, tag, subnet string) string {
		rside, lside := p+"-r"+tag, p+"-l"+tag
		run(t, "ip", "link", "add", rside, "netns", tp.router, "type", "veth", "peer", "name", lside, "netns", leaf)
		run(t, "ip", "-n", tp.router, "addr", "add", subnet+".254/24", "dev", rside)
		run(t, "ip", "-n", tp.router, "link", "set", rside, "up")
		run(t, "ip", "-n", leaf, "addr", "add", subnet+".1/24", "dev", lside)
		run(t, "ip", "-n", leaf, "link", "set", lside, "up")
		run(t, "ip", "-n", leaf, "route", "add", "default", "via", subnet+".254")
		return rside
	}
	link(tp.relay, "1", "10.231.1")
	homeSide := link(tp.home, "2", "10.231.2")
	link(tp.renter, "3", "10.231.3")
	in := func(args ...string) { run(t, "ip", append([]string{"netns", "exec", tp.router}, args...)...) }
	in("sysctl", "-qw", "net.ipv4.ip_forward=1")
	in("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", homeNet, "!", "-o", homeSide, "-j", "MASQUERADE")
	in("iptables", "-A", "FORWARD", "-i", homeSide, "-j", "ACCEPT")
	in("iptables", "-A", "FORWARD", "-o", homeSide, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
	in("iptables", "-A", "FORWARD", "-o", homeSide, "-j", "DROP")
	return tp
}

// daemon is one gpumesh daemon running in a namespace.
type daemon struct {
	name, ns, dir string
	id            string
	cmd           *exec.Cmd
}

func (d *daemon) logText() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "daemon.log"))
	return string(b)
}

type net struct {
	t   *testing.T
	bin string
	tmp string
}

// start writes config and runs `gpumesh daemon` in ns, waiting until its
// control API answers.
func (n *net) start(name, ns, config string) *daemon {
	t := n.t
	t.Helper()
	d := &daemon{name: name, ns: ns, dir: filepath.Join(n.tmp, name)}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(d.dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(d.dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	// `ip netns exec` enters the namespace and execs the daemon: the pid is
	// the daemon's.
	d.cmd = exec.Command("ip", "netns", "exec", ns, n.bin, "-d", d.dir, "daemon", "--config", cfg)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); _ = logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = d.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- %s log (tail) ---\n%s", name, tail(d.logText(), 4000))
		}
	})
	st := await(t, name+" status", 30*time.Second, func() (api.StatusInfo, error) {
		var st api.StatusInfo
		err := n.cliJSON(d, &st, "status", "--json")
		if err == nil && st.PeerID == "" {
			err = fmt.Errorf("status without peer id")
		}
		return st, err
	})
	d.id = st.PeerID
	t.Logf("%s up in %s: peer %s", name, ns, d.id)
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// cli runs the gpumesh CLI against d's daemon (through its unix socket, so
// from the host's namespace).
func (n *net) cli(d *daemon, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, n.bin, append([]string{"-d", d.dir}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("gpumesh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (n *net) cliJSON(d *daemon, v any, args ...string) error {
	out, err := n.cli(d, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("gpumesh %s: %v: %q", strings.Join(args, " "), err, tail(out, 500))
	}
	return nil
}

// await polls f until it returns nil error, failing the test after within.
func await[T any](t *testing.T, what string, within time.Duration, f func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := f()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func circuitAddrs(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if strings.Contains(a, "/p2p-circuit") {
			out = append(out, a)
		}
	}
	return out
}

// TestProviderBehindNAT: a provider that cannot be dialled reserves a slot on
// the relay, advertises its circuit address, is discovered by the renter,
// wins a job, runs it, streams its log and settles the lease; the relay
// refuses a reservation beyond its limit.
func TestProviderBehindNAT(t *testing.T) {
	requireNetns(t)
	began := time.Now()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "gpumesh")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpumesh")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gpumesh: %v: %s", err, out)
	}
	tp := buildTopology(t)
	n := &net{t: t, bin: bin, tmp: tmp}

	// Nothing on the public side can open a connection into home.
	probe := exec.Command("ip", "netns", "exec", tp.renter, "timeout", "3",
		"bash", "-c", "exec 3<>/dev/tcp/"+homeIP+"/22")
	if err := probe.Run(); err == nil {
		t.Fatal("a TCP connection from the renter's namespace into home succeeded: no NAT")
	}

	relay := n.start("relay", tp.relay, `listen: [/ip4/`+relayIP+`/tcp/4001]
reachability: public
relay_service: true
relay_limits: {max_reservations: 1, max_circuits: 4, limit_duration: 2m, limit_data: 1048576}
`)
	relayAddr := "/ip4/" + relayIP + "/tcp/4001/p2p/" + relay.id
	renter := n.start("renter", tp.renter, `listen: [/ip4/`+renterIP+`/tcp/4001]
reachability: public
bootstrap: [`+relayAddr+`]
`)
	provider := n.start("provider", tp.home, `listen: [/ip4/`+homeIP+`/tcp/4001]
reachability: private
bootstrap: [`+relayAddr+`]
relays: [`+relayAddr+`]
provider:
  enabled: true
  advertise_ttl: 15s
  heartbeat_interval: 1s
  executor: process
  gpu_source: declared
  gpus: [{model: RTX4090, vram_gb: 24}]
  policy: {price_floor: 0.5, accept_preemptible: true}
`)

	// The provider knows it is private and holds a circuit through the relay.
	wantCircuit := relayAddr + "/p2p-circuit/p2p/" + provider.id
	st := await(t, "provider's circuit address", 30*time.Second, func() (api.StatusInfo, error) {
		var st api.StatusInfo
		if err := n.cliJSON(provider, &st, "status", "--json"); err != nil {
			return st, err
		}
		if c := circuitAddrs(st.Addrs); len(c) != 1 || c[0] != wantCircuit {
			return st, fmt.Errorf("circuit addrs %v, want [%s]", c, wantCircuit)
		}
		return st, nil
	})
	if st.Reachability != "private" {
		t.Fatalf("provider reachability %q, want private", st.Reachability)
	}
	if !strings.Contains(provider.logText(), "reachability=private") {
		t.Fatal("provider did not log its reachability")
	}
	for _, d := range []*daemon{relay, renter} {
		var st api.StatusInfo
		if err := n.cliJSON(d, &st, "status", "--json"); err != nil || st.Reachability != "public" {
			t.Fatalf("%s reachability %q (%v), want public", d.name, st.Reachability, err)
		}
	}

	// The relay's limit holds: a second node behind the same NAT is refused
	// the one reservation the relay grants.
	second := n.start("second", tp.home, `listen: [/ip4/`+homeIP+`/tcp/4002]
reachability: private
bootstrap: [`+relayAddr+`]
relays: [`+relayAddr+`]
`)
	await(t, "second reservation refused", 30*time.Second, func() (struct{}, error) {
		if !strings.Contains(second.logText(), "RESERVATION_REFUSED") {
			return struct{}{}, fmt.Errorf("no RESERVATION_REFUSED in the second node's log")
		}
		return struct{}{}, nil
	})
	var st2 api.StatusInfo
	if err := n.cliJSON(second, &st2, "status", "--json"); err != nil {
		t.Fatal(err)
	}
	if c := circuitAddrs(st2.Addrs); len(c) != 0 {
		t.Fatalf("second node advertises circuits beyond the relay's max_reservations=1: %v", c)
	}

	// The renter discovers the provider through the DHT, circuit included.
	await(t, "renter discovers the provider", 60*time.Second, func() ([]auction.Capability, error) {
		var caps []auction.Capability
		if err := n.cliJSON(renter, &caps, "providers", "--json", "--gpu", "RTX4090"); err != nil {
			return nil, err
		}
		for _, c := range caps {
			if c.Peer == provider.id {
				if len(circuitAddrs(c.Addrs)) == 0 {
					return caps, fmt.Errorf("provider listed without a circuit address: %v", c.Addrs)
				}
				return caps, nil
			}
		}
		return caps, fmt.Errorf("provider not listed (%d others)", len(caps))
	})

	// It wins a job, runs it, and the renter streams its log.
	var v api.JobView
	if err := n.cliJSON(renter, &v, "job", "post", "--gpu", "RTX4090", "--max-price", "5", "--duration", "5m",
		"--wait", "--json", "--", "echo", "natted"); err != nil {
		t.Fatal(err)
	}
	if v.Lease == nil || v.Lease.Provider != provider.id {
		t.Fatalf("job %s leased to %v, want the provider behind NAT %s", v.Job.ID, v.Lease, provider.id)
	}
	if v.Run != auction.RunSucceeded || v.ExitCode == nil || *v.ExitCode != 0 {
		t.Fatalf("job %s: run %q exit %v detail %q, want succeeded", v.Job.ID, v.Run, v.ExitCode, v.Detail)
	}
	logs := await(t, "job logs", 30*time.Second, func() (string, error) {
		out, err := n.cli(renter, "job", "logs", v.Job.ID)
		if err == nil && !strings.Contains(out, "natted") {
			err = fmt.Errorf("log %q lacks the job's output", tail(out, 300))
		}
		return out, err
	})
	t.Logf("job %s log: %q", v.Job.ID, strings.TrimSpace(logs))

	// The lease settles: the renter's job carries the two-party receipt and
	// both ledgers hold it.
	await(t, "receipt in the job's status", 30*time.Second, func() (api.JobView, error) {
		var jv api.JobView
		if err := n.cliJSON(renter, &jv, "job", "status", "--json", v.Job.ID); err != nil {
			return jv, err
		}
		if jv.Receipt == nil {
			return jv, fmt.Errorf("no receipt yet (run %s)", jv.Run)
		}
		return jv, nil
	})
	for _, d := range []*daemon{renter, provider} {
		await(t, d.name+"'s ledger receipt", 30*time.Second, func() ([]ledger.Entry, error) {
			var es []ledger.Entry
			if err := n.cliJSON(d, &es, "ledger", "list", "--kind", "receipt", "--lease", v.Lease.ID, "--json"); err != nil {
				return nil, err
			}
			if len(es) != 1 {
				return es, fmt.Errorf("%d receipts for lease %s, want 1", len(es), v.Lease.ID)
			}
			return es, nil
		})
	}

	// How the renter reaches the provider now: through the relay, or a
	// direct connection (the provider dialled out, or a hole punch).
	var peers []api.PeerInfo
	if err := n.cliJSON(renter, &peers, "peers", "--json"); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.ID == provider.id {
			kind := "direct"
			if len(circuitAddrs(p.Addrs)) == len(p.Addrs) {
				kind = "relayed"
			}
			t.Logf("renter's connection to the provider: %s %v", kind, p.Addrs)
		}
	}
	t.Logf("NAT test took %s", time.Since(began).Round(time.Millisecond))
}
