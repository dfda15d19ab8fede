package callmachine

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Step applies ev, which happened at now, to st: it returns the next state
// and the effects to carry out, in order. An event that does not fit the
// call's phase (a stale timer, a bid after the window) changes nothing
// and asks for nothing but the refusal of a message that came too late; a
// call that is Done stays so.
func (r Rules) Step(st State, ev Event, now time.Time) (State, []Effect) {
	s := stepper{r: r, st: st, now: now}
	s.step(ev)
	return s.st, s.effs
}

type stepper struct {
	r    Rules
	st   State
	now  time.Time
	effs []Effect
}

func (s *stepper) do(e ...Effect) {
	if s.effs == nil {
		s.effs = make([]Effect, 0, 4) // (a bid's step asks for two or three)
	}
	s.effs = append(s.effs, e...)
}

func (s *stepper) step(ev Event) {
	st := &s.st
	switch ev := ev.(type) {
	case Opened:
		if st.Phase != "" || ev.Job.ID == "" {
			return
		}
		s.open(ev)
	case BidArrived:
		s.bid(ev.Bid)
	case DeclineArrived:
		if reason, detail := DeclineRefusal(st, ev.Decline); reason != "" {
			s.do(Reject{Reason: reason, Detail: detail})
			return
		}
		st.Decliners[ev.Decline.Provider] = true
		if ev.Busy {
			st.Busy[ev.Decline.Provider] = true
		}
		if st.Declines == nil {
			st.Declines = map[string]int{}
		}
		st.Declines[ev.Decline.Kind]++
		s.answered(ev.Decline.Provider)
	case Unreached:
		if st.Phase == Collecting {
			s.answered(ev.Provider)
		}
	case Measured:
		if st.Phase == Collecting {
			s.spell()
		}
	case TimerFired:
		s.timer(ev)
	case BestChecked:
		if st.Phase == Collecting && ev.StartsNow {
			s.close()
		}
	case Ranked:
		if st.Phase == Awarding && !st.Ranked {
			s.ranked(ev)
		}
	case AwardDone:
		s.done(ev)
	case Claimed:
		s.claimed(ev)
	case HedgeTick:
		if st.Phase == Awarding && st.Ranked {
			s.hedge()
		}
	case Leased:
		if st.Phase == Awarding && st.Ranked && st.Nodes > 1 {
			s.leased(ev.Lease)
		}
	case GangAwarded:
		if st.Nodes > 1 {
			s.gangAwarded(ev)
		}
	case GangEnded:
		if st.Phase == Awarding && st.Ranked && st.Nodes > 1 {
			s.gangEnded(ev)
		}
	case Failed:
		if st.Phase == Collecting || st.Phase == Awarding {
			s.finish(terms.JobFailed, ev.Reason)
		}
	case Cancelled:
		if st.Phase == Collecting || st.Phase == Awarding {
			s.finish(terms.JobCancelled, "cancelled")
		}
	case ContextDone:
		if st.Phase == Collecting || st.Phase == Awarding {
			s.finish(terms.JobCancelled, "context: "+ev.Err)
		}
	}
}

// open starts the call: its window runs from now.
func (s *stepper) open(ev Opened) {
	j := &ev.Job
	busy := ev.Busy
	if busy == nil {
		busy = map[string]bool{}
	}
	s.st = State{Phase: Collecting, JobID: j.ID, Attempt: j.Attempt, Tier: j.Tier, Nodes: j.Nodes, Window: j.BidWindow,
		Nonces: map[string]bool{}, Bidders: map[string]bool{}, Decliners: map[string]bool{}, Busy: busy,
		Unsampled: j.BidSample <= 0 || j.BidSample >= 1}
	if len(ev.Expected) > 0 {
		s.st.Awaited = make(map[string]bool, len(ev.Expected))
		for _, p := range ev.Expected {
			s.st.Awaited[p] = true
		}
		s.st.Expected = len(ev.Expected)
	}
	s.st.OpenedAt, s.st.Reach = s.now, ev.Reach
	s.arm(WindowTimer, j.BidWindow)
}

// bid takes a bid for an open window from a provider that has not bid
// yet, with a fresh nonce and not expired.
func (s *stepper) bid(b terms.Bid) {
	st := &s.st
	switch {
	case b.Attempt != st.Attempt:
		s.do(Reject{Reason: "wrong_attempt", Detail: fmt.Sprintf("attempt %d, current %d", b.Attempt, st.Attempt)})
		return
	case !st.Open():
		s.do(Reject{Reason: "window_closed", Detail: "job " + b.JobID})
		return
	case b.Nonce == "" || st.Nonces[b.Nonce]:
		s.do(Reject{Reason: "replayed_nonce", Detail: fmt.Sprintf("nonce %q", b.Nonce)})
		return
	case !b.ExpiresAt.IsZero() && !s.now.Before(b.ExpiresAt):
		s.do(Reject{Reason: "expired", Detail: "expired at " + b.ExpiresAt.Format(time.RFC3339)})
		return
	case st.Bidders[b.Provider]:
		st.Nonces[b.Nonce] = true
		s.do(Reject{Reason: "duplicate_provider", Detail: "provider " + b.Provider})
		return
	}
	st.Nonces[b.Nonce] = true
	st.Bidders[b.Provider] = true
	st.Bids = append(st.Bids, terms.Candidate{Bid: b})
	s.do(Lookup{Provider: b.Provider})
	if s.answered(b.Provider) {
		return
	}
	s.spell()
}

