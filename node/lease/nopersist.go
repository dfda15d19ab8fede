package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The no-persistence contract, renter side. A no-persist job's provider
// deletes its log and outputs once the lease is settled, so its renter
// takes them first: at the lease's final report it fetches the log (held
// to the digest and size the report names, as a succeeded run's evidence
// is) and the outputs (held to the report's manifest hash) into its own
// KeptDir, and countersigns the receipt only once it holds them and the
// receipt states the policy held (attest.Receipt.NoPersist). The job's
// logs and outputs are then served from there.

// keptManifest is the file, beside a kept lease's log and outputs, that
// lists the outputs (the whole manifest; a final report carries only its
// first files).
const keptManifest = "outputs.json"

// KeptDir is where this renter keeps lease leaseID's log and outputs, and
// whether it does (it took them from a no-persist job's provider).
func (t *Tracker) KeptDir(leaseID string) (string, bool) {
	if t.cfg.KeptDir == "" || terms.ValidID(leaseID) != nil {
		return "", false
	}
	dir := filepath.Join(t.cfg.KeptDir, leaseID)
	fi, err := os.Stat(dir)
	return dir, err == nil && fi.IsDir()
}

// KeptLog is the log file of a kept lease (see KeptDir).
func KeptLog(dir string) string { return filepath.Join(dir, "log") }

// KeptOutputs is the outputs dir of a kept lease and their manifest.
func KeptOutputs(dir string) (string, []terms.OutputFile, error) {
	var outs []terms.OutputFile
	b, err := os.ReadFile(filepath.Join(dir, keptManifest))
	if err == nil {
		err = json.Unmarshal(b, &outs)
	}
	return filepath.Join(dir, "outputs"), outs, err
}

// keepWant is what a lease's final report said of its files: what the
// kept copy must match.
type keepWant struct {
	lease       terms.Lease
	logDigest   string
	logBytes    int64
	outputsHash string
	// sealedJob is whether the job is sealed, and sealed its outputs
	// artifact, sealed to us: the outputs are taken from it (its provider
	// holds no plaintext of them).
	sealedJob bool
	sealed    string
}

func keepWantOf(v api.JobView) keepWant {
	w := keepWant{logDigest: v.LogDigest, logBytes: v.LogBytes, outputsHash: v.OutputsHash}
	if v.Lease != nil {
		w.lease = *v.Lease
	}
	if v.Job.Sealed {
		w.sealedJob, w.sealed = true, v.OutputsArtifact
	}
	return w
}

// keepFiles starts (unless it runs already) taking a no-persist lease's
// log and outputs from its provider into KeptDir, and returns a channel
// closed when it is done. A failed attempt is forgotten, so the next call
// (the provider's next receipt) tries again.
func (t *Tracker) keepFiles(w keepWant) <-chan struct{} {
	id := w.lease.ID
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch, ok := t.keeping[id]; ok {
		return ch
	}
	ch := make(chan struct{})
	t.keeping[id] = ch
	started := t.spawnLocked(func() {
		defer close(ch)
		err := t.takeFiles(w)
		t.mu.Lock()
		if err != nil {
			delete(t.keeping, id)
			t.keepErr[id] = err
		} else {
			delete(t.keepErr, id)
		}
		t.mu.Unlock()
		if err != nil {
			t.cfg.Counters.Add("renter.no_persist_keep_failed")
			t.log.Warn("no-persist lease: its files are not kept yet", "lease", id, "provider", w.lease.Provider, "err", err)
			return
		}
		t.log.Info("no-persist lease: log and outputs kept", "lease", id)
		t.markKept(id)
	})
	if !started {
		// Stopping: a failed attempt, tried again after the restart.
		delete(t.keeping, id)
		t.keepErr[id] = errors.New("the renter is stopping")
		close(ch)
	}
	return ch
}

