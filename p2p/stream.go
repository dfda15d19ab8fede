package p2p

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// MaxFrame bounds one framed message on a request/response stream.
const MaxFrame = 1 << 20

// ErrFrameTooLarge is returned for frames above MaxFrame.
var ErrFrameTooLarge = errors.New("p2p: frame too large")

// WriteFrame writes a uvarint length-prefixed frame.
func WriteFrame(w io.Writer, b []byte) error {
	if len(b) > MaxFrame {
		return ErrFrameTooLarge
	}
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(b)))
	if _, err := w.Write(hdr[:n]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame written by WriteFrame.
func ReadFrame(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > MaxFrame {
		return nil, ErrFrameTooLarge
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
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
// cannot be read (garbage, truncated, or a length over MaxFrame): such a
// stream is reset before the handler sees anything, so this is the only
// place it can be counted.
func (n *Node) HandleCounted(proto protocol.ID, h Handler, onBad func()) {
	n.mu.Lock()
	if n.handlers == nil {
		n.handlers = map[protocol.ID]Handler{}
	}
	n.handlers[proto] = h
	n.mu.Unlock()
	serve(n.Host, proto, h, onBad)
}

// Serve registers a request/response handler for proto on any host (Handle
// on a Node; harnesses that build their own hosts use it directly).
func Serve(hst host.Host, proto protocol.ID, h Handler) { serve(hst, proto, h, nil) }

func serve(hst host.Host, proto protocol.ID, h Handler, onBad func()) {
	hst.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(30 * time.Second))
		req, err := ReadFrame(bufio.NewReader(s))
		if err != nil {
			if onBad != nil {
				onBad()
			}
			_ = s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		resp, herr := h(ctx, s.Conn().RemotePeer(), req)
		if herr != nil {
			_, _ = s.Write([]byte{statusErr})
			_ = WriteFrame(s, []byte(herr.Error()))
			return
		}
		_, _ = s.Write([]byte{statusOK})
		_ = WriteFrame(s, resp)
	})
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
	return RequestOn(ctx, n.Host, to, proto, req)
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
	if err := WriteFrame(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	br := bufio.NewReader(s)
	st, err := br.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("p2p: %s response from %s: %w", proto, to, err)
	}
	resp, err := ReadFrame(br)
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
