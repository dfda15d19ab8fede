package ledger

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/ledger/record"
)

// linked is n receipt entries chained with Link, as Append stores them.
func linked(t *testing.T, n int) [][]byte {
	t.Helper()
	var out [][]byte
	hash := record.ZeroHash
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 1; i <= n; i++ {
		e, err := prepare(record.Entry{Kind: record.KindReceipt, Direction: record.DirOwed, LeaseID: "l" + string(rune('a'+i)), Amount: float64(i)}, at)
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = uint64(i)
		raw, err := Link(&e, hash)
		if err != nil {
			t.Fatal(err)
		}
		hash = e.Hash
		out = append(out, raw)
	}
	return out
}

func TestChainVerifierTakesALinkedChain(t *testing.T) {
	var cv ChainVerifier
	if seq, hash := cv.Head(); seq != 0 || hash != record.ZeroHash {
		t.Fatalf("empty verifier head %d %q, want 0 and ZeroHash", seq, hash)
	}
	chain := linked(t, 3)
	for i, raw := range chain {
		if err := cv.Next(uint64(i+1), raw); err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	if seq, _ := cv.Head(); seq != 3 {
		t.Fatalf("head %d, want 3", seq)
	}
}

func TestChainVerifierRefusesTampering(t *testing.T) {
	chain := linked(t, 3)
	for _, tc := range []struct {
		name string
		seq  uint64
		raw  func() []byte
		at   uint64
	}{
		{"altered amount", 2, func() []byte { return bytes.Replace(chain[1], []byte(`"amount":2`), []byte(`"amount":9`), 1) }, 2},
		{"gap", 3, func() []byte { return chain[2] }, 2},
		{"replayed entry", 2, func() []byte { return chain[0] }, 2},
		{"not json", 2, func() []byte { return []byte("{") }, 2},
		{"not canonical", 2, func() []byte { return append([]byte(" "), chain[1]...) }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cv ChainVerifier
			if err := cv.Next(1, chain[0]); err != nil {
				t.Fatal(err)
			}
			err := cv.Next(tc.seq, tc.raw())
			var te *TamperError
			if !errors.As(err, &te) || te.Seq != tc.at {
				t.Fatalf("got %v, want a TamperError at seq %d", err, tc.at)
			}
			if seq, _ := cv.Head(); seq != 1 {
				t.Fatalf("head moved to %d past a refused entry", seq)
			}
		})
	}
}
