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
	officeIP = "10.231.4.1"
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
type topology struct{ router, relay, renter, home, office string }

// buildTopology creates five namespaces: router forwards between relay
// (10.231.1.0/24) and renter (10.231.3.0/24) on the public side and two
// networks behind NAT, home (10.231.2.0/24) and office (10.231.4.0/24),
// whose traffic it masquerades; connections into home or office are dropped
// unless they belong to a flow started from inside. Everything is removed in
// t.Cleanup.
func buildTopology(t *testing.T) topology {
	t.Helper()
	p := "gm" + randHex(t, 3)
	tp := topology{router: p + "-rtr", relay: p + "-rly", renter: p + "-rnt", home: p + "-home", office: p + "-ofc"}
	for _, ns := range []string{tp.router, tp.relay, tp.renter, tp.home, tp.office} {
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
	officeSide := link(tp.office, "4", "10.231.4")
	in := func(args ...string) { run(t, "ip", append([]string{"netns", "exec", tp.router}, args...)...) }
	in("sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, nat := range []struct{ side, subnet string }{{homeSide, "10.231.2.0/24"}, {officeSide, "10.231.4.0/24"}} {
		in("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", nat.subnet, "!", "-o", nat.side, "-j", "MASQUERADE")
		in("iptables", "-A", "FORWARD", "-o", nat.side, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
		in("iptables", "-A", "FORWARD", "-o", nat.side, "-j", "DROP")
	}
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

	// Nothing outside home can open a connection into it: not the public
	// side, not the office behind the same router.
	for _, from := range []string{tp.renter, tp.office} {
		probe := exec.Command("ip", "netns", "exec", from, "timeout", "3",
			"bash", "-c", "exec 3<>/dev/tcp/"+homeIP+"/22")
		if err := probe.Run(); err == nil {
			t.Fatalf("a TCP connection from %s into home succeeded: no NAT", from)
		}
	}

	relay := n.start("relay", tp.relay, `listen: [/ip4/`+relayIP+`/tcp/4001]
reachability: public
relay_service: true
relay_limits: {max_reservations: 2, max_circuits: 4, limit_duration: 2m, limit_data: 1048576}
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

	// Both nodes behind NAT know they are private and hold a circuit
	// through the relay.
	office := n.start("office", tp.office, `listen: [/ip4/`+officeIP+`/tcp/4001]
reachability: private
bootstrap: [`+relayAddr+`]
relays: [`+relayAddr+`]
`)
	for _, d := range []*daemon{provider, office} {
		n.awaitCircuit(d, relayAddr+"/p2p-circuit/p2p/"+d.id)
		if !strings.Contains(d.logText(), "reachability=private") {
			t.Fatalf("%s did not log its reachability", d.name)
		}
	}
	for _, d := range []*daemon{relay, renter} {
		var st api.StatusInfo
		if err := n.cliJSON(d, &st, "status", "--json"); err != nil || st.Reachability != "public" {
			t.Fatalf("%s reachability %q (%v), want public", d.name, st.Reachability, err)
		}
	}

	// The relay's limit holds: a third node behind NAT is refused a
	// reservation, the relay granting two.
	third := n.start("third", tp.home, `listen: [/ip4/`+homeIP+`/tcp/4002]
reachability: private
bootstrap: [`+relayAddr+`]
relays: [`+relayAddr+`]
`)
	await(t, "third reservation refused", 30*time.Second, func() (struct{}, error) {
		if !strings.Contains(third.logText(), "RESERVATION_REFUSED") {
			return struct{}{}, fmt.Errorf("no RESERVATION_REFUSED in the third node's log")
		}
		return struct{}{}, nil
	})
	var st3 api.StatusInfo
	if err := n.cliJSON(third, &st3, "status", "--json"); err != nil {
		t.Fatal(err)
	}
	if c := circuitAddrs(st3.Addrs); len(c) != 0 {
		t.Fatalf("third node advertises circuits beyond the relay's max_reservations=2: %v", c)
	}

	// GossipSub does not run over relayed connections, so a job call from
	// behind NAT reaches a provider behind NAT through a public member of
	// the topic: here a public provider too expensive to bid.
	forwarder := n.start("forwarder", tp.renter, `listen: [/ip4/`+renterIP+`/tcp/4002]
reachability: public
bootstrap: [`+relayAddr+`]
provider:
  enabled: true
  advertise_ttl: 15s
  executor: process
  gpu_source: declared
  gpus: [{model: RTX4090, vram_gb: 24}]
  policy: {price_floor: 50}
`)

	// The provider behind NAT dials out to the forwarder and meshes with it.
	await(t, "provider meshed with the forwarder", 60*time.Second, func() (struct{}, error) {
		var peers []api.PeerInfo
		if err := n.cliJSON(forwarder, &peers, "peers", "--json"); err != nil {
			return struct{}{}, err
		}
		for _, p := range peers {
			if p.ID == provider.id && len(circuitAddrs(p.Addrs)) < len(p.Addrs) {
				return struct{}{}, nil
			}
		}
		return struct{}{}, fmt.Errorf("forwarder has no direct connection to the provider")
	})

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

	// A public renter: the provider dials out to it (bids), so their
	// connection is direct.
	kind := n.lease(renter, provider, "natted")
	t.Logf("public renter <-> provider behind NAT: %s", kind)

	// A renter behind a second NAT: neither side can dial the other, and
	// DCUtR only punches holes between public addresses (all of them are
	// private-range here), so the whole lease - bids, award, heartbeats,
	// log stream, receipt - runs over the relay's limited connection.
	if kind := n.lease(office, provider, "relayed"); kind != "relayed" {
		t.Fatalf("office renter <-> provider: %s connection, want relayed (both are behind NAT)", kind)
	}
	t.Logf("NAT test took %s", time.Since(began).Round(time.Millisecond))
}

// awaitCircuit waits until d's status lists exactly the circuit want, and
// requires its reachability to be private.
func (n *net) awaitCircuit(d *daemon, want string) {
	t := n.t
	t.Helper()
	st := await(t, d.name+"'s circuit address", 30*time.Second, func() (api.StatusInfo, error) {
		var st api.StatusInfo
		if err := n.cliJSON(d, &st, "status", "--json"); err != nil {
			return st, err
		}
		if c := circuitAddrs(st.Addrs); len(c) != 1 || c[0] != want {
			return st, fmt.Errorf("circuit addrs %v, want [%s]", c, want)
		}
		return st, nil
	})
	if st.Reachability != "private" {
		t.Fatalf("%s reachability %q, want private", d.name, st.Reachability)
	}
}

// lease has renter post `echo word` and requires provider to win and run
// it, the renter to stream its log, and the lease to settle with the
// receipt in the renter's job and in both ledgers. It returns how renter
// is connected to provider afterwards: "relayed" or "direct".
func (n *net) lease(renter, provider *daemon, word string) string {
	t := n.t
	t.Helper()
	var v api.JobView
	if err := n.cliJSON(renter, &v, "job", "post", "--gpu", "RTX4090", "--max-price", "5", "--duration", "5m",
		"--wait", "--json", "--", "echo", word); err != nil {
		t.Fatal(err)
	}
	if v.Lease == nil || v.Lease.Provider != provider.id {
		t.Fatalf("%s's job %s leased to %v, want the provider behind NAT %s", renter.name, v.Job.ID, v.Lease, provider.id)
	}
	if v.Run != auction.RunSucceeded || v.ExitCode == nil || *v.ExitCode != 0 {
		t.Fatalf("%s's job %s: run %q exit %v detail %q, want succeeded", renter.name, v.Job.ID, v.Run, v.ExitCode, v.Detail)
	}
	logs := await(t, renter.name+"'s job logs", 30*time.Second, func() (string, error) {
		out, err := n.cli(renter, "job", "logs", v.Job.ID)
		if err == nil && !strings.Contains(out, word) {
			err = fmt.Errorf("log %q lacks the job's output %q", tail(out, 300), word)
		}
		return out, err
	})
	t.Logf("%s's job %s log: %q", renter.name, v.Job.ID, strings.TrimSpace(logs))
	await(t, renter.name+"'s receipt in the job's status", 30*time.Second, func() (api.JobView, error) {
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
	var peers []api.PeerInfo
	if err := n.cliJSON(renter, &peers, "peers", "--json"); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.ID == provider.id {
			t.Logf("%s's connections to the provider: %v", renter.name, p.Addrs)
			if len(p.Addrs) > 0 && len(circuitAddrs(p.Addrs)) == len(p.Addrs) {
				return "relayed"
			}
			return "direct"
		}
	}
	t.Fatalf("%s is not connected to the provider after the lease", renter.name)
	return ""
}
