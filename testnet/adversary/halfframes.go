package adversary

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/gpumesh/gpumesh/p2p/frame"
	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// HalfFrames is the slow-loris of framed protocols: streams each carrying a
// length header that claims frame.Max and only part of the payload,
// held open. A daemon that allocates a frame's claimed length up front
// holds a megabyte per stream for as long as the peer likes.
type HalfFrames struct {
	// Opened is how many streams took the header and the partial payload;
	// Refused how many the target refused (or reset) before that.
	Opened  int `json:"opened"`
	Refused int `json:"refused"`
	streams []lpnet.Stream
}

// SendHalfFrames opens n streams on proto to target, writes a frame.Max
// header and sent bytes of payload on each, and holds them until Close.
func SendHalfFrames(ctx context.Context, p *Peer, target peer.ID, proto protocol.ID, n, sent int) *HalfFrames {
	var hdr [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(hdr[:], frame.Max)
	raw := append(hdr[:k:k], make([]byte, sent)...)
	h := &HalfFrames{}
	for range n {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := p.Node.Host.NewStream(sctx, target, proto)
		cancel()
		if err != nil {
			h.Refused++
			continue
		}
		if _, err := s.Write(raw); err != nil {
			_ = s.Reset()
			h.Refused++
			continue
		}
		h.Opened++
		h.streams = append(h.streams, s)
	}
	return h
}

// Close resets the held streams.
func (h *HalfFrames) Close() {
	for _, s := range h.streams {
		_ = s.Reset()
	}
	h.streams = nil
}
