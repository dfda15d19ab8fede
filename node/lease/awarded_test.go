package lease

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
)

// TestHeartbeatOnAwardedLeaseIsNotUnknown: a lease is its job's from the
// moment its award is sent. Its provider, which runs it as soon as it
// confirms, may send heartbeats before the confirmation is taken (a busy
// renter): they are not answered Unknown (three such answers make the
// provider cancel the lease). Once the auction ended without that lease,
// they are.
func TestHeartbeatOnAwardedLeaseIsNotUnknown(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	prov := signtest.New(t)
	jb := job(terms.Silver, 2, time.Minute, "true")
	jb.ID, jb.Owner = "job-awarded", r.id()
	r.tracker.mu.Lock()
	s := &jobState{}
	r.tracker.stepLocked(jb.ID, s, jobmachine.Posted{Job: jb}) // its auction is not run
	r.tracker.jobs[jb.ID] = s
	r.tracker.mu.Unlock()
	now := time.Now()
	l := terms.Lease{ID: "lease-awarded", JobID: jb.ID, Renter: r.id(), Provider: prov.ID().String(), Price: 1,
		Start: now.Add(-time.Second), End: now.Add(time.Minute), GPUCount: 1, State: terms.RunPending}
	r.tracker.onAward(l)
	var seq uint64
	beat := func(leaseID string) ([]byte, error) {
		seq++
		env, err := attest.SignHeartbeat(prov, attest.Heartbeat{LeaseID: leaseID, Provider: prov.ID().String(), Seq: seq,
			Time: time.Now(), Source: attest.SourceProcess})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := env.Marshal()
		return r.tracker.HandleHeartbeat(context.Background(), peer.ID(prov.ID()), b)
	}
	unknown := func(reply []byte) bool {
		var ans wire.HeartbeatReply
		return reply != nil && json.Unmarshal(reply, &ans) == nil && ans.Unknown
	}
	reply, err := beat(l.ID)
	if unknown(reply) || err == nil {
		t.Fatalf("heartbeat on an awarded lease: reply %s, err %v; want an error, not Unknown", reply, err)
	}
	if n := r.counters.Snapshot()["renter.heartbeat_before_lease"]; n != 1 {
		t.Fatalf("renter.heartbeat_before_lease = %d, want 1", n)
	}
	if reply, err := beat("lease-never-awarded"); !unknown(reply) || err != nil {
		t.Fatalf("heartbeat on a lease never awarded: reply %s, err %v; want Unknown", reply, err)
	}
	// The auction ends without it (its confirm never came): not the
	// job's any more.
	r.tracker.noLease(jb.ID, errors.New("no lease"))
	if reply, err := beat(l.ID); !unknown(reply) || err != nil {
		t.Fatalf("heartbeat on a lease whose award came to nothing: reply %s, err %v; want Unknown", reply, err)
	}
}
