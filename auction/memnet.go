package auction

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ErrUnreachable is returned by MemTransport for unknown or dropped peers.
var ErrUnreachable = errors.New("auction: peer unreachable")

// MemHandlers are a peer's message handlers on a MemNetwork; nil handlers
// refuse the message.
type MemHandlers struct {
	OnCall  func(from peer.ID, data []byte) error
	OnBid   func(from peer.ID, data []byte) error
	OnAward func(from peer.ID, data []byte) ([]byte, error)
}

// MemNetwork is an in-memory Transport fabric for tests and simulations:
// Publish reaches every other subscriber of the topic asynchronously, like
// gossip; SendBid and SendAward call the target's handler directly. A
// dropped peer neither sends nor receives.
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
	net *MemNetwork
	id  peer.ID
	mu  sync.Mutex
	h   MemHandlers
}

// Join attaches a peer to the network (replacing an earlier attachment).
func (n *MemNetwork) Join(id peer.ID) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := &MemTransport{net: n, id: id}
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
		h := to.handlers().OnCall
		if h == nil {
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = h(t.id, msg)
		}()
	}
	return nil
}

// SendBid calls the renter's bid handler and returns its error, or the
// context's error if it does not answer in time (like a stream deadline).
func (t *MemTransport) SendBid(ctx context.Context, to peer.ID, _ []string, data []byte) error {
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
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	msg := append([]byte(nil), data...)
	go func() {
		b, err := h(t.id, msg)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
