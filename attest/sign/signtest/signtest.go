// Package signtest is test support for attest/sign: fresh Ed25519 signers
// for tests and benchmarks of every package that signs or verifies.
package signtest

import (
	"crypto/rand"
	"testing"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/libp2p/go-libp2p/core/crypto"
)

// New returns a signer with a fresh random Ed25519 key; it fails tb if the
// key cannot be made.
func New(tb testing.TB) *sign.Signer {
	tb.Helper()
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatalf("signtest: generate key: %v", err)
	}
	s, err := sign.NewSigner(priv)
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
