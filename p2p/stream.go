package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// DefaultFrameTimeout is how long a peer may take to send a request frame
// on a served stream before the stream is reset.
const DefaultFrameTimeout = 10 * time.Second

// ErrFrameMemory is ReadFrameOn's refusal of a frame whose length the
// stream's resource scopes (its protocol's and its peer's frame memory)
// cannot hold now.
var ErrFrameMemory = errors.New("p2p: frame over the protocol's memory limit")

// ReadFrameOn reads a request frame from a served stream: its declared
// length is reserved in the stream's resource scope first (so the
// protocol's and the peer's limits, ProtocolLimit, bound the frames being
// read at once; a large frame fits only while they are at most 60 % used,
// so small ones always find room), and the frame must arrive within
// timeout. release gives
// the reservation back (closing the stream does too).
func ReadFrameOn(s network.Stream, br *bufio.Reader, timeout time.Duration) (b []byte, release func(), err error) {
	release = func() {}
	_ = s.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = s.SetReadDeadline(time.Time{}) }()
	n, err := frame.ReadLen(br)
	if err != nil {
		return nil, release, err
	}
	scope := s.Scope()
	if err := scope.ReserveMemory(int(n), framePriority(n)); err != nil {
		return nil, release, fmt.Errorf("%w: %d bytes: %v", ErrFrameMemory, n, err)
	}
	release = sync.OnceFunc(func() { scope.ReleaseMemory(int(n)) })
	b, err = frame.ReadBody(br, n)
	if err != nil {
		release()
		return nil, func() {}, err
	}
	return b, release, nil
}

// Handler answers one request frame. A nil response with nil error sends an
// empty frame; an error is sent back as an error frame.
type Handler func(ctx context.Context, from peer.ID, req []byte) ([]byte, error)

const (
	statusOK  = 0
	statusErr = 1
)

// Handle registers a request/response handler for proto. A Request this
// node sends to itself is answered by the same handler, without a stream.
func (n *Node) Handle(proto protocol.ID, h Handler) { n.HandleCounted(proto, h, nil) }

// HandleCounted is Handle with onBad called for each request whose frame
// cannot be read (garbage, truncated, or a length over frame.Max): such a
// stream is reset before the handler sees anything, so this is the only
// place it can be counted.
func (n *Node) HandleCounted(proto protocol.ID, h Handler, onBad func()) {
	n.mu.Lock()
	if n.handlers == nil {
		n.handlers = map[protocol.ID]Handler{}
	}
	n.handlers[proto] = h
	n.mu.Unlock()
	serve(n.Host, proto, h, onBad, n.frameTimeout, n.log)
}

// Serve registers a request/response handler for proto on any host (Handle
// on a Node; harnesses that build their own hosts use it directly).
func Serve(hst host.Host, proto protocol.ID, h Handler) {
	serve(hst, proto, h, nil, DefaultFrameTimeout, slog.Default())
}

func serve(hst host.Host, proto protocol.ID, h Handler, onBad func(), frameTimeout time.Duration, log *slog.Logger) {
	hst.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(30 * time.Second))
		req, release, err := ReadFrameOn(s, bufio.NewReader(s), frameTimeout)
		defer release()
		if err != nil {
			if onBad != nil {
				onBad()
			}
			_ = s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		resp, herr := callHandler(ctx, log, h, proto, s.Conn().RemotePeer(), req)
		if herr != nil {
			_, _ = s.Write([]byte{statusErr})
			_ = frame.Write(s, []byte(herr.Error()))
			return
		}
		_, _ = s.Write([]byte{statusOK})
		_ = frame.Write(s, resp)
	})
}

// ErrInternal is what a peer hears when a handler failed inside (a
// panic): the request fails, the node goes on serving.
var ErrInternal = errors.New("internal error")

// callHandler runs h, turning a panic into ErrInternal (logged with its
// stack).
func callHandler(ctx context.Context, log *slog.Logger, h Handler, proto protocol.ID, from peer.ID, req []byte) (resp []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("request handler panicked; request failed", "proto", proto, "peer", from, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, ErrInternal
		}
	}()
	return h(ctx, from, req)
}

