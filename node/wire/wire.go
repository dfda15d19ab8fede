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
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Protocols between daemons. Every request payload is a signed envelope
// except the stream requests, which are authorised by the stream's
// authenticated remote peer.
const (
	ProtoCall       = "/gpumesh/call/1.0.0"        // renter → provider: a sampled call for bids (terms.EncodeCall), sent to each provider it asks instead of gossiped; answered by the bid or decline (terms.BidMessage) when the caller is the job's owner
	ProtoBid        = "/gpumesh/bid/1.0.0"         // provider → renter: terms.BidMessage (a bid, decline or capacity notice, by its envelope's domain)
	ProtoAward      = "/gpumesh/award/1.0.0"       // renter → provider: terms.AwardMessage (an award, answered by an terms.Confirm, or a bid release)
	ProtoHeartbeat  = "/gpumesh/heartbeat/1.0.0"   // provider → renter: attest.Heartbeat
	ProtoLeaseEvent = "/gpumesh/lease-event/1.0.0" // provider → renter: LeaseEvent, answered by a LeaseEventAnswer
	ProtoReceipt    = "/gpumesh/receipt/1.0.0"     // provider → renter: attest.SignedReceipt, answered countersigned
	ProtoLogs       = "/gpumesh/logs/1.0.0"        // renter → provider: StreamRequest, then the job's log
	ProtoOutputs    = "/gpumesh/outputs/1.0.0"     // renter → provider: StreamRequest, then an outputs bundle
	ProtoCancel     = "/gpumesh/cancel/1.0.0"      // renter → provider: CancelRequest
	// ProtoCheckpoint: provider → renter, a signed terms.Checkpoint
	// (sign.DomainCheckpoint); the renter's daemon fetches its artifact
	// before it answers.
	ProtoCheckpoint = "/gpumesh/checkpoint/1.0.0"
	// ProtoLeaseKeys: provider → renter, a LeaseKeysRequest for a sealed
	// job's lease; the renter answers LeaseKeys to that lease's provider
	// alone. The stream's libp2p security (authenticated to the
	// provider's identity, encrypted) is the keys' seal.
	ProtoLeaseKeys = "/gpumesh/lease-keys/1.0.0"
	ProtoArtifact  = "/gpumesh/artifact/1.0.0"      // any → holder: ArtifactRequest frames, each answered by a manifest or a chunk
	ProtoWarm      = "/gpumesh/artifact-warm/1.0.0" // renter → provider: a sealed ArtifactWarm, answered by an ArtifactWarmAck
	// ProtoService carries a service replica's traffic: renter → provider,
	// a ServiceRequest frame, the provider's one-frame answer (ServiceAck),
	// then raw bytes both ways to and from the replica's port.
	ProtoService = "/gpumesh/service/1.0.0"
	// ProtoExec runs a command inside a running job: renter → provider,
	// an ExecRequest frame, the provider's one-frame ExecAck, then exec
	// frames both ways (WriteExecFrame); the provider's last is the
	// ExecExit. Only the lease's renter, only while the job runs.
	ProtoExec = "/gpumesh/exec/1.0.0"
	// ProtoPortForward carries one connection to a port of a running
	// job's own network namespace: renter → provider, a
	// PortForwardRequest, the provider's answer (a ServiceAck, framed as
	// on ProtoService), then raw bytes both ways. Only the lease's
	// renter, only while the job runs.
	ProtoPortForward = "/gpumesh/port-forward/1.0.0"
	// ProtoGPUChallenge: verifier → provider, a GPU challenge
	// (attest/gpuproof: challenge, ready, ping, seed, commitment, result).
	ProtoGPUChallenge = "/gpumesh/gpu-challenge/1.0.0"
	// ProtoGang carries one connection between two members of a gang
	// (node/gangnet): provider → provider, a GangRequest, the answer (a
	// ServiceAck, framed as on ProtoService), then raw bytes both ways.
	// Only the provider of another member of the same gang, while both
	// members run.
	ProtoGang = "/gpumesh/gang/1.0.0"
)

