package auction

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// The renter drives each call's machine (callmachine) like node/lease's
// tracker drives its jobs', modelled on etcd raft's Step/Ready/Advance:
// every event of a call (a bid, a decline, a provider not reached, a
// bidder's round trip measured, a timer, the ranking, an award's answer,
// a hedging tick, a cancel, the context's end) goes through stepLocked,
// which steps the machine under r.mu and carries out at once what needs
// no more than the lock (refuse the message, start a bidder's lookups,
// record the call's end in its status); what takes time or calls out
// (timers, ranking, awards, claims, releases, the listener) is queued
// for the call's own goroutine (drive), which carries it out in the one
// switch of carry, and feeds the results back as events.

// stepLocked steps the machine of job rj's call with ev and carries out
// its effects (r.mu held): those of the call's own goroutine are queued
// for it (drive). It returns the error of a refused message, or of an
// effect it does not know.
func (r *Renter) stepLocked(rj *renterJob, ev callmachine.Event) error {
	var effs []callmachine.Effect
	rj.call, effs = r.rules.Step(rj.call, ev, r.cfg.Now())
	var first error
	for _, e := range effs {
		if err := r.doLocked(rj, e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// step is stepLocked, taking r.mu.
func (r *Renter) step(rj *renterJob, ev callmachine.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stepLocked(rj, ev)
}

// end steps job rj's call with ev, an event that ends it, and returns
// err.
func (r *Renter) end(rj *renterJob, ev callmachine.Event, err error) error {
	if serr := r.step(rj, ev); serr != nil && err == nil {
		err = serr
	}
	return err
}

// doLocked carries out one effect of a call's machine (r.mu held), or
// queues it for the call's goroutine.
func (r *Renter) doLocked(rj *renterJob, e callmachine.Effect) error {
	switch e := e.(type) {
	case callmachine.Reject:
		return r.rejectLocked(e.Reason, errors.New(e.Detail))
	case callmachine.Lookup:
		r.lookupHoldingsLocked(rj, e.Provider)
		r.measureRTTLocked(rj, e.Provider)
	case callmachine.Close:
		rj.status.State = terms.JobAwarding
		r.queueLocked(rj, e)
	case callmachine.Finish:
		rj.status.State = e.As
		if e.Reason != "" {
			rj.status.Reasons = append(rj.status.Reasons, e.Reason)
		}
		rj.status.Lease, rj.status.Winner = e.Lease, ""
		if e.Lease != nil {
			rj.status.Winner = e.Lease.Provider
		}
		if e.As == terms.JobLeased || e.As == terms.JobUnplaceable {
			r.queueLocked(rj, e) // the listener is told
		}
	case callmachine.ArmTimer, callmachine.CheckBest, callmachine.Award, callmachine.AwardGang, callmachine.Settle,
		callmachine.NoConfirm, callmachine.Release, callmachine.Result, callmachine.ReleaseBids:
		r.queueLocked(rj, e)
	default:
		// A new effect kind the driver does not know yet: a programming
		// error, reported (and counted) rather than taken down with the
		// daemon, whose other auctions go on.
		r.counters["call_effect_unknown"]++
		return fmt.Errorf("auction: call machine effect %T not carried out", e)
	}
	return nil
}

// queueLocked hands an effect to the call's goroutine (drive) and wakes
// it (r.mu held).
func (r *Renter) queueLocked(rj *renterJob, e callmachine.Effect) {
	rj.loop = append(rj.loop, e)
	select {
	case rj.kick <- struct{}{}:
	default:
	}
}

// caller is what a call's goroutine keeps to carry out its effects.
type caller struct {
	r   *Renter
	rj  *renterJob
	job *terms.Job
	ctx context.Context
	// The window's and the quiet spell's timers, and the seq each was
	// last armed with; hedge ticks while awards are outstanding.
	window, quiet       *time.Timer
	windowC, quietC     <-chan time.Time
	windowSeq, quietSeq int
	hedge               *time.Ticker
	hedgeC              <-chan time.Time
	ranked              []terms.Ranked
	results             chan awardDone
	slots               []int    // by try: its index in the job's Attempts
	claims              []*claim // by try: its claim, nil when not sent
	stop, unplaceable   error    // the context's end, once stepped; the call's end without a lease
}

// awardDone is an award's answer.
type awardDone struct {
	try    int
	lease  terms.Lease
	result string
}

// drive runs job rj's call once it went out (Post): it carries out the
// effects queued for it, turns its timers, its awards' answers and the
// context's end into events, and returns once the call ended: nil once
// leased (hedged awards still outstanding are taken in the background,
// Wait), or why not. Awards outstanding when the call ended otherwise
// are taken first, to release their confirms.
func (r *Renter) drive(ctx context.Context, rj *renterJob, job *terms.Job) error {
	c := &caller{r: r, rj: rj, job: job, ctx: ctx}
	defer c.stopTimers()
	done, cancelled := ctx.Done(), rj.cancel
	for {
		busy, err := c.flush()
		if err != nil {
			return err
		}
		if busy {
			continue
		}
		r.mu.Lock()
		phase, inflight, end := rj.call.Phase, rj.call.Inflight, rj.call.End
		r.mu.Unlock()
		if phase == callmachine.Done {
			switch {
			case inflight == 0:
				return c.err(end)
			case end == terms.JobLeased:
				// The lease holds from now on: the awards still
				// outstanding (hedged) are taken in the background, only
				// to release their confirms.
				c.stopTimers()
				r.wg.Add(1)
				go func() {
					defer r.wg.Done()
					c.drain()
				}()
				return nil
			}
		}
		var ev callmachine.Event
		select {
		case <-rj.kick:
			continue
		case <-cancelled:
			cancelled = nil // Cancel stepped the machine: look again
			continue
		case <-done:
			done, c.stop = nil, ctx.Err()
			ev = callmachine.ContextDone{Err: ctx.Err().Error()}
		case <-c.windowC:
			ev = callmachine.TimerFired{Timer: callmachine.WindowTimer, Seq: c.windowSeq}
		case <-c.quietC:
			c.quietC = nil
			ev = callmachine.TimerFired{Timer: callmachine.QuietTimer, Seq: c.quietSeq}
		case <-c.hedgeC:
			ev = callmachine.HedgeTick{}
		case res := <-c.results:
			ev = callmachine.AwardDone{Try: res.try, Result: res.result, Lease: res.lease}
		}
		if err := r.step(rj, ev); err != nil {
			return err
		}
	}
}

// drain takes the answers of the awards still outstanding once the call
// ended.
func (c *caller) drain() {
	for {
		c.r.mu.Lock()
		n := c.rj.call.Inflight
		c.r.mu.Unlock()
		if n == 0 {
			return
		}
		res := <-c.results
		if c.r.step(c.rj, callmachine.AwardDone{Try: res.try, Result: res.result, Lease: res.lease}) != nil {
			return
		}
		if _, err := c.flush(); err != nil {
			return
		}
	}
}

// err is what Post returns for a call that ended as end.
func (c *caller) err(end terms.JobState) error {
	switch {
	case end == terms.JobLeased:
		return nil
	case end == terms.JobUnplaceable && c.unplaceable != nil:
		return c.unplaceable
	case c.stop != nil:
		return c.stop
	}
	return ErrCancelled
}

func (c *caller) stopTimers() {
	if c.window != nil {
		c.window.Stop()
	}
	if c.quiet != nil {
		c.quiet.Stop()
	}
	if c.hedge != nil {
		c.hedge.Stop()
	}
	c.windowC, c.quietC, c.hedgeC = nil, nil, nil
}

// flush carries out the effects queued for the call's goroutine, and
// reports whether there were any.
func (c *caller) flush() (bool, error) {
	c.r.mu.Lock()
	effs := c.rj.loop
	c.rj.loop = nil
	c.r.mu.Unlock()
	for _, e := range effs {
		if err := c.carry(e); err != nil {
			return true, err
		}
	}
	return len(effs) > 0, nil
}

// carry carries out one effect of the call's machine on its goroutine:
// the only place where the renter acts on those.
func (c *caller) carry(e callmachine.Effect) error {
	r, rj, job := c.r, c.rj, c.job
	switch e := e.(type) {
	case callmachine.ArmTimer:
		if e.Timer == callmachine.WindowTimer {
			c.windowSeq = e.Seq
			c.window, c.windowC = arm(c.window, e.After)
		} else {
			c.quietSeq = e.Seq
			c.quiet, c.quietC = arm(c.quiet, e.After)
		}
	case callmachine.CheckBest:
		return r.step(rj, callmachine.BestChecked{StartsNow: r.bestStartsNow(rj, job)})
	case callmachine.Close:
		c.windowC, c.quietC = nil, nil
		ranked := c.rank()
		return r.step(rj, callmachine.Ranked{Ranked: ranked, Late: r.late(ranked, r.cfg.Now())})
	case callmachine.Award:
		return c.award(e)
	case callmachine.AwardGang:
		eligible, reason, err := r.awardGang(c.ctx, rj, job, c.ranked, e.Order)
		switch {
		case eligible >= 0:
			return r.step(rj, callmachine.GangEnded{Eligible: eligible, Reason: reason})
		case err != nil && !errors.Is(err, ErrCancelled):
			c.stop = err
		}
	case callmachine.Settle:
		if e.Try < len(c.claims) {
			r.settleClaim(e.Provider, c.claims[e.Try], e.Lease)
		}
	case callmachine.NoConfirm:
		r.noConfirm(e.Provider)
		r.log.Info("award failed", "job", job.ID, "provider", e.Provider, "result", e.Result)
	case callmachine.Release:
		if r.cfg.Release != nil {
			r.cfg.Release.Release(e.Lease)
		}
	case callmachine.Result:
		if e.Try < len(c.slots) {
			r.mu.Lock()
			rj.status.Attempts[c.slots[e.Try]].Result = e.Result
			r.mu.Unlock()
		}
	case callmachine.ReleaseBids:
		r.releaseBids(job, e.Bids)
	case callmachine.Finish:
		switch {
		case e.As == terms.JobLeased && e.Lease != nil && r.cfg.Listener != nil && job.Nodes <= 1:
			// (A gang's members are told of by awardGang.)
			r.cfg.Listener.OnLease(*e.Lease, *job)
		case e.As == terms.JobUnplaceable:
			c.unplaceable = fmt.Errorf("%w: %s: %s", ErrUnplaceable, job.ID, e.Reason)
			switch {
			case e.Raced:
				c.unplaceable = fmt.Errorf("%w (%w)", c.unplaceable, ErrRaced)
			case e.Lost:
				c.unplaceable = fmt.Errorf("%w (%w)", c.unplaceable, ErrLostRace)
			}
			if r.cfg.Listener != nil {
				r.cfg.Listener.OnUnplaceable(*job, e.Reason)
			}
		}
	default:
		r.mu.Lock()
		r.counters["call_effect_unknown"]++
		r.mu.Unlock()
		return fmt.Errorf("auction: call machine effect %T not carried out", e)
	}
	return nil
}

// arm starts t (a new timer if nil) to fire after d, and returns it and
// its channel. Since Go 1.23 no stale fire survives a Reset.
func arm(t *time.Timer, d time.Duration) (*time.Timer, <-chan time.Time) {
	if t == nil {
		t = time.NewTimer(d)
	} else {
		t.Reset(d)
	}
	return t, t.C
}

// rank ranks the window's bids: what the renter's book says of their
// providers, their holdings and round trips (waiting for the lookups
// under way, each bounded), and RankAt. The job's status shows them.
func (c *caller) rank() []terms.Ranked {
	r, rj := c.r, c.rj
	r.mu.Lock()
	cands := append([]terms.Candidate(nil), rj.call.Bids...)
	r.mu.Unlock()
	for i := range cands {
		r.standing(&cands[i])
	}
	r.checkHoldings(c.ctx, rj, c.job, cands, time.Now().Add(r.cfg.HoldingsWait))
	r.fillRTTs(c.ctx, rj, cands, time.Now().Add(c.job.BidWindow))
	c.ranked = RankAt(c.job, cands, r.cfg.Now())
	c.results = make(chan awardDone, len(c.ranked))
	r.mu.Lock()
	rj.status.Bids = c.ranked
	r.mu.Unlock()
	return c.ranked
}

// award carries out Award: the try is recorded among the job's attempts
// under a new lease id; unless skipped, the bid's GPUs are claimed
// (claim; when they cannot be, Claimed comes back) and the award sent,
// its answer coming back as AwardDone. Awards outlive the context's end,
// so that their confirms are seen and released; each is bounded by
// ConfirmTimeout.
func (c *caller) award(e callmachine.Award) error {
	r, rj, job, b := c.r, c.rj, c.job, e.Bid
	leaseID := terms.NewID("lease")
	result := callmachine.Pending
	if e.Skip != "" {
		result = e.Skip
	}
	r.mu.Lock()
	slot := len(rj.status.Attempts)
	rj.status.Attempts = append(rj.status.Attempts, terms.AwardAttempt{Provider: b.Provider, LeaseID: leaseID, Result: result})
	r.mu.Unlock()
	for len(c.slots) <= e.Try {
		c.slots, c.claims = append(c.slots, -1), append(c.claims, nil)
	}
	c.slots[e.Try] = slot
	if e.Skip != "" {
		return nil
	}
	cl, ok := r.claim(b, job.BilledGPUs())
	if !ok {
		r.mu.Lock()
		rj.status.Attempts[slot].Result = callmachine.SkippedClaimed
		r.counters["award_skipped_claimed"]++
		r.mu.Unlock()
		return r.step(rj, callmachine.Claimed{Try: e.Try})
	}
	c.claims[e.Try] = cl
	if c.hedge == nil {
		c.hedge = time.NewTicker(r.cfg.HedgeAfter)
		c.hedgeC = c.hedge.C
	}
	actx, results, try := context.WithoutCancel(c.ctx), c.results, e.Try
	go func() {
		lease, result := r.award(actx, job, b, leaseID, nil)
		results <- awardDone{try: try, lease: lease, result: result}
	}()
	return nil
}

// late names the providers among the eligible ranked bids that recently
// did not confirm an award (NoConfirmPenalty): they are awarded after
// every other; the others' penalties, past, are forgotten.
func (r *Renter) late(ranked []terms.Ranked, now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var late []string
	for _, c := range ranked {
		if c.Rejected != "" {
			continue
		}
		if until, ok := r.unconfirmed[c.Bid.Provider]; ok && now.Before(until) {
			late = append(late, c.Bid.Provider)
		} else {
			delete(r.unconfirmed, c.Bid.Provider)
		}
	}
	return late
}
