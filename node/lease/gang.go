package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Gang jobs, renter side. A gang job (terms.Job.Nodes > 1) has one
// lease per member. The job's own record follows rank 0's lease; each
// other rank has a record of its own (key gangKey), which follows that
// member's lease exactly as a job's record follows its lease: heartbeats,
// lease events, checkpoints, receipts and loss all go through the same
// paths, so each member is billed for what its renter observed of it and
// settles with its own receipt. Only the job's record is listed; its view
// shows every member (api.JobView.Gang).
//
// The gang lives and dies together: when a member's lease ends early and
// would be requeued (lost, failed through its provider, preempted), every
// other member still running is stopped with a gang stop (its provider
// saves its checkpoint and ends it preempted), every member's lease is
// archived, and the whole gang goes back to auction with the lost
// provider excluded, each rank restoring its own checkpoints (only when
// every rank has one: otherwise the gang starts over). A member that fails
// through its own fault, or is cancelled, stops the others too, and the
// gang ends.

// gangSep separates a gang job's id from a member's rank in the member's
// record key: terms.ValidID never allows it in a job id.
const gangSep = "#"

// gangKey is the record key of a gang job's member of rank: the job's own
// id for rank 0.
func gangKey(jobID string, rank int) string {
	if rank == 0 {
		return jobID
	}
	return jobID + gangSep + strconv.Itoa(rank)
}

// leaseKey is the record key of lease l's job.
func leaseKey(l terms.Lease) string {
	if l.Gang == nil {
		return l.JobID
	}
	return gangKey(l.JobID, l.Gang.Rank)
}

// isMemberKey reports whether a record key is a gang member's (rank > 0).
func isMemberKey(key string) bool { return strings.Contains(key, gangSep) }

// gangOfLocked returns the job id of the gang whose record key is key, and
// the gang's size; ok is false for a job that is not a gang. t.mu is held.
func (t *Tracker) gangOfLocked(key string) (jobID string, size int, ok bool) {
	jobID, _, _ = strings.Cut(key, gangSep)
	v := t.jobs[jobID]
	if v == nil || v.Job.Nodes <= 1 {
		return "", 0, false
	}
	return jobID, v.Job.Nodes, true
}

// gangViewLocked is the members of gang job id as its view shows them,
// and what their leases other than rank 0's cost. t.mu is held.
func (t *Tracker) gangViewLocked(id string, size int) ([]api.GangMember, float64) {
	var out []api.GangMember
	cost := 0.0
	for rank := range size {
		v := t.jobs[gangKey(id, rank)]
		if v == nil || (v.Lease == nil && len(v.History) == 0) {
			continue
		}
		m := api.GangMember{Rank: rank, Run: v.Run, Fault: v.Fault, Started: v.Started, Ended: v.Ended, Detail: v.Detail,
			Settled: v.Receipt != nil, Checkpoint: v.Checkpoint}
		l := v.Lease
		if l == nil {
			l = &v.History[len(v.History)-1].Lease
			r := v.History[len(v.History)-1]
			m.Run, m.Fault, m.Started, m.Ended, m.Detail, m.Settled = r.Run, r.Fault, r.Started, r.Ended, r.Detail, r.Receipt
		}
		m.Provider, m.LeaseID, m.Attempt, m.Price = l.Provider, l.ID, l.Attempt, l.Price
		if v.Receipt != nil {
			m.CostUSD = v.Receipt.Amount
		}
		if rank > 0 {
			cost += v.CostUSD
		}
		out = append(out, m)
	}
	return out, cost
}

