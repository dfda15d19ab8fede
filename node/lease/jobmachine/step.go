package jobmachine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Step applies ev, which happened at now, to st: it returns the next state
// and the effects to carry out, in order. An event that does not fit the
// job's phase (late, duplicated, or for another lease) changes nothing and
// asks for nothing; a job in a final phase stays there.
func (r Rules) Step(st Record, ev Event, now time.Time) (Record, []Effect) {
	s := stepper{r: r, st: st, now: now}
	s.st.Reasons = append([]string(nil), st.Reasons...)
	s.st.Awarded = append([]string(nil), st.Awarded...)
	s.st.Refused = maps.Clone(st.Refused)
	s.st.Released = append([]Released(nil), st.Released...)
	s.st.Archived = append([]Archived(nil), st.Archived...)
	s.step(ev)
	if len(s.st.Released) == 0 {
		s.st.Released = nil
	}
	if len(s.st.Archived) == 0 {
		s.st.Archived = nil
	}
	return s.st, s.effs
}

type stepper struct {
	r    Rules
	st   Record
	now  time.Time
	effs []Effect
}

func (s *stepper) do(e ...Effect) { s.effs = append(s.effs, e...) }

func (s *stepper) step(ev Event) {
	st := &s.st
	if ev, ok := ev.(Unused); ok {
		// Whatever the job's phase: the lease was never its to run (its
		// current lease is not the auction's to give back).
		if st.Lease == nil || st.Lease.ID != ev.Lease.ID {
			s.release(ev.Lease)
		}
		return
	}
	if ev, ok := ev.(Rebooked); ok {
		s.rebooked(ev)
		return
	}
	if st.Phase == "" {
		switch ev := ev.(type) {
		case Posted:
			if ev.Job.ID != "" && st.Job.ID == "" {
				*st = Record{Job: ev.Job, PostedAt: s.now, Phase: Auctioning}
				s.do(Persist{}, StartAuction{Job: ev.Job})
			}
		case Confirmed:
			if ev.Job.ID != "" {
				*st = Record{Job: ev.Job, PostedAt: s.now, Phase: Auctioning}
				s.confirm(ev.Lease, ev.Job)
			}
		case Restarted:
			if st.Job.ID != "" {
				s.restarted(ev)
			}
		}
		return
	}
	if ev, ok := ev.(GangRequeued); ok {
		// The one event a final phase takes: a gang lives and dies
		// together.
		if st.Lease != nil && !st.Run.Terminal() {
			return // its lease is stopped first
		}
		s.reauction(ev.Job)
		return
	}
	if st.Phase.Final() {
		if ev, ok := ev.(Confirmed); ok && !st.Knows(ev.Lease.ID) {
			// Confirmed after the job ended (cancelled while awarding): a
			// lease it cannot use.
			s.release(ev.Lease)
		}
		s.settlement(ev) // its last lease settles after the job ended
		return
	}
	switch ev := ev.(type) {
	case Awarded:
		if s.inAuction() && ev.LeaseID != "" && !st.Knows(ev.LeaseID) {
			st.Phase = Awarding
			st.Awarded = append(st.Awarded, ev.LeaseID)
		}
	case Confirmed:
		switch {
		case s.inAuction() || st.Phase == Queued:
			s.confirm(ev.Lease, ev.Job)
		case st.Lease == nil || st.Lease.ID != ev.Lease.ID:
			s.release(ev.Lease) // one lease at a time
		}
	case NoLease:
		if s.inAuction() {
			s.noLease(ev)
		}
	case Folded:
		if ev.Job.ID == st.Job.ID {
			st.Job = ev.Job
		}
		st.Reasons = append(st.Reasons, ev.Reasons...)
	case TimerDue:
		if st.Phase == Queued {
			s.offerDue()
		}
	case Wake:
		if st.Phase == Queued && st.Due.After(s.now) {
			st.Due = s.now
			s.do(ArmTimer{At: s.now})
		}
	case Cancel:
		switch {
		case s.inAuction() || st.Phase == Queued:
			st.Phase, st.Awarded, st.Due = Cancelled, nil, time.Time{}
			st.Reasons = append(st.Reasons, "cancelled")
			s.do(CancelAuction{}, Persist{})
		case st.Phase == Leased && st.Lease != nil && !st.Run.Terminal():
			s.do(StopLease{Lease: *st.Lease})
		}
	case Reported:
		s.reported(ev)
	case Moved:
		if st.Phase == Leased && st.Lease != nil && st.Lease.ID == ev.Lease.ID && st.Run == terms.RunPending {
			l := ev.Lease
			st.Lease = &l
			s.do(Persist{}, Watch{Lease: l})
		}
	case Lost:
		if st.Phase == Leased && st.Lease != nil && st.Lease.ID == ev.LeaseID && !st.Run.Terminal() {
			st.Fault, st.Detail = terms.FaultProvider, ev.Detail
			if st.Ended.IsZero() {
				st.Ended = ev.At
			}
			s.archive(true) // its provider may still report and settle it
			s.setRun(terms.RunFailed)
			s.release(*st.Lease) // if it still runs there, it stops
			s.ended(ev.Detail)
		}
	case Evidence:
		if st.Phase == Verifying && st.Lease != nil && st.Lease.ID == ev.LeaseID && st.Receipt == nil {
			if ev.OK {
				st.Phase = Finished
				s.do(Persist{})
				return
			}
			detail := "no evidence of work: " + ev.Why
			st.Fault, st.Detail = terms.FaultProvider, detail
			s.setRun(terms.RunFailed)
			s.ended(detail)
		}
	case ReceiptRecorded, ReceiptRefused, Disputed, LateReport:
		s.settlement(ev)
	case Reauctioned:
		if st.Phase == Requeued {
			s.reauction(ev.Job)
		}
	case Closed:
		if ev.As.Final() {
			st.Phase, st.Awarded, st.Due = ev.As, nil, time.Time{}
			s.do(Persist{})
		}
	case Restarted:
		s.restarted(ev)
	}
}

