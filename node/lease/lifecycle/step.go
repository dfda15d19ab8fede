package lifecycle

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Step applies ev, which happened at now, to st: it returns the next state
// and the effects to carry out, in order. An event that does not fit the
// lease's phase (late, duplicated, or hostile) changes nothing and asks
// for nothing.
func (r Rules) Step(st Lease, ev Event, now time.Time) (Lease, []Effect) {
	s := stepper{r: r, st: st, now: now}
	s.step(ev)
	return s.st, s.effs
}

type stepper struct {
	r    Rules
	st   Lease
	now  time.Time
	effs []Effect
}

func (s *stepper) do(e ...Effect) { s.effs = append(s.effs, e...) }

func (s *stepper) step(ev Event) {
	st := &s.st
	if st.Phase == "" {
		switch ev := ev.(type) {
		case Confirmed:
			s.confirm(ev)
		case Restarted:
			if st.Lease.ID != "" {
				s.restarted(ev) // a record from before phases were stored
			}
		}
		return
	}
	if st.Phase.Final() {
		return // nothing after settled, disputed or abandoned
	}
	switch ev := ev.(type) {
	case Moved:
		if st.Moves() && ev.Lease.ID == st.Lease.ID {
			if st.Told == nil {
				told := st.Lease
				st.Told = &told
			}
			st.Lease = ev.Lease
			st.Lease.State = terms.RunPending
			s.do(Count{"provider.lease_moved"}, Persist{}, AnnounceMove{Lease: st.Lease})
		}
	case MoveTold:
		if st.Phase == Waiting && st.Told != nil {
			if ev.Lease.Start.Equal(st.Lease.Start) {
				st.Told = nil
			} else {
				told := ev.Lease
				st.Told = &told
			}
			s.arm(st.Lease.Start)
		}
	case MoveUntold:
		if st.Phase == Waiting && st.Told != nil {
			// A renter that does not know of the move would refuse the
			// lease's heartbeats and report before its old start: the
			// lease is not run. It keeps the lease the renter knows, so
			// its report says it ended ahead of that start, and the job
			// goes back to auction.
			st.Lease, st.Told = *st.Told, nil
			s.do(Count{"provider.move_untold"})
			s.stop(Stop{As: terms.RunFailed, Detail: "renter not told of the lease's move earlier: " + ev.Err})
		}
	case TimerDue:
		s.timer()
	case StopRequested:
		if Stop(ev).As.Terminal() {
			s.stop(Stop(ev))
		}
	case Keep:
		if st.Phase == Waiting && st.Stop == nil && st.Lease.Start.After(s.now) {
			st.Phase, st.Due = Parked, time.Time{}
			s.do(Park{})
		}
	case Prepared:
		if st.Phase == Preparing {
			if s.over() {
				return // prepared after its end (a slow host)
			}
			st.Phase = Starting
			s.do(StartExecutor{})
		}
	case ExecStarted:
		if st.Phase == Starting {
			// The run (and its bill) starts once the executor started
			// it: what preparing took was not billed. Started is when
			// its start returned, not when this step came (later on a
			// busy host: a short job could have ended meanwhile, and
			// been billed nothing).
			started := s.now
			if !ev.At.IsZero() && ev.At.Before(started) {
				started = ev.At
			}
			st.Run, st.Started, st.Backend, st.Phase = terms.RunRunning, started, ev.Backend, Running
			s.do(Persist{}, Notify{})
			if st.Stop != nil {
				st.Phase = Stopping
				s.do(StopExecutor{Grace: s.r.Grace})
			}
		}
	case Failed:
		if st.Phase != Parked && !st.Run.Terminal() {
			s.end(ev.Exit)
		}
	case Exited:
		if st.Phase == Running || st.Phase == Stopping {
			e := ev.Exit
			st.Exit, st.Phase = &e, Collecting
			if st.StoppedEarly(e) {
				// The job had its grace to save its state: the renter
				// holds it before it hears of the end (and requeues).
				s.do(Snapshot{})
			}
			s.do(CollectOutputs{})
		}
	case OutputsCollected:
		if st.Phase == Collecting && st.Exit != nil {
			s.end(*st.Exit)
		}
	case ReportDelivered:
		if st.Phase == Reporting {
			if st.EndedAhead() {
				// Reported: the renter requeues it; no time to settle.
				s.final(Settled)
				return
			}
			if s.expired() {
				s.abandon() // no receipt goes after the window
				return
			}
			st.Phase = Receipting
			start, end := ReceiptSpan(st.Lease, st.Started, st.Ended)
			s.do(SendReceipt{Start: start, End: end})
		}
	case ReportFailed:
		if st.Phase == Reporting {
			s.retry()
		}
	case ReportReleased:
		if st.Phase == Reporting {
			s.released()
		}
	case ReceiptCountersigned:
		if st.Phase == Receipting {
			s.final(Settled)
		}
	case ReceiptRefused:
		if st.Phase == Receipting {
			s.do(Count{"provider.settle_refused"})
			if st.Refusals++; s.r.MaxRefusals > 0 && st.Refusals >= s.r.MaxRefusals {
				st.Dispute = fmt.Sprintf("receipt refused %d times by the renter: %s", st.Refusals, ev.Err)
				s.do(Count{"provider.settle_disputed"}, RecordDispute{Reason: st.Dispute})
				s.final(Disputed)
				return
			}
			s.do(Persist{}) // its refusals count across a restart
			s.retry()
		}
	case ReceiptFailed:
		if st.Phase == Receipting {
			s.retry()
		}
	case Restarted:
		s.restarted(ev)
	case Rebooked:
		if st.Phase == Waiting && st.Due.IsZero() {
			s.do(Count{"provider.reservation_restored"})
			s.arm(st.Lease.Start)
		}
	case RebookFailed:
		if st.Phase == Waiting && st.Due.IsZero() {
			s.interrupted(time.Time{})
		}
	}
}