// GPUVerdictTopic carries signed GPU challenge verdicts to every node's
// reputation book, each as a GPUVerdictGossip.
const GPUVerdictTopic = "gpumesh/gpu-verdicts/1"

// GPUVerdictGossip is one sending of a verifier's signed verdict
// (attest/gpuproof). A verifier sends each of its verdicts again while it
// counts (gossip is best-effort; GossipSub drops a byte-identical copy, so
// each sending carries its time); books count a verdict once.
type GPUVerdictGossip struct {
	Verdict *sign.Envelope `json:"verdict"`
	Sent    time.Time      `json:"sent"`
}

// SuccessionTopic carries identity successions (sign.SignedSuccession) to
// every node's reputation book, each as a SuccessionGossip.
const SuccessionTopic = "gpumesh/successions/1"

// SuccessionGossip is one sending of a rotated node's succession. The node
// sends it again now and then (gossip is best-effort; GossipSub drops a
// byte-identical copy, so each sending carries its time); books learn it
// once.
type SuccessionGossip struct {
	Succession *sign.SignedSuccession `json:"succession"`
	Sent       time.Time              `json:"sent"`
}

// RequestProtocols are the protocols whose stream carries one request
// frame and one answer; StreamProtocols carry data after their request
// frame. Together: every protocol a daemon serves (each gets its stream
// and frame memory limits, p2p.ProtocolLimit).
var (
	RequestProtocols = []string{ProtoCall, ProtoBid, ProtoAward, ProtoHeartbeat, ProtoLeaseEvent, ProtoReceipt, ProtoCancel,
		ProtoCheckpoint, ProtoWarm, ProtoLeaseKeys}
	StreamProtocols = []string{ProtoLogs, ProtoOutputs, ProtoArtifact, ProtoService, ProtoGPUChallenge,
		ProtoExec, ProtoPortForward, ProtoGang}
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

// ReputationTopic carries two-party signed receipts to every node, each
// message one ReceiptBatch. Version 2: gossip unsigned at the GossipSub
// layer (p2p.GossipOptions); version 3: a message is a batch (it was one
// receipt).
const ReputationTopic = "gpumesh/reputation/3"

// A node gossips the receipts it settles in batches: at most
// MaxBatchReceipts receipts and MaxBatchBytes of them in one message.
// Every gossiped message costs each node of the market a delivery and a
// forward to its mesh, whatever its size; one per settled lease (two:
// both parties gossip) was most of what a job cost the nodes that did not
// run it.
const (
	MaxBatchReceipts = 64
	MaxBatchBytes    = 256 << 10
)

// ReceiptBatch is one message of ReputationTopic: signed two-party
// receipts (attest.SignedReceipt's wire bytes), each checked on its own.
type ReceiptBatch struct {
	Receipts []json.RawMessage `json:"receipts"`
}

// EncodeReceiptBatch is the ReputationTopic message carrying receipts
// (1 to MaxBatchReceipts of them, each a JSON value).
func EncodeReceiptBatch(receipts [][]byte) ([]byte, error) {
	if len(receipts) == 0 || len(receipts) > MaxBatchReceipts {
		return nil, fmt.Errorf("wire: a receipt batch carries 1 to %d receipts, not %d", MaxBatchReceipts, len(receipts))
	}
	b := ReceiptBatch{Receipts: make([]json.RawMessage, len(receipts))}
	for i, r := range receipts {
		b.Receipts[i] = r
	}
	return json.Marshal(b)
}

// DecodeReceiptBatch reads a ReputationTopic message: the receipts it
// carries, unchecked (1 to MaxBatchReceipts). Anything else is an error.
func DecodeReceiptBatch(data []byte) ([][]byte, error) {
	var b ReceiptBatch
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("wire: receipt batch: %w", err)
	}
	if len(b.Receipts) == 0 || len(b.Receipts) > MaxBatchReceipts {
		return nil, fmt.Errorf("wire: a receipt batch carries 1 to %d receipts, not %d", MaxBatchReceipts, len(b.Receipts))
	}
	out := make([][]byte, len(b.Receipts))
	for i, r := range b.Receipts {
		out[i] = r
	}
	return out, nil
}

