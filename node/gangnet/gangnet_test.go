package gangnet

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/transport/tcpreuse"
)

// ringBin is the gangring test program, built once in a dir every job
// uid can read (not /tmp, which is private to each job as root).
var ringBin string

func TestMain(m *testing.M) {
	// The hosts dial from their listening ports (reuseport) by default:
	// a dial of connect's while the other host dials back on its own (its
	// DHT, say) is then one TCP connection opened from both ends, on
	// which both run noise as its initiator ("noise: message is too
	// short"; TestGangHostile failed so 3 times in 60). Dialling from
	// ephemeral ports, two such dials make two connections. Nothing here
	// tests reuseport (hole punching).
	tcpreuse.EnvReuseportVal = false
	code := func() int {
		if os.Geteuid() == 0 {
			base, err := os.MkdirTemp("/run", "gpumesh-gangnet-test-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(base)
			if err := os.Chmod(base, 0o711); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			os.Setenv("TMPDIR", base)
			bin := filepath.Join(base, "bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			ringBin = filepath.Join(bin, "gangring")
			cmd := exec.Command("go", "build", "-o", ringBin, "./testdata/gangring")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build gangring: %v\n%s", err, out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// needJail skips a test that runs gang jobs where the runtime cannot
// give them a network of their own.
func needJail(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gang networks need job network namespaces, which need root")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("gang networks need iptables-restore: ", err)
	}
}

// provider is one in-process provider: a libp2p host on loopback, its
// gang network and a process executor.
type provider struct {
	node   *p2p.Node
	net    *Net
	exec   *runtime.ProcessExecutor
	counts counts
}

// counts are a provider's counters.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[what]++
}

func (c *counts) get(what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[what]
}

func newProvider(t *testing.T, ctx context.Context, jobs bool) *provider {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(ctx, p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		Protocols: map[protocol.ID]p2p.ProtocolLimit{wire.ProtoGang: p2p.BulkLimit}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	p := &provider{node: n}
	p.net = New(n.ID(), func(ctx context.Context, to peer.ID) (network.Stream, error) {
		return n.Host.NewStream(ctx, to, wire.ProtoGang)
	}, nil, p.counts.add)
	n.Host.SetStreamHandler(wire.ProtoGang, func(s network.Stream) { _ = p.net.Serve(ctx, s) })
	if jobs {
		root := filepath.Join(t.TempDir(), "jobs")
		for d := filepath.Dir(root); d != filepath.Clean(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if p.exec, err = runtime.NewProcessExecutor(root, runtime.ProcessOptions{Grace: 300 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// connect makes every provider know every other's addresses.
func connect(t *testing.T, ctx context.Context, ps ...*provider) {
	t.Helper()
	for _, a := range ps {
		for _, b := range ps {
			if a != b {
				if err := a.node.Host.Connect(ctx, peer.AddrInfo{ID: b.node.ID(), Addrs: b.node.Host.Addrs()}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// gang is a gang's terms as its renter signs them into each member's
// lease.
type gang struct {
	renter string
	terms  terms.Gang
}

// newGang is a gang of one member per provider, rank = index.
func newGang(t *testing.T, id string, ps ...*provider) gang {
	g := gang{renter: signtest.New(t).ID().String(), terms: terms.Gang{ID: id, Size: len(ps)}}
	for r, p := range ps {
		g.terms.Members = append(g.terms.Members, terms.GangMember{Rank: r, Provider: p.node.ID().String(), LeaseID: fmt.Sprintf("%s-lease-%d", id, r)})
	}
	return g
}

// lease is member rank's lease, its terms naming it at its rank.
func (g gang) lease(rank int) terms.Lease {
	gt := g.terms
	gt.Rank = rank
	return terms.Lease{ID: gt.Members[rank].LeaseID, JobID: "job-" + gt.ID, Renter: g.renter,
		Provider: gt.Members[rank].Provider, Gang: &gt}
}

// job is the gang's job.
func (g gang) job() terms.Job {
	return terms.Job{ID: "job-" + g.terms.ID, Nodes: g.terms.Size}
}

// digest is what each member's provider names the gang's terms by.
func (g gang) digest() string { return digest(g.renter, g.terms) }

// syncBuffer is a goroutine-safe job output sink that can wait for
// content.
type syncBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	changed broadcast.Signal // at each write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.changed.Notify()
	return b.b.Write(p)
}

// waitFor waits until the output holds s.
func (b *syncBuffer) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		changed := b.changed.Wait()
		if strings.Contains(b.String(), s) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waiting for %q; the job printed: %s", s, b.String())
		}
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// member is one started member's job and what it printed.
type member struct {
	h   runtime.Handle
	out *syncBuffer
}

// startGang starts each provider's member of gang g, running gangring
// with args, as the lease supervisor does through its Network hook.
func startGang(t *testing.T, ctx context.Context, g gang, ps []*provider, args ...string) []member {
	t.Helper()
	ms := make([]member, len(ps))
	for r, p := range ps {
		l := g.lease(r)
		spec := runtime.Spec{ID: l.ID, JobID: l.JobID, Command: append([]string{ringBin}, args...),
			Deadline: time.Now().Add(2 * time.Minute)}
		started, end, err := p.net.Hook(l, g.job(), &spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(end)
		out := newSyncBuffer()
		h, err := p.exec.Start(ctx, spec, out, out)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Stop(0); h.Wait(); _ = h.Cleanup() })
		started(h)
		ms[r] = member{h, out}
	}
	return ms
}

// TestGangRingAllReduce: three providers each run one member of a gang;
// the members do a ring all-reduce of a vector over the gang network
// (every member connects to the next one's gang address, carried over
// libp2p streams), and every rank prints the same, correct sum, having
// seen its predecessor connect from the predecessor's own gang address.
func TestGangRingAllReduce(t *testing.T) {
	needJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const k, n = 3, 100000
	ps := make([]*provider, k)
	for i := range ps {
		ps[i] = newProvider(t, ctx, true)
	}
	connect(t, ctx, ps...)
	ms := startGang(t, ctx, newGang(t, "ring", ps...), ps, "allreduce", strconv.Itoa(n))

	// Each element i sums (r+1)(i+1) over the ranks: (i+1)k(k+1)/2.
	per := int64(k * (k + 1) / 2)
	want := fmt.Sprintf("allreduce n=%d sum=%d first=%d last=%d", n, per*int64(n)*int64(n+1)/2, per, per*n)
	line := regexp.MustCompile(`rank (\d+)/3 (allreduce .*) prev_from=(\S+)`)
	for r, m := range ms {
		res := m.h.Wait()
		if res.ExitCode != 0 {
			t.Fatalf("rank %d exited %d (%s): %s", r, res.ExitCode, res.Reason, m.out.String())
		}
		got := line.FindStringSubmatch(m.out.String())
		if got == nil {
			t.Fatalf("rank %d printed %q", r, m.out.String())
		}
		if got[1] != strconv.Itoa(r) || got[2] != want {
			t.Errorf("rank %d printed %q, want rank %d %q", r, got[0], r, want)
		}
		if prev := Addr((r + k - 1) % k).String(); got[3] != prev {
			t.Errorf("rank %d saw its predecessor connect from %s, want its gang address %s", r, got[3], prev)
		}
	}
	for r, p := range ps {
		if p.counts.get(CountOut) == 0 || p.counts.get(CountIn) == 0 {
			t.Errorf("provider %d carried %d connections out, %d in", r, p.counts.get(CountOut), p.counts.get(CountIn))
		}
	}
}

// TestGangEnvironment: a member's job gets torchrun's env:// rendezvous
// variables and every member's address.
func TestGangEnvironment(t *testing.T) {
	needJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := []*provider{newProvider(t, ctx, true), newProvider(t, ctx, false)}
	g := newGang(t, "env", ps...)
	lm, err := ps[0].net.Join(g.lease(0), g.job())
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Leave()
	out := newSyncBuffer()
	h, err := ps[0].exec.Start(ctx, runtime.Spec{ID: "env-0", Command: []string{"/usr/bin/env"}, Gang: lm.Spec(), GPUs: []int{0, 1}}, out, out)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	if res := h.Wait(); res.ExitCode != 0 {
		t.Fatalf("env exited %d: %s", res.ExitCode, out.String())
	}
	for _, kv := range []string{"MASTER_ADDR=127.77.0.1", "MASTER_PORT=29500", "WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0",
		"LOCAL_WORLD_SIZE=1", "GPUMESH_PEERS=127.77.0.1,127.77.0.2", "PET_NNODES=2", "PET_NODE_RANK=0",
		"PET_NPROC_PER_NODE=2", "PET_MASTER_ADDR=127.77.0.1", "PET_MASTER_PORT=29500", "NCCL_SOCKET_IFNAME=lo", "GLOO_SOCKET_IFNAME=lo"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(kv) + `$`).MatchString(out.String()) {
			t.Errorf("job environment lacks %s:\n%s", kv, out.String())
		}
	}
}

// TestGangHostile: streams to a running member are refused to a peer that
// is not in its gang's roster, to a member of another gang, to a member
// claiming another's rank, and to one holding another roster for the same
// gang id; nothing reaches the job. A member's own provider gets through,
// until the member has left.
func TestGangHostile(t *testing.T) {
	needJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := newProvider(t, ctx, true), newProvider(t, ctx, false)
	stranger, other := newProvider(t, ctx, false), newProvider(t, ctx, false)
	connect(t, ctx, a, b, stranger, other)
	g := newGang(t, "victim", a, b)
	// Member 0 (on a) listens on its gang address; its job prints every
	// connection it gets, and the probe's one line.
	lm, err := a.net.Join(g.lease(0), g.job())
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Leave()
	out := newSyncBuffer()
	h, err := a.exec.Start(ctx, runtime.Spec{ID: "victim-0", Command: []string{ringBin, "listen", "7000"}, Gang: lm.Spec(),
		Deadline: time.Now().Add(time.Minute)}, out, out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(0); h.Wait(); _ = h.Cleanup() }()
	lm.Started(h.(runtime.GangDialer))
	out.waitFor(t, "listening", 20*time.Second)

	// A member of another gang, whose own roster names it.
	og := newGang(t, "other", other, b)
	if _, err := other.net.Join(og.lease(0), og.job()); err != nil {
		t.Fatal(err)
	}
	forged := g
	forged.terms.Members = slices.Clone(g.terms.Members)
	forged.terms.Members[1].Provider = stranger.node.ID().String()
	try := func(who *provider, req wire.GangRequest) error {
		open := func(ctx context.Context, to peer.ID) (network.Stream, error) {
			return who.node.Host.NewStream(ctx, to, wire.ProtoGang)
		}
		s, err := service.ConnectGang(ctx, open, a.node.ID(), req)
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Write([]byte("hello from " + req.Gang))
		_ = s.CloseWrite()
		return err
	}
	for _, c := range []struct {
		name string
		who  *provider
		req  wire.GangRequest
		why  string
	}{
		{"stranger", stranger, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 1, To: 0, Port: 7000}, "is not member 1's provider"},
		{"stranger with a forged roster", stranger, wire.GangRequest{Gang: g.terms.ID, Roster: forged.digest(), From: 1, To: 0, Port: 7000}, "another roster"},
		{"other gang's member", other, wire.GangRequest{Gang: og.terms.ID, Roster: og.digest(), From: 0, To: 0, Port: 7000}, "no member 0 here"},
		{"other gang's member naming this gang", other, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 1, To: 0, Port: 7000}, "is not member 1's provider"},
		{"member claiming its peer's rank", b, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 0, To: 0, Port: 7000}, "is not member 0's provider"},
		{"member naming no port", b, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 1, To: 0, Port: 0}, "invalid port"},
		{"member naming another member", b, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 1, To: 1, Port: 7000}, "no member 1 here"},
	} {
		err := try(c.who, c.req)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: got %v, want a refusal saying %q", c.name, err, c.why)
		}
	}
	if got := a.counts.get(CountRefused); got != 7 {
		t.Errorf("%d streams refused, want 7", got)
	}
	// The member's own peer gets through, from its gang address.
	if err := try(b, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 1, To: 0, Port: 7000}); err != nil {
		t.Fatalf("member 1's provider: %v", err)
	}
	out.waitFor(t, "got 127.77.0.2 hello from victim", 20*time.Second)
	if strings.Count(out.String(), "got ") != 1 {
		t.Errorf("the job got connections it should not have: %s", out.String())
	}
	// Once the member has left (its lease ended), nobody gets in.
	lm.Leave()
	if err := try(b, wire.GangRequest{Gang: g.terms.ID, Roster: g.digest(), From: 1, To: 0, Port: 7000}); err == nil || !strings.Contains(err.Error(), "no member 0 here") {
		t.Errorf("member 1's provider after member 0 left: %v", err)
	}
}

// TestGangJoinRefused: a lease whose gang terms do not name it on this
// provider at their rank, or are malformed, or a gang job's lease without
// terms, is refused at Join with a one-line error; a lease of no gang
// joins nothing. Every member's provider names the gang by the same
// digest, which any change to the terms or their renter changes.
func TestGangJoinRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := newProvider(t, ctx, false), newProvider(t, ctx, false)
	g := newGang(t, "join", a, b)
	with := func(f func(*terms.Lease)) terms.Lease {
		l := g.lease(0)
		gt := *l.Gang
		gt.Members = slices.Clone(gt.Members)
		l.Gang = &gt
		f(&l)
		return l
	}
	for _, c := range []struct {
		name string
		l    terms.Lease
		job  terms.Job
		why  string
	}{
		{"another provider's member", g.lease(1), g.job(), "not this provider's"},
		{"rank out of range", with(func(l *terms.Lease) { l.Gang.Rank = 2 }), g.job(), "gang rank 2 of 2"},
		{"one member", with(func(l *terms.Lease) { l.Gang.Size, l.Gang.Members = 1, l.Gang.Members[:1] }), g.job(), "gang of 1 with 1 members"},
		{"bad id", with(func(l *terms.Lease) { l.Gang.ID = "../x" }), g.job(), "gang id"},
		{"ranks out of order", with(func(l *terms.Lease) {
			l.Gang.Members[0], l.Gang.Members[1] = l.Gang.Members[1], l.Gang.Members[0]
		}), g.job(), "member 0 has rank 1"},
		{"terms naming another lease at its rank", with(func(l *terms.Lease) { l.ID = "join-lease-9" }), g.job(), "not this award"},
		{"no renter", with(func(l *terms.Lease) { l.Renter = "nobody" }), g.job(), "renter"},
		{"a gang job's lease without terms", with(func(l *terms.Lease) { l.Gang = nil }), g.job(), "carries no gang terms"},
	} {
		m, err := a.net.Join(c.l, c.job)
		if err == nil || m != nil || !strings.Contains(err.Error(), c.why) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want a one-line error saying %q", c.name, err, c.why)
		}
	}
	plain := terms.Lease{ID: "plain", Provider: a.node.ID().String()}
	if m, err := a.net.Join(plain, terms.Job{ID: "job-plain"}); m != nil || err != nil {
		t.Errorf("a lease of no gang: %v, %v", m, err)
	}
	m, err := a.net.Join(g.lease(0), g.job())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.net.Join(g.lease(0), g.job()); err == nil {
		t.Error("the same member joined twice")
	}
	peerM, err := b.net.Join(g.lease(1), g.job())
	if err != nil {
		t.Fatal(err)
	}
	if m.gang.digest != peerM.gang.digest || m.gang.digest != g.digest() {
		t.Errorf("members' providers name the gang %s and %s", m.gang.digest, peerM.gang.digest)
	}
	peerM.Leave()
	other := g
	other.renter = signtest.New(t).ID().String()
	moved := g
	moved.terms.Members = slices.Clone(g.terms.Members)
	moved.terms.Members[1].LeaseID = "join-lease-9"
	if other.digest() == g.digest() || moved.digest() == g.digest() {
		t.Error("another renter's or another member's terms have the same digest")
	}
	m.Leave()
	if m, err = a.net.Join(g.lease(0), g.job()); err != nil {
		t.Errorf("join after leave: %v", err)
	}
	m.Leave()

	// Through the supervisor's hook: a refused lease fails with no
	// network; one of no gang runs as it is.
	var spec runtime.Spec
	if _, _, err := a.net.Hook(g.lease(1), g.job(), &spec); err == nil || spec.Gang != nil {
		t.Errorf("another member's lease: %v, gang %v", err, spec.Gang)
	}
	if started, end, err := a.net.Hook(plain, terms.Job{ID: "job-plain"}, &spec); err != nil || started != nil || end != nil || spec.Gang != nil {
		t.Errorf("a lease of no gang: %v, gang %v", err, spec.Gang)
	}
	_, end, err := a.net.Hook(g.lease(0), g.job(), &spec)
	if err != nil || spec.Gang == nil || spec.Gang.Rank != 0 || len(spec.Gang.Addrs) != 2 || spec.Gang.MasterPort != MasterPort {
		t.Fatalf("the member's lease: %v, gang %+v", err, spec.Gang)
	}
	end()
}

// TestGangOverlayBench measures the gang network between two members on
// loopback (job → nat redirect → provider → libp2p stream over TCP →
// provider → job) against a direct loopback TCP connection between the
// same two programs: the round trip of a one-byte ping-pong and the
// throughput of a bulk transfer, each checked to arrive whole.
// GPUMESH_GANG_BENCH=1 runs it at full size (5000 pings, 1 GiB).
func TestGangOverlayBench(t *testing.T) {
	needJail(t)
	pings, mib := "300", "32"
	if os.Getenv("GPUMESH_GANG_BENCH") == "1" {
		pings, mib = "5000", "1024"
	}
	figures := regexp.MustCompile(`bench rtt_us=([0-9.]+) throughput_mbps=([0-9.]+) bytes=(\d+)`)
	// Direct: the same two programs on the host's loopback.
	var direct []string
	{
		l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for rank 0
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		var outs [2]*syncBuffer
		var cmds [2]*exec.Cmd
		for r := range cmds {
			outs[r] = newSyncBuffer()
			cmds[r] = exec.Command(ringBin, "bench", pings, mib)
			cmds[r].Env = []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
				"GPUMESH_PEERS=127.0.0.1,127.0.0.2"}
			cmds[r].Stdout, cmds[r].Stderr = outs[r], outs[r]
			if err := cmds[r].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for r, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("direct rank %d: %v: %s", r, err, outs[r].String())
			}
		}
		if direct = figures.FindStringSubmatch(outs[1].String()); direct == nil {
			t.Fatalf("direct: %s", outs[1].String())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := []*provider{newProvider(t, ctx, true), newProvider(t, ctx, true)}
	connect(t, ctx, ps...)
	cpu0 := selfCPU(t)
	ms := startGang(t, ctx, newGang(t, "bench", ps...), ps, "bench", pings, mib)
	for r, m := range ms {
		if res := m.h.Wait(); res.ExitCode != 0 {
			t.Fatalf("rank %d exited %d (%s): %s", r, res.ExitCode, res.Reason, m.out.String())
		}
	}
	cpu := selfCPU(t) - cpu0
	overlay := figures.FindStringSubmatch(ms[1].out.String())
	if overlay == nil {
		t.Fatalf("overlay: %s", ms[1].out.String())
	}
	bytes, _ := strconv.ParseFloat(overlay[3], 64)
	t.Logf("%s pings, %s MiB: direct loopback TCP: rtt %s µs, %s MB/s; gang network: rtt %s µs, %s MB/s, both providers' CPU %.2f s per GB",
		pings, mib, direct[1], direct[2], overlay[1], overlay[2], cpu.Seconds()/(bytes/1e9))
}

// selfCPU is the CPU time this process (both providers) has used.
func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestGangUnreachableMemberResets: a member's connection to a member that
// cannot be reached (its provider runs no such member) was accepted in
// the job's namespace; it is then reset, not closed in order, so that the
// job sees a failed connection rather than a peer that said nothing.
func TestGangUnreachableMemberResets(t *testing.T) {
	needJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	absent, a := newProvider(t, ctx, false), newProvider(t, ctx, true)
	connect(t, ctx, absent, a)
	g := newGang(t, "lonely", absent, a)
	spec := runtime.Spec{ID: g.lease(1).ID, Command: []string{ringBin, "probe", "7000"}, Deadline: time.Now().Add(time.Minute)}
	started, end, err := a.net.Hook(g.lease(1), g.job(), &spec)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	out := newSyncBuffer()
	h, err := a.exec.Start(ctx, spec, out, out)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	started(h)
	if res := h.Wait(); res.ExitCode != 0 || strings.TrimSpace(out.String()) != "reset" {
		t.Fatalf("probe exited %d: %q, want reset", res.ExitCode, out.String())
	}
	if absent.counts.get(CountRefused) != 1 || a.counts.get(CountOut) != 0 {
		t.Errorf("refused %d there, carried %d here", absent.counts.get(CountRefused), a.counts.get(CountOut))
	}
}
