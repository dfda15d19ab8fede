package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
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
	keys, err := m.d.jobArts.LeaseKeys(req.LeaseID, job)
	if err != nil {
		return nil, err
	}
	return json.Marshal(keys)
}

// sealedOutputs fetches a sealed job's outputs artifact from the lease's
// provider and opens it: the outputs' manifest (held to the one the
// lease's final report named) and their bundle, read by the caller.
func (d *Daemon) sealedOutputs(ctx context.Context, v api.JobView) ([]auction.OutputFile, io.ReadCloser, error) {
	if v.Lease == nil || v.OutputsArtifact == "" {
		return nil, nil, api.NotFound("job %s has no sealed outputs (yet)", v.Job.ID)
	}
	prov, err := peer.Decode(v.Lease.Provider)
	if err != nil {
		return nil, nil, err
	}
	outs, body, err := d.jobArts.OpenSealedOutputs(ctx, prov, v.Lease.ID, v.OutputsArtifact)
	if err != nil {
		return nil, nil, err
	}
	if got := auction.ManifestHash(outs); v.OutputsHash != "" && got != v.OutputsHash {
		body.Close()
		return nil, nil, fmt.Errorf("sealed outputs %s list files (hash %.12s) other than the final report's (%.12s)", v.OutputsArtifact, got, v.OutputsHash)
	}
	return outs, body, nil
}