// markKept records on the job whose current lease is leaseID where its
// files are kept.
func (t *Tracker) markKept(leaseID string) {
	dir, ok := t.KeptDir(leaseID)
	if !ok {
		return
	}
	t.mu.Lock()
	jobID := t.byLease[leaseID]
	v := t.jobs[jobID]
	mark := v != nil && v.Lease != nil && v.Lease.ID == leaseID && v.Kept != dir
	if mark {
		v.Kept = dir
	}
	t.mu.Unlock()
	if mark {
		t.save(jobID)
	}
}

// kept waits (at most evidenceWait, or ctx) for the lease's files to be
// kept, starting their fetch when none runs, and returns nil once they
// are.
func (t *Tracker) kept(ctx context.Context, w keepWant) error {
	if _, ok := t.KeptDir(w.lease.ID); ok {
		return nil
	}
	ch := t.keepFiles(w)
	timer := time.NewTimer(evidenceWait)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		return fmt.Errorf("lease %s: its log and outputs are still being taken from the provider; retry", w.lease.ID)
	case <-ctx.Done():
		return ctx.Err()
	}
	if _, ok := t.KeptDir(w.lease.ID); ok {
		return nil
	}
	t.mu.Lock()
	err := t.keepErr[w.lease.ID]
	t.mu.Unlock()
	if err == nil {
		err = errors.New("not taken")
	}
	return fmt.Errorf("lease %s is no-persist: its log and outputs are not kept by the renter yet: %w", w.lease.ID, err)
}

// takeFiles fetches a lease's log and outputs from its provider, checks
// them against its final report and moves them into KeptDir at once
// (staged beside it: a failed fetch leaves nothing).
func (t *Tracker) takeFiles(w keepWant) error {
	if t.cfg.KeptDir == "" || t.cfg.Evidence == nil {
		return errors.New("this renter cannot keep no-persist jobs' files")
	}
	dir := filepath.Join(t.cfg.KeptDir, w.lease.ID)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	stage := dir + ".partial"
	_ = os.RemoveAll(stage)
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	f, err := os.OpenFile(KeptLog(stage), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = t.verifyLog(w.lease, w.logDigest, w.logBytes, nil, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	var outs []terms.OutputFile
	if w.outputsHash != "" {
		if outs, err = t.takeOutputs(w, filepath.Join(stage, "outputs")); err != nil {
			return fmt.Errorf("the job's outputs: %w", err)
		}
	}
	b, err := json.Marshal(outs)
	if err == nil {
		err = os.WriteFile(filepath.Join(stage, keptManifest), b, 0o600)
	}
	if err != nil {
		return err
	}
	return os.Rename(stage, dir)
}

// takeOutputs fetches a lease's outputs into dir: the manifest the
// provider serves must be the one its final report named, within the
// outputs cap, and the files must match it (wire.ExtractBundle).
func (t *Tracker) takeOutputs(w keepWant, dir string) ([]terms.OutputFile, error) {
	prov, err := peer.Decode(w.lease.Provider)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", w.lease.Provider, err)
	}
	if w.sealedJob && w.sealed == "" {
		return nil, errors.New("the job is sealed and the provider's final report names no sealed outputs artifact")
	}
	ctx, cancel := context.WithTimeout(t.ctx, evidenceTimeout)
	defer cancel()
	outs, body, err := t.cfg.Evidence.FetchOutputs(ctx, prov, w.lease.ID, w.sealed)
	if err != nil {
		return nil, fmt.Errorf("could not be fetched: %w", err)
	}
	defer body.Close()
	if got := terms.ManifestHash(outs); got != w.outputsHash {
		return nil, fmt.Errorf("the provider's manifest (%d files, hash %.12s) is not the one its final report named (%.12s)", len(outs), got, w.outputsHash)
	}
	var total int64
	for _, o := range outs {
		total += o.Size
	}
	if total > MaxOutputBytes {
		return nil, fmt.Errorf("the manifest lists %d bytes, over the cap of %d", total, MaxOutputBytes)
	}
	if _, err := wire.ExtractBundle(io.LimitReader(body, total+int64(len(outs)+2)*4096), outs, dir, false); err != nil {
		return nil, err
	}
	return outs, nil
}
