package signtest_test

import (
	"testing"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

func TestPairSignsAndVerifies(t *testing.T) {
	a, b := signtest.Pair(t)
	if a.ID() == b.ID() {
		t.Fatal("Pair returned the same identity twice")
	}
	sig, err := a.Sign(sign.DomainBid, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sign.Verify(a.ID(), sign.DomainBid, []byte("x"), sig); err != nil {
		t.Fatalf("own signature rejected: %v", err)
	}
	if err := sign.Verify(b.ID(), sign.DomainBid, []byte("x"), sig); err == nil {
		t.Fatal("signature verified under the other identity")
	}
}
