// Package latency tests latency as an SLA term (job post --max-rtt) over
// real network paths: gpumesh daemons in network namespaces, a renter and
// two providers behind a router, one 5 ms of round trip away, the other,
// cheaper, 80 ms away. The renter measures both with libp2p ping; the
// far one loses a --max-rtt 50ms job, with the reason in `bids`, and wins
// a job without latency terms.
//
// The delays are links of the test's own making: each provider's link to
// the router is a pair of TUN devices (one in the provider's namespace,
// one in the router's) whose packets this test carries across, each after
// the link's one-way delay. That is netem's delay, in user space: the
// kernels these tests run on do not all have sch_netem (this one was
// built without CONFIG_NET_SCH_NETEM), and every packet still crosses
// both kernels' IP stacks and the router's forwarding. It needs root,
// `ip netns` and /dev/net/tun; otherwise it skips.
//
// All addresses are in 10.232.0.0/16 on interfaces inside the test's own
// namespaces: the host's interfaces, routes and firewall are never
// touched.
package latency

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/cmd/gpumesh/gpumeshtest"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/testnet/internal/nstest"
	"golang.org/x/sys/unix"
)

const (
	renterIP = "10.232.1.1"
	nearIP   = "10.232.2.1"
	farIP    = "10.232.3.1"
	// The links' one-way delays: round trips of 5 ms and 80 ms.
	nearOneWay = 2500 * time.Microsecond
	farOneWay  = 40 * time.Millisecond
)

// requireNetns skips unless the test can create namespaces and TUN
// devices.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and TUN devices")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("ip not found: %v", err)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN device: %v", err)
	}
	probe := "glprobe" + nstest.RandHex(t, 3)
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("network namespaces unavailable: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
}

