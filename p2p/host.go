// Package p2p owns the node's networking: the libp2p host (TCP and QUIC,
// Noise), the Kademlia DHT under the private /gpumesh protocol prefix, the
// shared GossipSub router, small framed request/response helpers on top
// of libp2p streams, and the round trips measured to peers (RTTs). It
// knows nothing about the market itself.
package p2p

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p-kad-dht/records"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	cryptopb "github.com/libp2p/go-libp2p/core/crypto/pb"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/discovery/backoff"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	mh "github.com/multiformats/go-multihash"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// ProtocolPrefix keeps gpumesh's DHT apart from the public IPFS DHT.
const ProtocolPrefix protocol.ID = "/gpumesh"

// MaxGossipMessage bounds a gossiped message.
const MaxGossipMessage = 512 << 10

// Config configures a Node.
type Config struct {
	// Key is the node's identity. Required.
	Key crypto.PrivKey
	// ListenAddrs are multiaddrs to listen on. Defaults to all interfaces,
	// random TCP and QUIC ports.
	ListenAddrs []string
	// Bootstrap are multiaddrs (with /p2p/ID) of peers to join through.
	Bootstrap []string
	// Validators are DHT record validators by namespace ("/ns/key" keys).
	Validators map[string]record.Validator
	// ProvideValidity is how long a provider record lives in the DHT.
	// Defaults to 24h.
	ProvideValidity time.Duration
	// MDNS enables local-network discovery (off by default).
	MDNS bool
	// Reachability is auto (AutoNAT v1 and v2 decide), public or private
	// (the operator knows; AutoNAT is overridden). A private node runs its
	// DHT in client mode and reserves relay slots; an undecided one stays a
	// DHT server.
	Reachability string
	// Relays are static circuit relays (multiaddrs with /p2p/ID) on which a
	// node that is not publicly reachable holds a reservation; their
	// /p2p-circuit addresses join the node's own. Without them auto-relay
	// picks relays among the DHT's peers.
	Relays []string
	// RelayService runs the circuit relay v2 service for other peers, within
	// these limits (nil: no relay service).
	RelayService *RelayLimits
	// Protocols are the node's own protocols and their stream and frame
	// memory limits (RequestLimit, BulkLimit), enforced by libp2p's
	// resource manager; protocols not listed get libp2p's defaults.
	Protocols map[protocol.ID]ProtocolLimit
	// FrameTimeout bounds how long a peer may take to send a request
	// frame on a served stream (Handle) before the stream is reset; 0
	// means DefaultFrameTimeout.
	FrameTimeout time.Duration
	Log          *slog.Logger
}

// Node is a running libp2p host with its DHT and GossipSub.
type Node struct {
	// Host opens streams that may run over a relayed (limited) connection:
	// to a peer behind NAT that is the only way in until hole punching has
	// upgraded the connection.
	Host   host.Host
	DHT    *dht.IpfsDHT
	PubSub *pubsub.PubSub
	Links  *Links // the peers PubSub's streams reach

	raw       host.Host // the libp2p host itself
	log       *slog.Logger
	bootstrap []peer.AddrInfo
	mdns      mdns.Service
	relaySvc  *relay.Relay
	rtts      *RTTs

	natMu        sync.Mutex
	reach        string
	reachChanged broadcast.Signal
	circuits     map[peer.ID][]ma.Multiaddr
	firstReserve []chan struct{}

	mu           sync.Mutex
	topics       map[string]*pubsub.Topic
	handlers     map[protocol.ID]Handler // for requests a node sends itself
	frameTimeout time.Duration
	cancel       context.CancelFunc
}