// reauction sends the job, its lease archived, back to auction.
func (s *stepper) reauction(job terms.Job) {
	st := &s.st
	detail := ""
	if st.Lease != nil {
		detail = fmt.Sprintf("requeued after attempt %d was %s", st.Lease.Attempt, st.Run)
		s.archive(false)
	}
	st.Phase, st.Job, st.Awarded = Auctioning, job, nil
	st.Lease, st.Run, st.ExitCode, st.Detail, st.Fault, st.Receipt = nil, "", nil, detail, terms.FaultNone, nil
	st.Started, st.Ended, st.Due, st.Dispute = time.Time{}, time.Time{}, time.Time{}, ""
	s.do(Persist{})
}

// inAuction reports whether the job's auction runs.
func (s *stepper) inAuction() bool {
	p := s.st.Phase
	return p == Auctioning || p == Awarding
}

// confirm makes l, a lease of job as its auction leased it (its attempt,
// the checkpoints it restores), the job's current lease.
func (s *stepper) confirm(l terms.Lease, job terms.Job) {
	st := &s.st
	if l.ID == "" {
		return
	}
	if job.ID == st.Job.ID {
		st.Job = job
	}
	l.State = terms.RunPending
	st.Phase, st.Lease, st.Run = Leased, &l, terms.RunPending
	st.ExitCode, st.Detail, st.Fault, st.Receipt, st.Dispute = nil, "", terms.FaultNone, nil, ""
	st.Started, st.Ended, st.Due, st.Awarded = time.Time{}, time.Time{}, time.Time{}, nil
	st.Backoff = 0 // a requeue's offers start their waits over
	st.Leases++
	// Silence counts from now, not from the lease's start: until its
	// confirm was recorded here (late on a busy renter) the lease's
	// heartbeats were refused, and that is not its provider's silence.
	s.do(Persist{}, Watch{Lease: l, Since: s.now})
}