// LeaseEvent is a provider's signed report of a lease's run state
// (sign.DomainLeaseEvent).
type LeaseEvent struct {
	LeaseID  string         `json:"lease_id"`
	JobID    string         `json:"job_id"`
	Provider string         `json:"provider"`
	Run      terms.RunState `json:"run"`
	Detail   string         `json:"detail,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
	Fault    terms.Fault    `json:"fault,omitempty"`
	Started  time.Time      `json:"started,omitempty"`
	Ended    time.Time      `json:"ended,omitempty"`
	// Outputs are the first MaxEventOutputs files of the output manifest;
	// OutputCount and OutputsHash (terms.ManifestHash) describe the
	// whole manifest, which the outputs stream serves and the receipt's
	// ResultHash names.
	Outputs     []terms.OutputFile `json:"outputs,omitempty"`
	OutputCount int                `json:"output_count,omitempty"`
	OutputsHash string             `json:"outputs_hash,omitempty"`
	Time        time.Time          `json:"time"`
	// OutputsArtifact is the artifact holding the outputs, owned by the
	// renter (who may fetch it from the provider and any holder).
	OutputsArtifact string `json:"outputs_artifact,omitempty"`
	// Restored is the artifact id of the checkpoint (one of the job's
	// Restore) the lease started from; "" when it started fresh.
	Restored string `json:"restored,omitempty"`
	// Moved, on a pending lease's event, tells the renter its provider
	// moved the lease earlier (terms.Lease.Moved): GPUs freed before
	// its start. It comes before the lease's first heartbeat.
	Moved *LeaseMove `json:"moved,omitempty"`
	// LogDigest and LogBytes, on a final report of a lease that ran, are
	// the SHA-256 (hex) and length of the job's whole log as the provider
	// wrote it: what the logs stream serves. The renter pays for a
	// succeeded run only once its own fetch of the log hashes to them.
	LogDigest string `json:"log_digest,omitempty"`
	LogBytes  int64  `json:"log_bytes,omitempty"`
	// Log, on such a report when LogInline, is the whole log (it is no
	// longer than MaxInlineLog; maybe empty): the renter checks it against
	// LogDigest and LogBytes as it would a fetch, with no stream of its own.
	Log       []byte `json:"log,omitempty"`
	LogInline bool   `json:"log_inline,omitempty"`
}

// MaxInlineLog is the longest log a final report carries (LeaseEvent.Log):
// most batch jobs write little, and a fetch costs both daemons a stream.
const MaxInlineLog = 4 << 10

// LeaseMove is where a lease moved: its new start and devices (its length
// is kept).
type LeaseMove struct {
	Start   time.Time `json:"start"`
	Devices []int     `json:"devices,omitempty"`
}

// NeverRan reports whether the event is the final report of a lease that
// ended without ever starting (evicted or released ahead of its start):
// it carries no start, and there is nothing to bill.
func (e LeaseEvent) NeverRan() bool { return e.Run.Terminal() && e.Started.IsZero() }

// MaxEventOutputs caps the output files listed in a lease event, so a job
// that leaves many files cannot make its provider's final report too large
// to deliver.
const MaxEventOutputs = 64

// SetOutputs describes a lease's full output manifest in the event: its
// first MaxEventOutputs files, its count and its hash.
func (e *LeaseEvent) SetOutputs(outs []terms.OutputFile) {
	e.Outputs = outs
	if len(outs) > MaxEventOutputs {
		e.Outputs = outs[:MaxEventOutputs]
	}
	e.OutputCount = len(outs)
	e.OutputsHash = terms.ManifestHash(outs)
}

// CheckOutputs checks that the event's output fields are consistent: at
// most MaxEventOutputs listed, no more than the count, and a complete
// listing hashing to OutputsHash.
func (e LeaseEvent) CheckOutputs() error {
	switch {
	case len(e.Outputs) > MaxEventOutputs:
		return fmt.Errorf("lease event lists %d output files, more than %d", len(e.Outputs), MaxEventOutputs)
	case e.OutputCount < len(e.Outputs):
		return fmt.Errorf("lease event lists %d output files but counts %d", len(e.Outputs), e.OutputCount)
	case e.OutputCount == 0 && e.OutputsHash != "":
		return fmt.Errorf("lease event has an outputs hash but no outputs")
	case e.OutputCount > 0 && e.OutputsHash == "":
		return fmt.Errorf("lease event counts %d output files but has no outputs hash", e.OutputCount)
	case e.OutputCount == len(e.Outputs) && terms.ManifestHash(e.Outputs) != e.OutputsHash:
		return fmt.Errorf("lease event's outputs hash does not match its %d output files", len(e.Outputs))
	}
	return nil
}

// CancelRequest asks a provider to stop a lease (sign.DomainLeaseCancel,
// signed by the lease's renter).
type CancelRequest struct {
	LeaseID string `json:"lease_id"`
	JobID   string `json:"job_id"`
	// Gang stops a gang member because its gang lost another member: the
	// provider saves its checkpoint and ends it preempted (no fault), and
	// the whole gang resumes elsewhere.
	Gang bool `json:"gang,omitempty"`
}

// LeaseEventAnswer is a renter's answer to a lease's final report
// (ProtoLeaseEvent): the heartbeat summary the receipt bills by (the
// fields of attest.HeartbeatSummary, inline, as before this type), or,
// for a lease the renter released or cancelled and holds no more,
// Released: the renter's signed CancelRequest for it
// (sign.DomainLeaseCancel). Released is the renter's definitive word: the
// provider stops trying to settle the lease (CheckReleased says whether
// it holds).
type LeaseEventAnswer struct {
	attest.HeartbeatSummary
	Released *sign.Envelope `json:"released,omitempty"`
}

// CheckReleased checks a's Released for the lease leaseID of job jobID:
// signed by the lease's renter, for that very lease, and not a gang stop.
func (a LeaseEventAnswer) CheckReleased(renter sign.ID, leaseID, jobID string) error {
	var req CancelRequest
	signer, err := sign.Open(a.Released, sign.DomainLeaseCancel, &req)
	switch {
	case err != nil:
		return fmt.Errorf("release of lease %s: %w", leaseID, err)
	case signer != renter:
		return fmt.Errorf("release of lease %s signed by %s, not its renter %s", leaseID, signer, renter)
	case req.LeaseID != leaseID || req.JobID != jobID || req.Gang:
		return fmt.Errorf("release names lease %q of job %q (gang %t), not lease %s of job %s", req.LeaseID, req.JobID, req.Gang, leaseID, jobID)
	}
	return nil
}

// HeartbeatReply is a renter's answer to a heartbeat (ProtoHeartbeat). It
// comes over a stream to the renter's own peer id, so it needs no
// signature. Unknown says the renter holds no such lease: an award whose
// confirm came too late, which the renter gave up on. A provider stops a
// lease after UnknownLeaseBeats such answers in a row; one or two may come
// before the renter has recorded a lease it has just confirmed.
type HeartbeatReply struct {
	Unknown bool `json:"unknown,omitempty"`
}

// UnknownLeaseBeats is how many heartbeats in a row a renter must answer
// Unknown before the provider stops the lease.
const UnknownLeaseBeats = 3

// StreamRequest is the first frame of a logs or outputs stream.
type StreamRequest struct {
	LeaseID string `json:"lease_id"`
	Follow  bool   `json:"follow,omitempty"`
}

// DecodeStreamRequest reads a logs or outputs stream's request frame. Its
// lease id must satisfy terms.ValidID: it names files under the
// provider's data dir.
func DecodeStreamRequest(b []byte) (StreamRequest, error) {
	var r StreamRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return StreamRequest{}, fmt.Errorf("wire: stream request: %v", err)
	}
	if err := terms.ValidID(r.LeaseID); err != nil {
		return StreamRequest{}, fmt.Errorf("wire: stream request: lease id: %w", err)
	}
	return r, nil
}

// ArtifactKey is the DHT discovery key under which holders of an artifact
// announce themselves (p2p.KeyCID maps it to a CID).
func ArtifactKey(id string) string { return "artifact/" + id }

// Artifact request operations.
const (
	ArtifactOpManifest = "manifest" // answered by an ArtifactManifest
	ArtifactOpChunk    = "chunk"    // answered by the chunk's bytes
)

// ArtifactRequest is one frame on a ProtoArtifact stream; a stream carries
// any number of them, each answered in turn by a status byte and a frame.
// Private artifacts are served to their owner's authorised peers only:
// Grant (a sealed ArtifactGrant from the artifact's owner) admits a peer
// at any holder.
type ArtifactRequest struct {
	Op    string `json:"op"`
	ID    string `json:"id"`
	Chunk string `json:"chunk,omitempty"`
	Grant []byte `json:"grant,omitempty"`
}

// ArtifactGrant is an artifact owner's signed permission
// (sign.DomainArtifactGrant) for Peer to fetch artifact ID until Expires.
type ArtifactGrant struct {
	ID      string    `json:"id"`
	Peer    string    `json:"peer"`
	Expires time.Time `json:"expires"`
}

// ArtifactWarm is a renter's signed request (sign.DomainArtifactWarm) that
// Provider fetch artifact ID into its store ahead of a job (cache
// warming); the signer, the stream's remote peer, serves it. Grant (a
// sealed ArtifactGrant from the artifact's owner for Provider) admits the
// provider to a private artifact at any holder.
type ArtifactWarm struct {
	ID       string    `json:"id"`
	Provider string    `json:"provider"`
	Grant    []byte    `json:"grant,omitempty"`
	Expires  time.Time `json:"expires"`
}

// ArtifactWarmAck is a provider's answer to an ArtifactWarm it accepts:
// the artifact's size and the bytes it is fetching (0 when it already
// held it). The fetch runs on after the answer; the provider advertises
// the artifact once it holds it.
type ArtifactWarmAck struct {
	ID       string `json:"id"`
	Size     int64  `json:"size"`
	Fetching int64  `json:"fetching"`
}

// ArtifactManifest answers ArtifactOpManifest: the manifest's JSON (its
// SHA-256 is the artifact id), how the holder holds it, and, when the
// holder is the owner, a grant for the requester to show other holders.
type ArtifactManifest struct {
	Manifest []byte `json:"manifest"`
	Private  bool   `json:"private,omitempty"`
	// Owner is the peer that published the artifact.
	Owner string `json:"owner"`
	Grant []byte `json:"grant,omitempty"`
}

// LeaseKeysRequest asks a renter for the keys of one of its leases.
type LeaseKeysRequest struct {
	LeaseID string `json:"lease_id"`
}

// LeaseKeys are what a sealed job's provider needs, for the lease only:
// the content key of each sealed artifact the job reads (inputs,
// checkpoints to restore) and the lease key its checkpoints and outputs
// are sealed with, all hex (artifact.Key). The provider never writes
// them down.
type LeaseKeys struct {
	Lease     string            `json:"lease"`
	Artifacts map[string]string `json:"artifacts,omitempty"`
}
