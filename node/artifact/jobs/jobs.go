// Package jobs is what the artifact store does for jobs. On a provider it
// fetches what a job reads (its inputs, its image artifact, a checkpoint
// it restores) and stores what it leaves (its outputs, its checkpoints) as
// its renter's artifacts, sealed with the lease's key for a sealed job,
// keeping nothing a no-persist job fetched. On a renter it pins what its
// live jobs name, takes back its jobs' checkpoints and sealed outputs, and
// hands a sealed lease's keys to its provider.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/sign"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Images loads image artifacts into the container engine.
type Images interface {
	// LoadImage fetches image artifact id of owner's job that names image
	// into the container engine and returns the ID the job runs; unpin
	// releases the artifact.
	LoadImage(ctx context.Context, id, image string, owner peer.ID) (unpin func(), imageID string, err error)
}

// Advertiser spreads what the node's store holds.
type Advertiser interface {
	// Readvertise is called when the artifacts held change (a provider
	// advertises what it holds).
	Readvertise()
	// Announce announces artifact id to the DHT, in the background.
	Announce(id string)
}

// Config is what an Artifacts works with.
type Config struct {
	// Transfer is the node's artifact store, served and fetched over
	// libp2p.
	Transfer *transfer.Service
	// Images loads the image artifacts of provider's jobs.
	Images Images
	// Advertiser spreads what the store holds.
	Advertiser Advertiser
	Log        *slog.Logger
}

// Artifacts are the jobs' artifacts.
type Artifacts struct {
	cfg Config
	mu  sync.Mutex
	// pins releases the pins of each live job of this renter (PinLive).
	pins map[string]func()
}

// New returns the jobs' Artifacts.
func New(cfg Config) *Artifacts { return &Artifacts{cfg: cfg, pins: map[string]func(){}} }

// PinLive keeps the artifacts this renter's live jobs name (inputs,
// image) pinned in the store, so that eviction never removes what a
// queued or running job will fetch from it: it pins a job's artifacts
// while its state is live and releases them once it is not (the
// tracker's Pins, lease.JobPins).
func (a *Artifacts) PinLive(v api.JobView) {
	ids := v.Job.Run.Artifacts()
	if len(ids) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	unpin, pinned := a.pins[v.Job.ID]
	switch live := v.State.Live(); {
	case live && !pinned:
		st := a.cfg.Transfer.Store()
		unpins := make([]func(), 0, len(ids))
		for _, id := range ids {
			unpins = append(unpins, st.Pin(id))
		}
		a.pins[v.Job.ID] = func() {
			for _, u := range unpins {
				u()
			}
		}
	case !live && pinned:
		unpin()
		delete(a.pins, v.Job.ID)
	}
}

// Inputs serves the supervisor (lease.Artifacts): a
// job's inputs and image artifact come from its owner (the renter's
// daemon) and any other holder. The image artifact's image is loaded into
// the container engine (Config.LoadImage), and image is its ID, which the
// job runs.
//
// The owner is reached without the addresses its job names
// (Job.OwnerAddrs, anyone's to fill): through the connection its award
// came on, its own identify addresses, or the DHT.
func (a *Artifacts) Inputs(ctx context.Context, job terms.Job, dir string, keys *wire.LeaseKeys) (release func(), image string, err error) {
	owner, err := peer.Decode(job.Owner)
	if err != nil {
		return nil, "", fmt.Errorf("job %s: owner %q is not a peer id", job.ID, job.Owner)
	}
	_, arts, err := sealKeys(keys)
	if err != nil {
		return nil, "", err
	}
	forget := a.fetchedFor(job, job.Run.Artifacts()...)
	releases := []func(){forget}
	release = func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	if id := job.Run.ImageArtifact; id != "" {
		unpin, imageID, err := a.cfg.Images.LoadImage(ctx, id, job.Run.Image, owner)
		if err != nil {
			release()
			return nil, "", err
		}
		releases = append(releases, unpin)
		image = imageID
	}
	if len(job.Run.Inputs) > 0 {
		rel, err := a.cfg.Transfer.PrepareInputs(ctx, job.Run.Inputs, owner, nil, dir, arts)
		if err != nil {
			release()
			return nil, "", err
		}
		releases = append(releases, rel)
	}
	return release, image, nil
}