// Guard wraps a raw stream handler: a panic in fn resets its stream and is
// logged with its stack, instead of ending the process.
func (n *Node) Guard(proto protocol.ID, fn network.StreamHandler) network.StreamHandler {
	return func(s network.Stream) {
		defer func() {
			if p := recover(); p != nil {
				n.log.Error("stream handler panicked; stream reset", "proto", proto, "peer", s.Conn().RemotePeer(),
					"panic", p, "stack", string(debug.Stack()))
				_ = s.Reset()
			}
		}()
		fn(s)
	}
}

// RemoteError is an error the remote handler returned.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return "remote: " + e.Msg }

// Request opens a stream to peer, sends req and waits for the response. addrs
// (multiaddrs) are added to the peerstore first, when the caller knows them.
func (n *Node) Request(ctx context.Context, to peer.ID, addrs []string, proto protocol.ID, req []byte) ([]byte, error) {
	if to == n.raw.ID() {
		n.mu.Lock()
		h := n.handlers[proto]
		n.mu.Unlock()
		if h == nil {
			return nil, fmt.Errorf("p2p: no %s handler on this node", proto)
		}
		resp, err := h(ctx, to, req)
		if err != nil {
			return nil, &RemoteError{Msg: err.Error()}
		}
		return resp, nil
	}
	n.AddAddrs(to, addrs)
	n.Resolve(ctx, to)
	return RequestOn(ctx, n.Host, to, proto, req)
}

// Direct is a node as the market's messages travel on it: requests to
// peers it reaches by itself (a connection, the peerstore, the DHT; no
// addresses named, see auction.Transport) and gossip. It is the
// lease.Transport and wirenet.Carrier of the daemon and the harnesses.
type Direct struct{ N *Node }

// Request is N.Request without addresses.
func (d Direct) Request(ctx context.Context, to peer.ID, proto protocol.ID, req []byte) ([]byte, error) {
	return d.N.Request(ctx, to, nil, proto, req)
}

// Publish is N.Publish.
func (d Direct) Publish(ctx context.Context, topic string, data []byte) error {
	return d.N.Publish(ctx, topic, data)
}

// Resolve makes sure the peerstore has a way to p: nothing to do while
// connected or while it holds p's addresses (learned from p itself,
// through identify, or earlier lookups); otherwise p is looked up in the
// DHT (within ctx) and the addresses found are kept for 10 minutes. A
// failed lookup leaves the dial to fail with "no addresses".
func (n *Node) Resolve(ctx context.Context, p peer.ID) {
	if p == n.raw.ID() || n.Host.Network().Connectedness(p) == network.Connected || len(n.Host.Peerstore().Addrs(p)) > 0 {
		return
	}
	n.natMu.Lock()
	kad := n.DHT
	n.natMu.Unlock()
	if kad == nil {
		return
	}
	if ai, err := kad.FindPeer(ctx, p); err == nil && len(ai.Addrs) > 0 {
		n.Host.Peerstore().AddAddrs(p, ai.Addrs, 10*time.Minute)
	}
}

// RequestOn is Request from any host, to a peer whose addresses the host
// already knows: it opens a stream, sends req and waits for the response of
// the peer's Serve (or Handle) handler.
func RequestOn(ctx context.Context, h host.Host, to peer.ID, proto protocol.ID, req []byte) ([]byte, error) {
	s, err := h.NewStream(ctx, to, proto)
	if err != nil {
		return nil, fmt.Errorf("p2p: open %s to %s: %w", proto, to, err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	} else {
		_ = s.SetDeadline(time.Now().Add(30 * time.Second))
	}
	if err := frame.Write(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	br := bufio.NewReader(s)
	st, err := br.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("p2p: %s response from %s: %w", proto, to, err)
	}
	resp, err := frame.Read(br)
	if err != nil {
		return nil, fmt.Errorf("p2p: %s response from %s: %w", proto, to, err)
	}
	if st != statusOK {
		return nil, &RemoteError{Msg: string(resp)}
	}
	return resp, nil
}

// AddAddrs records known addresses of a peer (strings that fail to parse are
// ignored; /p2p/ suffixes are stripped).
func (n *Node) AddAddrs(p peer.ID, addrs []string) {
	var ms []ma.Multiaddr
	for _, a := range addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			continue
		}
		if ai, err := peer.AddrInfoFromP2pAddr(m); err == nil {
			if ai.ID != p {
				continue
			}
			ms = append(ms, ai.Addrs...)
			continue
		}
		ms = append(ms, m)
	}
	if len(ms) > 0 {
		n.Host.Peerstore().AddAddrs(p, ms, 10*time.Minute)
	}
}
