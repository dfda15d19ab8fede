package lease

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The tracker's one loop, modelled on etcd raft's Step/Ready/Advance.
// Every event about a job (a post or a cancel from the API, an auction's
// award, confirmation or end, a timer, a provider's report or silence, a
// checked receipt or log, a restart) goes through stepLocked, which steps
// the job's machine (jobmachine.Rules.Step), brings the tracker's indexes
// in line with the new record, and hands back the step's effects as a
// ready; advance then carries out every one of them, in order, each in
// the one switch of do, and what they bring back comes in again as events
// through the same two. A call site records the tracker's own facts of
// the event beside the step, under the same lock, but never changes the
// machine's record nor picks among the effects: apply is the whole loop
// for an event that brings no fact of its own.

// ready is the effects of one step of job key's machine, to be carried
// out (advance) once t.mu is released.
type ready struct {
	key  string
	effs []jobmachine.Effect
}

// empty reports whether the step asked for nothing: the event did not
// fit the job's phase (late, duplicated, for another lease).
func (r ready) empty() bool { return len(r.effs) == 0 }

// stepLocked steps the machine of job key (its state s) with ev and
// returns what the step asks for; the indexes of leases follow the new
// record. t.mu is held.
func (t *Tracker) stepLocked(key string, s *jobState, ev jobmachine.Event) ready {
	before := s.Record
	var effs []jobmachine.Effect
	s.Record, effs = t.rules.Step(s.Record, ev, t.now())
	t.indexLocked(key, before, s)
	return ready{key: key, effs: effs}
}

// apply steps job key's machine with ev and carries out what it asks
// for; it returns the first effect's error (a provider not told to stop).
// An unknown job takes nothing.
func (t *Tracker) apply(key string, ev jobmachine.Event) error {
	t.mu.Lock()
	s := t.jobs[key]
	if s == nil {
		t.mu.Unlock()
		return nil
	}
	rd := t.stepLocked(key, s, ev)
	t.mu.Unlock()
	return t.advance(rd)
}

