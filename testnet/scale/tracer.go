package scale

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// tracer counts, for every call for bids, the gossip messages that carry
// or name it (GossipSub message ids), received anywhere in the network, and
// the nodes that received it.
type tracer struct {
	mu    sync.Mutex
	order []string // calls' message ids, in the order the renter sent them
	sent  map[string]bool
	msgs  map[string]int
	recv  map[string]map[int]bool
	total int
	// mesh is each node's GossipSub mesh size per topic.
	mesh map[int]map[string]int
}

type callCount struct{ messages, receivers int }

func newTracer() *tracer {
	return &tracer{sent: map[string]bool{}, msgs: map[string]int{}, recv: map[string]map[int]bool{}, mesh: map[int]map[string]int{}}
}

// node is node idx's pubsub.RawTracer; the renter's also records the calls
// it publishes.
func (t *tracer) node(idx int, renter bool) pubsub.RawTracer {
	return &nodeTracer{t: t, idx: idx, renter: renter}
}

// settle waits until no message was counted for quiet (or until limit).
func (t *tracer) settle(ctx context.Context, quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last, since := -1, time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		t.mu.Lock()
		n := t.total
		t.mu.Unlock()
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// perCall returns each call's counts, in publish order.
func (t *tracer) perCall() []callCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]callCount, len(t.order))
	for i, id := range t.order {
		out[i] = callCount{messages: t.msgs[id], receivers: len(t.recv[id])}
	}
	return out
}

func isCall(topic string) bool { return strings.HasPrefix(topic, auction.TopicPrefix) }

type nodeTracer struct {
	t      *tracer
	idx    int
	renter bool
}

func (n *nodeTracer) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	if !n.renter {
		return
	}
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	for _, m := range rpc.GetPublish() {
		if id := p2p.MessageID(m); isCall(m.GetTopic()) && !n.t.sent[id] {
			n.t.sent[id] = true
			n.t.order = append(n.t.order, id)
		}
	}
}

func (n *nodeTracer) RecvRPC(rpc *pubsub.RPC) {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	count := func(id string) { t.msgs[id]++; t.total++ }
	for _, m := range rpc.GetPublish() {
		if !isCall(m.GetTopic()) {
			continue
		}
		id := p2p.MessageID(m)
		count(id)
		if t.recv[id] == nil {
			t.recv[id] = map[int]bool{}
		}
		t.recv[id][n.idx] = true
	}
	ctl := rpc.GetControl()
	for _, ih := range ctl.GetIhave() {
		if isCall(ih.GetTopicID()) {
			for _, id := range ih.GetMessageIDs() {
				count(id)
			}
		}
	}
	// IWANT and IDONTWANT name no topic; only calls' ids are reported.
	for _, iw := range ctl.GetIwant() {
		for _, id := range iw.GetMessageIDs() {
			count(id)
		}
	}
	for _, idw := range ctl.GetIdontwant() {
		for _, id := range idw.GetMessageIDs() {
			count(id)
		}
	}
}

func (n *nodeTracer) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (n *nodeTracer) OnClosedOutboundStream(peer.ID)                       {}
func (n *nodeTracer) Join(string)                                          {}
func (n *nodeTracer) Leave(string)                                         {}
func (n *nodeTracer) ValidateMessage(*pubsub.Message)                      {}
func (n *nodeTracer) DeliverMessage(*pubsub.Message)                       {}
func (n *nodeTracer) RejectMessage(*pubsub.Message, string)                {}
func (n *nodeTracer) DuplicateMessage(*pubsub.Message)                     {}
func (n *nodeTracer) ThrottlePeer(peer.ID)                                 {}
func (n *nodeTracer) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (n *nodeTracer) DropRPC(*pubsub.RPC, peer.ID)                         {}
func (n *nodeTracer) UndeliverableMessage(*pubsub.Message)                 {}

func (n *nodeTracer) Graft(_ peer.ID, topic string) { n.t.meshAdd(n.idx, topic, 1) }
func (n *nodeTracer) Prune(_ peer.ID, topic string) { n.t.meshAdd(n.idx, topic, -1) }

func (t *tracer) meshAdd(idx int, topic string, d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mesh[idx] == nil {
		t.mesh[idx] = map[string]int{}
	}
	t.mesh[idx][topic] += d
}

// meshSize is node idx's mesh size on topic.
func (t *tracer) meshSize(idx int, topic string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mesh[idx][topic]
}