// openTun creates TUN device name (raw IP packets, no header) in network
// namespace ns and returns it open (the device lives in the namespace of
// the thread that creates it).
func openTun(t *testing.T, ns, name string) *os.File {
	t.Helper()
	var f *os.File
	err := nstest.InNetns(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("tun %s in %s: %w", name, ns, err)
		}
		var ifr *unix.Ifreq
		if ifr, err = unix.NewIfreq(name); err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err == nil {
			err = unix.SetNonblock(fd, true)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("tun %s in %s: %w", name, ns, err)
		}
		// Non-blocking: reads and writes go through Go's poller.
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// carry copies packets from src to dst, each oneWay after it was read,
// in order, until src is closed.
func carry(src, dst *os.File, oneWay time.Duration) {
	type packet struct {
		b   []byte
		due time.Time
	}
	q := make(chan packet, 8192)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 65536)
			n, err := src.Read(b)
			if err != nil {
				return
			}
			q <- packet{b[:n], time.Now().Add(oneWay)}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for p := range q {
		if wait := time.Until(p.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		// A write that fails (the router's device gone at cleanup) drops
		// the packet, as a link would.
		_, _ = dst.Write(p.b)
	}
}

// topology is the test's namespaces.
type topology struct{ router, renter, near, far string }

// buildTopology creates four namespaces: router forwards between renter
// (10.232.1.0/24, a veth), near (10.232.2.0/24) and far (10.232.3.0/24),
// each provider's link a TUN pair carried with its delay. Everything is
// removed in t.Cleanup.
func buildTopology(t *testing.T) topology {
	t.Helper()
	p := "gl" + nstest.RandHex(t, 3)
	tp := topology{router: p + "-rtr", renter: p + "-rnt", near: p + "-near", far: p + "-far"}
	for _, ns := range []string{tp.router, tp.renter, tp.near, tp.far} {
		nstest.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			// Deleting a namespace deletes its devices.
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		nstest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	nstest.Run(t, "ip", "link", "add", p+"-r1", "netns", tp.router, "type", "veth", "peer", "name", p+"-l1", "netns", tp.renter)
	nstest.Run(t, "ip", "-n", tp.router, "addr", "add", "10.232.1.254/24", "dev", p+"-r1")
	nstest.Run(t, "ip", "-n", tp.router, "link", "set", p+"-r1", "up")
	nstest.Run(t, "ip", "-n", tp.renter, "addr", "add", renterIP+"/24", "dev", p+"-l1")
	nstest.Run(t, "ip", "-n", tp.renter, "link", "set", p+"-l1", "up")
	nstest.Run(t, "ip", "-n", tp.renter, "route", "add", "default", "via", "10.232.1.254")
	delayed := func(leaf, tag, subnet string, oneWay time.Duration) {
		rside, lside := p+"-r"+tag, p+"-l"+tag
		r, l := openTun(t, tp.router, rside), openTun(t, leaf, lside)
		go carry(l, r, oneWay)
		go carry(r, l, oneWay)
		nstest.Run(t, "ip", "-n", tp.router, "addr", "add", subnet+".254/24", "dev", rside)
		nstest.Run(t, "ip", "-n", tp.router, "link", "set", rside, "up")
		nstest.Run(t, "ip", "-n", leaf, "addr", "add", subnet+".1/24", "dev", lside)
		nstest.Run(t, "ip", "-n", leaf, "link", "set", lside, "up")
		nstest.Run(t, "ip", "-n", leaf, "route", "add", "default", "dev", lside)
	}
	delayed(tp.near, "2", "10.232.2", nearOneWay)
	delayed(tp.far, "3", "10.232.3", farOneWay)
	nstest.Run(t, "ip", "netns", "exec", tp.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return tp
}

// daemon is one gpumesh daemon running in a namespace.
type daemon = nstest.Daemon

// testNet is the test's daemons.
type testNet struct{ *nstest.Net }

func providerConfig(ip, boot, region string, floor float64) string {
	return `listen: [/ip4/` + ip + `/tcp/4001]
reachability: public
region: ` + region + `
bootstrap: [` + boot + `]
provider:
  enabled: true
  advertise_ttl: 15s
  heartbeat_interval: 1s
  executor: process
  gpu_source: declared
  gpus: [{model: RTX4090, vram_gb: 24}, {model: RTX4090, vram_gb: 24}]
  policy: {price_floor: ` + fmt.Sprint(floor) + `}
`
}

// buildGpumesh returns the gpumesh binary (gpumeshtest.Binary) and a
// temporary directory for the test's daemons.
func buildGpumesh(t *testing.T) (bin, tmp string) {
	t.Helper()
	tmp = t.TempDir()
	bin, err := gpumeshtest.Binary(tmp)
	if err != nil {
		t.Fatal(err)
	}
	return bin, tmp
}

// startRenter starts the renter in its namespace (with extra lines of
// config) and returns it and the bootstrap address providers join by.
func (n *testNet) startRenter(tp topology, extra ...string) (*daemon, string) {
	renter := n.Start("renter", tp.renter, `listen: [/ip4/`+renterIP+`/tcp/4001]
reachability: public
region: eu-west
`+strings.Join(extra, ""))
	return renter, "/ip4/" + renterIP + "/tcp/4001/p2p/" + renter.ID
}

// awaitProviders waits until the renter lists every provider named.
func (n *testNet) awaitProviders(renter *daemon, name map[string]string) {
	n.T.Helper()
	nstest.Await(n.T, "renter discovers the providers", 60*time.Second, func() (int, error) {
		var caps []terms.Capability
		if err := n.CLIJSON(renter, &caps, "providers", "--json", "--gpu", "RTX4090"); err != nil {
			return 0, err
		}
		seen := 0
		for _, c := range caps {
			if name[c.Peer] != "" {
				seen++
			}
		}
		if seen != len(name) {
			return seen, fmt.Errorf("%d of the %d providers listed", seen, len(name))
		}
		return seen, nil
	})
}

// TestMaxRTTOverDelayedLinks: the provider 80 ms away is the cheaper, and
// wins a job without latency terms; a --max-rtt 50ms job goes to the one
// 5 ms away, and `bids` shows the far one's measured round trip and why
// it was rejected.
func TestMaxRTTOverDelayedLinks(t *testing.T) {
	requireNetns(t)
	began := time.Now()
	bin, tmp := buildGpumesh(t)
	tp := buildTopology(t)
	n := &testNet{&nstest.Net{T: t, Bin: bin, Tmp: tmp}}

	// The test reads the far provider's bid for every job: no quiet
	// spell may close a window before it comes, a round trip after the
	// near one's (the renter's own background measurement of far, which
	// makes its windows wait, may not have run yet).
	renter, boot := n.startRenter(tp, "bid_quiet_close: -1s\n")
	near := n.Start("near", tp.near, providerConfig(nearIP, boot, "eu-west", 1.0))
	far := n.Start("far", tp.far, providerConfig(farIP, boot, "eu-west", 0.6))
	name := map[string]string{near.ID: "near", far.ID: "far"}
	n.awaitProviders(renter, name)

	post := func(extra ...string) api.JobView {
		t.Helper()
		var v api.JobView
		args := append([]string{"job", "post", "--gpu", "RTX4090", "--max-price", "5", "--duration", "5m", "--json"}, extra...)
		if err := n.CLIJSON(renter, &v, append(args, "--", "echo", "hi")...); err != nil {
			t.Fatal(err)
		}
		return v
	}
	bidsOf := func(id string) map[string]terms.Ranked {
		t.Helper()
		var bv api.BidsView
		if err := n.CLIJSON(renter, &bv, "bids", id, "--json"); err != nil {
			t.Fatal(err)
		}
		out := map[string]terms.Ranked{}
		for _, b := range bv.Bids {
			out[name[b.Bid.Provider]] = b
		}
		return out
	}

	// Without latency terms the cheaper far provider wins, once the
	// renter's calls reach it (its gossip mesh forms over the 80 ms link).
	nstest.Await(t, "a plain job leased to the far provider", 60*time.Second, func() (string, error) {
		v := post()
		if v.Lease == nil || v.Lease.Provider != far.ID {
			return "", fmt.Errorf("job %s %s, leased to %s", v.Job.ID, v.State, name[v.Winner])
		}
		return v.Job.ID, nil
	})

	v := post("--max-rtt", "50ms")
	if v.Lease == nil || v.Lease.Provider != near.ID {
		t.Fatalf("--max-rtt 50ms job %s: %s, leased to %q, want the near provider; reasons %v", v.Job.ID, v.State, name[v.Winner], v.Reasons)
	}
	bs := bidsOf(v.Job.ID)
	f, ok := bs["far"]
	if !ok {
		t.Fatalf("the far provider did not bid for job %s: %v", v.Job.ID, bs)
	}
	if f.RTT < 2*farOneWay || !strings.HasPrefix(f.Rejected, "rtt ") || !strings.HasSuffix(f.Rejected, " > max 50ms") {
		t.Fatalf("far bid: rtt %v rejected %q, want at least %v and rejected for it", f.RTT, f.Rejected, 2*farOneWay)
	}
	if nb := bs["near"]; nb.RTT < 2*nearOneWay || nb.RTT >= 50*time.Millisecond || nb.Rejected != "" {
		t.Fatalf("near bid: rtt %v rejected %q, want measured at 5 to 50 ms", nb.RTT, nb.Rejected)
	}
	table, err := n.CLI(renter, "bids", v.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, " RTT ") || !strings.Contains(table, f.Rejected) {
		t.Fatalf("`bids` does not show the RTTs and the far bid's rejection:\n%s", table)
	}
	t.Logf("bids %s:\n%s", v.Job.ID, table)
	t.Logf("latency test took %s", time.Since(began).Round(time.Millisecond))
}
