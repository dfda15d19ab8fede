// Package scale measures what one posted job costs the network as the
// network grows. It runs a whole market in one process over go-libp2p's
// mocknet: one renter and many providers, each a libp2p host with the
// daemon's GossipSub (p2p.GossipOptions) and the auction's Renter and
// Provider state machines, carried over those hosts exactly as the daemon
// carries them (calls gossiped on auction.JobTopics with p2p.PublishTo,
// bids and awards as p2p request/response streams on wire.ProtoBid and
// wire.ProtoAward).
//
// Some providers are eligible for the posted jobs (H100 in the EU, like
// the jobs); the others sell other models or sit on other continents. For
// every job the harness counts, network-wide, the gossip messages that
// carried its call (copies, duplicates included, plus IHAVE and IWANT
// gossip naming it), the nodes that received it, the bids the renter got
// and the time from post to lease. Calls only travel on their topic's
// mesh, so these follow the number of eligible providers, not the size of
// the network.
//
// Topic discovery, which the daemon does through the DHT, is an in-memory
// rendezvous here: a node subscribing to a topic finds up to ten of its
// other subscribers, as GossipSub's discovery would.
package scale

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/node/wire/wirenet"
	mrand "math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// Config is one network and the jobs posted on it.
type Config struct {
	// Nodes is the size of the network, the renter included (>= 2).
	Nodes int
	// Eligible is how many providers can serve the jobs (1..Nodes-1).
	Eligible int
	// Jobs is how many jobs are measured, posted one after another after
	// one warm-up job. Default 5.
	Jobs int
	// BidWindow is each job's bid window. Default 300ms.
	BidWindow time.Duration
	// Degree is how many random peers each node connects to besides its
	// topics' subscribers (the DHT's connections in the daemon). Default 4.
	Degree int
	// Latency is the one-way latency of every link. Default 0.
	Latency time.Duration
	// Seed seeds the random connections (0: 1).
	Seed uint64
}

func (c *Config) defaults() error {
	if c.Nodes < 2 {
		return fmt.Errorf("scale: nodes must be at least 2, got %d", c.Nodes)
	}
	if c.Eligible < 1 || c.Eligible > c.Nodes-1 {
		return fmt.Errorf("scale: eligible must be in [1, %d] for %d nodes, got %d", c.Nodes-1, c.Nodes, c.Eligible)
	}
	if c.Jobs == 0 {
		c.Jobs = 5
	}
	if c.Jobs < 0 || c.BidWindow < 0 || c.Degree < 0 || c.Latency < 0 {
		return errors.New("scale: jobs, bid window, degree and latency must not be negative")
	}
	if c.BidWindow == 0 {
		c.BidWindow = 300 * time.Millisecond
	}
	if c.Degree == 0 {
		c.Degree = 4
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return nil
}

// JobCost is what one job cost the network.
type JobCost struct {
	// Gossip is the messages that carried the job's call, received
	// network-wide: copies (duplicates included) and IHAVE/IWANT entries.
	Gossip int `json:"gossip"`
	// Receivers is how many nodes received the call at least once.
	Receivers int `json:"receivers"`
	// Bids is how many bids reached the renter within the bid window.
	Bids int `json:"bids"`
	// Leased says whether the job was leased; Latency is post → lease.
	Leased  bool          `json:"leased"`
	Latency time.Duration `json:"latency"`
}

// Report is one run's figures.
type Report struct {
	Config Config    `json:"config"`
	Jobs   []JobCost `json:"jobs"`
	// Setup is how long building the network took.
	Setup time.Duration `json:"setup"`
	// Means over the measured jobs.
	Gossip    float64 `json:"gossip_mean"`
	Receivers float64 `json:"receivers_mean"`
	Bids      float64 `json:"bids_mean"`
	Leased    int     `json:"leased"`
	// P50 and P95 of post → lease over the leased jobs.
	P50 time.Duration `json:"latency_p50"`
	P95 time.Duration `json:"latency_p95"`
}

// The jobs' and the providers' terms: eligible providers sell H100s in
// eu-west; the others sell other models, or H100s on other continents.
var (
	eligibleProfile = profile{"H100", "eu-west"}
	otherProfiles   = []profile{
		{"A100", "eu-central"}, {"H100", "us-east"}, {"RTX4090", "us-west"}, {"L4", "ap-south"},
		{"A100", "us-east"}, {"H100", "ap-south"}, {"L4", "eu-west"}, {"RTX4090", "eu-central"},
	}
	policy = terms.Policy{PriceFloor: 1, AcceptPreemptible: true}
)

type profile struct{ model, region string }

func job(window time.Duration) terms.Job {
	return terms.Job{Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, MinVRAMGB: 80, GPUModels: []string{"H100"},
		Region: "eu", Duration: time.Hour, BidWindow: window, Run: terms.RunSpec{Command: []string{"train"}}}
}

// Run builds the network, posts cfg.Jobs jobs (after a warm-up job that is
// not counted) and reports what each cost.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	net, err := build(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer net.close()
	if err := net.ready(ctx, cfg.Eligible, 2*time.Minute); err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Setup: time.Since(start)}
	for i := 0; i <= cfg.Jobs; i++ {
		c, err := net.post(ctx, cfg.BidWindow)
		if err != nil {
			return nil, err
		}
		if i > 0 { // the first job warms the renter's topic up
			rep.Jobs = append(rep.Jobs, c)
		}
	}
	// Gossip about a call (IHAVE) goes on for a few heartbeats after the
	// lease: wait until the counts settle, then attribute them.
	net.tr.settle(ctx, 2500*time.Millisecond, 20*time.Second)
	counts := net.tr.perCall()
	if len(counts) != cfg.Jobs+1 {
		return nil, fmt.Errorf("scale: saw %d calls published for %d jobs", len(counts), cfg.Jobs+1)
	}
	var lat []time.Duration
	for i := range rep.Jobs {
		c := &rep.Jobs[i]
		c.Gossip, c.Receivers = counts[i+1].messages, counts[i+1].receivers
		rep.Gossip += float64(c.Gossip)
		rep.Receivers += float64(c.Receivers)
		rep.Bids += float64(c.Bids)
		if c.Leased {
			rep.Leased++
			lat = append(lat, c.Latency)
		}
	}
	if n := float64(len(rep.Jobs)); n > 0 {
		rep.Gossip, rep.Receivers, rep.Bids = rep.Gossip/n, rep.Receivers/n, rep.Bids/n
	}
	rep.P50, rep.P95 = percentile(lat, 50), percentile(lat, 95)
	return rep, nil
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(i, 1)-1]
}