// fetchedFor returns what a no-persist job's release calls once its run
// ended: it removes from the store those of ids the store did not hold
// (complete) before the job, so that nothing fetched for it (inputs, a
// checkpoint it restored) stays here as an artifact. Artifacts held
// before stay, as does one another job still uses (pinned). For other
// jobs it does nothing: their artifacts are cached for the next.
func (a *Artifacts) fetchedFor(job terms.Job, ids ...string) func() {
	if !job.NoPersist {
		return func() {}
	}
	st := a.cfg.Transfer.Store()
	var fresh []string
	for _, id := range ids {
		if in, err := st.Info(id); err != nil || !in.Complete {
			fresh = append(fresh, id)
		}
	}
	return func() {
		for _, id := range fresh {
			if err := st.Remove(id); err != nil && !errors.Is(err, artifact.ErrNotFound) {
				a.cfg.Log.Warn("no-persist job: artifact fetched for it is still held", "job", job.ID, "artifact", id, "err", err)
			}
		}
	}
}

// Outputs serves the supervisor (lease.Artifacts):
// a lease's outputs become an artifact owned by its renter, announced so
// the renter can fetch it; a sealed job's are sealed with its lease key.
func (a *Artifacts) Outputs(dir, renter string, keys *wire.LeaseKeys) (string, error) {
	id, _, err := a.addFor(dir, renter, keys)
	if err != nil {
		return "", err
	}
	a.cfg.Advertiser.Readvertise()
	a.cfg.Advertiser.Announce(id)
	return id, nil
}

// Remove serves the supervisor (lease.Artifacts):
// it removes an artifact held for a renter (a sealed no-persist lease's
// outputs); one already gone is no error.
func (a *Artifacts) Remove(id string) error {
	if err := a.cfg.Transfer.Store().Remove(id); err != nil && !errors.Is(err, artifact.ErrNotFound) {
		return err
	}
	a.cfg.Advertiser.Readvertise()
	return nil
}

// Checkpoint serves the supervisor (lease.Checkpoints): a snapshot of a job's
// checkpoint dir becomes an artifact owned by its renter. It is not
// announced: the renter fetches it from us at once, then we drop it.
func (a *Artifacts) Checkpoint(dir, renter string, keys *wire.LeaseKeys) (string, int64, func(), error) {
	st := a.cfg.Transfer.Store()
	id, _, err := a.addFor(dir, renter, keys)
	if err != nil {
		return "", 0, nil, err
	}
	in, err := st.Info(id)
	if err != nil {
		return "", 0, nil, err
	}
	drop := func() {
		if err := st.Remove(id); err != nil && !errors.Is(err, artifact.ErrNotFound) {
			a.cfg.Log.Debug("drop checkpoint artifact", "id", id, "err", err)
		}
	}
	return id, in.Size, drop, nil
}

// PinCheckpoint keeps checkpoint artifact id from eviction until unpin.
func (a *Artifacts) PinCheckpoint(id string) (unpin func()) {
	return a.cfg.Transfer.Store().Pin(id)
}

// FetchCheckpoint serves the tracker (lease.CheckpointStore): the renter fetches a checkpoint
// from the provider that took it (it owns the artifact, so the provider
// serves it) and keeps it; one larger than max is abandoned. The fetch is
// for that provider (artifact.For): our store's copy of the id counts only
// if the provider may read it, so a provider cannot name an artifact of
// ours it never held as its checkpoint and have it kept and restored.
func (a *Artifacts) FetchCheckpoint(ctx context.Context, id string, from peer.ID, leaseID string, sealed bool, max int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, infoErr := a.cfg.Transfer.Store().Info(id)
	fresh := infoErr != nil
	var tooBig atomic.Bool
	res, err := a.cfg.Transfer.Fetch(ctx, id, transfer.FetchOptions{Origin: &peer.AddrInfo{ID: from}, NoDiscovery: true, For: artifact.For(sign.ID(from)),
		Progress: func(_, total int64) {
			if total > max {
				tooBig.Store(true)
				cancel()
			}
		}})
	if err == nil && res.Size > max {
		tooBig.Store(true)
	}
	if tooBig.Load() {
		if fresh { // never drop what we held before
			_ = a.cfg.Transfer.Store().Remove(id)
		}
		return 0, fmt.Errorf("checkpoint artifact %s is over the cap of %d bytes", id, max)
	}
	if err == nil {
		// A sealed one is kept with its content key, once it opens; a
		// sealed job's checkpoint must be one (its provider never holds
		// the job's plaintext on disk, and the renter takes none back).
		err = a.adoptSealed(id, leaseID, sealed)
	}
	if err != nil && fresh {
		_ = a.cfg.Transfer.Store().Remove(id)
	}
	return res.Size, err
}

