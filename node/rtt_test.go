package node

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"
)

// delayProxy forwards TCP connections to target, holding each chunk of
// bytes for delay in each direction: a peer that connects through it is
// a real network path 2×delay of round trip away, on loopback.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu sync.Mutex
	// out are the local addresses of the proxy's connections to target:
	// how target sees the peers behind it.
	out   map[string]bool
	conns []net.Conn
}

func startDelayProxy(t *testing.T, target string, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, out: map[string]bool{}}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.out[up.LocalAddr().String()] = true
			p.conns = append(p.conns, in, up)
			p.mu.Unlock()
			go p.pipe(up, in)
			go p.pipe(in, up)
		}
	}()
	return p
}

// pipe copies src to dst, each chunk delivered delay after it was read.
func (p *delayProxy) pipe(dst, src net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now().Add(p.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// proxied reports whether every connection of n to the peer behind the
// proxy goes through it.
func (p *delayProxy) proxied(n *testNode, behind *testNode) error {
	conns := n.net.Host.Network().ConnsToPeer(behind.ID())
	if len(conns) == 0 {
		return errors.New("not connected")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		host, _ := c.RemoteMultiaddr().ValueForProtocol(ma.P_IP4)
		port, _ := c.RemoteMultiaddr().ValueForProtocol(ma.P_TCP)
		if !p.out[net.JoinHostPort(host, port)] {
			return errors.New("a connection bypasses the delay proxy: " + c.RemoteMultiaddr().String())
		}
	}
	return nil
}

// tcpAddr is n's loopback TCP listen address, host:port.
func tcpAddr(t *testing.T, n *testNode) string {
	t.Helper()
	for _, a := range n.net.Host.Addrs() {
		ip, err1 := a.ValueForProtocol(ma.P_IP4)
		port, err2 := a.ValueForProtocol(ma.P_TCP)
		if err1 == nil && err2 == nil && ip == "127.0.0.1" {
			return net.JoinHostPort(ip, port)
		}
	}
	t.Fatalf("%s listens on no loopback TCP address: %v", n.ID(), n.net.Host.Addrs())
	return ""
}

// TestLatencyTermsOverLibp2p: a renter and three providers on loopback:
// near; far, cheaper, behind a link of 400 ms round trip (a TCP proxy
// delaying every byte 200 ms each way; its only connection to the renter);
// and mute, the cheapest, a hostile peer that does not answer pings (to
// hide how far it is). The renter really measures them with libp2p ping:
// far is rejected from a MaxRTT 100ms job for its RTT and mute for having
// none (`bids` says so); both lose a Near job to the dearer near one on
// the latency term; a job without latency terms goes to the cheapest. A
// daemon keeps the round trips to the providers it knows fresh in the
// background, and a renter's quiet spells wait for the far provider's
// bid, a round trip late: every call gets all three bids.
func TestLatencyTermsOverLibp2p(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{RTTRefreshEvery: 200 * time.Millisecond})
	// Far's round trip is at least 400 ms, over the job's 100 ms; near's,
	// on loopback, is under it with room for a loaded host.
	const oneWay = 200 * time.Millisecond
	proxy := startDelayProxy(t, tcpAddr(t, renter), oneWay)
	near := startWith(t, filepath.Join(root, "near"), fastConfig(providerConfig("eu-west", 1.0, a100, a100)), renter.Daemon,
		Options{LearnEvery: 200 * time.Millisecond, RTTRefreshEvery: 200 * time.Millisecond})
	farCfg := fastConfig(providerConfig("eu-west", 0.7, a100, a100))
	farCfg.Bootstrap = []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(proxy.ln.Addr().(*net.TCPAddr).Port) + "/p2p/" + renter.ID().String()}
	far := startWith(t, filepath.Join(root, "far"), farCfg, nil, Options{})
	mute := startWith(t, filepath.Join(root, "mute"), fastConfig(providerConfig("eu-west", 0.5, a100, a100)), renter.Daemon, Options{})
	mute.net.Host.RemoveStreamHandler(ping.ID)
	waitAdvertised(t, renter, near, far, mute)
	if err := proxy.proxied(renter, far); err != nil {
		t.Fatalf("renter to far: %v", err)
	}
	// The renter measures the providers it learned in the background.
	// Far's bid comes at least the proxy's 200 ms after near's and
	// mute's, later than the default quiet spell after theirs: knowing
	// far's round trip, the renter's windows wait for its answer, and
	// every job below gets all three bids (without that wait, none did).
	if d := waitRTT(t, renter, far); d < 2*oneWay {
		t.Fatalf("renter measured far at %v, under the proxy's %v", d, 2*oneWay)
	}

	bids := func(id string) map[string]terms.Ranked {
		t.Helper()
		v, err := api.NewClient(renter.dir).Bids(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]terms.Ranked{}
		for _, b := range v.Bids {
			out[b.Bid.Provider] = b
		}
		if len(out) != 3 {
			t.Fatalf("job %s: bids from %d providers, want all 3", id, len(out))
		}
		return out
	}

	// MaxRTT: the far provider's measured RTT exceeds it.
	job := shJob(terms.Silver, 2, "true")
	job.MaxRTT = 100 * time.Millisecond
	v := post(t, renter, job)
	if !leased(v) || v.Lease.Provider != near.ID().String() {
		t.Fatalf("MaxRTT job: %s leased to %v, want the near provider; reasons %v", v.State, v.Lease, v.Reasons)
	}
	bs := bids(v.Job.ID)
	f, n := bs[far.ID().String()], bs[near.ID().String()]
	if f.RTT < 2*oneWay || !strings.HasPrefix(f.Rejected, "rtt ") || !strings.HasSuffix(f.Rejected, "> max 100ms") {
		t.Fatalf("far bid: rtt %v rejected %q, want at least %v and rejected for it", f.RTT, f.Rejected, 2*oneWay)
	}
	if n.RTT <= 0 || n.RTT >= job.MaxRTT || n.Rejected != "" {
		t.Fatalf("near bid: rtt %v rejected %q, want measured under %v", n.RTT, n.Rejected, job.MaxRTT)
	}
	if m := bs[mute.ID().String()]; m.RTT != 0 || !strings.HasPrefix(m.Rejected, "rtt unknown") {
		t.Fatalf("mute bid: rtt %v rejected %q, want unmeasured and rejected for it", m.RTT, m.Rejected)
	}
	t.Logf("MaxRTT job: near rtt %v, far rtt %v (%s)", n.RTT, f.RTT, f.Rejected)

	// Near a client location: ranked on the renter's RTT, the far one
	// loses though cheaper.
	job = shJob(terms.Silver, 2, "true")
	job.Near = "/ip4/127.0.0.1"
	v = post(t, renter, job)
	if !leased(v) || v.Lease.Provider != near.ID().String() {
		t.Fatalf("Near job: %s leased to %v, want the near provider; reasons %v", v.State, v.Lease, v.Reasons)
	}
	bs = bids(v.Job.ID)
	if f := bs[far.ID().String()]; f.Rejected != "" || f.RTT < 2*oneWay {
		t.Fatalf("Near job, far bid: rtt %v rejected %q, want ranked (not rejected) at its RTT", f.RTT, f.Rejected)
	}
	if m := bs[mute.ID().String()]; m.Rejected != "" || m.RTT != 0 {
		t.Fatalf("Near job, mute bid: rtt %v rejected %q, want ranked, unmeasured", m.RTT, m.Rejected)
	}

	// No latency terms: the cheapest wins, as before.
	v = post(t, renter, shJob(terms.Silver, 2, "true"))
	if !leased(v) || v.Lease.Provider != mute.ID().String() {
		t.Fatalf("plain job: %s leased to %v, want the cheapest provider", v.State, v.Lease)
	}
	if err := proxy.proxied(renter, far); err != nil {
		t.Fatalf("after the auctions, renter to far: %v", err)
	}

	// The near provider's daemon measures the providers it knows in the
	// background too, without any job of its own.
	waitRTT(t, near, far)
}

// waitRTT waits until n's daemon has a fresh round trip to of, measured
// in the background, and returns it.
func waitRTT(t *testing.T, n, of *testNode) time.Duration {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		changed := n.net.RTTs().Changed()
		if d, ok := n.net.RTTs().Fresh(of.ID()); ok && d > 0 {
			return d
		}
		select {
		case <-deadline.C:
			t.Fatalf("%s's daemon never measured %s in the background", n.ID(), of.ID())
		case <-changed:
		}
	}
}
