package p2p

import (
	"fmt"

	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// ProtocolLimit bounds what peers may hold open on one of the node's own
// protocols, enforced by libp2p's resource manager: a stream over a
// stream limit is refused before its handler runs, and a request frame
// whose length would take the protocol's (or the peer's) frame memory
// over its limit is refused before a byte of it is read (ReadFrameOn).
type ProtocolLimit struct {
	// PeerStreams and Streams are how many inbound streams one peer, and
	// all peers together, may hold open at once on the protocol.
	PeerStreams, Streams int
	// PeerMemory and Memory are how many bytes of request frames one peer,
	// and all peers together, may have being read at once (reserved for
	// each frame's declared length while it is read and handled).
	PeerMemory, Memory int64
}

// RequestLimit suits a request/response protocol of small signed messages
// (bids, awards, heartbeats, lease events, receipts): a busy renter hears
// from many providers at once, but no peer needs more than a few dozen
// requests in flight, nor more than two frames of the largest size.
var RequestLimit = ProtocolLimit{PeerStreams: 64, Streams: 1024, PeerMemory: 2 * frame.Max, Memory: 8 * frame.Max}

// BulkLimit suits a protocol that streams data after one small request
// frame (logs, outputs, artifacts, service traffic): more streams, the
// same bound on request frames.
var BulkLimit = ProtocolLimit{PeerStreams: 128, Streams: 2048, PeerMemory: 2 * frame.Max, Memory: 8 * frame.Max}

// largeFrame is the size from which a request frame is reserved at medium
// priority (it fits while its scopes are at most 60 % used): large frames
// from any number of peers never take the room small ones need.
const largeFrame = 64 << 10

// framePriority is the resource manager's reservation priority of a
// frame of n bytes.
func framePriority(n uint64) uint8 {
	if n > largeFrame {
		return network.ReservationPriorityMedium
	}
	return network.ReservationPriorityAlways
}

// outboundStreams bounds the streams the node itself opens on one of its
// protocols (generous: they are the node's own doing).
const outboundStreams = 4096

// resourceManager is libp2p's default resource manager (its scaled
// default limits, and its services') with limits for the node's own
// protocols.
func resourceManager(protocols map[protocol.ID]ProtocolLimit) (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	for proto, l := range protocols {
		if l.PeerStreams <= 0 || l.Streams < l.PeerStreams || l.PeerMemory <= 0 || l.Memory < l.PeerMemory {
			return nil, fmt.Errorf("p2p: protocol %s: limits %+v: each must be positive, and no peer's above the total", proto, l)
		}
		limits.AddProtocolLimit(proto, rcmgr.BaseLimit{StreamsInbound: l.Streams, StreamsOutbound: outboundStreams,
			Streams: l.Streams + outboundStreams, Memory: l.Memory}, rcmgr.BaseLimitIncrease{})
		limits.AddProtocolPeerLimit(proto, rcmgr.BaseLimit{StreamsInbound: l.PeerStreams, StreamsOutbound: outboundStreams,
			Streams: l.PeerStreams + outboundStreams, Memory: l.PeerMemory}, rcmgr.BaseLimitIncrease{})
	}
	// Without its metrics (as the host, see New): their trace
	// of every stream and connection cost 1.3 % of a busy testnet's CPU,
	// for collectors nothing serves.
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()), rcmgr.WithMetricsDisabled())
}
