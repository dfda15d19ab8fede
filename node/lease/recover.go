package lease

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Recovery from provider loss, for every tier. The renter calls a lease
// lost when its provider goes silent while the job runs (no verified
// heartbeat for LossAfter), never reports by the lease's end (abandoned),
// or reports it failed through its own fault (terms.FaultProvider: its
// daemon restarted, its infrastructure failed, it could not fetch the
// inputs). The attempt is archived with who was at fault and why, and the
// job goes back to auction at once for its whole remaining work, the lost
// provider excluded, while its attempt budget (Job.Attempts) lasts.

// DefaultLossAfter is how long a running lease's provider may stay silent,
// at interval heartbeats, before the renter calls it lost: three missed
// heartbeats and some slack for a slow network.
func DefaultLossAfter(interval time.Duration) time.Duration {
	return 3*interval + 5*time.Second
}

// archived is what the tracker saw of a lease that is no longer its job's
// current attempt but is not settled yet (the job's machine keeps which
// leases those are, and whether each was lost or has reported since:
// jobmachine.Record.Archived): its provider may still send its final
// report and receipt, and is paid for what the renter saw of it.
type archived struct {
	jobID string
	// view is the job's record as it was for this lease: what the receipt
	// is checked against.
	view api.JobView
	// reloaded: taken back from the job's record at a restart (its
	// heartbeats are no longer held).
	reloaded bool
}

// archivedStateLocked is archived lease id as its job's record keeps it
// (ok false: the record no longer does). t.mu is held.
func (t *Tracker) archivedStateLocked(a *archived, id string) (jobmachine.Archived, bool) {
	if v := t.jobs[a.jobID]; v != nil {
		return v.ArchivedLease(id)
	}
	return jobmachine.Archived{}, false
}

// jobRecord is a job as the tracker persists it: its state, and its
// earlier leases that may still settle late (archived), so that a renter
// that restarts still takes their providers' late reports and receipts.
type jobRecord struct {
	jobState
	// State is the job's state as the API shows it: stored for whoever
	// reads a record as a job view, and read from a record stored before
	// the machine's phase was (jobmachine.Restarted).
	State     terms.JobState   `json:"state"`
	Unsettled []unsettledLease `json:"unsettled,omitempty"`
}

// unsettledLease is an archived lease as persisted: what the tracker saw
// of it (Lost and Reported are read from records stored before the
// machine kept them).
type unsettledLease struct {
	View     api.JobView `json:"view"`
	Lost     bool        `json:"lost,omitempty"`
	Reported bool        `json:"reported,omitempty"`
}

// unsettledLocked is the job's archived leases still in their settlement
// window, as persisted. t.mu is held.
func (t *Tracker) unsettledLocked(jobID string) []unsettledLease {
	var out []unsettledLease
	for id, a := range t.archived {
		if a.jobID == jobID && a.view.Lease != nil {
			st, _ := t.archivedStateLocked(a, id)
			out = append(out, unsettledLease{View: a.view, Lost: st.Lost, Reported: st.Reported})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].View.Lease.Start.Before(out[j].View.Lease.Start) })
	return out
}

// reloadUnsettled takes back, at a restart, what the tracker saw of a
// job's archived leases still in their settlement window: their providers
// may still report and settle them. The monitor of each only serves to
// take them: a lost lease's answer is the heartbeat summary kept at its
// loss. It returns them as the machine kept them in a record stored before
// it did (jobmachine.Restarted.Archived).
func (t *Tracker) reloadUnsettled(jobID string, us []unsettledLease) []jobmachine.Archived {
	now := t.now()
	var old []jobmachine.Archived
	for _, u := range us {
		l := u.View.Lease
		if l == nil || now.After(l.End.Add(DefaultSettleWindow)) {
			continue
		}
		t.archived[l.ID] = &archived{jobID: jobID, view: u.View, reloaded: true}
		t.mons[l.ID] = t.monitorFrom(*l, now)
		t.byLease[l.ID] = jobID
		old = append(old, jobmachine.Archived{Lease: l.ID, End: l.End, Lost: u.Lost, Reported: u.Reported})
	}
	return old
}

// requeueOptions says how a job whose lease l ended in run, through
// fault, goes back to auction: a provider at fault is excluded (the work
// no checkpoint saved is lost either way; the tracker adds the job's
// checkpoints).
func requeueOptions(l terms.Lease, run terms.RunState, fault terms.Fault, reason string) auction.RequeueOptions {
	opts := auction.RequeueOptions{Reason: reason}
	if run == terms.RunFailed && fault == terms.FaultProvider {
		opts.Exclude = []string{l.Provider}
	}
	return opts
}