// network is the market under test.
type network struct {
	mn     mocknet.Mocknet
	linkMu sync.Mutex
	nodes  []*mnode
	byID   map[peer.ID]*mnode
	rdv    *rendezvous
	tr     *tracer
	renter *auction.Renter
	ctx    context.Context
	cancel context.CancelFunc
}

// mnode is one node: a host, its GossipSub router and its market role.
type mnode struct {
	net    *network
	idx    int
	h      host.Host
	ps     *pubsub.PubSub
	links  *p2p.Links
	signer *sign.Signer
	prov   *auction.Provider

	mu     sync.Mutex
	topics map[string]*pubsub.Topic
}

// harnessDiscoveryPoll is how often the harness's GossipSub routers look
// for more topic peers. The daemon polls every 10 s (p2p), which suits a
// long-lived node but would make every network here wait that long for
// its renter, which only publishes, to find the topic's subscribers.
const harnessDiscoveryPoll = time.Second

func build(ctx context.Context, cfg Config) (*network, error) {
	// Read by each router as it starts; the harness's own process only.
	pubsub.DiscoveryPollInterval = harnessDiscoveryPoll
	n := &network{mn: mocknet.New(), byID: map[peer.ID]*mnode{}, rdv: &rendezvous{subs: map[string][]peer.ID{}}}
	n.tr = newTracer()
	n.ctx, n.cancel = context.WithCancel(ctx)
	n.mn.SetLinkDefaults(mocknet.LinkOptions{Latency: cfg.Latency})
	ok := false
	defer func() {
		if !ok {
			n.close()
		}
	}()
	for i := 0; i < cfg.Nodes; i++ {
		m, err := n.addNode(i)
		if err != nil {
			return nil, err
		}
		n.nodes = append(n.nodes, m)
		n.byID[m.h.ID()] = m
	}
	// Background connections, as the DHT's would be.
	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0))
	for _, m := range n.nodes {
		for k := 0; k < cfg.Degree; k++ {
			o := n.nodes[rng.IntN(len(n.nodes))]
			if o == m {
				continue
			}
			if err := n.connect(m, o); err != nil {
				return nil, err
			}
		}
	}
	var err error
	renter := n.nodes[0]
	if n.renter, err = auction.NewRenter(auction.RenterConfig{Signer: renter.signer, Transport: wirenet.AuctionTransport(renter)}); err != nil {
		return nil, err
	}
	p2p.Serve(renter.h, readyProto, func(context.Context, peer.ID, []byte) ([]byte, error) { return nil, nil })
	p2p.Serve(renter.h, wire.ProtoBid, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return nil, n.renter.HandleBid(from, req)
	})
	for i, m := range n.nodes[1:] {
		pr := eligibleProfile
		if i >= cfg.Eligible {
			pr = otherProfiles[(i-cfg.Eligible)%len(otherProfiles)]
		}
		if err := m.startProvider(pr); err != nil {
			return nil, err
		}
	}
	ok = true
	return n, nil
}

