// Package signtest is test support for attest/sign: fresh Ed25519 signers
// for tests and benchmarks of every package that signs or verifies.
package signtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"testing"

	"github.com/gpumesh/gpumesh/attest/sign"
)

// New returns a signer with a fresh random Ed25519 key; it fails tb if the
// key cannot be made.
func New(tb testing.TB) *sign.Signer {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatalf("signtest: generate key: %v", err)
	}
	s, err := sign.NewSigner(priv)
	if err != nil {
		tb.Fatalf("signtest: signer: %v", err)
	}
	return s
}

// Seeded returns the signer whose Ed25519 key is derived from name: the
// same identity in every run, so that a fuzz input naming it (a payload
// whose author must be its signer) keeps its meaning in a corpus.
func Seeded(tb testing.TB, name string) *sign.Signer {
	tb.Helper()
	seed := sha256.Sum256([]byte("signtest:" + name))
	// (the key libp2p's GenerateEd25519Key made from the same seed, so
	// corpora naming these identities keep them)
	s, err := sign.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		tb.Fatalf("signtest: signer: %v", err)
	}
	return s
}

// Pair returns two distinct signers, e.g. a provider and a renter.
func Pair(tb testing.TB) (*sign.Signer, *sign.Signer) {
	tb.Helper()
	return New(tb), New(tb)
}

// Raw signs payload, whatever bytes it holds, under domain as s: the
// envelope a hostile peer sends when it signs what it likes (fuzz targets
// reach a decoder's checks past the signature with it). It fails tb if the
// payload cannot be signed.
func Raw(tb testing.TB, s *sign.Signer, domain string, payload []byte) *sign.Envelope {
	tb.Helper()
	sig, err := s.Sign(domain, payload)
	if err != nil {
		tb.Fatalf("signtest: sign: %v", err)
	}
	return &sign.Envelope{Domain: domain, Signer: s.ID().String(), Payload: payload, Sig: sig}
}

// RawBytes is Raw's envelope in its wire form.
func RawBytes(tb testing.TB, s *sign.Signer, domain string, payload []byte) []byte {
	tb.Helper()
	b, err := Raw(tb, s, domain, payload).Marshal()
	if err != nil {
		tb.Fatalf("signtest: marshal: %v", err)
	}
	return b
}
