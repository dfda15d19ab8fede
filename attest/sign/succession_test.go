package sign

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var s0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestSuccessionNeedsBothKeys: a succession opens only when the old and the
// new key both signed its payload; one signed by either alone (the other
// signature missing, or made by a third key) or altered after signing is
// refused, naming the key that does not sign.
func TestSuccessionNeedsBothKeys(t *testing.T) {
	old, next, thief := testSigner(t), testSigner(t), testSigner(t)
	ss, err := SealSuccession(old, next, s0)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ss.Open()
	if err != nil {
		t.Fatalf("a succession signed by both keys: %v", err)
	}
	if rec.Old != old.ID().String() || rec.New != next.ID().String() || !rec.Issued.Equal(s0) {
		t.Fatalf("opened %+v", rec)
	}
	sigBy := func(s *Signer) []byte {
		sig, err := s.Sign(DomainSuccession, ss.Payload)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	otherDomain, _ := old.Sign(DomainCapability, ss.Payload)
	altered := strings.Replace(string(ss.Payload), "2026", "2027", 1)
	for name, c := range map[string]struct {
		ss   SignedSuccession
		role string
	}{
		"only the new key: no old signature":        {SignedSuccession{Payload: ss.Payload, NewSig: ss.NewSig}, "old"},
		"only the new key: a stranger signs as old": {SignedSuccession{Payload: ss.Payload, OldSig: sigBy(thief), NewSig: ss.NewSig}, "old"},
		"only the new key: its own sig twice":       {SignedSuccession{Payload: ss.Payload, OldSig: ss.NewSig, NewSig: ss.NewSig}, "old"},
		"only the old key: no new signature":        {SignedSuccession{Payload: ss.Payload, OldSig: ss.OldSig}, "new"},
		"only the old key: a stranger signs as new": {SignedSuccession{Payload: ss.Payload, OldSig: ss.OldSig, NewSig: sigBy(thief)}, "new"},
		"old key's signature of another domain":     {SignedSuccession{Payload: ss.Payload, OldSig: otherDomain, NewSig: ss.NewSig}, "old"},
		"payload altered after signing":             {SignedSuccession{Payload: []byte(altered), OldSig: ss.OldSig, NewSig: ss.NewSig}, "old"},
	} {
		_, err := c.ss.Open()
		if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), c.role+" key") {
			t.Errorf("%s: %v, want ErrBadSignature naming the %s key", name, err, c.role)
		}
	}
	// A succession of an identity by itself, or with a malformed identity.
	self, err := json.Marshal(Succession{Old: old.ID().String(), New: old.ID().String(), Issued: s0})
	if err != nil {
		t.Fatal(err)
	}
	for name, payload := range map[string][]byte{
		"by itself":    self,
		"bad identity": []byte(`{"old":"nobody","new":"` + next.ID().String() + `","issued":"2026-03-01T12:00:00Z"}`),
		"no time":      []byte(`{"old":"` + old.ID().String() + `","new":"` + next.ID().String() + `"}`),
		"not json":     []byte(`{`),
	} {
		s := SignedSuccession{Payload: payload, OldSig: ss.OldSig, NewSig: ss.NewSig}
		if _, err := s.Open(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// The wire form round-trips; garbage and oversized bytes are refused.
	b, err := ss.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := OpenSuccession(b); err != nil || got != rec {
		t.Fatalf("OpenSuccession(Marshal) = %+v, %v", got, err)
	}
	if _, _, err := OpenSuccession([]byte("nope")); !errors.Is(err, ErrMalformed) {
		t.Errorf("garbage: %v", err)
	}
	if _, _, err := OpenSuccession(make([]byte, MaxSuccessionSize+1)); !errors.Is(err, ErrOversized) {
		t.Errorf("oversized: %v", err)
	}
}

// TestSuccessionsFirstWinsSecondCompromises: the registry follows the first
// valid succession of an identity and retires its old key from the issue
// time on; a second, different succession marks the identity compromised,
// after which neither successor is followed.
func TestSuccessionsFirstWinsSecondCompromises(t *testing.T) {
	a, b, c := testSigner(t), testSigner(t), testSigner(t)
	A, B, C := a.ID().String(), b.ID().String(), c.ID().String()
	reg := NewSuccessions()
	ab, _ := SealSuccession(a, b, s0)
	if _, fresh, err := reg.Learn(ab, s0); err != nil || !fresh {
		t.Fatalf("learn A->B: fresh %v, %v", fresh, err)
	}
	if _, fresh, err := reg.Learn(ab, s0); err != nil || fresh {
		t.Fatalf("learn A->B again: fresh %v, %v; want no news", fresh, err)
	}
	if err := reg.Check(A, s0.Add(-time.Second)); err != nil {
		t.Fatalf("A's key before its succession: %v", err)
	}
	for _, at := range []time.Time{s0, s0.Add(time.Hour), {}} {
		if err := reg.Check(A, at); !errors.Is(err, ErrRetired) {
			t.Fatalf("A's key at %v after its succession: %v, want ErrRetired", at, err)
		}
	}
	if err := reg.Check(B, s0.Add(time.Hour)); err != nil {
		t.Fatalf("the successor's key: %v", err)
	}
	if rec, ok := reg.Of(A); !ok || rec.New != B {
		t.Fatalf("Of(A) = %+v, %v", rec, ok)
	}
	if reg.Heir(A) != B || reg.Heir(B) != B || !slices.Equal(reg.Lineage(A), []string{B, A}) || !slices.Equal(reg.Lineage(B), []string{B, A}) {
		t.Fatalf("heir(A) %s heir(B) %s lineage(B) %v", reg.Heir(A), reg.Heir(B), reg.Lineage(B))
	}

	// One chain per identity: B may not hand back to A, nor may another
	// identity hand over to B.
	ba, _ := SealSuccession(b, a, s0.Add(time.Minute))
	if _, _, err := reg.Learn(ba, s0.Add(time.Minute)); err == nil {
		t.Fatal("B -> A (a retired successor) was learned")
	}
	cb, _ := SealSuccession(c, b, s0)
	if _, _, err := reg.Learn(cb, s0); err == nil {
		t.Fatal("C -> B (B already succeeds A) was learned")
	}
	// Issued beyond the skew in the future.
	future, _ := SealSuccession(c, testSigner(t), s0.Add(time.Hour))
	if _, _, err := reg.Learn(future, s0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a succession issued an hour ahead: %v", err)
	}

	// A second, different succession of A, earlier: compromised.
	ac, _ := SealSuccession(a, c, s0.Add(-time.Minute))
	if _, fresh, err := reg.Learn(ac, s0); !errors.Is(err, ErrCompromised) || !fresh {
		t.Fatalf("a second succession of A: fresh %v, %v; want ErrCompromised", fresh, err)
	}
	if !reg.Compromised(A) || reg.Heir(A) != A || !slices.Equal(reg.Lineage(B), []string{B}) || !slices.Equal(reg.Lineage(C), []string{C}) {
		t.Fatalf("after the conflict: heir(A) %s lineage(B) %v lineage(C) %v; want neither followed", reg.Heir(A), reg.Lineage(B), reg.Lineage(C))
	}
	if err := reg.Check(A, s0.Add(-30*time.Second)); !errors.Is(err, ErrCompromised) {
		t.Fatalf("A's key after the earlier of its successions: %v, want ErrCompromised", err)
	}
	if err := reg.Check(A, s0.Add(-2*time.Minute)); err != nil {
		t.Fatalf("A's key before either succession: %v", err)
	}
	if _, fresh, err := reg.Learn(ab, s0); !errors.Is(err, ErrCompromised) || fresh {
		t.Fatalf("the first succession again: fresh %v, %v", fresh, err)
	}

	// A nil registry knows of nothing.
	var none *Successions
	if _, fresh, err := none.Learn(ab, s0); err != nil || fresh {
		t.Fatalf("nil registry learning a valid succession: fresh %v, %v", fresh, err)
	}
	if _, _, err := none.Learn(&SignedSuccession{Payload: ab.Payload, NewSig: ab.NewSig}, s0); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("nil registry learning a forged succession: %v", err)
	}
	if _, ok := none.Of(A); ok || none.Check(A, s0) != nil || none.Heir(A) != A || none.Len() != 0 || none.Compromised(A) {
		t.Fatal("nil registry retired something")
	}
}