// MaxHandBacks is how many times one provider may hand the same job back
// (stop it early, no one's fault: a drain's hand-back, or the preemption of
// a lease that was not preemptible) before the job excludes it: a
// provider that wins a job's attempts only to hand them back would
// otherwise spend its whole attempt budget.
const MaxHandBacks = 2

// handBack reports whether a lease that ended in run with detail was
// handed back by its provider: a drain's hand-back, or any preemption of a
// lease that was not preemptible (its provider may preempt it only then).
func handBack(l terms.Lease, run terms.RunState, detail string) bool {
	return run == terms.RunPreempted && (!l.Preemptible || strings.HasPrefix(detail, terms.HandBackDetail))
}

// handBacksLocked counts the earlier leases of v's job that provider
// handed back. t.mu is held.
func handBacksLocked(v *jobState, provider string) int {
	n := 0
	for _, h := range v.History {
		if h.Lease.Provider == provider && handBack(h.Lease, h.Run, h.Detail) {
			n++
		}
	}
	return n
}

// guard calls the lease l of job lost when, from the lease's start, its
// provider stays silent (no verified heartbeat) for LossAfter before the
// lease's end (watch covers the end): providers send heartbeats from the
// start, marked Preparing while they fetch the job's inputs, so a provider
// that dies before the job is seen to start is caught as soon as one that
// dies while it runs. since is when the renter began watching (its
// restart): its own outage is not the provider's silence.
func (t *Tracker) guard(jobID string, l terms.Lease, since time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.guarded[l.ID] {
		return // guarded already (a lease moved earlier keeps its guard, which follows it)
	}
	if !t.spawnLocked(func() {
		defer func() {
			t.mu.Lock()
			delete(t.guarded, l.ID)
			t.mu.Unlock()
		}()
		// One timer, armed for the moment the silence would pass
		// LossAfter: a heartbeat meanwhile moves that moment on (seen
		// when the timer fires, which arms it again); a change of the
		// job's record (its lease moved earlier, or ended) is looked at
		// as it happens.
		due := time.NewTimer(t.cfg.LossAfter)
		defer due.Stop()
		for {
			changed := t.changed.Wait()
			t.mu.Lock()
			v, mon := t.jobs[jobID], t.mons[l.ID]
			if v == nil || mon == nil || v.Lease == nil || v.Lease.ID != l.ID || v.Run.Terminal() {
				t.mu.Unlock()
				return
			}
			seen := v.ObservedStart
			l = *v.Lease // as it stands: it may have moved earlier
			t.mu.Unlock()
			now := t.now()
			if now.After(l.End) {
				return
			}
			heard := maxTime(maxTime(maxTime(seen, l.Start), since), mon.LastAccepted())
			silent := now.Sub(heard)
			if silent > t.cfg.LossAfter {
				detail := "provider lost: no heartbeat for " + roundSilence(silent)
				if seen.IsZero() {
					detail += " (the job had not started)"
				}
				t.lose(jobID, l, detail, false)
				return
			}
			due.Reset(t.cfg.LossAfter - silent + time.Nanosecond)
			select {
			case <-t.ctx.Done():
				return
			case <-changed:
			case <-due.C:
			}
		}
	}) {
		return
	}
	t.guarded[l.ID] = true
}