// advance carries out the effects of a step, in order (t.mu not held),
// and returns the first error among them.
func (t *Tracker) advance(rd ready) error {
	var first error
	for _, e := range rd.effs {
		if err := t.do(rd.key, e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// do carries out one effect of job key's machine: the only place where
// the tracker acts on a step.
func (t *Tracker) do(key string, e jobmachine.Effect) error {
	switch e := e.(type) {
	case jobmachine.Persist:
		t.save(key)
	case jobmachine.StartAuction:
		if e.Reoffer {
			t.cfg.Counters.Add("renter.job_reoffered")
		}
		t.offer(e.Job) // the auction's end comes back as NoLease, its lease as Confirmed
	case jobmachine.CancelAuction:
		if err := t.renter.Cancel(key); err == nil {
			t.fold(key)
		}
		// else: queued before a restart and not offered since, or its
		// auction ended meanwhile (a lease confirmed now is released).
		t.wakeQueue(key)
	case jobmachine.GiveUp:
		t.log.Info("job unplaceable", "job", key, "reason", e.Reason)
		t.observeAuction(key, OutcomeUnplaceable)
	case jobmachine.ArmTimer:
		t.arm(key)
	case jobmachine.Watch:
		t.watch(key, e.Lease, e.Since)
		t.guard(key, e.Lease, e.Since)
	case jobmachine.StopLease:
		return t.stopLease(e)
	case jobmachine.Release:
		t.release(key, e.Lease)
	case jobmachine.Requeue:
		opts := requeueOptions(e.Lease, e.Run, e.Fault, e.Detail)
		if t.churned(key, e) && !slices.Contains(opts.Exclude, e.Lease.Provider) {
			opts.Exclude = append(opts.Exclude, e.Lease.Provider)
		}
		t.spawn(func() { t.requeue(key, e.Lease, opts) })
	case jobmachine.CheckEvidence:
		t.checkEvidence(key, e.Lease)
	case jobmachine.RecordDispute:
		t.recordDispute(key, e)
	case jobmachine.StopGang:
		t.stopGang(key)
	default:
		// A new effect kind the driver does not know yet: a programming
		// error, reported (and counted) rather than taken down with the
		// daemon, whose other jobs go on.
		t.cfg.Counters.Add("renter.effect_unknown")
		return fmt.Errorf("lease: job machine effect %T not carried out", e)
	}
	return nil
}

// indexLocked brings the tracker's indexes of leases in line with job
// key's record after a step from before: a lease its auction awards is
// the job's at once (its provider, which runs it as soon as it confirms,
// is never told it is unknown); an award the job no longer knows is
// forgotten; a new current lease is watched for heartbeats. t.mu is held.
func (t *Tracker) indexLocked(key string, before jobmachine.Record, s *jobState) {
	for _, id := range s.Awarded {
		t.byLease[id] = key
	}
	for _, id := range before.Awarded {
		if !s.Knows(id) && t.byLease[id] == key && t.mons[id] == nil {
			delete(t.byLease, id)
		}
	}
	if l := s.Lease; l != nil && (before.Lease == nil || before.Lease.ID != l.ID) {
		t.byLease[l.ID] = key
		t.mons[l.ID] = t.monitor(*l)
	}
	t.indexReleasedLocked(key, before.Released, s.Released)
	if b := before.Lease; b != nil && (s.Lease == nil || s.Lease.ID != b.ID) && t.released[b.ID] == key {
		if _, kept := s.ArchivedLease(b.ID); !kept {
			// Replaced before it began (rebooked) and released: its
			// provider's reports are answered as released (released.go).
			delete(t.mons, b.ID)
			if t.byLease[b.ID] == key {
				delete(t.byLease, b.ID)
			}
		}
	}
	for _, a := range before.Archived {
		if _, still := s.ArchivedLease(a.Lease); !still && t.archived[a.Lease] != nil && t.archived[a.Lease].jobID == key {
			delete(t.archived, a.Lease) // settled, or past its window: what the tracker saw of it goes too
		}
	}
}

// churned reports whether the lease a Requeue effect gives up was handed
// back by a provider that already handed the job back MaxHandBacks-1
// times: the job excludes it from now on.
func (t *Tracker) churned(key string, e jobmachine.Requeue) bool {
	if !handBack(e.Lease, e.Run, e.Detail) {
		return false
	}
	t.mu.Lock()
	n := 0
	if v := t.jobs[key]; v != nil {
		n = handBacksLocked(v, e.Lease.Provider)
	}
	t.mu.Unlock()
	if n < MaxHandBacks-1 {
		return false
	}
	t.cfg.Counters.Add("renter.hand_back_churn")
	t.log.Warn("provider handed the job back again: excluded from it", "job", key, "provider", e.Lease.Provider,
		"hand_backs", MaxHandBacks)
	return true
}

// arm carries out ArmTimer: the queued job's wait (queue) looks at its
// timer again, or begins. A gang member's record is never offered alone:
// its gang's own record is.
func (t *Tracker) arm(key string) {
	if isMemberKey(key) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.wakeLocked(key) {
		t.queueLocked(key)
	}
}

// wakeQueue wakes job key's wait in the queue, if it has one, to look at
// the job again.
func (t *Tracker) wakeQueue(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wakeLocked(key)
}

// wakeLocked wakes job key's wait in the queue and reports whether it
// has one. t.mu is held.
func (t *Tracker) wakeLocked(key string) bool {
	w := t.wake[key]
	if w == nil {
		return false
	}
	select {
	case w <- struct{}{}:
	default:
	}
	return true
}

// stopLease carries out StopLease: the provider of the job's running
// lease is asked to stop it (it reports how the lease ended).
func (t *Tracker) stopLease(e jobmachine.StopLease) error {
	b, err := sealed(t.cfg.Signer, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: e.Lease.ID, JobID: e.Lease.JobID})
	if err != nil {
		return err
	}
	prov, err := peer.Decode(e.Lease.Provider)
	if err != nil {
		return fmt.Errorf("provider %q: %w", e.Lease.Provider, err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 15*time.Second)
	defer cancel()
	if _, err := t.cfg.Transport.Request(ctx, prov, wire.ProtoCancel, b); err != nil {
		return fmt.Errorf("ask provider to stop the job: %w", err)
	}
	return nil
}

// advanceWithFacts is advance for a step beside which the tracker
// recorded facts of its own: the job's record is persisted even where the
// step asks for no Persist.
func (t *Tracker) advanceWithFacts(rd ready) error {
	persists := false
	for _, e := range rd.effs {
		if _, ok := e.(jobmachine.Persist); ok {
			persists = true
		}
	}
	if !persists {
		t.save(rd.key)
	}
	return t.advance(rd)
}

// recordDispute carries out RecordDispute: the ledger records the dispute
// of the lease's settlement, and so does the attempt's history if the
// lease is archived; then the machine takes it (Disputed), showing the
// current lease's.
func (t *Tracker) recordDispute(key string, e jobmachine.RecordDispute) {
	l := e.Lease
	t.cfg.Counters.Add("renter.settle_disputed")
	t.log.Error("lease settlement given up: its provider's receipt is refused", "job", key, "lease", l.ID, "provider", l.Provider, "reason", e.Reason)
	if err := t.cfg.Receipts.dispute(l.ID, key, l.Provider, e.Reason); err != nil {
		t.log.Error("ledger: dispute not recorded", "lease", l.ID, "err", err)
	}
	t.mu.Lock()
	if v := t.jobs[key]; v != nil && (v.Lease == nil || v.Lease.ID != l.ID) {
		if rec := historyRecordLocked(v, l.ID); rec != nil {
			rec.Dispute = e.Reason
		}
	}
	t.mu.Unlock()
	// Recorded: the job's record shows it from now on (never before the
	// ledger has it).
	_ = t.apply(key, jobmachine.Disputed{LeaseID: l.ID, Reason: e.Reason})
}