func (n *network) addNode(i int) (*mnode, error) {
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	addr, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", i>>16&255, i>>8&255, i&255))
	if err != nil {
		return nil, err
	}
	h, err := n.mn.AddPeer(key, addr)
	if err != nil {
		return nil, fmt.Errorf("scale: add peer: %w", err)
	}
	s, err := p2p.Signer(key)
	if err != nil {
		return nil, err
	}
	m := &mnode{net: n, idx: i, h: h, signer: s, topics: map[string]*pubsub.Topic{}}
	m.links = p2p.NewLinks()
	opts := append(p2p.GossipOptions(&nodeDiscovery{n: n, self: h.ID()}, m.links), pubsub.WithRawTracer(n.tr.node(i, i == 0)))
	if m.ps, err = pubsub.NewGossipSub(n.ctx, h, opts...); err != nil {
		return nil, fmt.Errorf("scale: gossipsub: %w", err)
	}
	return m, nil
}

// link makes sure a and b can dial each other (mocknet needs a link) and
// know each other's addresses.
func (n *network) link(a, b peer.ID) error {
	n.linkMu.Lock()
	defer n.linkMu.Unlock()
	if len(n.mn.LinksBetweenPeers(a, b)) > 0 {
		return nil
	}
	if _, err := n.mn.LinkPeers(a, b); err != nil {
		return fmt.Errorf("scale: link: %w", err)
	}
	n.mn.Host(a).Peerstore().AddAddrs(b, n.mn.Host(b).Addrs(), time.Hour)
	n.mn.Host(b).Peerstore().AddAddrs(a, n.mn.Host(a).Addrs(), time.Hour)
	return nil
}

func (n *network) connect(a, b *mnode) error {
	if err := n.link(a.h.ID(), b.h.ID()); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	return a.h.Connect(cctx, peer.AddrInfo{ID: b.h.ID()})
}

func (n *network) close() {
	n.cancel()
	_ = n.mn.Close()
}

// ready waits until every eligible provider has grafted the job topic's
// mesh (min(eligible-1, Dlo) peers) and the renter knows min(eligible, D)
// of the topic's subscribers to publish to, as a network that has been up
// a while would.
func (n *network) ready(ctx context.Context, eligible int, limit time.Duration) error {
	topic := auction.JobTopics(ptr(job(0)))[0]
	rt, err := n.nodes[0].topic(topic)
	if err != nil {
		return err
	}
	params := pubsub.DefaultGossipSubParams()
	deadline := time.Now().Add(limit)
	for {
		missing := 0
		for _, m := range n.nodes[1 : eligible+1] {
			if n.tr.meshSize(m.idx, topic) < min(eligible-1, params.Dlo) {
				missing++
			}
		}
		known := len(rt.ListPeers())
		if missing == 0 && known >= min(eligible, params.D) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("scale: network not ready after %v: %d eligible providers short of mesh peers, renter knows %d subscribers",
				limit, missing, known)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	// A stream waits for identify to finish on its connection; on a busy
	// machine that backlog (hundreds of hosts identifying each other) can
	// outlast the bid window. Every eligible provider reaches the renter
	// once before the jobs start.
	for _, m := range n.nodes[1 : eligible+1] {
		for {
			if err := n.link(m.h.ID(), n.nodes[0].h.ID()); err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := p2p.RequestOn(rctx, m.h, n.nodes[0].h.ID(), readyProto, nil)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("scale: provider %d cannot reach the renter: %w", m.idx, err)
			}
		}
	}
	return nil
}

// readyProto is what the renter answers to say it can be reached.
const readyProto = "/gpumesh/scale/ready/1.0.0"

func ptr[T any](v T) *T { return &v }