func roundSilence(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// lose gives up the current lease l of a job whose provider is lost (it
// went silent or abandoned the lease) and reports whether it did (false:
// the lease ended or changed meanwhile). The attempt ends failed through
// the provider's fault, billed up to the last heartbeat the renter
// verified; the provider is asked to stop it; the job goes back to auction
// without that provider, unless its attempt budget is spent. An abandoned
// lease's provider is slashed before that auction, which weighs it.
func (t *Tracker) lose(jobID string, l terms.Lease, detail string, abandoned bool) bool {
	t.mu.Lock()
	v, mon := t.jobs[jobID], t.mons[l.ID]
	if v == nil || mon == nil || v.Lease == nil || v.Lease.ID != l.ID || v.Run.Terminal() {
		t.mu.Unlock()
		return false
	}
	last := v.ObservedStart
	if !last.IsZero() {
		last = maxTime(last, mon.LastAccepted())
	}
	// What the provider may still settle: its run as last seen, observed
	// up to its last heartbeat.
	snap := v.view()
	snap.History = nil
	snap.ObservedEnd = last
	// The heartbeats seen up to the loss: what the provider's late report
	// is answered with (kept with the job across a renter restart).
	sum := mon.Summary(last)
	snap.Heartbeats = &sum
	t.keepArchivedLocked(jobID, snap)
	v.ObservedEnd = last
	rd := t.stepLocked(jobID, v, jobmachine.Lost{LeaseID: l.ID, Detail: detail, At: last})
	again, started := v.Phase == jobmachine.Requeued, v.Started
	t.mu.Unlock()
	t.cfg.Counters.Add("renter.lease_lost")
	t.log.Warn("lease lost", "job", jobID, "lease", l.ID, "provider", l.Provider, "detail", detail, "requeue", again)
	t.cfg.Observe.jobEnded(l, terms.RunFailed, started, last)
	if abandoned {
		t.slashAbandoned(l)
	}
	// The machine's release of the lease (if it still runs there, it
	// stops), and its requeue or the gang's stop.
	_ = t.advanceWithFacts(rd)
	return true
}

// keepArchivedLocked keeps what the tracker saw of an unsettled lease that
// stops being its job's current attempt (the machine archives it), so that
// its provider can still report and settle it; entries past the
// settlement window are dropped. t.mu is held.
func (t *Tracker) keepArchivedLocked(jobID string, v api.JobView) {
	if v.Lease == nil || v.Receipt != nil {
		return
	}
	now := t.now()
	for id, a := range t.archived {
		if now.After(a.view.Lease.End.Add(DefaultSettleWindow)) {
			delete(t.archived, id)
		}
	}
	if _, ok := t.archived[v.Lease.ID]; ok {
		return // lost first: keep what the renter saw then
	}
	t.archived[v.Lease.ID] = &archived{jobID: jobID, view: v}
}

// archivedLease returns the unsettled, archived lease id (nil if none).
func (t *Tracker) archivedLease(id string) *archived {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.archived[id]
}

// lostEvent takes a provider's report on a lease the renter archived
// before it settled: a lost lease's provider reporting its end late (a
// restarted daemon does), or a final report re-sent. The job's current
// attempt is not touched; the report is noted in the attempt's history and
// answered with the renter's heartbeat summary up to the reported end.
func (t *Tracker) lostEvent(from peer.ID, ev wire.LeaseEvent, a *archived) ([]byte, error) {
	now := t.now()
	t.mu.Lock()
	mon := t.mons[ev.LeaseID]
	if a.view.Lease.Provider != from.String() || mon == nil {
		t.mu.Unlock()
		t.cfg.Counters.Add("renter.event_unknown_lease")
		return nil, fmt.Errorf("no lease %s from %s", ev.LeaseID, from)
	}
	st, _ := t.archivedStateLocked(a, ev.LeaseID)
	if st.Reported {
		sum := a.view.Heartbeats
		run := a.view.Run
		t.mu.Unlock()
		if ev.Run == run && sum != nil {
			return json.Marshal(sum) // re-sent: the same answer
		}
		t.cfg.Counters.Add("renter.event_stale")
		return nil, nil
	}
	t.mu.Unlock()
	if !ev.Run.Terminal() {
		t.cfg.Counters.Add("renter.event_stale")
		return nil, nil
	}
	if err := EventTimesValid(ev, *a.view.Lease, now); err != nil {
		t.cfg.Counters.Add("renter.event_bad_time")
		return nil, err
	}
	if err := ev.CheckOutputs(); err != nil {
		t.cfg.Counters.Add("renter.event_bad_outputs")
		return nil, err
	}
	end := ev.Ended
	if end.IsZero() || end.After(now) {
		end = now
	}
	// Time after the last heartbeat the renter saw is a gap in this
	// summary: the receipt bills up to that heartbeat at most. A renter
	// that restarted since the loss no longer holds those heartbeats: it
	// answers with the summary kept at the loss, silent after it.
	sum := mon.Summary(end)
	if last := a.view.ObservedEnd; st.Lost && a.reloaded && a.view.Heartbeats != nil {
		sum = a.view.Heartbeats.SilentUntil(a.view.Lease.Start, last, end, t.cfg.HeartbeatInterval)
	}
	t.mu.Lock()
	if st, _ := t.archivedStateLocked(a, ev.LeaseID); st.Reported {
		t.mu.Unlock()
		return nil, fmt.Errorf("lease %s: final report already taken", ev.LeaseID)
	}
	rd := ready{key: a.jobID}
	if v := t.jobs[a.jobID]; v != nil {
		rd = t.stepLocked(a.jobID, v, jobmachine.LateReport{LeaseID: ev.LeaseID})
	}
	w := &a.view
	w.Run, w.Detail, w.ExitCode, w.Fault = ev.Run, ev.Detail, ev.ExitCode, ev.Fault
	if !ev.Started.IsZero() {
		w.Started = ev.Started
	}
	w.Ended = ev.Ended
	w.Outputs, w.OutputCount, w.OutputsHash, w.OutputsArtifact = ev.Outputs, ev.OutputCount, ev.OutputsHash, ev.OutputsArtifact
	w.Heartbeats = &sum
	if v := t.jobs[a.jobID]; v != nil {
		if rec := historyRecordLocked(v, ev.LeaseID); rec != nil {
			rec.Detail += fmt.Sprintf("; its provider reported later: %s", ev.Run)
			if ev.Detail != "" {
				rec.Detail += " (" + ev.Detail + ")"
			}
		}
	}
	t.mu.Unlock()
	t.cfg.Counters.Add("renter.event_after_loss")
	t.log.Info("late report on a lost lease", "job", a.jobID, "lease", ev.LeaseID, "run", ev.Run, "detail", ev.Detail)
	_ = t.advanceWithFacts(rd)
	return json.Marshal(sum)
}

// historyRecordLocked is the job's archived attempt on lease id (nil if
// none). t.mu is held.
func historyRecordLocked(v *jobState, id string) *api.LeaseRecord {
	for i := range v.History {
		if v.History[i].Lease.ID == id {
			return &v.History[i]
		}
	}
	return nil
}

// settledArchived records the countersigned receipt of an archived lease
// in its attempt's history and the job's cost. It reports whether the
// lease was still waiting for it, and the step of the job's machine that
// records it.
func (t *Tracker) settledArchived(r attest.Receipt) (bool, ready) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.archived[r.LeaseID]
	if a == nil {
		return false, ready{}
	}
	delete(t.archived, r.LeaseID)
	v := t.jobs[a.jobID]
	if v == nil {
		return true, ready{}
	}
	v.CostUSD += r.Amount
	if rec := historyRecordLocked(v, r.LeaseID); rec != nil {
		rec.CostUSD, rec.Receipt = r.Amount, true
	}
	// Its refusals are over; lost on its last attempt, the lease is still
	// the job's, and the machine records its receipt.
	return true, t.stepLocked(a.jobID, v, jobmachine.ReceiptRecorded{Receipt: r})
}