// New starts a host, a server-mode DHT and GossipSub. It does not contact
// bootstrap peers: call Bootstrap for that.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Key == nil {
		return nil, errors.New("p2p: identity key required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	listen := cfg.ListenAddrs
	if len(listen) == 0 {
		listen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}
	}
	for _, a := range listen {
		if _, err := ma.NewMultiaddr(a); err != nil {
			return nil, fmt.Errorf("p2p: listen address %q: %w", a, err)
		}
	}
	if err := portsFree(listen); err != nil {
		return nil, err
	}
	boot, err := ParseAddrInfos(cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	relays, err := ParseAddrInfos(cfg.Relays)
	if err != nil {
		return nil, err
	}
	if err := ValidateReachability(cfg.Reachability); err != nil {
		return nil, fmt.Errorf("p2p: %w", err)
	}
	if cfg.RelayService != nil {
		if err := cfg.RelayService.Validate(); err != nil {
			return nil, fmt.Errorf("p2p: relay service: %w", err)
		}
	}
	n := &Node{log: cfg.Log, bootstrap: boot, topics: map[string]*pubsub.Topic{},
		reach: ReachabilityUnknown, circuits: map[peer.ID][]ma.Multiaddr{},
		frameTimeout: cfg.FrameTimeout}
	if n.frameTimeout <= 0 {
		n.frameTimeout = DefaultFrameTimeout
	}
	rm, err := resourceManager(cfg.Protocols)
	if err != nil {
		return nil, err
	}
	opts := []libp2p.Option{
		libp2p.Identity(cfg.Key),
		libp2p.ListenAddrStrings(listen...),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Muxer(yamux.ID, muxer()),
		libp2p.Transport(libp2pquic.NewTransport),
		// NAT traversal: the circuit relay v2 transport (dialling peers
		// behind NAT through their relay, accepting relayed connections),
		// AutoNAT v1 and v2 (client and dial-back service), auto-relay,
		// DCUtR hole punching, and circuits through static relays in the
		// host's addresses.
		libp2p.EnableRelay(),
		libp2p.EnableNATService(),
		libp2p.EnableAutoNATv2(),
		libp2p.EnableHolePunching(),
		libp2p.EnableAutoRelayWithPeerSource(n.relayPeerSource),
		libp2p.AddrsFactory(n.addrsFactory),
		libp2p.ResourceManager(rm),
		// libp2p's Prometheus collectors register with the default
		// registry, which the daemon does not serve (its /metrics is its
		// own registry, node/metrics): kept, they cost every stream and
		// connection their bookkeeping for nothing.
		libp2p.DisableMetrics(),
	}
	switch cfg.Reachability {
	case ReachabilityPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachabilityPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		_ = rm.Close()
		return nil, fmt.Errorf("p2p: start host: %w", err)
	}
	n.raw, n.Host = h, limitedOK{h}
	// libp2p's ping service is on (libp2p.Ping is true by default): peers
	// measure their round trips to this node with it, and it to them.
	n.rtts = NewRTTs(func(ctx context.Context, p peer.ID) (time.Duration, error) { return PingRTT(ctx, n.Host, p) }, nil)
	pctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if err := n.watchReachability(pctx); err != nil {
		cancel()
		_ = h.Close()
		return nil, err
	}
	if cfg.RelayService != nil {
		n.relaySvc, err = relay.New(h, relay.WithResources(cfg.RelayService.resources()))
		if err != nil {
			cancel()
			_ = h.Close()
			return nil, fmt.Errorf("p2p: start relay service: %w", err)
		}
		n.log.Info("relay service on", "max_reservations", cfg.RelayService.resources().MaxReservations,
			"max_circuits", cfg.RelayService.resources().MaxCircuits)
	}
	validity := cfg.ProvideValidity
	if validity <= 0 {
		validity = 24 * time.Hour
	}
	nv := record.NamespacedValidator{"pk": record.PublicKeyValidator{}}
	for ns, v := range cfg.Validators {
		nv[ns] = v
	}
	kad, err := dht.New(h,
		// A server unless AutoNAT (or the operator) says the node is
		// private; then a client, which others cannot dial.
		dht.Mode(dht.ModeAutoServer),
		dht.ProtocolPrefix(ProtocolPrefix),
		dht.Validator(nv),
		dht.BootstrapPeers(boot...),
		dht.ProviderManagerOpts(records.ProvideValidity(validity)),
		dht.MaxRecordAge(validity),
		// A sender that checks answers before kad-dht reads them: a peer's
		// empty answer to a put crashed kad-dht (dhtsender.go).
		dht.WithCustomMessageSender(newDHTSender),
	)
	if err != nil {
		n.closeRelay()
		cancel()
		_ = h.Close()
		return nil, fmt.Errorf("p2p: start dht: %w", err)
	}
	n.natMu.Lock()
	n.DHT = kad
	n.natMu.Unlock()
	disc, err := topicDiscovery(drouting.NewRoutingDiscovery(kad))
	if err == nil {
		disc = topicAdvertiser{Discovery: disc, rt: kad.RoutingTable().Size, validity: validity, poll: time.Second}
		n.Links = NewLinks()
		n.PubSub, err = pubsub.NewGossipSub(pctx, h, GossipOptions(disc, n.Links)...)
	}
	if err != nil {
		cancel()
		n.closeRelay()
		_ = kad.Close()
		_ = h.Close()
		return nil, fmt.Errorf("p2p: start gossipsub: %w", err)
	}
	for _, ai := range relays {
		first := make(chan struct{})
		n.firstReserve = append(n.firstReserve, first)
		go n.keepReservation(pctx, ai, first)
	}
	if cfg.MDNS {
		n.mdns = mdns.NewMdnsService(h, "gpumesh", mdnsNotifee{n})
		if err := n.mdns.Start(); err != nil {
			n.log.Warn("mdns disabled", "err", err)
			n.mdns = nil
		}
	}
	return n, nil
}

