package lease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestCheckpointQuota: a provider flooding a lease's renter with
// checkpoints (each under the size cap) gets at most the job's quota of
// checkpoint bytes per hour fetched into the renter's store; the rest are
// refused before anything is fetched, so they cannot evict the renter's
// own artifacts.
func TestCheckpointQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 0.5})
	v := r.post(job(terms.Bronze, 1, time.Minute, "gate", "flood", "0"))
	v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	l := *v.Lease
	r.tracker.cfg.CheckpointBytesPerHour = 8 << 30
	const size = 3 << 30
	fetched := 0
	r.tracker.cfg.Checkpoints = checkpointHooks{
		fetch: func(context.Context, string, peer.ID, string, bool, int64) (int64, error) {
			fetched++
			return size, nil
		},
		pin: func(string) func() { return func() {} }}
	var errs []error
	for seq := 1; seq <= 6; seq++ {
		c := terms.Checkpoint{JobID: l.JobID, LeaseID: l.ID, Attempt: l.Attempt, Seq: seq, Artifact: strings.Repeat(string("abcdef"[seq-1]), 64),
			Bytes: size, Work: time.Millisecond, Reason: terms.CheckpointPeriodic, Provider: pa.id(), TakenAt: time.Now()}
		b, err := sealed(pa.signer, sign.DomainCheckpoint, c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.tracker.HandleCheckpoint(context.Background(), peer.ID(pa.signer.ID()), b)
		errs = append(errs, err)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("checkpoints within the quota refused: %v", errs)
	}
	for i, err := range errs[2:] {
		if err == nil || !strings.Contains(err.Error(), "quota") {
			t.Fatalf("checkpoint %d over the quota: %v", i+3, err)
		}
	}
	if fetched != 2 {
		t.Fatalf("%d checkpoints fetched into the renter's store, want 2", fetched)
	}
	if got := r.counters.Snapshot()["renter.checkpoint_over_quota"]; got != 4 {
		t.Fatalf("over-quota counter %d, want 4", got)
	}
}
