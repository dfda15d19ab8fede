package lease

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestHandleCheckpoint: the renter keeps only checkpoints of its running
// leases sent by their provider, within the cap and the work the job can
// have done; it answers once the artifact is fetched, takes a retry twice,
// keeps the newest two (unpinning the older) and names them for the
// requeue.
func TestHandleCheckpoint(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	pa := h.provider(provSpec{model: "H100", price: 0.5})
	pb := h.provider(provSpec{model: "A100", price: 0.8})
	j := job(terms.Bronze, 1, time.Minute, "gate", "ck", "0")
	j.GPUModels = []string{"H100"}
	v := r.post(j)
	v = r.waitJob(v.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	l := *v.Lease

	send := func(by *node, from peer.ID, c terms.Checkpoint) error {
		b, err := sealed(by.signer, sign.DomainCheckpoint, c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.tracker.HandleCheckpoint(context.Background(), from, b)
		return err
	}
	art := func(c byte) string { return strings.Repeat(string(c), 64) }
	good := func(seq int, a string) terms.Checkpoint {
		return terms.Checkpoint{JobID: l.JobID, LeaseID: l.ID, Attempt: l.Attempt, Seq: seq, Artifact: a, Bytes: 10,
			Work: time.Millisecond, Reason: terms.CheckpointPeriodic, Provider: pa.id(), TakenAt: time.Now()}
	}
	refusals := []struct {
		name string
		by   *node
		from peer.ID
		mod  func(*terms.Checkpoint)
		want string
	}{
		{"another provider", pb, peer.ID(pb.signer.ID()), func(c *terms.Checkpoint) { c.Provider = pb.id() }, "no lease"},
		{"relayed", pa, peer.ID(pb.signer.ID()), func(*terms.Checkpoint) {}, ""},
		{"other attempt", pa, peer.ID(pa.signer.ID()), func(c *terms.Checkpoint) { c.Attempt = 3 }, "attempt 3"},
		{"over the cap", pa, peer.ID(pa.signer.ID()), func(c *terms.Checkpoint) { c.Bytes = terms.MaxCheckpointBytes + 1 }, "the cap is"},
		{"too much work", pa, peer.ID(pa.signer.ID()), func(c *terms.Checkpoint) { c.Work = time.Hour }, "can have been done"},
		{"not an artifact", pa, peer.ID(pa.signer.ID()), func(c *terms.Checkpoint) { c.Artifact = "x" }, "not an artifact id"},
		{"no store", pa, peer.ID(pa.signer.ID()), func(*terms.Checkpoint) {}, "does not keep checkpoints"},
	}
	for _, c := range refusals {
		ck := good(1, art('a'))
		c.mod(&ck)
		if err := send(c.by, c.from, ck); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}

	fetched := map[string]int{}
	var pinMu sync.Mutex // the pins are released by the lease's end, elsewhere
	pins := map[string]int{}
	pinned := func(id string) int {
		pinMu.Lock()
		defer pinMu.Unlock()
		return pins[id]
	}
	r.tracker.cfg.Checkpoints = checkpointHooks{
		fetch: func(_ context.Context, id string, from peer.ID, _ string, _ bool, max int64) (int64, error) {
			if from != peer.ID(pa.signer.ID()) || max != terms.MaxCheckpointBytes {
				t.Errorf("fetch %s from %s (max %d)", id, from, max)
			}
			fetched[id]++
			return 10, nil
		},
		pin: func(id string) func() {
			pinMu.Lock()
			defer pinMu.Unlock()
			pins[id]++
			return func() {
				defer h.changed.Notify()
				pinMu.Lock()
				defer pinMu.Unlock()
				pins[id]--
			}
		}}
	bad := good(1, art('a'))
	bad.Bytes = 11
	if err := send(pa, peer.ID(pa.signer.ID()), bad); err == nil || !strings.Contains(err.Error(), "holds 10 bytes") {
		t.Fatalf("size mismatch: %v", err)
	}
	for i, a := range []string{art('a'), art('a'), art('b'), art('c')} {
		seq := []int{1, 1, 2, 3}[i]
		if err := send(pa, peer.ID(pa.signer.ID()), good(seq, a)); err != nil {
			t.Fatalf("checkpoint %d: %v", seq, err)
		}
	}
	if err := send(pa, peer.ID(pa.signer.ID()), good(2, art('d'))); err == nil || !strings.Contains(err.Error(), "older") {
		t.Fatalf("stale checkpoint: %v", err)
	}
	v, _ = r.tracker.View(v.Job.ID)
	if len(v.Checkpoints) != 2 || v.Checkpoints[0].Seq != 3 || v.Checkpoints[1].Seq != 2 || v.Checkpoint == nil || v.Checkpoint.Artifact != art('c') {
		t.Fatalf("kept %+v, newest %+v", v.Checkpoints, v.Checkpoint)
	}
	if fetched[art('a')] != 2 || pinned(art('a')) != 0 || pinned(art('b')) != 1 || pinned(art('c')) != 1 {
		t.Fatalf("fetched %v (the size mismatch and the first: the retry is not fetched again), pins %v", fetched, pins)
	}
	if got := r.tracker.restoreFor(v.Job.ID); len(got) != 2 || got[0].Artifact != art('c') {
		t.Fatalf("restore %+v", got)
	}

	// The job ends for good: no attempt will restore its checkpoints, so
	// the renter stops pinning them (the record still names them).
	pa.exec.open("ck")
	v = r.waitJob(v.Job.ID, "finished", func(v api.JobView) bool { return v.State == terms.JobFinished })
	if v.Run != terms.RunSucceeded || len(v.Checkpoints) != 2 {
		t.Fatalf("finished job: run %s, checkpoints %+v", v.Run, v.Checkpoints)
	}
	// The pins are released after the record's save, which the view
	// precedes.
	h.waitFor(3*time.Second, "the finished job's checkpoints unpinned", func() bool { return pinned(art('b')) == 0 && pinned(art('c')) == 0 })
}

// checkpointHooks is a renter's checkpoint store in tests: what each test
// fetches and pins.
type checkpointHooks struct {
	fetch func(ctx context.Context, id string, from peer.ID, leaseID string, sealed bool, max int64) (int64, error)
	pin   func(id string) (unpin func())
}

func (c checkpointHooks) FetchCheckpoint(ctx context.Context, id string, from peer.ID, leaseID string, sealed bool, max int64) (int64, error) {
	return c.fetch(ctx, id, from, leaseID, sealed, max)
}
func (c checkpointHooks) PinCheckpoint(id string) func() { return c.pin(id) }
