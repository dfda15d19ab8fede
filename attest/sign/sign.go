// Package sign is the signing core every signed message in gpumesh goes
// through: a peer's identity (ID), a node's Signer (its Ed25519 identity key,
// the same key as its libp2p host's), the self-describing
// Envelope, Seal/Open, and the one list of signature domains. It sits at the
// bottom of the import graph so that every package, whatever its place, signs
// and verifies the same way.
package sign

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
)

// Signature domains: a signature made under one can never be replayed as
// another. Every signed message kind in gpumesh has its domain here.
const (
	DomainCapability      = "capability/v1"       // a provider's capability record (DHT)
	DomainJob             = "job/v1"              // a renter's job, inside a call for bids
	DomainBid             = "bid/v1"              // provider → renter
	DomainAward           = "award/v1"            // renter → provider
	DomainConfirm         = "confirm/v1"          // provider → renter, answers an award
	DomainBidRelease      = "bid-release/v1"      // renter → provider, a bid that will not be awarded
	DomainGangDecision    = "gang-decision/v1"    // renter → provider, commit or abort a gang member's hold
	DomainDecline         = "decline/v1"          // provider → renter, why it will not bid
	DomainCapacityNotice  = "capacity-notice/v1"  // provider → renter, room freed for jobs it turned away
	DomainLeaseEvent      = "lease-event/v1"      // provider → renter, a lease's run state
	DomainLeaseCancel     = "lease-cancel/v1"     // renter → provider, stop a lease
	DomainFingerprint     = "fingerprint/v1"      // a provider's hardware fingerprint
	DomainHeartbeat       = "heartbeat/v1"        // provider → renter, telemetry
	DomainReceiptProvider = "receipt-provider/v1" // the provider's half of a receipt
	DomainReceiptRenter   = "receipt-renter/v1"   // the renter's countersignature
	DomainArtifactGrant   = "artifact-grant/v1"   // an artifact's owner lets a peer fetch it from any holder
	DomainCheckpoint      = "checkpoint/v1"       // provider → renter, a job's saved checkpoint (terms.Checkpoint)
	DomainArtifactWarm    = "artifact-warm/v1"    // renter → provider, fetch an artifact ahead of a job
	DomainGPUChallenge    = "gpu-challenge/v1"    // verifier → provider, a GPU challenge (attest/gpuproof)
	DomainGPUCommit       = "gpu-commit/v1"       // provider → verifier, the hash of its challenge result
	DomainGPUVerdict      = "gpu-verdict/v1"      // a verifier's verdict on a challenge, gossiped
	DomainSuccession      = "succession/v1"       // an identity's old and new keys, both: the old hands over to the new (Succession)
)

// MaxPayload bounds the size of any signed payload a node accepts.
const MaxPayload = 256 << 10

// Errors returned when an envelope does not verify.
var (
	ErrBadSignature = errors.New("sign: signature does not verify")
	ErrWrongDomain  = errors.New("sign: envelope domain mismatch")
	ErrOversized    = errors.New("sign: payload too large")
	ErrMalformed    = errors.New("sign: malformed envelope")
)

// Signer signs payloads with a node's identity key: the Ed25519 key of
// its libp2p identity (p2p.Signer makes one from the host's key), whose
// public half its ID inlines.
type Signer struct {
	priv ed25519.PrivateKey
	id   ID
}

// NewSigner wraps an Ed25519 private key.
func NewSigner(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign: an Ed25519 private key is %d bytes, not %d", ed25519.PrivateKeySize, len(priv))
	}
	return &Signer{priv: priv, id: IDOf(priv.Public().(ed25519.PublicKey))}, nil
}

// ID is the signer's peer ID.
func (s *Signer) ID() ID { return s.id }

