package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Sealed jobs (auction.Job.Sealed), the renter's side: it hands a lease's
// keys to that lease's provider alone, records the content key of each
// checkpoint the provider sealed, and opens the lease's sealed outputs
// itself (node/artifact, seal.go; node/lease, seal.go).

// handleLeaseKeys answers a provider's wire.ProtoLeaseKeys request: the
// keys of a current lease of a sealed job of ours that the sender holds,
// and nothing to anyone else.
func (m *market) handleLeaseKeys(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	var req wire.LeaseKeysRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("bad lease keys request: %v", err)
	}
	job, ok := m.tracker.LeaseJob(from, req.LeaseID)
	if !ok {
		return nil, fmt.Errorf("lease %q is no current lease of %s", req.LeaseID, from)
	}
	if !job.Sealed {
		return nil, fmt.Errorf("lease %s is not sealed", req.LeaseID)
	}
	st := m.d.artifacts.Store()
	lk, err := st.LeaseKey(req.LeaseID)
	if err != nil {
		return nil, err
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
	return json.Marshal(keys)
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
func (d *Daemon) adoptSealed(id, leaseID string, must bool) error {
	st := d.artifacts.Store()
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

// sealedOutputs fetches a sealed job's outputs artifact from the lease's
// provider and opens it: the outputs' manifest (held to the one the
// lease's final report named) and their bundle, read by the caller.
func (d *Daemon) sealedOutputs(ctx context.Context, v api.JobView) ([]auction.OutputFile, io.ReadCloser, error) {
	if v.Lease == nil || v.OutputsArtifact == "" {
		return nil, nil, notFound("job %s has no sealed outputs (yet)", v.Job.ID)
	}
	prov, err := peer.Decode(v.Lease.Provider)
	if err != nil {
		return nil, nil, err
	}
	outs, body, err := d.openSealedOutputs(ctx, prov, v.Lease.ID, v.OutputsArtifact)
	if err != nil {
		return nil, nil, err
	}
	if got := auction.ManifestHash(outs); v.OutputsHash != "" && got != v.OutputsHash {
		body.Close()
		return nil, nil, fmt.Errorf("sealed outputs %s list files (hash %.12s) other than the final report's (%.12s)", v.OutputsArtifact, got, v.OutputsHash)
	}
	return outs, body, nil
}

// openSealedOutputs fetches outputs artifact id of lease leaseID from its
// provider prov, records its content key once it opens with the lease's
// key, and opens it: the outputs' manifest and their bundle.
func (d *Daemon) openSealedOutputs(ctx context.Context, prov peer.ID, leaseID, id string) ([]auction.OutputFile, io.ReadCloser, error) {
	if _, err := d.artifacts.Fetch(ctx, id, transfer.FetchOptions{Origin: &peer.AddrInfo{ID: prov}, NoDiscovery: true, For: artifact.For(prov)}); err != nil {
		return nil, nil, fmt.Errorf("sealed outputs %s: %w", id, err)
	}
	if err := d.adoptSealed(id, leaseID, true); err != nil {
		return nil, nil, fmt.Errorf("sealed outputs %s: %w", id, err)
	}
	st := d.artifacts.Store()
	ck, ok := st.Key(id)
	if !ok {
		return nil, nil, fmt.Errorf("outputs artifact %s of a sealed job is not sealed", id)
	}
	outs, _, body, err := st.OpenSealed(id, artifact.Local, ck)
	return outs, body, err
}