// DeclineRefusal is why a decline is refused for call st (its counter
// key and detail), or "" when it is taken: a decline counts for the
// call's attempt while its window is open, once per provider that has
// neither bid nor declined.
func DeclineRefusal(st *State, d terms.Decline) (reason, detail string) {
	switch {
	case d.Attempt != st.Attempt || !st.Open():
		return "window_closed", "job " + d.JobID
	case st.Decliners[d.Provider] || st.Bidders[d.Provider]:
		return "duplicate_provider", "provider " + d.Provider
	}
	return "", ""
}

// answered notes that provider answered the call (or will not): the last
// expected answer closes the window, unless the call is unsampled and no
// bid starts now: then a provider the renter does not know yet (one that
// joined since its last discovery) may answer with a sooner start, and
// the job, which would wait for its start anyway, waits for the window.
// (A renter that knew 4 of 10 providers as a burst began booked its
// first half-second deep on those 4, closing each window at their
// answers, while the other 6 had GPUs free.) It reports whether it
// closed the window.
func (s *stepper) answered(provider string) bool {
	st := &s.st
	if !st.Awaited[provider] {
		return false
	}
	delete(st.Awaited, provider)
	if len(st.Awaited) == 0 && st.Phase == Collecting {
		if st.Unsampled && !s.anyStartsNow() {
			return false
		}
		s.close()
		return true
	}
	return false
}

// anyStartsNow reports whether a bid taken starts now (StartsNow).
func (s *stepper) anyStartsNow() bool {
	for _, c := range s.st.Bids {
		if StartsNow(c.Bid, s.now) {
			return true
		}
	}
	return false
}

// spell begins a quiet spell at a bid (or a bidder's lookup's end): a
// gold job's window may close at once if its best bid starts now, any
// other's once the spell passes.
func (s *stepper) spell() {
	if s.r.QuietClose < 0 {
		return
	}
	if s.st.Tier == terms.Gold {
		s.do(CheckBest{})
	}
	s.arm(QuietTimer, s.r.QuietClose)
}

// timer takes a fire of the window's timer (the window ends: extended
// once when no bid came) or of the quiet spell's (the window closes if
// most expected providers answered and the best bid starts now).
func (s *stepper) timer(ev TimerFired) {
	st := &s.st
	if st.Phase != Collecting {
		return
	}
	switch {
	case ev.Timer == WindowTimer && ev.Seq == st.WindowSeq:
		if len(st.Bids) == 0 && !st.Extended {
			st.Extended = true
			s.arm(WindowTimer, st.Window)
			return
		}
		s.close()
	case ev.Timer == QuietTimer && ev.Seq == st.QuietSeq:
		if !st.MostAnswered() {
			return
		}
		if wait := s.untilDue(); wait > 0 {
			s.arm(QuietTimer, wait)
			return
		}
		s.do(CheckBest{})
	}
}

// untilDue is how long a quiet spell still waits for the awaited
// providers whose round trip the renter knows: one's spell counts from
// its answer's due time, a round trip after the window opened. (A renter
// whose near providers answered at once closed each window 150 ms later,
// before a cheaper provider 160 ms away could answer: it never won.)
func (s *stepper) untilDue() time.Duration {
	st := &s.st
	if len(st.Reach) == 0 {
		return 0
	}
	var wait time.Duration
	for p := range st.Awaited {
		if rtt, ok := st.Reach[p]; ok {
			wait = max(wait, st.OpenedAt.Add(rtt+s.r.QuietClose).Sub(s.now))
		}
	}
	return wait
}

func (s *stepper) arm(t Timer, after time.Duration) {
	seq := &s.st.WindowSeq
	if t == QuietTimer {
		seq = &s.st.QuietSeq
	}
	*seq++
	s.do(ArmTimer{Timer: t, Seq: *seq, After: after})
}

func (s *stepper) close() {
	s.st.Phase = Awarding
	s.do(Close{})
}

func (s *stepper) leased(l terms.Lease) {
	s.st.Phase, s.st.End, s.st.Reason = Done, terms.JobLeased, ""
	s.do(Finish{As: terms.JobLeased, Lease: &l})
	s.releaseBids()
}

func (s *stepper) finish(as terms.JobState, reason string) {
	s.st.Phase, s.st.End, s.st.Reason = Done, as, reason
	s.do(Finish{As: as, Reason: reason})
	s.releaseBids()
}