// rebooked takes a lease a later auction of the leased job confirmed
// (Rebooked): it replaces the current lease if that one is still pending
// and starts later, and is released otherwise.
func (s *stepper) rebooked(ev Rebooked) {
	st := &s.st
	l := ev.Lease
	if l.ID == "" || st.Knows(l.ID) {
		return // a duplicate
	}
	if st.Phase != Leased || st.Lease == nil || st.Run != terms.RunPending || ev.Job.ID != st.Job.ID ||
		l.JobID != st.Job.ID || !l.Start.Before(st.Lease.Start) {
		s.release(l)
		return
	}
	old := *st.Lease
	job := ev.Job
	// The rebook's call bounded its start and left the old provider out:
	// the job's own deadline and exclusions stay as they were.
	job.Deadline, job.Exclude = st.Job.Deadline, st.Job.Exclude
	st.Job = job
	l.State = terms.RunPending
	st.Lease = &l
	st.Reasons = append(st.Reasons, fmt.Sprintf("rebooked: lease %s starts %s sooner than lease %s did",
		l.ID, old.Start.Sub(l.Start).Round(time.Millisecond), old.ID))
	s.release(old)
	s.do(Persist{}, Watch{Lease: l, Since: s.now})
}

// noLease takes an auction that ended without a lease: the job is queued
// for another offer while its start deadline lasts, or ends.
func (s *stepper) noLease(ev NoLease) {
	st := &s.st
	st.Awarded = nil
	if !ev.Retry {
		st.Phase = ev.As
		if !st.Phase.Final() {
			st.Phase = Unplaceable
		}
		if ev.Reason != "" {
			st.Reasons = append(st.Reasons, ev.Reason)
		}
		s.do(Persist{})
		return
	}
	if s.pastDeadline() {
		s.giveUp()
		return
	}
	st.Phase = Queued
	// One line says why, however often the job was offered: it replaces
	// the auction's own reason and the previous offer's.
	rs := st.Reasons
	if n := len(rs); n > 0 && rs[n-1] == ev.Reason {
		rs = rs[:n-1]
	}
	if n := len(rs); n > 0 && strings.HasPrefix(rs[n-1], QueuedPrefix) {
		rs = rs[:n-1]
	}
	st.Reasons = append(rs, fmt.Sprintf("%s%s (offered %d times)", QueuedPrefix, ev.Reason, ev.Offers))
	switch {
	case ev.Raced:
		st.Due = s.now // lost only to another of this renter's auctions
	case ev.Lost && st.Backoff <= 0:
		// Lost to other awards (other renters', mostly), one at least
		// declined by its provider as taken: the bids that start now are a
		// new call away. Once: the providers say why they declined, and
		// a job that keeps losing (or a provider that keeps declining)
		// waits as any queued job, from QueueBackoff on.
		st.Due = s.now
		st.Backoff = s.r.QueueBackoff / 2
	case st.Backoff <= 0:
		st.Backoff = s.r.QueueBackoff
		st.Due = s.now.Add(st.Backoff)
	default:
		st.Backoff = min(2*st.Backoff, max(s.r.QueueBackoffMax, s.r.QueueBackoff))
		st.Due = s.now.Add(st.Backoff)
	}
	s.do(Persist{})
	s.arm()
}

// arm arms the timer of a queued job: its next offer, or its deadline if
// sooner.
func (s *stepper) arm() {
	at := s.st.Due
	if d := s.st.Job.Deadline; !d.IsZero() && d.Before(at) {
		at = d
	}
	s.do(ArmTimer{At: at})
}

func (s *stepper) pastDeadline() bool {
	d := s.st.Job.Deadline
	return !d.IsZero() && !s.now.Before(d)
}

// giveUp ends a queued job's wait: its start deadline passed.
func (s *stepper) giveUp() {
	st := &s.st
	st.Phase, st.Due = Unplaceable, time.Time{}
	st.Reasons = append(st.Reasons, DeadlineDetail)
	s.do(Persist{}, GiveUp{Reason: DeadlineDetail})
}

// offerDue takes a queued job's timer: its deadline, or its next offer.
func (s *stepper) offerDue() {
	st := &s.st
	switch {
	case s.pastDeadline():
		s.giveUp()
	case s.now.Before(st.Due):
		s.arm()
	default:
		// A new attempt: providers answer each call once.
		st.Phase, st.Due = Auctioning, time.Time{}
		st.Job.Attempt++
		s.do(Persist{}, StartAuction{Job: st.Job, Reoffer: true})
	}
}

// setRun records the current lease's run state (the lease's own state
// follows it once the job runs).
func (s *stepper) setRun(run terms.RunState) {
	st := &s.st
	st.Run = run
	if st.Lease != nil && (run == terms.RunRunning || run.Terminal()) {
		l := *st.Lease
		l.State = run
		st.Lease = &l
	}
}

