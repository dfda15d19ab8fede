// Package attest holds everything a node uses to prove what it did and to
// check what others claim: signed envelopes, hardware fingerprints, telemetry
// heartbeats, two-party completion receipts and the reputation computed from
// verified receipts only.
package attest

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxPayload bounds the size of any signed payload a node accepts.
const MaxPayload = 256 << 10

// Errors returned when an envelope does not verify.
var (
	ErrBadSignature = errors.New("attest: signature does not verify")
	ErrWrongDomain  = errors.New("attest: envelope domain mismatch")
	ErrOversized    = errors.New("attest: payload too large")
	ErrMalformed    = errors.New("attest: malformed envelope")
)

// Signer signs payloads with a node's libp2p identity key.
type Signer struct {
	priv crypto.PrivKey
	id   peer.ID
}

// NewSigner wraps a private key. The key must be one whose public half is
// inlined in the peer ID (Ed25519), so that anyone can verify a signature
// from the signer's peer ID alone.
func NewSigner(priv crypto.PrivKey) (*Signer, error) {
	if priv == nil {
		return nil, errors.New("attest: nil key")
	}
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("attest: peer id from key: %w", err)
	}
	if _, err := id.ExtractPublicKey(); err != nil {
		return nil, fmt.Errorf("attest: key type must inline its public key in the peer id: %w", err)
	}
	return &Signer{priv: priv, id: id}, nil
}

// ID is the signer's peer ID.
func (s *Signer) ID() peer.ID { return s.id }

// Sign signs payload under a domain-separation tag, so that a signature made
// for one message kind can never be replayed as another.
func (s *Signer) Sign(domain string, payload []byte) ([]byte, error) {
	return s.priv.Sign(signingBytes(domain, payload))
}

// Verify checks that sig is id's signature of payload under domain.
func Verify(id peer.ID, domain string, payload, sig []byte) error {
	pub, err := id.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	ok, err := pub.Verify(signingBytes(domain, payload), sig)
	if err != nil || !ok {
		return ErrBadSignature
	}
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
		return nil, fmt.Errorf("attest: encode %s: %w", domain, err)
	}
	if len(payload) > MaxPayload {
		return nil, ErrOversized
	}
	sig, err := s.Sign(domain, payload)
	if err != nil {
		return nil, fmt.Errorf("attest: sign %s: %w", domain, err)
	}
	return &Envelope{Domain: domain, Signer: s.id.String(), Payload: payload, Sig: sig}, nil
}

// Open verifies the envelope's signature for the expected domain and decodes
// its payload into v. It returns the verified signer.
func Open(env *Envelope, domain string, v any) (peer.ID, error) {
	if env == nil {
		return "", ErrMalformed
	}
	if env.Domain != domain {
		return "", fmt.Errorf("%w: got %q, want %q", ErrWrongDomain, env.Domain, domain)
	}
	if len(env.Payload) > MaxPayload {
		return "", ErrOversized
	}
	id, err := peer.Decode(env.Signer)
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