// post posts one job and waits for its auction to end.
func (n *network) post(ctx context.Context, window time.Duration) (JobCost, error) {
	// The harness is where its jobs enter, as the control API's post is a
	// daemon's: the renter engine trusts what it is given.
	spec := job(window)
	if err := spec.Validate(); err != nil {
		return JobCost{}, fmt.Errorf("scale: job: %w", err)
	}
	start := time.Now()
	j, err := n.renter.Post(ctx, spec)
	c := JobCost{Latency: time.Since(start), Leased: err == nil}
	if err != nil && !errors.Is(err, auction.ErrUnplaceable) {
		return c, fmt.Errorf("scale: post: %w", err)
	}
	st, ok := n.renter.Status(j.ID)
	if ok {
		c.Bids = len(st.Bids)
	}
	// The lease ends at once, so that capacity never runs out.
	if ok && st.Lease != nil {
		if id, err := peer.Decode(st.Winner); err == nil && n.byID[id] != nil && n.byID[id].prov != nil {
			_ = n.byID[id].prov.LeaseEnded(st.Lease.ID, time.Now(), terms.RunSucceeded)
		}
	}
	return c, nil
}

// fixedSelf is a provider's capability record, the same at every call.
type fixedSelf terms.Capability

func (c fixedSelf) Capability() terms.Capability { return terms.Capability(c) }
func (fixedSelf) Reliability() float64           { return terms.NeutralReliability }

func (m *mnode) startProvider(pr profile) error {
	gpus := make([]terms.GPU, 8)
	for i := range gpus {
		gpus[i] = terms.GPU{Model: pr.model, VRAMGB: 80}
	}
	capab := terms.Capability{Peer: m.h.ID().String(), Region: pr.region, GPUs: gpus, Policy: policy}
	var err error
	if m.prov, err = auction.NewProvider(auction.ProviderConfig{Signer: m.signer, Transport: wirenet.AuctionTransport(m),
		Self: fixedSelf(capab), Calendar: auction.NewCalendar(len(gpus))}); err != nil {
		return err
	}
	p2p.Serve(m.h, wire.ProtoAward, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return m.prov.HandleAward(from, req)
	})
	for _, t := range auction.ProviderTopics(&capab) {
		tp, err := m.topic(t)
		if err != nil {
			return err
		}
		sub, err := tp.Subscribe()
		if err != nil {
			return fmt.Errorf("scale: subscribe %s: %w", t, err)
		}
		go func() {
			defer sub.Cancel()
			for {
				msg, err := sub.Next(m.net.ctx)
				if err != nil {
					return
				}
				if msg.ReceivedFrom != m.h.ID() {
					_ = m.prov.HandleGossipedCall(msg.ReceivedFrom, msg.Data)
				}
			}
		}()
	}
	return nil
}

func (m *mnode) topic(name string) (*pubsub.Topic, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.topics[name]; ok {
		return t, nil
	}
	t, err := m.ps.Join(name)
	if err != nil {
		return nil, fmt.Errorf("scale: join %s: %w", name, err)
	}
	m.topics[name] = t
	return t, nil
}

// Publish and Request make a node a wirenet.Carrier, which
// wirenet.AuctionTransport binds as the daemon's node is bound.
func (m *mnode) Publish(ctx context.Context, topic string, data []byte) error {
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	return p2p.PublishTo(ctx, t, m.links, data)
}

func (m *mnode) Request(ctx context.Context, to peer.ID, proto protocol.ID, data []byte) ([]byte, error) {
	if err := m.net.link(m.h.ID(), to); err != nil {
		return nil, err
	}
	return p2p.RequestOn(ctx, m.h, to, proto, data)
}

// rendezvous is the in-memory stand-in for topic discovery through the DHT.
type rendezvous struct {
	mu   sync.Mutex
	subs map[string][]peer.ID
}

type nodeDiscovery struct {
	n    *network
	self peer.ID
}

func (d *nodeDiscovery) Advertise(_ context.Context, ns string, _ ...discovery.Option) (time.Duration, error) {
	r := d.n.rdv
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.subs[ns] {
		if p == d.self {
			return time.Hour, nil
		}
	}
	r.subs[ns] = append(r.subs[ns], d.self)
	return time.Hour, nil
}

// FindPeers returns up to ten random other subscribers of ns, linked to
// this node so that GossipSub's connector can dial them.
func (d *nodeDiscovery) FindPeers(_ context.Context, ns string, _ ...discovery.Option) (<-chan peer.AddrInfo, error) {
	r := d.n.rdv
	r.mu.Lock()
	var cands []peer.ID
	for _, p := range r.subs[ns] {
		if p != d.self {
			cands = append(cands, p)
		}
	}
	r.mu.Unlock()
	mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	cands = cands[:min(len(cands), 10)]
	ch := make(chan peer.AddrInfo, len(cands))
	for _, p := range cands {
		if err := d.n.link(d.self, p); err != nil {
			continue
		}
		ch <- peer.AddrInfo{ID: p, Addrs: d.n.mn.Host(p).Addrs()}
	}
	close(ch)
	return ch, nil
}
