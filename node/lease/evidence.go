package lease

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Payment needs evidence. A provider's word that a job succeeded is paid
// only once the renter has checked it against what it received itself: the
// final report names the job's whole log by SHA-256 and length
// (wire.LeaseEvent.LogDigest, LogBytes), the renter fetches that log from
// the provider over the logs stream and hashes it, and countersigns a
// succeeded receipt only when both agree and the receipt carries the same
// digest (attest.Receipt.LogDigest). A job that wrote nothing has the empty
// log's digest, which counts only when the renter's own fetch is empty too.
// When the check fails (no digest, the log cannot be fetched, or it is not
// the one reported) the renter holds the run failed through the provider's
// fault: the succeeded receipt is refused (no payment), the job goes back
// to auction without that provider (renter.no_evidence).

// evidenceTimeout bounds one fetch of a job's log for the check.
const evidenceTimeout = 2 * time.Minute

// evidenceWait bounds how long a receipt waits for a check in progress
// before it is refused for now (the provider retries).
const evidenceWait = 10 * time.Second

// MaxEvidenceLog is the largest log a renter fetches to check a run; a
// final report naming a larger one is not evidence it can check.
const MaxEvidenceLog = 1 << 30

// evidenceVerified is JobView.Evidence for a run whose log was checked.
const evidenceVerified = "log verified"

// checkEvidence starts (once per lease) the check of a succeeded run's
// evidence and returns a channel closed when it is done.
func (t *Tracker) checkEvidence(jobID string, l terms.Lease) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch, ok := t.checking[l.ID]; ok {
		return ch
	}
	ch := make(chan struct{})
	t.checking[l.ID] = ch
	v := t.jobs[jobID]
	if v == nil || v.Lease == nil || v.Lease.ID != l.ID {
		close(ch)
		return ch
	}
	digest, size, inline := v.LogDigest, v.LogBytes, v.inlineLog
	want, noPersist := keepWantOf(v.view()), v.Job.NoPersist
	started := t.spawnLocked(func() {
		defer close(ch)
		var err error
		if noPersist {
			// Its files are taken from the provider anyway: the log kept
			// is the log checked.
			<-t.keepFiles(want)
			if _, ok := t.KeptDir(l.ID); !ok {
				t.mu.Lock()
				err = t.keepErr[l.ID]
				t.mu.Unlock()
				if err == nil {
					err = errors.New("the job's log and outputs could not be kept")
				}
			}
		} else {
			err = t.verifyLog(l, digest, size, inline, io.Discard)
		}
		if err == nil {
			t.mu.Lock()
			rd := ready{key: jobID}
			if v := t.jobs[jobID]; v != nil && v.Lease != nil && v.Lease.ID == l.ID {
				v.Evidence = fmt.Sprintf("%s (%d bytes)", evidenceVerified, size)
				rd = t.stepLocked(jobID, v, jobmachine.Evidence{LeaseID: l.ID, OK: true})
			}
			t.mu.Unlock()
			_ = t.advanceWithFacts(rd)
			return
		}
		if t.ctx.Err() != nil {
			return // stopping: checked again after the restart
		}
		t.noEvidence(jobID, l, err)
	})
	if !started {
		// Stopping: checked after the restart, as one cut short.
		delete(t.checking, l.ID)
		close(ch)
	}
	return ch
}

// verifyLog reads lease l's log into sink, from inline when its final
// report carried it (wire.LeaseEvent.Log; nil: none) or else fetched from
// its provider, and checks it against the digest and size the provider
// reported.
func (t *Tracker) verifyLog(l terms.Lease, digest string, size int64, inline []byte, sink io.Writer) error {
	if digest == "" {
		return errors.New("the provider's final report names no log digest")
	}
	if size < 0 || size > MaxEvidenceLog {
		return fmt.Errorf("the provider reports a log of %d bytes, over the %d this renter checks", size, MaxEvidenceLog)
	}
	if inline != nil {
		return checkLog(bytes.NewReader(inline), digest, size, sink)
	}
	if t.cfg.Evidence == nil {
		return errors.New("this renter cannot fetch job logs")
	}
	prov, err := peer.Decode(l.Provider)
	if err != nil {
		return fmt.Errorf("provider %q: %w", l.Provider, err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, evidenceTimeout)
	defer cancel()
	rc, err := t.cfg.Evidence.FetchLog(ctx, prov, l.ID)
	if err != nil {
		return fmt.Errorf("the job's log could not be fetched: %w", err)
	}
	defer rc.Close()
	return checkLog(rc, digest, size, sink)
}

// checkLog reads a job's log from r into sink and checks it against the
// digest and size its provider reported (verifyLog).
func checkLog(r io.Reader, digest string, size int64, sink io.Writer) error {
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(h, sink), io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("the job's log could not be read: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != size || got != digest {
		return fmt.Errorf("the job's log as fetched (%d bytes, sha256 %.12s) is not the one reported (%d bytes, sha256 %.12s)",
			n, got, size, digest)
	}
	return nil
}

// noEvidence holds a run its provider called succeeded failed through the
// provider's fault, for want of evidence: its succeeded receipt is refused,
// and the job goes back to auction without that provider (its budget
// permitting).
func (t *Tracker) noEvidence(jobID string, l terms.Lease, why error) {
	detail := "no evidence of work: " + why.Error()
	t.mu.Lock()
	v := t.jobs[jobID]
	if v == nil || v.Lease == nil || v.Lease.ID != l.ID || v.Run != terms.RunSucceeded || v.Receipt != nil {
		t.mu.Unlock()
		return
	}
	v.Evidence = detail
	rd := t.stepLocked(jobID, v, jobmachine.Evidence{LeaseID: l.ID, Why: why.Error()})
	again := v.Phase == jobmachine.Requeued
	t.mu.Unlock()
	t.cfg.Counters.Add("renter.no_evidence")
	t.log.Warn("succeeded run not accepted", "job", jobID, "lease", l.ID, "provider", l.Provider, "why", why, "requeue", again)
	_ = t.advanceWithFacts(rd) // its requeue, its budget permitting
}

// awaitEvidence waits (at most evidenceWait, or ctx) for the check of a
// succeeded run's evidence, starting it if none ran (a renter restarted
// since the final report), and returns nil once the log was verified.
func (t *Tracker) awaitEvidence(ctx context.Context, jobID string, l terms.Lease) error {
	ch := t.checkEvidence(jobID, l)
	timer := time.NewTimer(evidenceWait)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		return fmt.Errorf("lease %s: the evidence of its run (its log) is still being checked; retry", l.ID)
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.jobs[jobID]
	switch {
	case v == nil || v.Lease == nil || v.Lease.ID != l.ID:
		return fmt.Errorf("lease %s is no longer its job's current attempt", l.ID)
	case v.Evidence == "":
		return fmt.Errorf("lease %s: the evidence of its run was not checked; retry", l.ID)
	case v.Run != terms.RunSucceeded:
		return fmt.Errorf("lease %s: %s", l.ID, v.Evidence)
	}
	return nil
}