// lostUnreported reports whether a lease was given up as lost and its
// provider never reported it since.
func (t *Tracker) lostUnreported(leaseID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lostUnreportedLocked(leaseID)
}

// lostUnreportedLocked is lostUnreported with t.mu held.
func (t *Tracker) lostUnreportedLocked(leaseID string) bool {
	a := t.archived[leaseID]
	if a == nil {
		return false
	}
	st, ok := t.archivedStateLocked(a, leaseID)
	return ok && st.Lost && !st.Reported
}

// refuseArchivedHeartbeat refuses a heartbeat for a lease that is no
// longer its job's current attempt (the renter gave it up, or it ended):
// what a lost provider sends after the loss is not billed.
func (t *Tracker) refuseArchivedHeartbeat(leaseID string) error {
	if t.archivedLease(leaseID) == nil {
		return nil
	}
	t.cfg.Counters.Add("renter.heartbeat_after_loss")
	return fmt.Errorf("lease %s is no longer running for this renter", leaseID)
}

// slashAbandoned slashes a provider that never reported the end of lease l.
func (t *Tracker) slashAbandoned(l terms.Lease) {
	if err := t.cfg.Receipts.cfg.Book.Slash(l.Provider, attest.Evidence{Kind: attest.SlashAbandonedLease, LeaseID: l.ID,
		Reporter: t.cfg.Signer.ID().String(), Detail: "no final report by the lease end"}); err != nil {
		t.log.Warn("slash", "err", err)
	}
}

// joinDetail appends more to a detail ("; " between).
func joinDetail(detail, more string) string {
	if detail == "" || more == "" {
		return detail + more
	}
	return detail + "; " + more
}
