package auction

import (
	"errors"
	"fmt"
	"github.com/libp2p/go-libp2p/core/peer"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestCapacityNoticeChecks: a renter passes on a fresh notice signed by its
// provider, and refuses one relayed by another peer, a stale one, and one
// naming too many jobs or no free GPU.
func TestCapacityNoticeChecks(t *testing.T) {
	t.Parallel()
	m := newMarket(t, nil)
	var got []terms.CapacityNotice
	r, _ := m.renter(t, RenterConfig{Listener: hooks{capacity: func(n terms.CapacityNotice) { got = append(got, n) }}})
	prov, other := signtest.New(t), signtest.New(t)
	notice := func(n terms.CapacityNotice) []byte {
		t.Helper()
		b, err := terms.EncodeCapacityNotice(prov, n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// prov turned job-a away as busy; job-b it never did (another
	// provider did, for another reason).
	r.mu.Lock()
	r.jobs["job-a"] = &renterJob{call: callmachine.State{Busy: map[string]bool{prov.ID().String(): true}}}
	r.jobs["job-b"] = &renterJob{call: callmachine.State{Busy: map[string]bool{other.ID().String(): true}}}
	r.mu.Unlock()
	fresh := terms.CapacityNotice{Provider: prov.ID().String(), FreeGPUs: 2, Jobs: []string{"job-a", "job-b", "job-z"}, IssuedAt: m.now()}
	if err := r.HandleBid(peer.ID(prov.ID()), notice(fresh)); err != nil || len(got) != 1 || len(got[0].Jobs) != 1 || got[0].Jobs[0] != "job-a" {
		t.Fatalf("fresh notice: %v, passed on %v (want job-a only)", err, got)
	}
	var rej0 *Rejection
	unsolicited := fresh
	unsolicited.Jobs = []string{"job-b", "job-z"}
	if err := r.HandleBid(peer.ID(prov.ID()), notice(unsolicited)); !errors.As(err, &rej0) || rej0.Reason != "unsolicited_notice" {
		t.Fatalf("notice naming only jobs the provider never declined as busy: %v", err)
	}
	var rej *Rejection
	if err := r.HandleBid(peer.ID(other.ID()), notice(fresh)); !errors.As(err, &rej) || rej.Reason != "sender_mismatch" {
		t.Fatalf("relayed notice: %v", err)
	}
	stale := fresh
	stale.IssuedAt = m.now().Add(-time.Minute)
	if err := r.HandleBid(peer.ID(prov.ID()), notice(stale)); !errors.As(err, &rej) || rej.Reason != "stale_notice" {
		t.Fatalf("stale notice: %v", err)
	}
	many := fresh
	many.Jobs = nil
	for i := 0; i <= terms.MaxNoticeJobs; i++ {
		many.Jobs = append(many.Jobs, fmt.Sprintf("job-%d", i))
	}
	none := fresh
	none.FreeGPUs = 0
	// A slice free makes up for no whole GPU only when it is a share.
	negative := fresh
	negative.FreeGPUs, negative.FreeFraction = -1, 2
	negSlice := fresh
	negSlice.FreeGPUs, negSlice.FreeFraction = 2, -1.5
	for name, n := range map[string]terms.CapacityNotice{"too many jobs": many, "no free gpu": none,
		"negative gpus, room in slices": negative, "negative slice room": negSlice} {
		if err := r.HandleBid(peer.ID(prov.ID()), notice(n)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := terms.EncodeCapacityNotice(other, fresh); !errors.Is(err, terms.ErrSignerMismatch) {
		t.Fatalf("notice sealed by another signer: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("%d notices passed on, want 1", len(got))
	}
}
