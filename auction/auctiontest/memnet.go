package auctiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// ErrUnreachable is returned by MemTransport for unknown or dropped peers.
var ErrUnreachable = errors.New("auctiontest: peer unreachable")

// MemHandlers are a peer's message handlers on a MemNetwork; nil handlers
// refuse the message. A call comes to OnCall when sent to the peer
// (SendCall, a provider's ProtoCall) and to OnGossipedCall when heard on a
// topic it subscribes to (Publish), as a daemon tells them apart.
type MemHandlers struct {
	OnCall         func(from peer.ID, data []byte) ([]byte, error)
	OnGossipedCall func(from peer.ID, data []byte) error
	OnBid          func(from peer.ID, data []byte) error
	OnAward        func(from peer.ID, data []byte) ([]byte, error)
}

// MemNetwork is an in-memory Transport fabric for tests and simulations:
// Publish reaches every other subscriber of the topic asynchronously, like
// gossip; SendBid and SendAward call the target's handler directly. Besides
// the auction's messages it carries any request/response protocol
// (OnRequest, Request) and topic (OnTopic), so a whole market, lease
// lifecycle included, runs on it. A dropped peer neither sends nor
// receives.
type MemNetwork struct {
	mu      sync.Mutex
	peers   map[peer.ID]*MemTransport
	subs    map[string]map[peer.ID]bool
	dropped map[peer.ID]bool
	wg      sync.WaitGroup
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{peers: map[peer.ID]*MemTransport{}, subs: map[string]map[peer.ID]bool{}, dropped: map[peer.ID]bool{}}
}

// MemTransport is one peer's Transport on a MemNetwork.
type MemTransport struct {
	net    *MemNetwork
	id     peer.ID
	mu     sync.Mutex
	h      MemHandlers
	protos map[protocol.ID]MemRequestHandler
	topics map[string]func(from peer.ID, data []byte)
}

// MemRequestHandler answers a request of one protocol.
type MemRequestHandler func(ctx context.Context, from peer.ID, data []byte) ([]byte, error)

// Join attaches a peer to the network (replacing an earlier attachment).
func (n *MemNetwork) Join(id peer.ID) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := &MemTransport{net: n, id: id, protos: map[protocol.ID]MemRequestHandler{}, topics: map[string]func(peer.ID, []byte){}}
	n.peers[id] = t
	return t
}

// Drop makes a peer unreachable until Restore.
func (n *MemNetwork) Drop(id peer.ID) {
	n.mu.Lock()
	n.dropped[id] = true
	n.mu.Unlock()
}

// Restore makes a dropped peer reachable again.
func (n *MemNetwork) Restore(id peer.ID) {
	n.mu.Lock()
	delete(n.dropped, id)
	n.mu.Unlock()
}

// Wait blocks until all gossip deliveries in flight have been handled.
func (n *MemNetwork) Wait() { n.wg.Wait() }

func (n *MemNetwork) reachable(from, to peer.ID) (*MemTransport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dropped[from] {
		return nil, fmt.Errorf("%w: sender %s dropped", ErrUnreachable, from)
	}
	t, ok := n.peers[to]
	if !ok || n.dropped[to] {
		return nil, fmt.Errorf("%w: %s", ErrUnreachable, to)
	}
	return t, nil
}

// ID is the peer this transport speaks for.
func (t *MemTransport) ID() peer.ID { return t.id }

// Handle sets the peer's handlers.
func (t *MemTransport) Handle(h MemHandlers) {
	t.mu.Lock()
	t.h = h
	t.mu.Unlock()
}

func (t *MemTransport) handlers() MemHandlers {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.h
}

// OnRequest sets the peer's handler of protocol proto (nil removes it).
func (t *MemTransport) OnRequest(proto protocol.ID, h MemRequestHandler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h == nil {
		delete(t.protos, proto)
		return
	}
	t.protos[proto] = h
}

