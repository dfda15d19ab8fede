package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
)

// The invariants, checked after every step.
const (
	invBookedTwice  = "gpu-booked-twice"   // no GPU booked twice for overlapping time
	invOverbilled   = "billed-beyond-seen" // no lease billed beyond what its renter observed
	invSettledTwice = "settled-twice"      // no lease settled twice
	invJobState     = "job-state"          // every job in one machine phase, never moving back, not live past its deadline
	invJobLost      = "job-lost"           // no posted job lost
	invLedger       = "ledger-verifies"    // every ledger verifies
	invPanic        = "no-panic"           // no panic
	// invAgree: a lease its renter settled (countersigned and recorded)
	// is not given up as disputed by its provider: the two ledgers agree.
	invAgree = "settlement-agrees"
)

// hold is a lease's hold on a provider's devices as the provider
// promised it: from its confirmation until its devices were freed.
type hold struct {
	lease      string
	devices    []int
	start, end time.Time // end: the booking's, or when its devices were freed
}

// checker holds the omniscient view the invariants are checked against:
// what each provider promised, what each renter was told it posted, and
// what each node's ledger and jobs looked like at the last step.
type checker struct {
	s        *sim
	holds    map[*node][]*hold
	fresh    []*hold // holds made this step, checked against the others
	freshOf  map[*hold]*node
	posts    map[*node][]string
	marks    map[string]jobMark // renter/job -> where it was at the last step
	led      map[*node]*ledgerView
	settled  map[string]string // node/class/lease -> where it was first settled
	disputed map[string]string // renter/receipt/lease -> the provider that disputed it
}

func newChecker(s *sim) *checker {
	return &checker{s: s, holds: map[*node][]*hold{}, freshOf: map[*hold]*node{}, posts: map[*node][]string{},
		marks: map[string]jobMark{}, led: map[*node]*ledgerView{}, settled: map[string]string{}, disputed: map[string]string{}}
}

// booked records a provider's confirmation of a lease on b's devices:
// from its start, or from now if that is later (a late award's span may
// begin in the past, on devices a lease that ended since held then; it
// cannot use them before it exists).
func (c *checker) booked(p *node, id string, b auction.Booking) {
	h := &hold{lease: id, devices: slices.Clone(b.Devices), start: maxTime(b.Start.Add(-p.skew), c.s.now), end: b.End.Add(-p.skew)}
	c.holds[p] = append(c.holds[p], h)
	c.fresh = append(c.fresh, h)
	c.freshOf[h] = p
}

// freed ends a lease's hold at the simulated instant at.
func (c *checker) freed(p *node, id string, at time.Time) {
	for _, h := range c.holds[p] {
		if h.lease == id && at.Before(h.end) {
			h.end = at
		}
	}
}

func (c *checker) posted(r *node, id string) { c.posts[r] = append(c.posts[r], id) }

func (c *checker) check() *Violation {
	for _, chk := range []func() *Violation{c.bookings, c.jobs, c.ledgers} {
		if v := chk(); v != nil {
			return v
		}
	}
	return nil
}

// final checks what must hold when the seed's time is up.
func (c *checker) final() *Violation { return c.check() }

func (c *checker) bookings() *Violation {
	defer func() { c.fresh = c.fresh[:0]; clear(c.freshOf) }()
	for _, h := range c.fresh {
		p := c.freshOf[h]
		for _, o := range c.holds[p] {
			if o == h || !o.start.Before(h.end) || !h.start.Before(o.end) {
				continue
			}
			for _, d := range h.devices {
				if slices.Contains(o.devices, d) {
					return c.s.violation(invBookedTwice, fmt.Sprintf("%s device %d: lease %s [%s, %s) and lease %s [%s, %s)", p.name, d,
						o.lease, o.start.Sub(epoch), o.end.Sub(epoch), h.lease, h.start.Sub(epoch), h.end.Sub(epoch)))
				}
			}
		}
	}
	return nil
}

// phaseRank orders a job's phases within one attempt (Job.Attempt): a
// job moves back in rank only as a new attempt (a queued job offered
// again, a requeued one auctioned again).
func phaseRank(p jobmachine.Phase) int {
	switch p {
	case jobmachine.Auctioning:
		return 0
	case jobmachine.Awarding:
		return 1
	case jobmachine.Queued:
		return 2
	case jobmachine.Leased:
		return 3
	case jobmachine.Requeued, jobmachine.Verifying:
		return 4
	case jobmachine.Finished, jobmachine.Unplaceable, jobmachine.Cancelled, jobmachine.Failed:
		return 5
	}
	return -1
}