// portsFree refuses listen addresses whose fixed TCP or UDP port a socket
// already holds. libp2p's TCP transport listens with SO_REUSEPORT (dials
// then leave from the listen port, which TCP hole punching needs), and
// the kernel lets another SO_REUSEPORT socket of the same user bind the
// same port: a second daemon on the port started and took half the
// first's incoming connections. A probe bind without SO_REUSEPORT fails
// while any socket holds the port, so the second stops here instead,
// short of two starting in the same instant. Port 0 (any free port) is
// not probed.
func portsFree(listen []string) error {
	for _, a := range listen {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return fmt.Errorf("p2p: listen address %q: %w", a, err)
		}
		var host string
		for _, p := range []int{ma.P_IP4, ma.P_IP6} {
			if v, err := m.ValueForProtocol(p); err == nil {
				host = v
			}
		}
		for _, p := range []struct {
			code int
			net  string
		}{{ma.P_TCP, "tcp"}, {ma.P_UDP, "udp"}} {
			port, err := m.ValueForProtocol(p.code)
			if err != nil || port == "0" || host == "" {
				continue
			}
			addr := net.JoinHostPort(host, port)
			var c io.Closer
			if p.net == "tcp" {
				c, err = net.Listen("tcp", addr)
			} else {
				c, err = net.ListenPacket("udp", addr)
			}
			if err != nil {
				return fmt.Errorf("p2p: listen port %s/%s on %s is in use (another gpumesh daemon?): %w", port, p.net, host, errors.Unwrap(err))
			}
			_ = c.Close()
		}
	}
	return nil
}

// measureRTTEvery is how often a TCP connection's stream multiplexer pings
// its peer to re-measure the round-trip time (yamux's default is every
// 30 s, on top of its keep-alive pings, from both ends: on a node connected
// to every peer of a small network that was a steady stream of wake-ups).
// The RTT only tunes receive windows; the keep-alive (a ping after 30 s
// without traffic) still detects dead connections.
const measureRTTEvery = 5 * time.Minute

// muxer is libp2p's yamux transport with measureRTTEvery.
func muxer() *yamux.Transport {
	c := *yamux.DefaultTransport.Config()
	c.MeasureRTTInterval = measureRTTEvery
	return (*yamux.Transport)(&c)
}

// GossipOptions are the GossipSub options of every gossiping node:
// messages of at most MaxGossipMessage, unsigned and named by their
// content, peer exchange on prune, and disc (nil: none) to find a topic's
// other subscribers.
//
// Every payload gossiped is signed by its author already (a call carries
// its job sealed by the renter, a receipt both parties' signatures), and
// receivers check that signature, so GossipSub's own (StrictSign: the
// publisher signs each message, every receiver checks it) only repeated
// the work: it was 8 % of the network's CPU per job. Unsigned messages
// carry no author or sequence number, so a message's ID is the hash of
// its topic and data (MessageID): no two payloads are alike (a re-offered
// job is a new attempt), and a byte-identical replay is dropped as seen.
// Peers on the old policy reject these messages, and these peers theirs:
// the topics' protocol versions changed with it. links, where not nil,
// follows the router's streams for WaitTopicPeer and PublishTo.
func GossipOptions(disc discovery.Discovery, links *Links) []pubsub.Option {
	opts := []pubsub.Option{
		pubsub.WithMaxMessageSize(MaxGossipMessage),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign),
		pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(MessageID),
		pubsub.WithPeerExchange(true),
		pubsub.WithPeerOutboundQueueSize(gossipQueue),
	}
	if disc != nil {
		opts = append(opts, pubsub.WithDiscovery(disc))
	}
	if links != nil {
		opts = append(opts, pubsub.WithRawTracer(links))
	}
	return opts
}

