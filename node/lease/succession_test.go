package lease

import (
	"context"
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

// TestHeartbeatOfRetiredKeyRefused: once the renter's book knows a
// provider's succession, a heartbeat the old key signed after it is
// refused and counted, whatever lease it names; one signed before is not
// refused for its key.
func TestHeartbeatOfRetiredKeyRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	old, next := signtest.Pair(t)
	at := time.Now().Add(-time.Minute)
	ss, err := sign.SealSuccession(old, next, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.book.Succeed(ss); err != nil {
		t.Fatal(err)
	}
	beat := func(when time.Time) []byte {
		env, err := attest.SignHeartbeat(old, attest.Heartbeat{LeaseID: "lease-1", Seq: 1, Time: when, Source: attest.SourceProcess})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := env.Marshal()
		return b
	}
	if _, err := r.tracker.HandleHeartbeat(context.Background(), peer.ID(old.ID()), beat(time.Now())); !errors.Is(err, sign.ErrRetired) {
		t.Fatalf("the old key's heartbeat after its succession: %v, want sign.ErrRetired", err)
	}
	if n := r.counters.Snapshot()["renter.heartbeat_retired_key"]; n != 1 {
		t.Fatalf("renter.heartbeat_retired_key = %d, want 1", n)
	}
	if _, err := r.tracker.HandleHeartbeat(context.Background(), peer.ID(old.ID()), beat(at.Add(-time.Second))); errors.Is(err, sign.ErrRetired) {
		t.Fatalf("a heartbeat signed before the succession refused for its key: %v", err)
	}
}
