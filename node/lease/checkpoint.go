package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The checkpoint contract, provider side: a job's checkpoint dir
// (runtime.CheckpointDir, GPUMESH_CHECKPOINT_DIR) is saved as an artifact
// owned by its renter every job.CheckpointEvery while it runs and once
// more after it exits when it was stopped early (preempted, drained, gap
// end). Each checkpoint is signed (sign.DomainCheckpoint) and sent to the
// renter, whose daemon fetches the artifact before it answers; the
// provider's copy is then dropped. A later attempt restores the newest one
// that verifies.

// ckptState is a running lease's checkpoint bookkeeping.
type ckptState struct {
	// restored is the checkpoint the lease started from (nil: fresh).
	restored *terms.Checkpoint
	seq      int
	// lastFP is the checkpoint dir's listing at the last snapshot (or
	// refusal), so an unchanged dir is not saved again.
	lastFP string
	// lastID is the artifact of the last saved (or restored) checkpoint.
	lastID string
}

// restoreCheckpoint fetches the job's checkpoints to restore, newest
// first, until one verifies, and returns the dir holding its files (""
// when the job starts fresh). Each refusal is said in the job's log.
func (r *leaseRun) restoreCheckpoint(job terms.Job, lw io.Writer) (dir string, release func(), err error) {
	s := r.s
	release = func() {}
	// A gang member restores its own rank's dir.
	job.Restore = job.RestoreFor(r.lease())
	if len(job.Restore) == 0 {
		return "", release, nil
	}
	if s.cfg.Checkpoints == nil {
		fmt.Fprintf(lw, "gpumesh: this provider cannot restore checkpoints; starting fresh\n")
		return "", release, nil
	}
	root := s.cfg.WorkRoot
	if root == "" {
		root = filepath.Join(s.cfg.JobsDir, "restore")
	}
	l := r.lease()
	ctx, cancel := r.untilStopped()
	defer cancel()
	seal := r.sealed()
	if seal != nil {
		root = seal.dir
	}
	for i, ck := range job.Restore {
		dir = filepath.Join(root, fmt.Sprintf("restore-%s-%d", l.ID, i))
		rel, err := s.cfg.Checkpoints.Restore(ctx, job, ck.Artifact, dir, seal.leaseKeys())
		if err == nil {
			fmt.Fprintf(lw, "gpumesh: restoring checkpoint %s (seq %d of attempt %d, %d bytes, work saved %v)\n",
				ck.Artifact, ck.Seq, ck.Attempt, ck.Bytes, ck.Work.Round(time.Second))
			c := ck
			r.mu.Lock()
			r.ck.restored, r.ck.lastID = &c, ck.Artifact
			r.pr.Restored = &c
			r.mu.Unlock()
			s.saveRun(r)
			return dir, rel, nil
		}
		if ctx.Err() != nil {
			return "", release, fmt.Errorf("restore checkpoint %s: %w", ck.Artifact, ctx.Err())
		}
		s.cfg.Counters.Add("provider.checkpoint_refused")
		next := "starting fresh"
		if i+1 < len(job.Restore) {
			next = "restoring the previous checkpoint " + job.Restore[i+1].Artifact
		}
		fmt.Fprintf(lw, "gpumesh: checkpoint %s refused: %v; %s\n", ck.Artifact, err, next)
		s.log.Warn("checkpoint refused", "lease", l.ID, "artifact", ck.Artifact, "err", err)
	}
	return "", release, nil
}

// checkpointLoop saves the job's checkpoint dir every job.CheckpointEvery
// until the job ends or is being stopped (the stop's own snapshot follows
// the job's exit).
func (r *leaseRun) checkpointLoop(h runtime.Handle, every time.Duration, started time.Time, lw io.Writer) {
	waitDone := make(chan struct{})
	go func() { h.Wait(); close(waitDone) }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-waitDone:
			return
		case <-r.stop:
			return
		case <-t.C:
			r.snapshot(h, terms.CheckpointPeriodic, started, r.s.now(), lw)
		}
	}
}