// gossipQueue is how many gossip messages wait for each peer, and for each
// local subscriber, before GossipSub drops more (its default is 32). A
// burst (a renter posting many calls, receipts settling together) used to
// be slowed on its way in by GossipSub's own signature checks; without
// them a burst of 60 to a subscriber taking 200 µs a message kept only
// 33-35, and lost the same tail each time it was sent again.
const gossipQueue = 256

// MessageID names a gossiped message by the SHA-256 of its topic and
// data (GossipSub's message ID function here): copies of one message are
// one message, on the same topic only.
func MessageID(m *pb.Message) string {
	h := sha256.New()
	h.Write([]byte(m.GetTopic()))
	h.Write([]byte{0})
	h.Write(m.Data)
	return string(h.Sum(nil))
}

// discoveryPollInterval is how often GossipSub checks its topics for too
// few peers and asks topic discovery again (the library's default is every
// second). Joining a topic asks at once; retries are answered from
// topicDiscovery's cache for at least 30 s, and connecting to the peers it
// returns backs off for 10 s or more, so polling every second only spent
// wake-ups and goroutines on an idle node.
const discoveryPollInterval = 10 * time.Second

func init() {
	// A package variable of go-libp2p-pubsub, read when a GossipSub router
	// starts: the daemon's, and the harnesses' that take GossipOptions.
	pubsub.DiscoveryPollInterval = discoveryPollInterval
}

// topicDiscovery finds a topic's subscribers through disc (the DHT),
// asking again for the same topic only after a backoff (30 s, growing
// to 10 min while the answer does not change, reset when it does).
// GossipSub asks every second for each topic with fewer than its low-water
// mark of peers, and a market topic (a region's GPU model) often has only
// a few subscribers: without the backoff every node would run a DHT lookup
// per such topic every second, forever. Subscribers still find a new one
// at once, since a newcomer looks them up (its cache is empty) and
// connects.
func topicDiscovery(disc discovery.Discovery) (discovery.Discovery, error) {
	rng := mrand.New(mrand.NewSource(time.Now().UnixNano()))
	return backoff.NewBackoffDiscovery(disc,
		backoff.NewExponentialBackoff(30*time.Second, 10*time.Minute, backoff.FullJitter, time.Second, 2, 0, rng))
}

type mdnsNotifee struct{ n *Node }

func (m mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.n.Host.Connect(ctx, ai)
}

func (n *Node) closeRelay() {
	if n.relaySvc != nil {
		_ = n.relaySvc.Close()
	}
}

// RTTs is what the node measured of the round trips to its peers.
func (n *Node) RTTs() *RTTs { return n.rtts }

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.Host.ID() }

// Addrs returns the node's addresses with its /p2p/ID suffix: those it
// listens on and, once it holds a relay reservation, its /p2p-circuit
// addresses through that relay.
func (n *Node) Addrs() []string {
	var out []string
	for _, a := range n.Host.Addrs() {
		out = append(out, a.String()+"/p2p/"+n.ID().String())
	}
	return out
}