// runRank orders a lease's run states: they never move back.
func runRank(r terms.RunState) int {
	switch {
	case r == "":
		return 0
	case r == terms.RunPending:
		return 1
	case r.Terminal():
		return 3
	}
	return 2
}

// jobMark is where a job was at the last step.
type jobMark struct {
	attempt, rank int
	phase         jobmachine.Phase
	lease         string
	run           int
}

// jobs checks every posted job's record, as its renter's machine keeps
// it: in one known phase, with a current lease exactly when the phase
// has one; never moving back within an attempt, nor out of a final phase,
// nor its lease's run state back; and no longer live once its deadline,
// its last lease's run and the renter's waits for it are past.
func (c *checker) jobs() *Violation {
	s := c.s
	for _, r := range s.nodes {
		if r.rent == nil || !r.up {
			continue
		}
		for _, id := range c.posts[r] {
			rec := r.rent.jobs[id]
			if rec == nil {
				return s.violation(invJobLost, fmt.Sprintf("%s posted job %s and no longer has it", r.name, id))
			}
			m := &rec.M
			key := r.name + "/" + id
			rk := phaseRank(m.Phase)
			if rk < 0 || m.Job.ID != id {
				return s.violation(invJobState, fmt.Sprintf("%s job %s in unknown phase %q (record of %q)", r.name, id, m.Phase, m.Job.ID))
			}
			switch m.Phase {
			case jobmachine.Auctioning, jobmachine.Awarding, jobmachine.Queued:
				if m.Lease != nil {
					return s.violation(invJobState, fmt.Sprintf("%s job %s %s with lease %s", r.name, id, m.Phase, m.Lease.ID))
				}
			case jobmachine.Leased, jobmachine.Requeued, jobmachine.Verifying:
				if m.Lease == nil {
					return s.violation(invJobState, fmt.Sprintf("%s job %s %s without a lease", r.name, id, m.Phase))
				}
			}
			now := jobMark{attempt: m.Job.Attempt, rank: rk, phase: m.Phase, run: runRank(m.Run)}
			if m.Lease != nil {
				now.lease = m.Lease.ID
			}
			if was, ok := c.marks[key]; ok {
				switch {
				case was.phase.Final() && now.phase != was.phase:
					return s.violation(invJobState, fmt.Sprintf("%s job %s left %s for %s", r.name, id, was.phase, now.phase))
				case now.attempt < was.attempt || (now.attempt == was.attempt && now.rank < was.rank):
					return s.violation(invJobState, fmt.Sprintf("%s job %s moved back from %s (attempt %d) to %s (attempt %d)",
						r.name, id, was.phase, was.attempt, now.phase, now.attempt))
				case now.lease != "" && now.lease == was.lease && now.run < was.run:
					return s.violation(invJobState, fmt.Sprintf("%s job %s lease %s moved back to run %q", r.name, id, now.lease, m.Run))
				}
			}
			c.marks[key] = now
			// Its latest start, then its run, then the renter's wait for
			// a lost lease's report, its wait for a requeued lease's
			// receipt and one more auction, and a renter's crash: by then
			// it is over.
			due := m.Deadline().Add(m.Job.Duration + lostGrace + settleWait + bidWindow + 10*awardTimeout + 4*time.Minute).Add(-r.skew)
			if m.Live() && s.now.After(due) {
				return s.violation(invJobState, fmt.Sprintf("%s job %s still %s at %s, past its deadline", r.name, id, m.Phase, s.now.Sub(epoch)))
			}
		}
	}
	return nil
}

// ledgerView is how far the checker has verified one node's ledger: the
// chain up to and including key last, whose verifier carries on from
// there.
type ledgerView struct {
	cv   ledger.ChainVerifier
	last string
}

// ledgers verifies every changed ledger with ledger.ChainVerifier, and
// checks its settlements: one receipt and one payment per lease, no
// renter's receipt billing beyond what that renter observed, and no
// provider disputing a lease its renter settled. A ledger that only grew
// past the last key verified is verified from there on; any other change
// (an entry rewritten or deleted) verifies it again from its first
// entry, as if never seen.
func (c *checker) ledgers() *Violation {
	s := c.s
	for _, n := range s.nodes {
		if n.hostile != nil {
			continue
		}
		changed := n.disk.takeLedgerChanges()
		if len(changed) == 0 {
			continue
		}
		lv := c.led[n]
		if lv == nil {
			lv = &ledgerView{}
			c.led[n] = lv
		}
		keys := changed
		if changed[0] <= lv.last {
			*lv = ledgerView{}
			keys = n.disk.keys(ledgerPrefix)
		}
		for _, k := range keys {
			raw, ok := n.disk.get(k)
			if !ok {
				continue // written and deleted again since the last step
			}
			seq, err := strconv.ParseUint(strings.TrimPrefix(k, ledgerPrefix), 10, 64)
			if err == nil {
				err = lv.cv.Next(seq, raw)
			}
			if err != nil {
				return s.violation(invLedger, fmt.Sprintf("%s: %v", n.name, err))
			}
			lv.last = k
			var e record.Entry
			if err := json.Unmarshal(raw, &e); err != nil {
				return s.violation(invLedger, fmt.Sprintf("%s entry %d: %v", n.name, seq, err))
			}
			if v := c.entry(n, k, e); v != nil {
				return v
			}
		}
	}
	return nil
}