// Restore serves the supervisor (lease.Checkpoints): a checkpoint the job
// restores comes from its owner (the renter's daemon) or any other
// holder, every chunk checked against its hash, and is written to dir.
// Our store's copy serves only if the job's owner may read it.
func (a *Artifacts) Restore(ctx context.Context, job terms.Job, id, dir string, keys *wire.LeaseKeys) (func(), error) {
	owner, err := peer.Decode(job.Owner)
	if err != nil {
		return nil, fmt.Errorf("job %s: owner %q is not a peer id", job.ID, job.Owner)
	}
	_, arts, err := sealKeys(keys)
	if err != nil {
		return nil, err
	}
	if !artifact.ValidID(id) {
		return nil, fmt.Errorf("not an artifact id: %q", id)
	}
	forget := a.fetchedFor(job, id)
	unpin, err := a.cfg.Transfer.FetchForJob(ctx, id, owner, nil)
	if err != nil {
		forget()
		return nil, err
	}
	release := func() {
		_ = os.RemoveAll(dir)
		unpin()
		forget()
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		release()
		return nil, err
	}
	if err := a.cfg.Transfer.Store().ExportFor(id, dir, artifact.For(sign.ID(owner)), arts); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// addFor stores dir as an artifact owned by renter: sealed with the
// lease key when the renter gave one (a sealed job), else plain.
func (a *Artifacts) addFor(dir, renter string, keys *wire.LeaseKeys) (string, bool, error) {
	st := a.cfg.Transfer.Store()
	meta := artifact.Meta{Private: true, Owner: renter}
	if keys == nil {
		id, err := st.Add(dir, meta)
		return id, false, err
	}
	lk, _, err := sealKeys(keys)
	if err != nil {
		return "", false, err
	}
	id, _, err := st.AddSealed(dir, lk, meta)
	return id, true, err
}
func keyHex(k artifact.Key) string {
	b, _ := k.MarshalText()
	return string(b)
}

// sealKeys reads the keys a renter gave for a lease (nil: not sealed).
func sealKeys(keys *wire.LeaseKeys) (lease artifact.Key, arts map[string]artifact.Key, err error) {
	if keys == nil {
		return lease, nil, nil
	}
	if lease, err = artifact.ParseKey(keys.Lease); err != nil {
		return lease, nil, fmt.Errorf("lease key: %w", err)
	}
	arts = map[string]artifact.Key{}
	for id, h := range keys.Artifacts {
		if arts[id], err = artifact.ParseKey(h); err != nil {
			return lease, nil, fmt.Errorf("key of artifact %s: %w", id, err)
		}
	}
	return lease, arts, nil
}

// adoptSealed records the content key of sealed artifact id, sealed by
// the provider of lease leaseID with its lease key, once it opens every
// segment. An artifact that is not sealed needs none, unless must: then
// it is refused.
func (a *Artifacts) adoptSealed(id, leaseID string, must bool) error {
	st := a.cfg.Transfer.Store()
	m, _, err := st.Manifest(id)
	if err != nil {
		return err
	}
	if !m.Sealed {
		if must {
			return fmt.Errorf("artifact %s is not sealed, and lease %s is of a sealed job", id, leaseID)
		}
		return nil
	}
	lk, err := st.LeaseKey(leaseID)
	if err != nil {
		return err
	}
	ck, err := st.ContentKey(id, lk)
	if err != nil {
		return err
	}
	return st.SetKey(id, ck)
}

// OpenSealedOutputs fetches outputs artifact id of lease leaseID from its
// provider prov, records its content key once it opens with the lease's
// key, and opens it: the outputs' manifest and their bundle.
func (a *Artifacts) OpenSealedOutputs(ctx context.Context, prov peer.ID, leaseID, id string) ([]terms.OutputFile, io.ReadCloser, error) {
	if _, err := a.cfg.Transfer.Fetch(ctx, id, transfer.FetchOptions{Origin: &peer.AddrInfo{ID: prov}, NoDiscovery: true, For: artifact.For(sign.ID(prov))}); err != nil {
		return nil, nil, fmt.Errorf("sealed outputs %s: %w", id, err)
	}
	if err := a.adoptSealed(id, leaseID, true); err != nil {
		return nil, nil, fmt.Errorf("sealed outputs %s: %w", id, err)
	}
	st := a.cfg.Transfer.Store()
	ck, ok := st.Key(id)
	if !ok {
		return nil, nil, fmt.Errorf("outputs artifact %s of a sealed job is not sealed", id)
	}
	outs, _, body, err := st.OpenSealed(id, artifact.Local, ck)
	return outs, body, err
}

// leaseKeys are the keys of lease leaseID of the renter's sealed job:
// the lease's, and the content keys of the artifacts the job reads and
// the checkpoints it restores that the store holds.
func (a *Artifacts) leaseKeys(leaseID string, job terms.Job) (wire.LeaseKeys, error) {
	st := a.cfg.Transfer.Store()
	lk, err := st.LeaseKey(leaseID)
	if err != nil {
		return wire.LeaseKeys{}, err
	}
	keys := wire.LeaseKeys{Lease: keyHex(lk), Artifacts: map[string]string{}}
	ids := job.Run.Artifacts()
	for _, ck := range job.Restore {
		ids = append(ids, ck.Artifact)
	}
	for _, id := range ids {
		if k, ok := st.Key(id); ok {
			keys.Artifacts[id] = keyHex(k)
		}
	}
	return keys, nil
}

// InputSizes fills a renter's job's InputBytes from the store: the renter
// is the origin of the job's inputs, so it must hold each of them. A job
// reading a sealed artifact is sealed; an input the renter does not hold,
// or cannot hand out safely, refuses the job (a bad request).
func (a *Artifacts) InputSizes(job *terms.Job) error {
	if len(job.Run.Artifacts()) == 0 {
		return nil
	}
	job.InputBytes = map[string]int64{}
	for _, id := range job.Run.Artifacts() {
		if !artifact.ValidID(id) {
			return api.BadRequest("not an artifact id (64 hex digits): %q", id)
		}
		in, err := a.cfg.Transfer.Store().Info(id)
		if err != nil || !in.Complete {
			return api.BadRequest("artifact %s is not held on this node; add it first (gpumesh artifact add)", id)
		}
		job.InputBytes[id] = in.Size
		switch {
		case id == job.Run.ImageArtifact:
			// Its image is loaded by the provider's engine, which keeps
			// it on its disk: an image artifact is never sealed.
			if in.Sealed {
				return api.BadRequest("artifact %s is sealed: an image artifact cannot be (its image is loaded by the provider's engine)", id)
			}
		case in.Sealed:
			job.Sealed = true
		case in.Private:
			// Every private file or tree is sealed; a plain one (added
			// before they were) would leave its bytes on the provider's
			// disk.
			return api.BadRequest("artifact %s is private but not sealed (added before private files were sealed, or the outputs or checkpoint of a job that read no private input): add the data again (gpumesh artifact add PATH), or with --public if anyone may read it", id)
		}
	}
	return nil
}

// Sealed jobs (terms.Job.Sealed), the renter's side: it hands a lease's
// keys to that lease's provider alone, records the content key of each
// checkpoint the provider sealed, and opens the lease's sealed outputs
// itself (node/artifact, seal.go; node/lease, seal.go).

// LeaseKeysHandler answers a provider's wire.ProtoLeaseKeys request: the
// keys of a current lease of a sealed job of this renter's that the
// sender holds (leaseJob: lease.Tracker.LeaseJob), and nothing to anyone
// else.
func (a *Artifacts) LeaseKeysHandler(leaseJob func(provider peer.ID, leaseID string) (terms.Job, bool)) func(context.Context, peer.ID, []byte) ([]byte, error) {
	return func(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
		var req wire.LeaseKeysRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return nil, fmt.Errorf("bad lease keys request: %v", err)
		}
		job, ok := leaseJob(from, req.LeaseID)
		if !ok {
			return nil, fmt.Errorf("lease %q is no current lease of %s", req.LeaseID, from)
		}
		if !job.Sealed {
			return nil, fmt.Errorf("lease %s is not sealed", req.LeaseID)
		}
		keys, err := a.leaseKeys(req.LeaseID, job)
		if err != nil {
			return nil, err
		}
		return json.Marshal(keys)
	}
}

// SealedOutputs fetches a sealed job's outputs artifact from the lease's
// provider and opens it: the outputs' manifest (held to the one the
// lease's final report named) and their bundle, read by the caller.
func (a *Artifacts) SealedOutputs(ctx context.Context, v api.JobView) ([]terms.OutputFile, io.ReadCloser, error) {
	if v.Lease == nil || v.OutputsArtifact == "" {
		return nil, nil, api.NotFound("job %s has no sealed outputs (yet)", v.Job.ID)
	}
	prov, err := peer.Decode(v.Lease.Provider)
	if err != nil {
		return nil, nil, err
	}
	outs, body, err := a.OpenSealedOutputs(ctx, prov, v.Lease.ID, v.OutputsArtifact)
	if err != nil {
		return nil, nil, err
	}
	if got := terms.ManifestHash(outs); v.OutputsHash != "" && got != v.OutputsHash {
		body.Close()
		return nil, nil, fmt.Errorf("sealed outputs %s list files (hash %.12s) other than the final report's (%.12s)", v.OutputsArtifact, got, v.OutputsHash)
	}
	return outs, body, nil
}