// OnTopic subscribes the peer to topic with its own handler (instead of
// OnGossipedCall).
func (t *MemTransport) OnTopic(topic string, fn func(from peer.ID, data []byte)) {
	t.mu.Lock()
	t.topics[topic] = fn
	t.mu.Unlock()
	t.Subscribe(topic)
}

func (t *MemTransport) topicHandler(topic string) func(peer.ID, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fn := t.topics[topic]; fn != nil {
		return fn
	}
	if t.h.OnGossipedCall == nil {
		return nil
	}
	return func(from peer.ID, data []byte) { _ = t.h.OnGossipedCall(from, data) }
}

// Request calls the target's handler of proto and returns its answer, or
// the context's error if it does not answer in time.
func (t *MemTransport) Request(ctx context.Context, to peer.ID, proto protocol.ID, data []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dst, err := t.net.reachable(t.id, to)
	if err != nil {
		return nil, err
	}
	dst.mu.Lock()
	h := dst.protos[proto]
	dst.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("%w: %s does not speak %s", ErrUnreachable, to, proto)
	}
	return call(ctx, func() ([]byte, error) { return h(ctx, t.id, append([]byte(nil), data...)) })
}

// call runs f and returns its answer, or ctx's error if that comes first.
func call(ctx context.Context, f func() ([]byte, error)) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := f()
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Subscribe adds topics the peer hears calls on.
func (t *MemTransport) Subscribe(topics ...string) {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	for _, topic := range topics {
		if t.net.subs[topic] == nil {
			t.net.subs[topic] = map[peer.ID]bool{}
		}
		t.net.subs[topic][t.id] = true
	}
}

// Publish delivers data to every other reachable subscriber of topic.
func (t *MemTransport) Publish(ctx context.Context, topic string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	if n.dropped[t.id] {
		n.mu.Unlock()
		return fmt.Errorf("%w: sender %s dropped", ErrUnreachable, t.id)
	}
	var targets []*MemTransport
	for id := range n.subs[topic] {
		if id != t.id && !n.dropped[id] {
			targets = append(targets, n.peers[id])
		}
	}
	n.mu.Unlock()
	msg := append([]byte(nil), data...)
	for _, to := range targets {
		h := to.topicHandler(topic)
		if h == nil {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			h(t.id, msg)
		}()
	}
	return nil
}

// SendCall calls the provider's call handler (OnCall) and returns its
// answer (its bid or decline, or nothing) and error, as the daemon's
// ProtoCall does; or the context's error if it does not answer in time.
func (t *MemTransport) SendCall(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dst, err := t.net.reachable(t.id, to)
	if err != nil {
		return nil, err
	}
	h := dst.handlers().OnCall
	if h == nil {
		return nil, fmt.Errorf("%w: %s takes no calls", ErrUnreachable, to)
	}
	msg := append([]byte(nil), data...)
	return call(ctx, func() ([]byte, error) { return h(t.id, msg) })
}

// SendBid calls the renter's bid handler and returns its error, or the
// context's error if it does not answer in time (like a stream deadline).
func (t *MemTransport) SendBid(ctx context.Context, to peer.ID, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dst, err := t.net.reachable(t.id, to)
	if err != nil {
		return err
	}
	h := dst.handlers().OnBid
	if h == nil {
		return fmt.Errorf("%w: %s takes no bids", ErrUnreachable, to)
	}
	done := make(chan error, 1)
	msg := append([]byte(nil), data...)
	go func() { done <- h(t.id, msg) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SendAward calls the provider's award handler and returns its confirm, or
// the context's error if it does not answer in time.
func (t *MemTransport) SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	dst, err := t.net.reachable(t.id, to)
	if err != nil {
		return nil, err
	}
	h := dst.handlers().OnAward
	if h == nil {
		return nil, fmt.Errorf("%w: %s takes no awards", ErrUnreachable, to)
	}
	msg := append([]byte(nil), data...)
	return call(ctx, func() ([]byte, error) { return h(t.id, msg) })
}