// ReleasedDispute is the dispute of a lease whose job ran on the provider
// while its renter says it had released it.
const ReleasedDispute = "released by its renter, but the job ran on the provider"

// released takes the renter's word that it released the lease: retrying
// the report would only hear it again, so the settlement ends now. A lease
// that never ran has nothing to bill and is settled. One whose job ran
// (the release reached the provider late, or the renter says "released"
// to avoid paying) is not settled as a silent zero: it is disputed, so the
// provider's ledger shows the unpaid run.
func (s *stepper) released() {
	st := &s.st
	s.do(Count{"provider.settle_released"})
	if st.Started.IsZero() || !st.Ended.After(st.Started) {
		s.final(Settled)
		return
	}
	st.Dispute = ReleasedDispute
	s.do(Count{"provider.settle_disputed"}, RecordDispute{Reason: st.Dispute})
	s.final(Disputed)
}

// confirm starts the machine for a confirmed lease.
func (s *stepper) confirm(c Confirmed) {
	l := c.Lease
	if l.ID == "" || !l.End.After(l.Start) {
		return
	}
	l.State = terms.RunPending
	s.st = Lease{Lease: l, Run: terms.RunPending, Phase: Waiting, Terms: TermsOf(c.Job)}
	s.do(Persist{})
	s.arm(l.Start)
}

func (s *stepper) arm(at time.Time) {
	s.st.Due = at
	s.do(ArmTimer{At: at})
}

// timer takes a due timer: the start of a waiting lease, or a settlement
// retry. An early or stale one is armed again for what is due.
func (s *stepper) timer() {
	st := &s.st
	switch st.Phase {
	case Waiting:
		if st.Told != nil || st.Due.IsZero() {
			return // its move is being told, or it is being booked again
		}
		if s.now.Before(st.Lease.Start) {
			s.arm(st.Lease.Start)
			return
		}
		st.Due = time.Time{}
		if s.over() {
			// Taken up after its end (a slow host or store; the auction
			// confirms no lease that late, terms.Lease.Late).
			return
		}
		// Heartbeats go from the lease's start (preparing until the job
		// starts) until its final report is ready.
		st.Phase = Preparing
		s.do(StartHeartbeats{}, Prepare{})
	case Retrying:
		if s.now.Before(st.Due) {
			s.arm(st.Due)
			return
		}
		st.Due = time.Time{}
		if s.expired() {
			s.abandon()
			return
		}
		st.Phase = Reporting
		s.do(SendReport{})
	}
}

// over ends, unstarted, a lease whose job is about to start when its end
// has passed, and reports whether it did. Started now, the job would run
// on devices the calendar has given to the next lease (and be stopped at
// once, expired, as if the job were at fault). It is not run; the
// lateness is the provider's, and its renter requeues the job.
func (s *stepper) over() bool {
	st := &s.st
	if s.now.Before(st.Lease.End) {
		return false
	}
	s.do(Count{"provider.lease_begun_late"})
	s.end(Exit{Code: -1, Ended: s.now, Err: fmt.Sprintf("lease was over (its end %s passed by %s) before the provider started it",
		st.Lease.End.Format(time.RFC3339Nano), s.now.Sub(st.Lease.End).Round(time.Millisecond))})
	return true
}