// entry checks one verified entry of n's ledger, stored under key k, as
// it is recorded.
func (c *checker) entry(n *node, k string, e record.Entry) *Violation {
	s := c.s
	if e.Kind == record.KindDispute && n.prov != nil {
		if renter := s.byID(e.Counterparty); renter != nil {
			key := renter.name + "/receipt/" + e.LeaseID
			if at, ok := c.settled[key]; ok {
				return s.violation(invAgree, fmt.Sprintf("%s disputes lease %s, which %s settled (%s)", n.name, e.LeaseID, renter.name, at))
			}
			c.disputed[key] = n.name
		}
	}
	class := ""
	switch e.Kind {
	case record.KindReceipt:
		class = "receipt"
	case record.KindPaymentOwed, record.KindPaymentEarned:
		class = "payment"
	}
	if class == "" {
		return nil
	}
	key := n.name + "/" + class + "/" + e.LeaseID
	first, seen := c.settled[key]
	if seen && first != k {
		return s.violation(invSettledTwice, fmt.Sprintf("%s lease %s: %s at %s and again at %s", n.name, e.LeaseID, class, first, k))
	}
	c.settled[key] = k
	if seen {
		return nil // the same entry again, its ledger verified anew
	}
	if prov, ok := c.disputed[key]; ok {
		return s.violation(invAgree, fmt.Sprintf("%s disputes lease %s, which %s settled (%s)", prov, e.LeaseID, n.name, k))
	}
	// A receipt is judged once, as it is recorded, against what its
	// renter knew then (its estimate of the provider's clock moves on
	// later).
	if e.Kind == record.KindReceipt && n.rent != nil {
		return c.billed(n, e)
	}
	return nil
}

// billed checks a receipt a renter recorded against what it observed of
// the run: from the first heartbeat or report of it running to the final
// report, inside the lease, on the lease's GPUs, with a second of
// rounding.
func (c *checker) billed(r *node, e record.Entry) *Violation {
	sr, err := attest.UnmarshalReceipt(e.Data)
	if err != nil {
		return c.s.violation(invLedger, fmt.Sprintf("%s receipt entry %d: %v", r.name, e.Seq, err))
	}
	rc := sr.Receipt
	rec := r.rent.jobs[rc.JobID]
	if rec == nil || rec.M.Lease == nil || rec.M.Lease.ID != rc.LeaseID {
		return nil // the job's record is checked by job-lost
	}
	l := rec.M.Lease
	// The lease's times are its provider's clock: moved onto the renter's
	// by the clocks' true offset. A provider that lies about its clock may
	// move the renter's estimate off the truth, and gain that much (at most
	// attest.HeartbeatSkew) of time its renter saw it run.
	offset, slack := time.Duration(0), time.Duration(0)
	if p := c.s.byID(l.Provider); p != nil {
		offset = p.skew - r.skew
		est := max(-attest.HeartbeatSkew, min(attest.HeartbeatSkew, rec.ProviderClock.Ahead))
		slack = min(attest.HeartbeatSkew, (est - offset).Abs())
	}
	seen := 0.0
	if !rec.ObservedStart.IsZero() {
		from, to := maxTime(rec.ObservedStart, l.Start.Add(-offset)), minTime(rec.ObservedEnd, l.End.Add(-offset))
		if to.After(from) {
			seen = to.Sub(from).Seconds()
		}
	}
	if allowed := (seen+slack.Seconds())*l.BilledGPUs() + 1; rc.GPUSeconds > allowed {
		return c.s.violation(invOverbilled, fmt.Sprintf("%s countersigned lease %s billing %.1f GPU-seconds; it observed %.1f s on %v GPUs",
			r.name, rc.LeaseID, rc.GPUSeconds, seen, l.BilledGPUs()))
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