// Bootstrap connects to the configured bootstrap peers (succeeding if at
// least one answers, or if none is configured), refreshes the routing table
// and waits for the first reservation attempt on each static relay, so that
// Addrs then carries the circuits granted.
func (n *Node) Bootstrap(ctx context.Context) error {
	var ok int
	var lastErr error
	for _, ai := range n.bootstrap {
		if ai.ID == n.ID() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := n.Host.Connect(cctx, ai)
		cancel()
		if err != nil {
			lastErr = err
			n.log.Warn("bootstrap peer unreachable", "peer", ai.ID, "err", err)
			continue
		}
		ok++
	}
	if err := n.DHT.Bootstrap(ctx); err != nil {
		return fmt.Errorf("p2p: dht bootstrap: %w", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	n.waitReservations(wctx)
	wcancel()
	if ok == 0 && lastErr != nil {
		return fmt.Errorf("p2p: no bootstrap peer reachable: %w", lastErr)
	}
	if ok > 0 {
		// Populate the routing table now rather than on the next refresh.
		select {
		case err := <-n.DHT.RefreshRoutingTable():
			if err != nil {
				n.log.Debug("routing table refresh", "err", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// KeepConnected re-dials the bootstrap peers whenever the node has lost
// every connection (after a partition, or when it started before them):
// at once when its last connection closes (the host's connectedness
// events say so), and while none of them answers, again every retry,
// until ctx ends.
func (n *Node) KeepConnected(ctx context.Context, retry time.Duration) {
	if len(n.bootstrap) == 0 {
		return
	}
	sub, err := n.Host.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged))
	if err != nil {
		n.log.Warn("connectedness events", "err", err)
		return
	}
	defer sub.Close()
	// The peers connected, as the events tell it: the network's own peer
	// list may still hold a peer whose last connection is closing when
	// the event comes, and no event would follow to look again. The events
	// are drained at once (the bus waits on slow subscribers), into one
	// pending wake-up.
	var mu sync.Mutex
	connected := map[peer.ID]bool{}
	for _, p := range n.Host.Network().Peers() {
		connected[p] = true
	}
	alone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(connected) == 0
	}
	wake := make(chan struct{}, 1)
	go func() {
		for e := range sub.Out() {
			ev := e.(event.EvtPeerConnectednessChanged)
			mu.Lock()
			if ev.Connectedness == network.Connected {
				connected[ev.Peer] = true
			} else {
				delete(connected, ev.Peer)
			}
			mu.Unlock()
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	// again is pending while a re-dial waits for its turn: at most one
	// every retry (a network retry), so that a peer that drops each new
	// connection does not make the node dial it in a loop.
	var again <-chan time.Time
	var last time.Time
	for {
		// Subscribed before this look: a loss after it wakes the loop.
		if again == nil && alone() {
			if wait := retry - time.Since(last); !last.IsZero() && wait > 0 {
				again = time.After(wait)
			} else {
				n.log.Info("no peers left; re-dialling bootstrap peers")
				last = time.Now()
				if err := n.Bootstrap(ctx); err != nil && ctx.Err() == nil {
					n.log.Debug("re-bootstrap", "err", err)
				}
				if len(n.Host.Network().Peers()) == 0 {
					again = time.After(retry)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-again:
			again = nil
		}
	}
}

// Close leaves the network: it stops GossipSub and the DHT and closes the
// host and its connections.
func (n *Node) Close() error {
	n.cancel()
	n.closeRelay()
	if n.mdns != nil {
		_ = n.mdns.Close()
	}
	n.mu.Lock()
	for _, t := range n.topics {
		_ = t.Close()
	}
	n.topics = nil
	n.mu.Unlock()
	err1 := n.DHT.Close()
	err2 := n.Host.Close()
	return errors.Join(err1, err2)
}

// Topic joins a GossipSub topic once and returns the shared handle.
func (n *Node) Topic(name string) (*pubsub.Topic, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.topics == nil {
		return nil, errors.New("p2p: node closed")
	}
	if t, ok := n.topics[name]; ok {
		return t, nil
	}
	t, err := n.PubSub.Join(name)
	if err != nil {
		return nil, fmt.Errorf("p2p: join %s: %w", name, err)
	}
	n.topics[name] = t
	return t, nil
}

// Publish gossips data on a topic. When no subscriber of the topic is
// reachable yet (right after start-up), it waits for one, bounded by 3s and
// ctx, so a call is not published into the void; then it publishes
// regardless.
func (n *Node) Publish(ctx context.Context, topic string, data []byte) error {
	t, err := n.Topic(topic)
	if err != nil {
		return err
	}
	return PublishTo(ctx, t, n.Links, data)
}

// PublishTo is Publish on a joined topic of any GossipSub router, whose
// streams links follows (nil: any subscriber known will do).
func PublishTo(ctx context.Context, t *pubsub.Topic, links *Links, data []byte) error {
	if !reachable(t, links) {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_ = WaitTopicPeer(wctx, t, links, nil)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return t.Publish(ctx, data)
}

// reachable: some subscriber of t is known and, with links, has a stream.
func reachable(t *pubsub.Topic, links *Links) bool {
	for _, p := range t.ListPeers() {
		if links == nil || links.Open(p) {
			return true
		}
	}
	return false
}

// Subscribe delivers every message on topic (except our own) to fn until ctx
// ends, with the peer that forwarded it (gossip is unsigned: a message's
// author is whoever signed its payload). fn runs on the subscription's
// goroutine.
func (n *Node) Subscribe(ctx context.Context, topic string, fn func(from peer.ID, data []byte)) error {
	t, err := n.Topic(topic)
	if err != nil {
		return err
	}
	sub, err := t.Subscribe(pubsub.WithBufferSize(gossipQueue))
	if err != nil {
		return fmt.Errorf("p2p: subscribe %s: %w", topic, err)
	}
	go func() {
		defer sub.Cancel()
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				return
			}
			if msg.ReceivedFrom == n.ID() {
				continue
			}
			fn(msg.ReceivedFrom, msg.Data)
		}
	}()
	return nil
}

// KeyCID maps a discovery key (e.g. "gpu/h100") to a CID for DHT provider
// records.
func KeyCID(key string) cid.Cid {
	h, _ := mh.Sum([]byte("gpumesh:"+key), mh.SHA2_256, -1)
	return cid.NewCidV1(cid.Raw, h)
}

// Provide announces this node under a discovery key.
func (n *Node) Provide(ctx context.Context, key string) error {
	return n.DHT.Provide(ctx, KeyCID(key), true)
}

// ParseAddrInfos parses multiaddrs carrying /p2p/ID into peer infos.
func ParseAddrInfos(addrs []string) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("p2p: bootstrap address %q: %w", s, err)
		}
		ai, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil {
			return nil, fmt.Errorf("p2p: bootstrap address %q must end in /p2p/<peer id>: %w", s, err)
		}
		out = append(out, *ai)
	}
	return out, nil
}

// LoadOrCreateKey reads the Ed25519 identity key at path, creating it (0600)
// on first use. A key file readable by others is refused.
func LoadOrCreateKey(path string) (crypto.PrivKey, error) {
	priv, err := LoadKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return priv, err
	}
	if priv, err = NewKey(); err != nil {
		return nil, err
	}
	if err := WriteKey(path, priv); err != nil {
		return nil, err
	}
	return priv, nil
}

// Signer is the signing core's signer for an identity key: the same
// Ed25519 key, so the signer's ID is the host's peer ID. A key of any other
// type is refused (gpumesh identities are Ed25519 only: their peer IDs
// inline the public key every signature is checked against).
func Signer(priv crypto.PrivKey) (*sign.Signer, error) {
	if priv == nil {
		return nil, errors.New("p2p: nil identity key")
	}
	if priv.Type() != cryptopb.KeyType_Ed25519 {
		return nil, fmt.Errorf("p2p: identity key is %s, not Ed25519", priv.Type())
	}
	raw, err := priv.Raw()
	if err != nil {
		return nil, fmt.Errorf("p2p: identity key: %w", err)
	}
	return sign.NewSigner(ed25519.PrivateKey(raw))
}

// NewKey makes a fresh Ed25519 identity key.
func NewKey() (crypto.PrivKey, error) {
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("p2p: generate key: %w", err)
	}
	return priv, nil
}

// LoadKey reads the identity key at path. A missing file is an error
// matching os.ErrNotExist; a key file readable by others is refused.
func LoadKey(path string) (crypto.PrivKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("p2p: no key file %s: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("p2p: read key: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("p2p: key file %s is accessible by other users (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	priv, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("p2p: key file %s is corrupt: %w", path, err)
	}
	return priv, nil
}

// WriteKey writes priv to path (0600), replacing it atomically: the file
// is written and synced aside, then renamed into place.
func WriteKey(path string, priv crypto.PrivKey) error {
	raw, err := crypto.MarshalPrivateKey(priv)
	if err != nil {
		return fmt.Errorf("p2p: encode key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("p2p: key dir: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("p2p: write key: %w", err)
	}
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("p2p: write key: %w", err)
	}
	return nil
}