// stop takes a stop request: the first one counts.
func (s *stepper) stop(stop Stop) {
	st := &s.st
	if st.Stop != nil || st.Run.Terminal() {
		return
	}
	switch st.Phase {
	case Waiting:
		// Stopped ahead of its start (evicted for gold, released, its
		// move untold): it never ran, and its report carries no start.
		st.Stop = &stop
		st.Due = time.Time{}
		s.end(Exit{Code: -1, Ended: s.now})
	case Preparing:
		st.Stop = &stop
		s.do(CancelPrepare{})
	case Starting:
		st.Stop = &stop // stopped as soon as it started
	case Running:
		st.Stop, st.Phase = &stop, Stopping
		s.do(StopExecutor{Grace: s.r.Grace})
	}
	// Parked: kept for the next start; Collecting: the job already
	// exited, and ends as it did.
}

// end records how the lease's run ended and starts its settlement.
func (s *stepper) end(e Exit) {
	st := &s.st
	state, detail, fault := st.outcome(e)
	st.Run, st.Detail, st.Fault = state, detail, fault
	if st.Started.IsZero() {
		st.Started = e.Started
	}
	st.Ended = e.Ended
	if st.Ended.IsZero() {
		st.Ended = s.now
	}
	if st.Ended.Before(st.Started) {
		// It ended before the executor's start returned (milliseconds of
		// work on a busy host): its run, and bill, is empty from the
		// recorded start. An end before the start would be refused.
		st.Ended = st.Started
	}
	if e.Started.IsZero() && !(st.Started.IsZero() && st.Ended.Before(st.Lease.Start)) {
		// Never started (and not stopped ahead of its start): no time
		// used.
		st.Started = st.Ended
	}
	if e.Code >= 0 && (e.Reason != "" || e.Err == "") && !e.Started.IsZero() {
		code := e.Code
		st.ExitCode = &code
	}
	st.Exit, st.Due, st.Phase = nil, time.Time{}, Reporting
	s.do(Release{}, Persist{}, Free{}, SendReport{})
}

// retry takes a failed settlement attempt: tried again after a doubling
// wait, until the settlement window closes.
func (s *stepper) retry() {
	st := &s.st
	if s.expired() {
		s.abandon()
		return
	}
	if st.Failures++; st.Failures == 1 || st.Wait <= 0 {
		st.Wait = s.r.SettleRetry
	} else {
		s.do(Count{"provider.settle_retry"})
		st.Wait = min(2*st.Wait, max(s.r.SettleRetryMax, s.r.SettleRetry))
	}
	st.Phase = Retrying
	s.arm(s.now.Add(st.Wait))
}

// expired reports whether the lease ended too long ago to go on trying to
// settle it.
func (s *stepper) expired() bool { return s.now.After(s.st.Lease.End.Add(s.r.SettleWindow)) }

func (s *stepper) abandon() {
	s.do(Count{"provider.settle_abandoned"})
	s.final(Abandoned)
}

// final ends the lease's settlement in phase p.
func (s *stepper) final(p Phase) {
	st := &s.st
	st.Phase, st.Due, st.Failures, st.Wait = p, time.Time{}, 0, 0
	s.do(Persist{})
	if st.Terms.NoPersist {
		s.do(Purge{})
	}
}

// restarted takes up a lease the daemon had persisted before it stopped.
func (s *stepper) restarted(ev Restarted) {
	st := &s.st
	st.Stop, st.Told, st.Exit, st.Due, st.Failures, st.Wait = nil, nil, nil, time.Time{}, 0, 0
	switch {
	case st.Run == terms.RunPending && st.Lease.Start.After(s.now):
		// Still ahead: booked again (the calendar lives in memory), then
		// waited for.
		st.Phase = Waiting
		s.do(Rebook{})
	case !st.Run.Terminal():
		s.interrupted(ev.LastBeat)
	case st.Dispute != "":
		st.Phase = Disputed
	default:
		// Wait for the network before telling the renter.
		st.Phase = Retrying
		s.arm(s.now.Add(s.r.RecoverDelay))
	}
}

// interrupted reports a lease the daemon's restart cut short failed, the
// provider's fault, ended at its last heartbeat.
func (s *stepper) interrupted(lastBeat time.Time) {
	st := &s.st
	was := st.Run
	st.Run, st.Fault = terms.RunFailed, terms.FaultProvider
	st.Detail = fmt.Sprintf("provider daemon restarted while the job was %s; the job was stopped", was)
	st.Ended = lastBeat
	// (its last heartbeat may precede the start: one sent while the
	// job's inputs were prepared)
	if st.Ended.IsZero() || st.Started.IsZero() || st.Ended.Before(st.Started) {
		st.Ended = st.Started
	}
	st.Phase = Retrying
	s.do(KillOrphan{}, Persist{})
	s.arm(s.now.Add(s.r.RecoverDelay))
}