// reported takes the current lease's provider's report: run states only
// move forward.
func (s *stepper) reported(ev Reported) {
	st := &s.st
	if st.Phase != Leased || st.Lease == nil || st.Lease.ID != ev.LeaseID || !ev.Run.Follows(st.Run) || ev.Run == st.Run {
		return
	}
	s.setRun(ev.Run)
	st.Detail, st.ExitCode, st.Fault = ev.Detail, ev.ExitCode, ev.Fault
	if !ev.Started.IsZero() {
		st.Started = ev.Started
	}
	st.Ended = ev.Ended
	if !ev.Run.Terminal() {
		s.do(Persist{})
		return
	}
	if ev.Run == terms.RunSucceeded {
		// Paid on evidence: checked before the receipt comes.
		st.Phase = Verifying
		s.do(Persist{}, CheckEvidence{Lease: *st.Lease})
		return
	}
	s.ended(ev.Detail)
}

// ended decides, once the current lease ended unsuccessfully (its run
// state and fault set), whether the job goes back to auction or is
// finished. detail is the lease's own end, as its provider or the renter
// said it.
func (s *stepper) ended(detail string) {
	st := &s.st
	again, why := st.Requeues(st.Run, st.Fault)
	if !again {
		st.Detail = joinDetail(st.Detail, why)
		st.Phase = Finished
		s.do(Persist{})
		if st.Job.Nodes > 1 {
			s.do(StopGang{})
		}
		return
	}
	st.Phase = Requeued
	s.do(Persist{}, Requeue{Lease: *st.Lease, Run: st.Run, Fault: st.Fault, Detail: detail})
}

func (s *stepper) receipt(ev ReceiptRecorded) {
	st := &s.st
	delete(st.Refused, ev.Receipt.LeaseID) // settled: its refusals are over
	if len(st.Refused) == 0 {
		st.Refused = nil
	}
	st.Archived = slices.DeleteFunc(st.Archived, func(a Archived) bool { return a.Lease == ev.Receipt.LeaseID })
	if st.Lease != nil && st.Lease.ID == ev.Receipt.LeaseID && st.Receipt == nil {
		r := ev.Receipt
		st.Receipt = &r
		s.do(Persist{})
	}
}

// refused counts a refusal of a lease's receipt: at the MaxRefusals-th
// its settlement is given up as a dispute (a receipt that settles it later
// is still taken).
func (s *stepper) refused(ev ReceiptRefused) {
	st := &s.st
	id := ev.Lease.ID
	if id == "" || s.r.MaxRefusals <= 0 || (st.Lease != nil && st.Lease.ID == id && st.Receipt != nil) {
		return
	}
	if st.Refused == nil {
		st.Refused = map[string]int{}
	}
	st.Refused[id]++
	n := st.Refused[id]
	if n < s.r.MaxRefusals {
		return
	}
	delete(st.Refused, id)
	if len(st.Refused) == 0 {
		st.Refused = nil
	}
	s.do(RecordDispute{Lease: ev.Lease, Reason: fmt.Sprintf("receipt refused %d times: %s", n, ev.Why)})
}

// disputed takes a recorded dispute: the current lease's is shown.
func (s *stepper) disputed(ev Disputed) {
	st := &s.st
	if ev.LeaseID == "" || ev.Reason == "" {
		return
	}
	if st.Lease != nil && st.Lease.ID == ev.LeaseID && st.Receipt == nil {
		st.Dispute = ev.Reason
	}
	s.do(Persist{}) // an archived lease's dispute is in the job's history
}

// archive keeps the current lease, unsettled, among the job's archived
// leases (lost: given up before any final report), unless it is there
// already (lost first: it stays as it was then); past their settlement
// window the archived leases are forgotten.
func (s *stepper) archive(lost bool) {
	st := &s.st
	if w := s.r.SettleWindow; w > 0 {
		st.Archived = slices.DeleteFunc(st.Archived, func(a Archived) bool { return s.now.After(a.End.Add(w)) })
	}
	if st.Lease == nil || st.Receipt != nil {
		return
	}
	if _, ok := st.ArchivedLease(st.Lease.ID); ok {
		return
	}
	st.Archived = append(st.Archived, Archived{Lease: st.Lease.ID, End: st.Lease.End, Lost: lost, Reported: !lost && st.Run.Terminal()})
}