// snapshot saves the job's checkpoint dir, when it holds files and changed
// since the last one, and hands it to the renter. at is the time the
// dir's state stands for (now, or the job's exit).
func (r *leaseRun) snapshot(h runtime.Handle, reason string, started, at time.Time, lw io.Writer) {
	s := r.s
	if s.cfg.Checkpoints == nil {
		return
	}
	l := r.lease()
	fp, size, files, err := listCheckpoint(h.WorkDir())
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: checkpoint not saved: %v\n", err)
		return
	}
	r.mu.Lock()
	unchanged := fp == r.ck.lastFP
	r.mu.Unlock()
	if files == 0 || unchanged {
		return
	}
	r.mu.Lock()
	r.ck.lastFP = fp
	r.mu.Unlock()
	if size > terms.MaxCheckpointBytes {
		s.cfg.Counters.Add("provider.checkpoint_too_big")
		fmt.Fprintf(lw, "gpumesh: checkpoint not saved: %d bytes is over the cap of %d bytes per checkpoint\n", size, int64(terms.MaxCheckpointBytes))
		return
	}
	// A copy under a fixed name: the job may go on writing while the
	// artifact is hashed, and equal contents make equal artifacts.
	stage := filepath.Join(s.cfg.JobsDir, "checkpoints", l.ID)
	seal := r.sealed()
	if seal != nil {
		stage = filepath.Join(seal.dir, "checkpoint")
	}
	_ = os.RemoveAll(stage)
	defer os.RemoveAll(stage)
	dst := filepath.Join(stage, runtime.CheckpointDir)
	skipped, err := copyCheckpoint(h.WorkDir(), dst)
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: checkpoint not saved: %v\n", err)
		return
	}
	if len(skipped) > 0 {
		fmt.Fprintf(lw, "gpumesh: checkpoint: left out %s\n", strings.Join(skipped, "; "))
	}
	id, bytes, drop, err := s.cfg.Checkpoints.Checkpoint(dst, l.Renter, seal.leaseKeys())
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: checkpoint not saved: %v\n", err)
		return
	}
	r.mu.Lock()
	same := id == r.ck.lastID
	var work time.Duration
	if r.ck.restored != nil {
		work = r.ck.restored.Work
	}
	if !same {
		r.ck.seq++
	}
	seq, job := r.ck.seq, r.pr.Job
	r.mu.Unlock()
	if same {
		// What the last checkpoint (or the restored one) holds.
		if restored := r.restoredArtifact(); id != restored {
			drop()
		}
		return
	}
	if ran := at.Sub(started); ran > 0 {
		work += ran
	}
	ck := terms.Checkpoint{JobID: l.JobID, LeaseID: l.ID, Attempt: job.Attempt, Seq: seq, Artifact: id, Bytes: bytes,
		Work: work, Reason: reason, Provider: s.cfg.Signer.ID().String(), TakenAt: s.now()}
	err = s.sendCheckpoint(l, ck)
	drop() // the renter holds it now, or will never
	if err != nil {
		s.cfg.Counters.Add("provider.checkpoint_undelivered")
		fmt.Fprintf(lw, "gpumesh: checkpoint %d not kept by the renter: %v\n", seq, err)
		s.log.Warn("checkpoint not delivered", "lease", l.ID, "seq", seq, "err", err)
		return
	}
	s.cfg.Counters.Add("provider.checkpoint_saved")
	fmt.Fprintf(lw, "gpumesh: checkpoint %d saved (%s, %d bytes, work saved %v): %s\n", seq, reason, bytes, work.Round(time.Millisecond), id)
	r.mu.Lock()
	r.ck.lastID = id
	r.pr.Checkpoint = &ck
	r.mu.Unlock()
	s.saveRun(r)
}

func (r *leaseRun) restoredArtifact() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ck.restored == nil {
		return ""
	}
	return r.ck.restored.Artifact
}

// sendCheckpoint hands a signed checkpoint to the lease's renter, which
// answers once it stored the artifact; a lost answer is retried (the
// renter takes the same checkpoint twice).
func (s *Supervisor) sendCheckpoint(l terms.Lease, ck terms.Checkpoint) error {
	b, err := sealed(s.cfg.Signer, sign.DomainCheckpoint, ck)
	if err != nil {
		return err
	}
	renter, err := peer.Decode(l.Renter)
	if err != nil {
		return err
	}
	// Time for the renter to fetch it: 2 minutes plus 10 MB/s.
	timeout := 2*time.Minute + time.Duration(ck.Bytes/(10<<20))*time.Second
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(s.ctx, timeout)
		_, err = s.cfg.Transport.Request(ctx, renter, wire.ProtoCheckpoint, b)
		cancel()
		if err == nil || s.ctx.Err() != nil || attempt == 2 {
			return err
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		case <-s.ctx.Done():
		}
	}
}

// listCheckpoint describes the checkpoint dir of the work dir workDir: a
// fingerprint of its files' names, sizes and modification times, their
// total size and count. The dir is the job's: it is read without following
// any symlink (runtime.WalkJobTree), and symlinks are not listed.
func listCheckpoint(workDir string) (fp string, size int64, files int, err error) {
	var lines []string
	err = runtime.WalkJobTree(workDir, runtime.CheckpointDir, func(e runtime.TreeEntry, err error) error {
		if err != nil || !e.Mode.IsRegular() {
			return nil
		}
		lines = append(lines, fmt.Sprintf("%s\x00%d\x00%d", e.Path, e.Size, e.ModTime.UnixNano()))
		size += e.Size
		files++
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, 0, nil
	}
	if err != nil {
		return "", 0, 0, err
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), size, files, nil
}

// copyCheckpoint copies the regular files and dirs of the checkpoint dir
// of workDir into dst and returns the entries it left out. The provider
// copies as root while the job runs and may swap any part of the dir for
// a symlink: runtime.CopyJobTree never follows one (nor opens a fifo, nor
// copies a hard link to a file the job does not own). Files the job
// renames away meanwhile are skipped (it writes atomically: the new name
// holds the complete file).
func copyCheckpoint(workDir, dst string) (skipped []string, err error) {
	return runtime.CopyJobTree(workDir, runtime.CheckpointDir, dst, terms.MaxCheckpointBytes)
}
