package sign

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"testing"

	"crypto/ed25519"
)

func testSigner(t *testing.T) *Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestVerifyRemembersOnlySuccesses: a signature that verified is
// remembered and verifies again; a forged or altered one next to it is
// still refused, and nothing that failed is remembered.
func TestVerifyRemembersOnlySuccesses(t *testing.T) {
	s, other := testSigner(t), testSigner(t)
	payload := []byte(`{"seq":1}`)
	sig, err := s.Sign(DomainCapability, payload)
	if err != nil {
		t.Fatal(err)
	}
	k := verifiedKey(s.ID(), DomainCapability, payload, sig)
	// Signed in this process, so remembered already: forget it, to see
	// Verify remember it.
	verified.forget(k)
	if verified.has(k) {
		t.Fatal("remembered before it was verified")
	}
	for i := 0; i < 2; i++ {
		if err := Verify(s.ID(), DomainCapability, payload, sig); err != nil {
			t.Fatalf("verify #%d: %v", i, err)
		}
		if !verified.has(k) {
			t.Fatalf("verify #%d: a good signature is not remembered", i)
		}
	}
	forged := append([]byte(nil), sig...)
	forged[0] ^= 1
	n := verified.len()
	for name, try := range map[string]func() error{
		"forged signature": func() error { return Verify(s.ID(), DomainCapability, payload, forged) },
		"altered payload":  func() error { return Verify(s.ID(), DomainCapability, []byte(`{"seq":2}`), sig) },
		"other domain":     func() error { return Verify(s.ID(), DomainBid, payload, sig) },
		"other signer":     func() error { return Verify(other.ID(), DomainCapability, payload, sig) },
	} {
		for i := 0; i < 2; i++ {
			if err := try(); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("%s (#%d): %v, want ErrBadSignature", name, i, err)
			}
		}
	}
	if verified.len() != n {
		t.Fatalf("failed verifications were remembered: %d entries, was %d", verified.len(), n)
	}
}

// TestSignRemembersItsOwnSignatures: a signature this process made
// verifies from the cache, and only that exact one: the same payload
// under another domain, or the signature altered, is still checked and
// refused.
func TestSignRemembersItsOwnSignatures(t *testing.T) {
	s := testSigner(t)
	payload := []byte(`{"lease":"own"}`)
	sig, err := s.Sign(DomainReceiptRenter, payload)
	if err != nil {
		t.Fatal(err)
	}
	if !verified.has(verifiedKey(s.ID(), DomainReceiptRenter, payload, sig)) {
		t.Fatal("a signature made here is not remembered")
	}
	forged := append([]byte(nil), sig...)
	forged[1] ^= 1
	for name, err := range map[string]error{
		"other domain":      Verify(s.ID(), DomainReceiptProvider, payload, sig),
		"altered signature": Verify(s.ID(), DomainReceiptRenter, payload, forged),
	} {
		if !errors.Is(err, ErrBadSignature) {
			t.Fatalf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

// TestVerifiedCacheIsBounded: past maxVerified entries the cache forgets
// its older half, and what it forgot still verifies the slow way.
func TestVerifiedCacheIsBounded(t *testing.T) {
	s := testSigner(t)
	var first []byte
	for i := 0; i <= maxVerified; i++ {
		p := []byte{byte(i), byte(i >> 8)}
		sig, err := s.Sign(DomainHeartbeat, p)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = sig
		}
		if err := Verify(s.ID(), DomainHeartbeat, p, sig); err != nil {
			t.Fatal(err)
		}
		if verified.len() > maxVerified {
			t.Fatalf("%d entries, bound %d", verified.len(), maxVerified)
		}
	}
	if err := Verify(s.ID(), DomainHeartbeat, []byte{0, 0}, first); err != nil {
		t.Fatalf("a forgotten signature: %v", err)
	}
}

func BenchmarkVerifyRepeated(b *testing.B) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, _ := NewSigner(priv)
	payload := make([]byte, 1500)
	sig, _ := s.Sign(DomainCapability, payload)
	for b.Loop() {
		if err := Verify(s.ID(), DomainCapability, payload, sig); err != nil {
			b.Fatal(err)
		}
	}
}

// forget drops k from the cache (tests only).
func (c *verifiedCache) forget(k [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, k)
	delete(c.prev, k)
}
