package auction

import (
	"context"
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// retire makes the registry hold old succeeded by a fresh identity at at.
func retire(t *testing.T, reg *sign.Successions, old *sign.Signer, at time.Time) {
	t.Helper()
	ss, err := sign.SealSuccession(old, signtest.New(t), at)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Learn(ss, at); err != nil {
		t.Fatal(err)
	}
}

// TestCapabilityOfRetiredIdentityRefused: a capability record a retired
// identity's old key issued after its succession is refused by the DHT
// validator and never selected, even as the newest; one issued before
// stays valid until it expires.
func TestCapabilityOfRetiredIdentityRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	reg := sign.NewSuccessions()
	v := terms.CapabilityValidator{Now: func() time.Time { return now }, Successions: reg}
	old := signtest.New(t)
	before, _ := terms.SealCapability(old, testCap(old, now.Add(-time.Minute), 10*time.Minute))
	late := testCap(old, now, 10*time.Minute)
	late.Seq = 2
	after, _ := terms.SealCapability(old, late)
	key := terms.CapabilityKey(old.ID())
	for _, rec := range [][]byte{before, after} {
		if err := v.Validate(key, rec); err != nil {
			t.Fatalf("before any succession: %v", err)
		}
	}
	retire(t, reg, old, now.Add(-30*time.Second))
	if err := v.Validate(key, after); !errors.Is(err, sign.ErrRetired) {
		t.Fatalf("a record issued after the succession: %v, want sign.ErrRetired", err)
	}
	if err := v.Validate(key, before); err != nil {
		t.Fatalf("a record issued before the succession: %v", err)
	}
	if i, err := v.Select(key, [][]byte{after, before}); err != nil || i != 1 {
		t.Fatalf("Select = %d, %v; want the record issued before the succession (1)", i, err)
	}
}

// TestBidFromRetiredIdentityRefused: a renter refuses (retired_key) a bid
// its provider's old key signed after the identity's succession.
func TestBidFromRetiredIdentityRefused(t *testing.T) {
	t.Parallel()
	m := newMarket(t, eightProviders()[:1])
	reg := sign.NewSuccessions()
	r, _ := m.renter(t, RenterConfig{Successions: reg})
	j := euJob(m.now())
	j.BidWindow = 2 * time.Second
	j.ID = "job-retired"
	heard := m.hearCall(t, j)
	go func() { _, _ = r.Post(context.Background(), j) }()
	waitCall(t, heard, 5*time.Second)
	defer func() { _ = r.Cancel(j.ID) }()

	old := signtest.New(t)
	now := m.now()
	retire(t, reg, old, now.Add(-time.Minute))
	bid, err := terms.EncodeBid(old, terms.Bid{JobID: j.ID, Provider: old.ID().String(), Region: "eu-west", Price: 1, Start: now,
		End: now.Add(time.Hour), Nonce: "n1", IssuedAt: now, ExpiresAt: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.HandleBid(peer.ID(old.ID()), bid); !isRejection(err, "retired_key") || !errors.Is(err, sign.ErrRetired) {
		t.Fatalf("a retired key's bid: %v, want a retired_key rejection", err)
	}
	if r.Counters()["retired_key"] != 1 {
		t.Fatalf("counters %v", r.Counters())
	}
}
