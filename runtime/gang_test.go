package runtime

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func gangAddrs(k int) []netip.Addr {
	out := make([]netip.Addr, k)
	for r := range out {
		out[r] = netip.AddrFrom4([4]byte{127, 77, 0, byte(r + 1)})
	}
	return out
}

// TestGangSpecRefused: a gang network that cannot be set up as asked is
// refused before anything starts, with a one-line error.
func TestGangSpecRefused(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	accept := func(c net.Conn, _ netip.AddrPort) { c.Close() }
	for _, c := range []struct {
		name string
		g    GangNet
		why  string
	}{
		{"one member", GangNet{Addrs: gangAddrs(1), MasterPort: 1, Accept: accept}, "1 members"},
		{"rank past the members", GangNet{Rank: 2, Addrs: gangAddrs(2), MasterPort: 1, Accept: accept}, "rank 2 of 2"},
		{"a routable address", GangNet{Addrs: []netip.Addr{gangAddrs(1)[0], netip.MustParseAddr("10.0.0.1")}, MasterPort: 1, Accept: accept}, "10.0.0.1 is not a loopback"},
		{"the job's own loopback", GangNet{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), gangAddrs(2)[1]}, MasterPort: 1, Accept: accept}, "127.0.0.1 is not"},
		{"an address twice", GangNet{Addrs: []netip.Addr{gangAddrs(1)[0], gangAddrs(1)[0]}, MasterPort: 1, Accept: accept}, "given to two members"},
		{"no master port", GangNet{Addrs: gangAddrs(2), Accept: accept}, "master port 0"},
		{"nothing accepting", GangNet{Addrs: gangAddrs(2), MasterPort: 1}, "nothing accepts"},
	} {
		g := c.g
		_, err := e.Start(context.Background(), Spec{ID: "gang-bad", Command: []string{helperBin, "exit", "0"}, Gang: &g}, nil, nil)
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.why) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line saying %q", c.name, err, c.why)
		}
	}
}

// TestGangNeedsOwnNetwork: a provider whose jobs share its network cannot
// run a gang member, and says why.
func TestGangNeedsOwnNetwork(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{AllowNetwork: true})
	g := GangNet{Addrs: gangAddrs(2), MasterPort: 29500, Accept: func(c net.Conn, _ netip.AddrPort) { c.Close() }}
	_, err := e.Start(context.Background(), Spec{ID: "gang-shared", Command: []string{helperBin, "exit", "0"}, Gang: &g}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "needs a network namespace of its own") {
		t.Fatalf("gang job on a shared network: %v", err)
	}
}

// TestGangJobReachesOnlyItsMembers: in a gang job's network, connections
// to the other members' addresses, on any port, are captured and handed
// over with the address and port dialed, coming from the member's own
// address; its own address, an address of no member and the host stay
// unreachable while its own 127.0.0.1 works, and a connection is
// delivered into the job only from another member's address.
func TestGangJobReachesOnlyItsMembers(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	caught := make(chan string, 8)
	g := GangNet{Rank: 1, Addrs: gangAddrs(3), MasterPort: 29500, Accept: func(c net.Conn, dst netip.AddrPort) {
		// From the member's own address: lo's first.
		caught <- c.RemoteAddr().(*net.TCPAddr).IP.String() + "->" + dst.String()
		c.Close()
	}}
	script := helperBin + " dial 127.77.0.1:4000; " + helperBin + " dial 127.77.0.3:65000; " +
		helperBin + " dial 127.77.0.2:4000; " + helperBin + " dial 127.77.0.9:4000; " + helperBin + " dial " + host.Addr().String() +
		"; " + helperBin + " dial self; echo done; exec " + helperBin + " sleep 60s"
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "gang-net", Command: []string{"/bin/sh", "-c", script}, Gang: &g}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(0); _ = h.Cleanup() })
	if _, err := h.(GangDialer).DialGang(context.Background(), netip.MustParseAddr("127.77.0.2"), 4000); err == nil || !strings.Contains(err.Error(), "no other member's address") {
		t.Errorf("a connection from the member's own address: %v", err)
	}
	out.waitFor(t, "done", 30*time.Second)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 7 || lines[0] != "connected" || lines[1] != "connected" || lines[5] != "connected" {
		t.Fatalf("the job's dials: %q", out.String())
	}
	for i, l := range lines[2:5] {
		if !strings.Contains(l, "connection refused") {
			t.Errorf("dial %d reached something: %q", i+3, l)
		}
	}
	var got []string
	for len(got) < 2 {
		select {
		case dst := <-caught:
			got = append(got, dst)
		case <-time.After(10 * time.Second):
			t.Fatalf("captured only %q", got)
		}
	}
	a, b := "127.77.0.2->127.77.0.1:4000", "127.77.0.2->127.77.0.3:65000"
	if strings.Join(got, " ") != a+" "+b && strings.Join(got, " ") != b+" "+a {
		t.Errorf("captured %q, want the two members' addresses and ports", got)
	}
	_ = h.Stop(0)
	waitTimeout(t, h, 30*time.Second)
	if _, err := h.(GangDialer).DialGang(context.Background(), netip.MustParseAddr("127.77.0.1"), 4000); err == nil || !strings.Contains(err.Error(), "has ended") {
		t.Errorf("a connection into an ended job: %v", err)
	}
}

// TestProbeGangNetworks: the probe doctor runs agrees with what the
// executors do on this host.
func TestProbeGangNetworks(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	if err := ProbeGangNetworks(); err != nil {
		t.Fatalf("probe on a host that runs gang jobs: %v", err)
	}
	if err := GangNetworks(e); err != nil {
		t.Fatalf("sandboxed process executor: %v", err)
	}
	if err := GangNetworks(newTestExecutor(t, ProcessOptions{AllowNetwork: true})); err == nil {
		t.Fatal("an executor whose jobs share the host's network runs gang members")
	}
	t.Setenv("PATH", "/nonexistent")
	if err := ProbeGangNetworks(); err == nil || !strings.Contains(err.Error(), "needs iptables-restore") {
		t.Fatalf("probe without iptables-restore: %v", err)
	}
}
