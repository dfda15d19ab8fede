package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The checkpoint contract, renter side: the renter's daemon keeps its
// jobs' checkpoints. A provider's signed checkpoint (wire.ProtoCheckpoint)
// for the current lease of one of our jobs is fetched from that provider
// into our own artifact store and pinned before it is acknowledged; the
// newest terms.MaxRestore good ones are kept per job (older ones are
// unpinned) and a requeued attempt restores them, newest first.

// HandleCheckpoint takes a provider's signed checkpoint of a lease of ours
// (wire.ProtoCheckpoint) and answers once its artifact is stored here.
func (t *Tracker) HandleCheckpoint(ctx context.Context, from peer.ID, data []byte) ([]byte, error) {
	count := t.cfg.Counters.Add
	var c terms.Checkpoint
	if err := sign.OpenFrom(data, sign.DomainCheckpoint, sign.ID(from), &c); err != nil {
		count("renter.checkpoint_rejected")
		return nil, err
	}
	t.mu.Lock()
	jobID := t.byLease[c.LeaseID]
	v := t.jobs[jobID]
	dup, err := checkpointFits(v, c, from, t.now())
	t.mu.Unlock()
	if err != nil {
		count("renter.checkpoint_rejected")
		return nil, err
	}
	if dup {
		return nil, nil // a retry of one we hold: the first answer was lost
	}
	if t.cfg.Checkpoints == nil {
		count("renter.checkpoint_rejected")
		return nil, errors.New("this renter does not keep checkpoints")
	}
	if err := t.chargeCheckpoint(jobID, c.Bytes); err != nil {
		count("renter.checkpoint_over_quota")
		t.log.Warn("checkpoint refused", "job", jobID, "lease", c.LeaseID, "seq", c.Seq, "err", err)
		return nil, err
	}
	size, err := t.cfg.Checkpoints.FetchCheckpoint(ctx, c.Artifact, from, c.LeaseID, v.Job.Sealed, terms.MaxCheckpointBytes)
	if err == nil && size != c.Bytes {
		err = fmt.Errorf("checkpoint artifact holds %d bytes, the checkpoint says %d", size, c.Bytes)
	}
	if err != nil {
		count("renter.checkpoint_fetch_failed")
		t.log.Warn("checkpoint not kept", "job", jobID, "lease", c.LeaseID, "seq", c.Seq, "err", err)
		return nil, fmt.Errorf("checkpoint %d of lease %s not kept: %w", c.Seq, c.LeaseID, err)
	}
	unpin := t.cfg.Checkpoints.PinCheckpoint(c.Artifact)
	t.mu.Lock()
	v = t.jobs[jobID]
	if _, err := checkpointFits(v, c, from, t.now()); err != nil {
		t.mu.Unlock()
		unpin()
		count("renter.checkpoint_rejected")
		return nil, err
	}
	kept := append([]terms.Checkpoint{c}, v.Checkpoints...)
	var dropped []terms.Checkpoint
	if len(kept) > terms.MaxRestore {
		kept, dropped = kept[:terms.MaxRestore], kept[terms.MaxRestore:]
	}
	v.Checkpoints = kept
	newest := c
	v.Checkpoint = &newest
	t.keepPin(c.Artifact, unpin)
	for _, d := range dropped {
		t.unpinCheckpoint(d.Artifact)
	}
	t.mu.Unlock()
	count("renter.checkpoint_kept")
	t.log.Info("checkpoint kept", "job", jobID, "lease", c.LeaseID, "seq", c.Seq, "bytes", c.Bytes, "work", c.Work, "reason", c.Reason)
	t.save(jobID)
	return nil, nil
}

// checkpointFits checks a checkpoint against the job's record (t.mu
// held): it must be for the current, running lease of the job, sent by
// that lease's provider, newer than the lease's last one, within the size
// cap and claim no more work than the job could have done. dup reports a
// checkpoint already held.
func checkpointFits(v *jobState, c terms.Checkpoint, from peer.ID, now time.Time) (dup bool, err error) {
	if v == nil || v.Lease == nil || v.Lease.ID != c.LeaseID || v.Lease.Provider != from.String() || c.Provider != from.String() {
		return false, fmt.Errorf("no lease %q from %s", c.LeaseID, from)
	}
	l := v.Lease
	switch {
	case c.JobID != l.JobID || c.Attempt != l.Attempt:
		return false, fmt.Errorf("checkpoint names job %q attempt %d; lease %s is job %s attempt %d", c.JobID, c.Attempt, l.ID, l.JobID, l.Attempt)
	case !terms.ValidArtifactID(c.Artifact):
		return false, fmt.Errorf("checkpoint artifact %q is not an artifact id", c.Artifact)
	case c.Bytes <= 0 || c.Bytes > terms.MaxCheckpointBytes:
		return false, fmt.Errorf("checkpoint of %d bytes: the cap is %d", c.Bytes, int64(terms.MaxCheckpointBytes))
	case c.Seq < 1 || c.Work < 0:
		return false, fmt.Errorf("checkpoint seq %d, work %v", c.Seq, c.Work)
	}
	for _, k := range v.Checkpoints {
		if k.LeaseID != c.LeaseID {
			continue
		}
		if k.Seq == c.Seq && k.Artifact == c.Artifact {
			return true, nil
		}
		if c.Seq <= k.Seq {
			return false, fmt.Errorf("checkpoint %d of lease %s is older than the one held (%d)", c.Seq, l.ID, k.Seq)
		}
	}
	if v.Run.Terminal() {
		return false, fmt.Errorf("lease %s has ended: no more checkpoints", l.ID)
	}
	// The work a checkpoint captures: what the restored one held plus at
	// most the time since the lease started.
	limit := now.Sub(l.Start) + attest.HeartbeatSkew
	if rs := v.Job.RestoreFor(*l); len(rs) > 0 {
		limit += rs[0].Work
	}
	if c.Work > limit {
		return false, fmt.Errorf("checkpoint claims %v of work; at most %v can have been done", c.Work, limit)
	}
	return false, nil
}

