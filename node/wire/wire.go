// Package wire is gpumesh's protocol between daemons in one place: every
// libp2p protocol ID and gossip topic the daemon speaks, and the payloads of
// the post-award protocol (lease events, cancel, log and output stream
// requests).
//
// The auction's own messages (calls for bids, bids, awards, confirms) and
// their per-region/per-model call topics are defined with the rules that
// produce them, in package auction (messages.go, topics.go); the signature
// domain of every signed message is in package attest/sign; the DHT record
// namespace is in package p2p.
package wire

import (
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Protocols between daemons. Every request payload is a signed envelope
// except the stream requests, which are authorised by the stream's
// authenticated remote peer.
const (
	ProtoBid        protocol.ID = "/gpumesh/bid/1.0.0"         // provider → renter: auction.Bid
	ProtoAward      protocol.ID = "/gpumesh/award/1.0.0"       // renter → provider: auction.Award, answered by an auction.Confirm
	ProtoHeartbeat  protocol.ID = "/gpumesh/heartbeat/1.0.0"   // provider → renter: attest.Heartbeat
	ProtoLeaseEvent protocol.ID = "/gpumesh/lease-event/1.0.0" // provider → renter: LeaseEvent, answered by the renter's attest.HeartbeatSummary
	ProtoReceipt    protocol.ID = "/gpumesh/receipt/1.0.0"     // provider → renter: attest.SignedReceipt, answered countersigned
	ProtoLogs       protocol.ID = "/gpumesh/logs/1.0.0"        // renter → provider: StreamRequest, then the job's log
	ProtoOutputs    protocol.ID = "/gpumesh/outputs/1.0.0"     // renter → provider: StreamRequest, then an outputs bundle
	ProtoCancel     protocol.ID = "/gpumesh/cancel/1.0.0"      // renter → provider: CancelRequest
	// ProtoService carries a service replica's traffic: renter → provider,
	// a ServiceRequest frame, the provider's one-frame answer (ServiceAck),
	// then raw bytes both ways to and from the replica's port.
	ProtoService protocol.ID = "/gpumesh/service/1.0.0"
)

// ServiceRequest opens a ProtoService stream to one service lease; only the
// lease's renter (the stream's authenticated remote peer) is let through.
type ServiceRequest struct {
	LeaseID string `json:"lease_id"`
}

// ServiceAck is the provider's answer to a ServiceRequest: empty Error
// means the stream is now connected to the replica's port.
type ServiceAck struct {
	Error string `json:"error,omitempty"`
}

// ReputationTopic carries two-party signed receipts to every node.
const ReputationTopic = "gpumesh/reputation/1"

// LeaseEvent is a provider's signed report of a lease's run state
// (sign.DomainLeaseEvent).
type LeaseEvent struct {
	LeaseID  string               `json:"lease_id"`
	JobID    string               `json:"job_id"`
	Provider string               `json:"provider"`
	Run      auction.RunState     `json:"run"`
	Detail   string               `json:"detail,omitempty"`
	ExitCode *int                 `json:"exit_code,omitempty"`
	Started  time.Time            `json:"started,omitempty"`
	Ended    time.Time            `json:"ended,omitempty"`
	Outputs  []auction.OutputFile `json:"outputs,omitempty"`
	Time     time.Time            `json:"time"`
}

// CancelRequest asks a provider to stop a lease (sign.DomainLeaseCancel,
// signed by the lease's renter).
type CancelRequest struct {
	LeaseID string `json:"lease_id"`
	JobID   string `json:"job_id"`
}

// StreamRequest is the first frame of a logs or outputs stream.
type StreamRequest struct {
	LeaseID string `json:"lease_id"`
	Follow  bool   `json:"follow,omitempty"`
}
