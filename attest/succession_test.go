package attest_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

func seal(t *testing.T, old, next *sign.Signer, at time.Time) *sign.SignedSuccession {
	t.Helper()
	ss, err := sign.SealSuccession(old, next, at)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

func wire(t *testing.T, ss *sign.SignedSuccession) []byte {
	t.Helper()
	b, err := ss.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSucceededIdentityKeepsItsReputation: once the book learns a
// provider's succession, the new identity scores exactly as the old one did
// (receipts, slash and GPU verdicts), and a renter's successor has the old
// renter's standing: its receipt weighs as an established renter's.
func TestSucceededIdentityKeepsItsReputation(t *testing.T) {
	b, c := newBook(t0)
	old, next := signtest.Pair(t)
	history(t, b, c, old, "h", 6, t0.Add(-time.Hour), terms.RunSucceeded, 0.9)
	if err := b.Slash(old.ID().String(), attest.Evidence{Kind: attest.SlashAbandonedLease, LeaseID: "gone", Time: t0.Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	verifier := signtest.New(t)
	establish(t, b, c, verifier)
	if err := b.AddVerdict(verdict(t, verifier, old, gpuproof.Verified, t0.Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	want, wantGPU := b.Stats(old.ID().String()), b.GPUStandings(old.ID().String())
	if want.Receipts != 6 || want.Slashes != 1 || len(wantGPU) != 1 || !wantGPU[0].Verified {
		t.Fatalf("setup: %+v %+v", want, wantGPU)
	}
	if got := b.Stats(next.ID().String()); got.Score != attest.Prior || got.Receipts != 0 {
		t.Fatalf("the successor before the book knows: %+v", got)
	}

	// A renter's successor, before and after: its receipt with provider p.
	oldRenter, nextRenter := signtest.Pair(t)
	establish(t, b, c, oldRenter)
	p := signtest.New(t)
	mustAdd(t, b, signed(t, p, nextRenter, receipt("r1", p, nextRenter, t0.Add(-time.Hour))))
	if w := b.Stats(p.ID().String()).Weight; w > attest.DefaultNewcomerWeight+1e-9 {
		t.Fatalf("a fresh renter's receipt weighs %v", w)
	}

	if err := b.Succeed(seal(t, old, next, t0)); err != nil {
		t.Fatalf("succeed: %v", err)
	}
	if err := b.Succeed(seal(t, oldRenter, nextRenter, t0)); err != nil {
		t.Fatalf("succeed renter: %v", err)
	}
	if err := b.Succeed(seal(t, old, next, t0)); err != nil {
		t.Fatalf("the same succession again: %v", err)
	}
	for _, id := range []peer.ID{peer.ID(next.ID()), peer.ID(old.ID())} {
		if got := b.Stats(id.String()); !reflect.DeepEqual(got, want) {
			t.Fatalf("Stats(%s) after the succession:\n%+v\nwant the old identity's\n%+v", id, got, want)
		}
		if got := b.GPUStandings(id.String()); !reflect.DeepEqual(got, wantGPU) {
			t.Fatalf("GPUStandings(%s) = %+v, want %+v", id, got, wantGPU)
		}
	}
	if !b.Verified(next.ID().String(), "h100") {
		t.Fatal("the successor is not verified for the old identity's GPU")
	}
	if w := b.Stats(p.ID().String()).Weight; w < 0.99 {
		t.Fatalf("the established renter's successor's receipt weighs %v, want full standing", w)
	}
	cs := b.Counters()
	if cs[attest.CountSuccession] != 2 || cs[attest.CountSuccessionDuplicate] != 1 {
		t.Fatalf("counters %v", cs)
	}
}

// TestRetiredKeyRefused: after a succession, a receipt or verdict the old
// key signed later than its issue time is refused and counted, whichever
// role the old identity has in it; one it signed before (gossip arriving
// late) still counts, for the successor.
func TestRetiredKeyRefused(t *testing.T) {
	b, c := newBook(t0.Add(2 * time.Hour))
	old, next := signtest.Pair(t)
	renter := signtest.New(t)
	establish(t, b, c, renter)
	if err := b.Succeed(seal(t, old, next, t0)); err != nil {
		t.Fatal(err)
	}
	p := signtest.New(t)
	for name, sr := range map[string]*attest.SignedReceipt{
		"old key as provider": signed(t, old, renter, receipt("after-p", old, renter, t0.Add(time.Hour))),
		"old key as renter":   signed(t, p, old, receipt("after-r", p, old, t0.Add(time.Hour))),
	} {
		if err := b.AddReceipt(sr); !errors.Is(err, sign.ErrRetired) {
			t.Fatalf("%s after the succession: %v, want sign.ErrRetired", name, err)
		}
	}
	if got := b.Counters()[attest.CountRetiredKey]; got != 2 {
		t.Fatalf("retired_key counter %d, want 2", got)
	}
	if st := b.Stats(next.ID().String()); st.Receipts != 0 {
		t.Fatalf("a refused receipt counted: %+v", st)
	}
	if err := b.AddVerdict(verdict(t, old, p, gpuproof.Failed, t0.Add(time.Hour))); !errors.Is(err, sign.ErrRetired) {
		t.Fatalf("a verdict by the old key after the succession: %v", err)
	}
	if st := b.Stats(p.ID().String()); st.Score != attest.Prior {
		t.Fatalf("a refused verdict moved the provider: %+v", st)
	}
	// Signed before the succession: counted, for the successor.
	mustAdd(t, b, signed(t, old, renter, receipt("before", old, renter, t0.Add(-time.Minute))))
	if st := b.Stats(next.ID().String()); st.Receipts != 1 || st.Completed != 1 {
		t.Fatalf("a receipt signed before the succession: successor's stats %+v", st)
	}
}

// TestForgedAndConflictingSuccessions: a hostile peer's succession signed
// by only one of the two keys is refused by the book and the DHT validator
// and passes nothing on; a second, different succession of one identity
// marks it compromised: neither successor inherits its reputation, and
// its key is refused from the earlier succession on. The validator keeps
// the first valid succession it saw.
func TestForgedAndConflictingSuccessions(t *testing.T) {
	b, c := newBook(t0)
	old, next := signtest.Pair(t)
	thief := signtest.New(t)
	history(t, b, c, old, "h", 4, t0.Add(-time.Hour), terms.RunSucceeded, 1)
	want := b.Stats(old.ID().String())

	genuine := seal(t, old, next, t0)
	onlyNew := seal(t, thief, next, t0) // the thief signs in the old key's place
	onlyNew.Payload = genuine.Payload
	onlyOld := *genuine
	onlyOld.NewSig, _ = thief.Sign(sign.DomainSuccession, genuine.Payload)
	reg := sign.NewSuccessions()
	dht := attest.SuccessionValidator{Successions: reg, Now: func() time.Time { return t0 }}
	key := attest.SuccessionKey(old.ID())
	for name, ss := range map[string]*sign.SignedSuccession{"signed by the new key only": onlyNew, "signed by the old key only": &onlyOld} {
		if err := b.Succeed(ss); !errors.Is(err, sign.ErrBadSignature) {
			t.Fatalf("book: %s: %v, want sign.ErrBadSignature", name, err)
		}
		if err := dht.Validate(key, wire(t, ss)); !errors.Is(err, sign.ErrBadSignature) {
			t.Fatalf("DHT validator: %s: %v, want sign.ErrBadSignature", name, err)
		}
	}
	if reg.Len() != 0 || b.Counters()[attest.CountSuccessionRejected] != 2 {
		t.Fatalf("forgeries learned: registry %d, counters %v", reg.Len(), b.Counters())
	}
	if st := b.Stats(next.ID().String()); st.Receipts != 0 || st.Score != attest.Prior {
		t.Fatalf("a forged succession passed the reputation on: %+v", st)
	}
	// The genuine record only under its old identity's key; garbage refused.
	if err := dht.Validate(attest.SuccessionKey(next.ID()), wire(t, genuine)); err == nil {
		t.Fatal("a succession was accepted under another identity's key")
	}
	if err := dht.Validate(key, []byte(`{"payload":"AA=="}`)); err == nil {
		t.Fatal("garbage accepted")
	}
	if err := dht.Validate(key, wire(t, genuine)); err != nil {
		t.Fatalf("the genuine succession: %v", err)
	}

	// A second, different succession of old: compromised.
	if err := b.Succeed(genuine); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(next.ID().String()); !reflect.DeepEqual(st, want) {
		t.Fatalf("the successor: %+v, want %+v", st, want)
	}
	other := signtest.New(t)
	second := seal(t, old, other, t0.Add(-time.Minute))
	if err := b.Succeed(second); !errors.Is(err, sign.ErrCompromised) {
		t.Fatalf("a second succession: %v, want sign.ErrCompromised", err)
	}
	if got := b.Counters()[attest.CountSuccessionConflict]; got != 1 {
		t.Fatalf("succession_conflict %d", got)
	}
	for _, id := range []*sign.Signer{next, other} {
		if st := b.Stats(id.ID().String()); st.Receipts != 0 || st.Score != attest.Prior {
			t.Fatalf("successor %s of a compromised identity inherited: %+v", id.ID(), st)
		}
	}
	renter := signtest.New(t)
	late := signed(t, old, renter, receipt("late", old, renter, t0.Add(-30*time.Second)))
	if err := b.AddReceipt(late); !errors.Is(err, sign.ErrCompromised) {
		t.Fatalf("the compromised key's receipt after its earlier succession: %v", err)
	}

	// The DHT: both are valid records; the first one seen is kept, and
	// the second marks the identity compromised in the registry.
	if err := dht.Validate(key, wire(t, second)); err != nil {
		t.Fatalf("the second succession is a valid record (evidence): %v", err)
	}
	if !reg.Compromised(old.ID().String()) {
		t.Fatal("the validator's registry does not hold the identity compromised")
	}
	if i, err := dht.Select(key, [][]byte{wire(t, second), wire(t, genuine)}); err != nil || i != 1 {
		t.Fatalf("Select = %d, %v; want the first seen (1)", i, err)
	}
	// A validator that knows neither keeps the earlier issued.
	fresh := attest.SuccessionValidator{Now: func() time.Time { return t0 }}
	if i, err := fresh.Select(key, [][]byte{wire(t, genuine), []byte("x"), wire(t, second)}); err != nil || i != 2 {
		t.Fatalf("Select = %d, %v; want the earliest issued (2)", i, err)
	}
	var forged sign.SignedSuccession
	_ = json.Unmarshal(wire(t, &onlyOld), &forged)
	if _, err := fresh.Select(key, [][]byte{wire(t, &forged)}); err == nil {
		t.Fatal("Select picked a forgery")
	}
}