// keepPin holds a checkpoint's pin (t.mu held).
func (t *Tracker) keepPin(id string, unpin func()) {
	if t.ckPins == nil {
		t.ckPins = map[string]func(){}
	}
	if old := t.ckPins[id]; old != nil {
		old()
	}
	t.ckPins[id] = unpin
}

// unpinCheckpoint releases a checkpoint no job that may still run keeps
// any more (t.mu held). Artifacts are content-addressed: two jobs may keep
// the same one.
func (t *Tracker) unpinCheckpoint(id string) {
	for _, v := range t.jobs {
		if !v.Live() {
			continue // it will not restore anything again
		}
		for _, k := range v.Checkpoints {
			if k.Artifact == id {
				return
			}
		}
	}
	if u := t.ckPins[id]; u != nil {
		u()
		delete(t.ckPins, id)
	}
}

// releaseCheckpoints unpins the checkpoints of a job that is over for
// good (finished, failed and not requeued, cancelled, unplaceable, its
// attempt budget spent): no attempt will restore them, so the store may
// evict them like any other artifact. The record still names them (job
// status, receipts); a restart does not pin them again either
// (repinCheckpoints).
func (t *Tracker) releaseCheckpoints(jobID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.jobs[jobID]
	if v == nil || v.Live() {
		return
	}
	for _, k := range v.Checkpoints {
		t.unpinCheckpoint(k.Artifact)
	}
}

// repinCheckpoints pins the checkpoints a job keeps (after a restart).
func (t *Tracker) repinCheckpoints(v *jobState) {
	if !v.Live() || t.cfg.Checkpoints == nil {
		return // no attempt will restore them
	}
	for _, k := range v.Checkpoints {
		if t.ckPins[k.Artifact] == nil {
			t.keepPin(k.Artifact, t.cfg.Checkpoints.PinCheckpoint(k.Artifact))
		}
	}
}

// restoreFor is the checkpoints a requeued attempt of a job restores,
// newest first.
func (t *Tracker) restoreFor(jobID string) []terms.Checkpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v := t.jobs[jobID]; v != nil {
		return append([]terms.Checkpoint(nil), v.Checkpoints...)
	}
	return nil
}

// restoredOf is the checkpoint of job's Restore with artifact id (nil for
// none).
func restoredOf(job terms.Job, id string) *terms.Checkpoint {
	for _, c := range job.Restore {
		if id != "" && c.Artifact == id {
			cc := c
			return &cc
		}
	}
	return nil
}

// leaseCheckpoint is the newest checkpoint a job keeps of lease leaseID
// (nil for none).
func leaseCheckpoint(held []terms.Checkpoint, leaseID string) *terms.Checkpoint {
	for _, k := range held {
		if k.LeaseID == leaseID {
			kk := k
			return &kk
		}
	}
	return nil
}

// checkReceiptCheckpoint: a receipt names the lease's last checkpoint this
// renter holds ("" when it holds none of that lease).
func checkReceiptCheckpoint(v *api.JobView, r attest.Receipt) error {
	want := ""
	if k := leaseCheckpoint(v.Checkpoints, r.LeaseID); k != nil {
		want = k.Artifact
	}
	if r.Checkpoint != want {
		return fmt.Errorf("receipt names checkpoint %q; the last checkpoint the renter holds of lease %s is %q", r.Checkpoint, r.LeaseID, want)
	}
	return nil
}

// Checkpoint quota defaults (TrackerConfig.CheckpointBytesPerHour).
const (
	DefaultCheckpointBytesPerHour int64 = 16 << 30
	// MinCheckpointCharge is what a checkpoint costs of the quota at
	// least, so that many small ones are limited too (256 an hour by
	// default).
	MinCheckpointCharge int64 = 64 << 20
)

// byteBucket is a token bucket of bytes.
type byteBucket struct {
	tokens float64
	last   time.Time
}

// chargeCheckpoint spends a checkpoint of n bytes from job's quota, or
// says why it cannot.
func (t *Tracker) chargeCheckpoint(jobID string, n int64) error {
	rate := t.cfg.CheckpointBytesPerHour
	if rate <= 0 {
		rate = DefaultCheckpointBytesPerHour
	}
	capacity := float64(max(rate, terms.MaxCheckpointBytes))
	cost := float64(max(n, MinCheckpointCharge))
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ckQuota == nil {
		t.ckQuota = map[string]*byteBucket{}
	}
	b := t.ckQuota[jobID]
	if b == nil {
		b = &byteBucket{tokens: capacity, last: now}
		t.ckQuota[jobID] = b
		for id := range t.ckQuota { // forget jobs that take no more checkpoints
			if v := t.jobs[id]; v == nil || !v.Live() {
				delete(t.ckQuota, id)
			}
		}
	}
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(capacity, b.tokens+dt.Hours()*float64(rate))
		b.last = now
	}
	if b.tokens < cost {
		return fmt.Errorf("checkpoint of %d bytes refused: job %s is over its checkpoint quota (%d bytes an hour)", n, jobID, rate)
	}
	b.tokens -= cost
	return nil
}