// lateReport takes the final report of an archived lease (once).
func (s *stepper) lateReport(ev LateReport) {
	st := &s.st
	for i := range st.Archived {
		if a := &st.Archived[i]; a.Lease == ev.LeaseID && !a.Reported {
			a.Reported = true
			s.do(Persist{})
		}
	}
}

// release releases lease l (Release) and remembers it, within its
// settlement window and MaxReleased.
func (s *stepper) release(l terms.Lease) {
	st := &s.st
	if l.ID == "" {
		return
	}
	if !slices.ContainsFunc(st.Released, func(r Released) bool { return r.Lease == l.ID }) {
		st.Released = append(st.Released, Released{Lease: l.ID, Job: l.JobID, Provider: l.Provider, End: l.End})
	}
	s.pruneReleased()
	s.do(Release{Lease: l})
}

// pruneReleased forgets the released leases past their settlement window,
// and the oldest beyond MaxReleased.
func (s *stepper) pruneReleased() {
	st := &s.st
	if w := s.r.SettleWindow; w > 0 {
		st.Released = slices.DeleteFunc(st.Released, func(r Released) bool { return s.now.After(r.End.Add(w)) })
	}
	if over := len(st.Released) - s.r.MaxReleased; s.r.MaxReleased > 0 && over > 0 {
		slices.SortStableFunc(st.Released, func(a, b Released) int { return a.End.Compare(b.End) })
		st.Released = st.Released[over:]
	}
}

// restarted takes up a record the daemon had stored before it stopped.
func (s *stepper) restarted(ev Restarted) {
	st := &s.st
	if st.Phase == "" {
		again, _ := st.Requeues(st.Run, st.Fault)
		if st.Leases <= 0 {
			st.Leases = ev.Leases
		}
		st.Phase = PhaseOf(ev.State, st.Run, again)
		if st.Phase == "" {
			st.Phase = Failed // an unknown state: never offered again
		}
		if st.Phase == Finished && st.Run == terms.RunSucceeded && st.Receipt == nil && ev.Unverified {
			st.Phase = Verifying // its evidence is checked when its receipt comes
		}
	}
	if st.Leases <= 0 && ev.Leases > 0 {
		st.Leases = ev.Leases
	}
	if len(st.Archived) == 0 {
		st.Archived = append([]Archived(nil), ev.Archived...)
	}
	if w := s.r.SettleWindow; w > 0 {
		st.Archived = slices.DeleteFunc(st.Archived, func(a Archived) bool { return s.now.After(a.End.Add(w)) })
	}
	s.pruneReleased()
	switch st.Phase {
	case Auctioning, Awarding, Queued:
		if st.Phase != Queued {
			st.Reasons = append(st.Reasons, RestartDetail)
		}
		st.Phase, st.Awarded = Queued, nil
		st.Backoff = s.r.QueueBackoff
		st.Due = s.now.Add(st.Backoff)
		s.arm()
	case Leased:
		if st.Lease != nil && !st.Run.Terminal() {
			s.do(Watch{Lease: *st.Lease, Since: s.now})
		}
	case Requeued:
		// Its driver's wait for the lease to settle, before the job goes
		// back to auction, stopped with the daemon: it begins again (else
		// the job stays requeued, never auctioned again).
		if st.Lease != nil {
			s.do(Requeue{Lease: *st.Lease, Run: st.Run, Fault: st.Fault, Detail: st.Detail})
		}
	}
}

// joinDetail appends more to a detail, if any.
func joinDetail(detail, more string) string {
	switch {
	case more == "":
		return detail
	case detail == "":
		return more
	}
	return detail + "; " + more
}

// settlement takes the events of a lease's settlement, which come in any
// phase, final ones included.
func (s *stepper) settlement(ev Event) {
	switch ev := ev.(type) {
	case ReceiptRecorded:
		s.receipt(ev)
	case ReceiptRefused:
		s.refused(ev)
	case Disputed:
		s.disputed(ev)
	case LateReport:
		s.lateReport(ev)
	}
}