// Sign signs payload under a domain-separation tag, so that a signature made
// for one message kind can never be replayed as another. The signature is
// remembered as verified (see verifiedCache): this process checks its own
// signatures again as they come back (a countersigned receipt, its own
// gossip), and one it made is good by construction.
func (s *Signer) Sign(domain string, payload []byte) ([]byte, error) {
	sig := ed25519.Sign(s.priv, signingBytes(domain, payload))
	verified.add(verifiedKey(s.id, domain, payload, sig))
	return sig, nil
}

// Verify checks that sig is id's signature of payload under domain.
// Signatures that verified recently are remembered (see verifiedCache).
func Verify(id ID, domain string, payload, sig []byte) error {
	k := verifiedKey(id, domain, payload, sig)
	if verified.has(k) {
		return nil
	}
	pub, err := id.PublicKey()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, signingBytes(domain, payload), sig) {
		return ErrBadSignature
	}
	verified.add(k)
	return nil
}

func signingBytes(domain string, payload []byte) []byte {
	b := make([]byte, 0, len(domain)+1+len(payload))
	b = append(b, "gpumesh:"...)
	b = append(b, domain...)
	b = append(b, 0)
	return append(b, payload...)
}

// Envelope is a signed, self-describing message. The payload is kept as the
// exact bytes that were signed, so no canonical encoding is needed.
type Envelope struct {
	Domain  string `json:"domain"`
	Signer  string `json:"signer"`
	Payload []byte `json:"payload"`
	Sig     []byte `json:"sig"`
}

// Seal JSON-encodes v and signs it under domain.
func Seal(s *Signer, domain string, v any) (*Envelope, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sign: encode %s: %w", domain, err)
	}
	if len(payload) > MaxPayload {
		return nil, ErrOversized
	}
	sig, err := s.Sign(domain, payload)
	if err != nil {
		return nil, fmt.Errorf("sign: sign %s: %w", domain, err)
	}
	return &Envelope{Domain: domain, Signer: s.id.String(), Payload: payload, Sig: sig}, nil
}

// OpenFrom decodes wire bytes into an envelope, verifies it for domain and
// decodes its payload into v, and checks that the signer is the peer the
// bytes came from (a message may not be relayed by a third party).
func OpenFrom(data []byte, domain string, from ID, v any) error {
	env, err := UnmarshalEnvelope(data)
	if err != nil {
		return err
	}
	signer, err := Open(env, domain, v)
	if err != nil {
		return err
	}
	if signer != from {
		return fmt.Errorf("%w: signed by %s but sent by %s", ErrBadSignature, signer, from)
	}
	return nil
}

// Open verifies the envelope's signature for the expected domain and decodes
// its payload into v. It returns the verified signer.
func Open(env *Envelope, domain string, v any) (ID, error) {
	if env == nil {
		return "", ErrMalformed
	}
	if env.Domain != domain {
		return "", fmt.Errorf("%w: got %q, want %q", ErrWrongDomain, env.Domain, domain)
	}
	if len(env.Payload) > MaxPayload {
		return "", ErrOversized
	}
	id, err := Decode(env.Signer)
	if err != nil {
		return "", fmt.Errorf("%w: signer: %v", ErrMalformed, err)
	}
	if err := Verify(id, domain, env.Payload, env.Sig); err != nil {
		return "", err
	}
	if v != nil {
		if err := json.Unmarshal(env.Payload, v); err != nil {
			return "", fmt.Errorf("%w: payload: %v", ErrMalformed, err)
		}
	}
	return id, nil
}

// Marshal encodes an envelope for the wire.
func (e *Envelope) Marshal() ([]byte, error) { return json.Marshal(e) }

// UnmarshalEnvelope decodes wire bytes into an envelope, bounding its size.
func UnmarshalEnvelope(b []byte) (*Envelope, error) {
	if len(b) > 2*MaxPayload {
		return nil, ErrOversized
	}
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if e.Domain == "" || e.Signer == "" || len(e.Sig) == 0 {
		return nil, ErrMalformed
	}
	return &e, nil
}
