// Package nat tests gpumesh across a NAT: real daemons in network namespaces,
// a provider in a "home" namespace behind a masquerading "router" namespace
// (it can dial out, nothing can dial in), a relay+bootstrap node and a renter
// on the "public" side. It needs root and `ip netns`; otherwise it skips.
//
// All addresses are in 10.231.0.0/16 on veths created inside the test's own
// namespaces: the host's interfaces, routes and firewall are never touched.
package nat

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/cmd/gpumesh/gpumeshtest"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet/internal/nstest"
)

const (
	relayIP  = "10.231.1.1"
	homeIP   = "10.231.2.1"
	renterIP = "10.231.3.1"
	officeIP = "10.231.4.1"
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
	probe := "gmprobe" + nstest.RandHex(t, 3)
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("network namespaces unavailable: %v: %s", err, strings.TrimSpace(string(out)))
	}
	defer func() { _ = exec.Command("ip", "netns", "del", probe).Run() }()
	if out, err := exec.Command("ip", "netns", "exec", probe, "iptables", "-t", "nat", "-S").CombinedOutput(); err != nil {
		t.Skipf("iptables unusable inside a namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
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
	p := "gm" + nstest.RandHex(t, 3)
	tp := topology{router: p + "-rtr", relay: p + "-rly", renter: p + "-rnt", home: p + "-home", office: p + "-ofc"}
	for _, ns := range []string{tp.router, tp.relay, tp.renter, tp.home, tp.office} {
		nstest.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			// Deleting a namespace deletes its veths and iptables rules.
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		nstest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	link := func(leaf, tag, subnet string) string {
		rside, lside := p+"-r"+tag, p+"-l"+tag
		nstest.Run(t, "ip", "link", "add", rside, "netns", tp.router, "type", "veth", "peer", "name", lside, "netns", leaf)
		nstest.Run(t, "ip", "-n", tp.router, "addr", "add", subnet+".254/24", "dev", rside)
		nstest.Run(t, "ip", "-n", tp.router, "link", "set", rside, "up")
		nstest.Run(t, "ip", "-n", leaf, "addr", "add", subnet+".1/24", "dev", lside)
		nstest.Run(t, "ip", "-n", leaf, "link", "set", lside, "up")
		nstest.Run(t, "ip", "-n", leaf, "route", "add", "default", "via", subnet+".254")
		return rside
	}
	link(tp.relay, "1", "10.231.1")
	homeSide := link(tp.home, "2", "10.231.2")
	link(tp.renter, "3", "10.231.3")
	officeSide := link(tp.office, "4", "10.231.4")
	in := func(args ...string) { nstest.Run(t, "ip", append([]string{"netns", "exec", tp.router}, args...)...) }
	in("sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, nat := range []struct{ side, subnet string }{{homeSide, "10.231.2.0/24"}, {officeSide, "10.231.4.0/24"}} {
		in("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", nat.subnet, "!", "-o", nat.side, "-j", "MASQUERADE")
		in("iptables", "-A", "FORWARD", "-o", nat.side, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
		in("iptables", "-A", "FORWARD", "-o", nat.side, "-j", "DROP")
	}
	return tp
}

// daemon is one gpumesh daemon running in a namespace.
type daemon = nstest.Daemon

// net is the test's daemons.
type net struct{ *nstest.Net }

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
	bin, err := gpumeshtest.Binary(tmp)
	if err != nil {
		t.Fatal(err)
	}
	tp := buildTopology(t)
	n := &net{&nstest.Net{T: t, Bin: bin, Tmp: tmp}}

	// Nothing outside home can open a connection into it: not the public
	// side, not the office behind the same router.
	for _, from := range []string{tp.renter, tp.office} {
		probe := exec.Command("ip", "netns", "exec", from, "timeout", "3",
			"bash", "-c", "exec 3<>/dev/tcp/"+homeIP+"/22")
		if err := probe.Run(); err == nil {
			t.Fatalf("a TCP connection from %s into home succeeded: no NAT", from)
		}
	}

	relay := n.Start("relay", tp.relay, `listen: [/ip4/`+relayIP+`/tcp/4001]
reachability: public
relay_service: true
relay_limits: {max_reservations: 2, max_circuits: 4, limit_duration: 2m, limit_data: 1048576}
`)
	relayAddr := "/ip4/" + relayIP + "/tcp/4001/p2p/" + relay.ID
	renter := n.Start("renter", tp.renter, `listen: [/ip4/`+renterIP+`/tcp/4001]
reachability: public
bootstrap: [`+relayAddr+`]
`)
	provider := n.Start("provider", tp.home, `listen: [/ip4/`+homeIP+`/tcp/4001]
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
	office := n.Start("office", tp.office, `listen: [/ip4/`+officeIP+`/tcp/4001]
reachability: private
bootstrap: [`+relayAddr+`]
relays: [`+relayAddr+`]
`)
	for _, d := range []*daemon{provider, office} {
		n.awaitCircuit(d, relayAddr+"/p2p-circuit/p2p/"+d.ID)
		if !strings.Contains(d.LogText(), "reachability=private") {
			t.Fatalf("%s did not log its reachability", d.Name)
		}
	}
	for _, d := range []*daemon{relay, renter} {
		var st api.StatusInfo
		if err := n.CLIJSON(d, &st, "status", "--json"); err != nil || st.Reachability != "public" {
			t.Fatalf("%s reachability %q (%v), want public", d.Name, st.Reachability, err)
		}
	}

	// The relay's limit holds: a third node behind NAT is refused a
	// reservation, the relay granting two.
	third := n.Start("third", tp.home, `listen: [/ip4/`+homeIP+`/tcp/4002]
reachability: private
bootstrap: [`+relayAddr+`]
relays: [`+relayAddr+`]
`)
	nstest.Await(t, "third reservation refused", 30*time.Second, func() (struct{}, error) {
		if !strings.Contains(third.LogText(), "RESERVATION_REFUSED") {
			return struct{}{}, fmt.Errorf("no RESERVATION_REFUSED in the third node's log")
		}
		return struct{}{}, nil
	})
	var st3 api.StatusInfo
	if err := n.CLIJSON(third, &st3, "status", "--json"); err != nil {
		t.Fatal(err)
	}
	if c := circuitAddrs(st3.Addrs); len(c) != 0 {
		t.Fatalf("third node advertises circuits beyond the relay's max_reservations=2: %v", c)
	}

	// GossipSub does not run over relayed connections, so a job call from
	// behind NAT reaches a provider behind NAT through a public member of
	// the topic: here a public provider too expensive to bid.
	forwarder := n.Start("forwarder", tp.renter, `listen: [/ip4/`+renterIP+`/tcp/4002]
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
	nstest.Await(t, "provider meshed with the forwarder", 60*time.Second, func() (struct{}, error) {
		var peers []api.PeerInfo
		if err := n.CLIJSON(forwarder, &peers, "peers", "--json"); err != nil {
			return struct{}{}, err
		}
		for _, p := range peers {
			if p.ID == provider.ID && len(circuitAddrs(p.Addrs)) < len(p.Addrs) {
				return struct{}{}, nil
			}
		}
		return struct{}{}, fmt.Errorf("forwarder has no direct connection to the provider")
	})

	// The renter discovers the provider through the DHT, circuit included.
	nstest.Await(t, "renter discovers the provider", 60*time.Second, func() ([]terms.Capability, error) {
		var caps []terms.Capability
		if err := n.CLIJSON(renter, &caps, "providers", "--json", "--gpu", "RTX4090"); err != nil {
			return nil, err
		}
		for _, c := range caps {
			if c.Peer == provider.ID {
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
	t := n.T
	t.Helper()
	st := nstest.Await(t, d.Name+"'s circuit address", 30*time.Second, func() (api.StatusInfo, error) {
		var st api.StatusInfo
		if err := n.CLIJSON(d, &st, "status", "--json"); err != nil {
			return st, err
		}
		if c := circuitAddrs(st.Addrs); len(c) != 1 || c[0] != want {
			return st, fmt.Errorf("circuit addrs %v, want [%s]", c, want)
		}
		return st, nil
	})
	if st.Reachability != "private" {
		t.Fatalf("%s reachability %q, want private", d.Name, st.Reachability)
	}
}

// lease has renter post `echo word` and requires provider to win and run
// it, the renter to stream its log, and the lease to settle with the
// receipt in the renter's job and in both ledgers. It returns how renter
// is connected to provider afterwards: "relayed" or "direct".
func (n *net) lease(renter, provider *daemon, word string) string {
	t := n.T
	t.Helper()
	var v api.JobView
	if err := n.CLIJSON(renter, &v, "job", "post", "--gpu", "RTX4090", "--max-price", "5", "--duration", "5m",
		"--wait", "--json", "--", "echo", word); err != nil {
		t.Fatal(err)
	}
	if v.Lease == nil || v.Lease.Provider != provider.ID {
		t.Fatalf("%s's job %s leased to %v, want the provider behind NAT %s", renter.Name, v.Job.ID, v.Lease, provider.ID)
	}
	if v.Run != terms.RunSucceeded || v.ExitCode == nil || *v.ExitCode != 0 {
		t.Fatalf("%s's job %s: run %q exit %v detail %q, want succeeded", renter.Name, v.Job.ID, v.Run, v.ExitCode, v.Detail)
	}
	logs := nstest.Await(t, renter.Name+"'s job logs", 30*time.Second, func() (string, error) {
		out, err := n.CLI(renter, "job", "logs", v.Job.ID)
		if err == nil && !strings.Contains(out, word) {
			err = fmt.Errorf("log %q lacks the job's output %q", nstest.Tail(out, 300), word)
		}
		return out, err
	})
	t.Logf("%s's job %s log: %q", renter.Name, v.Job.ID, strings.TrimSpace(logs))
	nstest.Await(t, renter.Name+"'s receipt in the job's status", 30*time.Second, func() (api.JobView, error) {
		var jv api.JobView
		if err := n.CLIJSON(renter, &jv, "job", "status", "--json", v.Job.ID); err != nil {
			return jv, err
		}
		if jv.Receipt == nil {
			return jv, fmt.Errorf("no receipt yet (run %s)", jv.Run)
		}
		return jv, nil
	})
	for _, d := range []*daemon{renter, provider} {
		nstest.Await(t, d.Name+"'s ledger receipt", 30*time.Second, func() ([]record.Entry, error) {
			var es []record.Entry
			if err := n.CLIJSON(d, &es, "ledger", "list", "--kind", "receipt", "--lease", v.Lease.ID, "--json"); err != nil {
				return nil, err
			}
			if len(es) != 1 {
				return es, fmt.Errorf("%d receipts for lease %s, want 1", len(es), v.Lease.ID)
			}
			return es, nil
		})
	}
	var peers []api.PeerInfo
	if err := n.CLIJSON(renter, &peers, "peers", "--json"); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.ID == provider.ID {
			t.Logf("%s's connections to the provider: %v", renter.Name, p.Addrs)
			if len(p.Addrs) > 0 && len(circuitAddrs(p.Addrs)) == len(p.Addrs) {
				return "relayed"
			}
			return "direct"
		}
	}
	t.Fatalf("%s is not connected to the provider after the lease", renter.Name)
	return ""
}
