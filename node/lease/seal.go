package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A sealed job (terms.Job.Sealed), provider side: before its inputs
// are fetched the provider mounts a scratch tmpfs for the lease and asks
// the renter for the lease's keys (wire.ProtoLeaseKeys), which it keeps in
// memory for the run alone. Its inputs are unsealed into the scratch
// tmpfs, a checkpoint it restores too; its checkpoints are staged there
// and its outputs collected there, and both are sealed with the lease
// key before they reach the artifact store. The scratch tmpfs is
// unmounted when the run ends: no plaintext of the job touches a disk.

// sealing is a sealed lease's keys and scratch tmpfs while it runs.
type sealing struct {
	keys    *wire.LeaseKeys
	dir     string
	release func() error
}

// leaseKeys is the keys of a sealed lease, nil for another (a nil
// sealing).
func (s *sealing) leaseKeys() *wire.LeaseKeys {
	if s == nil {
		return nil
	}
	return s.keys
}

// sealed is the lease's sealing while its run holds one.
func (r *leaseRun) sealed() *sealing {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seal
}

// scratchMB sizes a sealed lease's scratch tmpfs: its inputs, two
// checkpoints (the one restored and one staged) and its outputs. A tmpfs
// takes memory only for what is written.
func scratchMB(job terms.Job) int {
	n := int64(2*terms.MaxCheckpointBytes) + MaxOutputBytes
	for _, b := range job.InputBytes {
		n += b
	}
	return int(n>>20) + 64
}

// openSeal mounts the lease's scratch tmpfs and takes its keys from the
// renter.
func (r *leaseRun) openSeal(job terms.Job) error {
	s := r.s
	l := r.lease()
	root := s.cfg.WorkRoot
	if root == "" {
		root = s.cfg.JobsDir
	}
	dir := filepath.Join(root, "sealed-"+l.ID)
	release, err := runtime.MountScratch(dir, scratchMB(job))
	if err != nil {
		return fmt.Errorf("this provider cannot keep the job's plaintext off its disk: %w", err)
	}
	ctx, cancel := r.untilStopped()
	defer cancel()
	keys, err := s.fetchLeaseKeys(ctx, l)
	if err != nil {
		_ = release()
		return err
	}
	r.mu.Lock()
	r.seal = &sealing{keys: keys, dir: dir, release: release}
	r.mu.Unlock()
	return nil
}

// closeSeal forgets the lease's keys and unmounts its scratch tmpfs.
func (r *leaseRun) closeSeal() {
	r.mu.Lock()
	seal := r.seal
	r.seal = nil
	r.mu.Unlock()
	if seal == nil {
		return
	}
	if err := seal.release(); err != nil {
		r.s.log.Warn("sealed lease: scratch tmpfs not removed", "lease", r.lease().ID, "err", err)
	}
}

// fetchLeaseKeys asks lease l's renter for its keys; a lost answer is
// tried again (the renter may not have recorded the lease yet).
func (s *Supervisor) fetchLeaseKeys(ctx context.Context, l terms.Lease) (*wire.LeaseKeys, error) {
	if s.cfg.Transport == nil {
		return nil, errors.New("this provider cannot reach renters")
	}
	renter, err := peer.Decode(l.Renter)
	if err != nil {
		return nil, fmt.Errorf("renter %q: %w", l.Renter, err)
	}
	req, _ := json.Marshal(wire.LeaseKeysRequest{LeaseID: l.ID})
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err := s.cfg.Transport.Request(rctx, renter, wire.ProtoLeaseKeys, req)
		cancel()
		if err == nil {
			var keys wire.LeaseKeys
			if err := json.Unmarshal(b, &keys); err != nil {
				return nil, fmt.Errorf("lease keys: %w", err)
			}
			return &keys, nil
		}
		if ctx.Err() != nil || attempt == 4 {
			return nil, fmt.Errorf("lease keys from the renter: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		}
	}
}