// requeueGang takes a gang member's early end that would requeue it (the
// member's record key, its lease and how): unless another member's end
// already does, it stops every member still running (gang stops: each
// checkpoints and ends preempted), waits for them to end and settle,
// archives every member's lease and requeues the whole gang.
func (t *Tracker) requeueGang(jobID, key string, size int, lease terms.Lease, opts auction.RequeueOptions) {
	t.mu.Lock()
	if t.gangBusy[jobID] {
		t.mu.Unlock()
		return
	}
	t.gangBusy[jobID] = true
	stop := t.liveMembersLocked(jobID, size, key)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.gangBusy, jobID)
		t.mu.Unlock()
	}()
	t.cfg.Counters.Add("renter.gang_requeued")
	t.log.Warn("gang member ended early: the gang stops and goes back to auction", "job", jobID, "member", key,
		"provider", lease.Provider, "reason", opts.Reason, "stopping", len(stop))
	var wg sync.WaitGroup
	for _, l := range stop {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.stopMember(l, true)
		}()
	}
	wg.Wait()
	// Every member ended and settled (or was lost, or never ran): their
	// checkpoints are in, their receipts countersigned.
	t.waitChange(t.cfg.SettleWait+t.cfg.LossAfter, func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		for rank := range size {
			v := t.jobs[gangKey(jobID, rank)]
			if v == nil || v.Lease == nil {
				continue
			}
			if !v.Run.Terminal() || (v.Receipt == nil && !t.lostUnreportedLocked(v.Lease.ID) && !neverRan(v.Lease, v.Run, v.Started, v.Lease.ID)) {
				return false
			}
		}
		return true
	})
	var restore []terms.Checkpoint
	complete := true
	for rank := range size {
		k := gangKey(jobID, rank)
		t.mu.Lock()
		var id string
		if v := t.jobs[k]; v != nil && v.Lease != nil {
			id = v.Lease.ID
		}
		t.mu.Unlock()
		if id != "" {
			t.archive(k, id) // persisted by its machine's step
		}
		cks := t.restoreFor(k)
		complete = complete && len(cks) > 0
		for _, c := range cks {
			c.Rank = rank
			restore = append(restore, c)
		}
	}
	if !complete {
		// One rank's state alone cannot resume: the gang starts over.
		restore = nil
	}
	t.repost(jobID, restore, opts)
}

// liveMembersLocked is the leases of gang job id's members that have not
// ended, but the one of record key but. t.mu is held.
func (t *Tracker) liveMembersLocked(id string, size int, but string) []terms.Lease {
	var out []terms.Lease
	for rank := range size {
		k := gangKey(id, rank)
		if v := t.jobs[k]; k != but && v != nil && v.Lease != nil && !v.Run.Terminal() {
			out = append(out, *v.Lease)
		}
	}
	return out
}

// stopGang stops the other members of the gang of record key after its
// member ended for good without success (failed through its own fault,
// cancelled): a gang lives and dies together.
func (t *Tracker) stopGang(key string) {
	t.mu.Lock()
	jobID, size, ok := t.gangOfLocked(key)
	var stop []terms.Lease
	if ok && !t.gangBusy[jobID] {
		stop = t.liveMembersLocked(jobID, size, key)
	}
	t.mu.Unlock()
	for _, l := range stop {
		t.spawn(func() { t.stopMember(l, false) })
	}
}

// stopMember asks a gang member's provider to stop it: with gang set, to
// checkpoint it and end it preempted, as the gang resumes elsewhere;
// otherwise to cancel it.
func (t *Tracker) stopMember(l terms.Lease, gang bool) {
	b, err := sealed(t.cfg.Signer, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: l.ID, JobID: l.JobID, Gang: gang})
	if err != nil {
		t.log.Warn("stop gang member", "lease", l.ID, "err", err)
		return
	}
	prov, err := peer.Decode(l.Provider)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, 15*time.Second)
	defer cancel()
	if _, err := t.cfg.Transport.Request(ctx, prov, wire.ProtoCancel, b); err != nil {
		t.cfg.Counters.Add("renter.gang_stop_failed")
		t.log.Info("stop gang member", "lease", l.ID, "provider", l.Provider, "err", fmt.Errorf("not delivered: %w", err))
	}
}

// endMembers ends the records of gang job id's members between two
// placements (no current lease, or one that has ended) once the job's own
// record is over (not Live): they, and the checkpoints they pin, end with
// it. Called by save.
func (t *Tracker) endMembers(id string) {
	t.mu.Lock()
	var over []ready
	if v := t.jobs[id]; v != nil && v.Job.Nodes > 1 && !v.Live() {
		as := v.Phase
		if !as.Final() {
			as = jobmachine.Finished // its evidence checked yet
		}
		for rank := 1; rank < v.Job.Nodes; rank++ {
			k := gangKey(id, rank)
			if m := t.jobs[k]; m != nil && m.Live() && (m.Lease == nil || m.Run.Terminal()) {
				over = append(over, t.stepLocked(k, m, jobmachine.Closed{As: as}))
			}
		}
	}
	t.mu.Unlock()
	for _, rd := range over {
		_ = t.advance(rd)
	}
}
