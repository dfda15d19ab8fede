package p2p

import (
	"context"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// Links follows the peers a GossipSub router can send to. A peer is listed
// on a topic as soon as its subscription arrives over its stream to us, but
// what we publish reaches it only once our own stream to it is open: the
// router opens that stream after identify, and a message published before
// then is dropped ("no send queue for peer"). A router built with
// GossipOptions(..., links) reports its streams here; WaitTopicPeer and
// PublishTo wait on both.
type Links struct {
	mu      sync.Mutex
	open    map[peer.ID]bool
	changed broadcast.Signal
}

// NewLinks returns an empty Links for one router.
func NewLinks() *Links { return &Links{open: map[peer.ID]bool{}} }

// Open reports whether the router has a stream open to p.
func (l *Links) Open(p peer.ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[p]
}

func (l *Links) set(p peer.ID, open bool) {
	l.mu.Lock()
	if open {
		l.open[p] = true
	} else {
		delete(l.open, p)
	}
	l.mu.Unlock()
	l.changed.Notify()
}

// The router's tracer hooks; only its outbound streams matter here.

func (l *Links) OnNewOutboundStream(p peer.ID, _ protocol.ID)       { l.set(p, true) }
func (l *Links) OnClosedOutboundStream(p peer.ID)                   { l.set(p, false) }
func (*Links) Join(string)                                          {}
func (*Links) Leave(string)                                         {}
func (*Links) Graft(peer.ID, string)                                {}
func (*Links) Prune(peer.ID, string)                                {}
func (*Links) ValidateMessage(*pubsub.Message)                      {}
func (*Links) DeliverMessage(*pubsub.Message)                       {}
func (*Links) RejectMessage(*pubsub.Message, string)                {}
func (*Links) DuplicateMessage(*pubsub.Message)                     {}
func (*Links) ThrottlePeer(peer.ID)                                 {}
func (*Links) RecvRPC(*pubsub.RPC)                                  {}
func (*Links) SendRPC(*pubsub.RPC, peer.ID)                         {}
func (*Links) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (*Links) DropRPC(*pubsub.RPC, peer.ID)                         {}
func (*Links) UndeliverableMessage(*pubsub.Message)                 {}

var _ pubsub.RawTracer = (*Links)(nil)

// WaitTopicPeer waits until t knows a subscriber that want accepts (any,
// when want is nil) and, where links is not nil, the router has its stream
// to that subscriber open, so a publish made now reaches it; or until ctx
// ends. It wakes on the router's join and leave events and on links'
// changes, not on a timer: the peers known already come first, as joins.
func WaitTopicPeer(ctx context.Context, t *pubsub.Topic, links *Links, want func(peer.ID) bool) error {
	h, err := t.EventHandler()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan pubsub.PeerEvent)
	go func() {
		defer h.Cancel()
		for {
			ev, err := h.NextPeerEvent(ctx)
			if err != nil {
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	joined := map[peer.ID]bool{}
	for {
		var linked <-chan struct{}
		if links != nil {
			linked = links.changed.Wait()
		}
		for p := range joined {
			if links == nil || links.Open(p) {
				return nil
			}
		}
		select {
		case ev := <-events:
			switch {
			case want != nil && !want(ev.Peer):
			case ev.Type == pubsub.PeerJoin:
				joined[ev.Peer] = true
			case ev.Type == pubsub.PeerLeave:
				delete(joined, ev.Peer)
			}
		case <-linked:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
