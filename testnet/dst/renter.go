package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
)

// Renter timings.
const (
	bidWindow    = time.Second
	awardTimeout = 3 * time.Second
	retryAuction = 30 * time.Second // a queued job's first wait before it is offered again
	startWithin  = 30 * time.Minute // a job's deadline: the latest it may start
	// lostGrace is how long after its lease's end a renter waits for the
	// final report before it gives the lease up as lost.
	lostGrace = 10 * time.Minute
	// settleWait is how long a requeued job waits for its lease's receipt
	// before it goes back to auction without it (node/lease's SettleWait).
	settleWait = time.Minute
	// rebookAhead is node/lease's RebookAhead, scaled to a simulated
	// run: a pending lease that starts more than this after one of the
	// renter's leases ended is offered again for a start rebookAhead/2
	// sooner elsewhere (late binding).
	rebookAhead = 2 * time.Minute
	// evidenceFails is the odds that a succeeded run's evidence (its log)
	// does not check out.
	evidenceFails = 0.05
)

// jobRules are the renter's job rules, the daemon's defaults scaled to a
// simulated run, and its settlement's matching the providers' (rules).
var jobRules = jobmachine.Rules{
	QueueBackoff: retryAuction, QueueBackoffMax: 4 * retryAuction,
	MaxRefusals: rules.MaxRefusals, SettleWindow: rules.SettleWindow, MaxReleased: 64,
}

// jobRecord is a renter's persisted record of one job: the production job
// machine's record (jobmachine.Record, every decision about the job's
// state), and beside it the facts the driver keeps of the job's current
// lease, as node/lease's Tracker keeps them beside its machine.
type jobRecord struct {
	M jobmachine.Record `json:"machine"`
	// Awards counts the awards the job's auctions sent: the next lease's
	// id (kept on disk, so that no id is awarded twice).
	Awards        int       `json:"awards"`
	ObservedStart time.Time `json:"observed_start,omitzero"`
	ObservedEnd   time.Time `json:"observed_end,omitzero"`
	// Countersigned is the current lease's countersigned receipt, once
	// settled: a retry is answered with it.
	Countersigned []byte `json:"countersigned,omitempty"`
	// ProviderClock is the provider's clock as measured from its lease
	// events' times (Tracker's JobView.ProviderClock).
	ProviderClock attest.ClockOffset `json:"provider_clock,omitzero"`
	// Providers are the providers of the job's confirmed leases, by lease
	// id: whose receipt of an archived lease is its provider's.
	Providers map[string]string `json:"providers,omitempty"`
}

// jobRun is what the renter holds in memory for a job: its auction in
// flight (calls, bids, the award awaiting its answer) and its timers.
// None of it survives a crash.
type jobRun struct {
	gen      int       // generation of the auction running (a new one, or a cancel, ends it)
	job      terms.Job // the job as its running auction offers it
	bids     []terms.Candidate
	pending  *pendingAward
	offers   int
	timer    int  // generation of the armed timer (ArmTimer replaces it)
	checking bool // a check of the current lease's evidence runs
}

// pendingAward is an award sent and not answered yet, with the bids left
// to try after it.
type pendingAward struct {
	lease terms.Lease
	rest  []terms.Ranked
}

// renter posts jobs and runs them with the production job machine
// (jobmachine.Rules.Step), as provider.go runs leases with the lease
// machine: every change of a job's state is the machine's, and the renter
// carries out its effects (auctions, timers, watches, releases,
// requeues, evidence checks, disputes) and feeds their results back as
// events. What the machine leaves to its driver stays here: the bids, their
// ranking (auction.RankAt), the awards, the checks of providers' reports
// and the countersigning of receipts.
type renter struct {
	n       *node
	jobs    map[string]*jobRecord
	runs    map[string]*jobRun
	byLease map[string]string // lease id -> job id
	// rebooking is the rebook auction running (one at a time; lost in a
	// crash, as the daemon's is).
	rebooking *rebookRun
}

// rebookRun is a rebook auction (node/lease's rebook.go): the job's next
// attempt, bounded to start by its deadline, its current provider left
// out; the award sent, not answered yet.
type rebookRun struct {
	job     terms.Job
	bids    []terms.Candidate
	pending *terms.Lease
}

func newRenter(n *node) *renter {
	return &renter{n: n, jobs: map[string]*jobRecord{}, runs: map[string]*jobRun{}, byLease: map[string]string{}}
}

// restartRenter loads the renter's jobs from disk and feeds each to its
// machine as Restarted: a job in auction is queued for another offer, a
// leased one's lease is watched again.
func restartRenter(n *node) *renter {
	r := newRenter(n)
	var ids []string
	for _, k := range n.disk.keys("job/") {
		raw, _ := n.disk.get(k)
		var rec jobRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			panic(fmt.Sprintf("renter %s: job record %s: %v", n.name, k, err))
		}
		id := rec.M.Job.ID
		r.jobs[id] = &rec
		r.runs[id] = &jobRun{}
		if rec.M.Lease != nil {
			r.byLease[rec.M.Lease.ID] = id
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		rec := r.jobs[id]
		r.step(rec, jobmachine.Restarted{State: rec.M.Phase.State(), Leases: rec.M.Leases})
	}
	return r
}

func (r *renter) save(rec *jobRecord) { r.n.disk.putJSON("job/"+rec.M.Job.ID, rec) }

// step steps job rec's machine with ev and carries out its effects, in
// order. The facts kept of a lease start anew with a new current lease.
func (r *renter) step(rec *jobRecord, ev jobmachine.Event) {
	s := r.n.s
	before := rec.M
	next, effs := s.cfg.Rules.StepJob(jobRules, rec.M, ev, r.n.now())
	rec.M = next
	if before.Phase != next.Phase || before.Run != next.Run {
		s.logf("%s job %s: %T: %s/%s -> %s/%s", r.n.name, next.Job.ID, ev, before.Phase, before.Run, next.Phase, next.Run)
	}
	if l := next.Lease; l != nil && (before.Lease == nil || before.Lease.ID != l.ID) {
		rec.ObservedStart, rec.ObservedEnd, rec.ProviderClock, rec.Countersigned = time.Time{}, time.Time{}, attest.ClockOffset{}, nil
		if rec.Providers == nil {
			rec.Providers = map[string]string{}
		}
		rec.Providers[l.ID] = l.Provider
		r.byLease[l.ID] = next.Job.ID
	}
	if next.Run.Terminal() && !before.Run.Terminal() && before.Lease != nil && next.Lease != nil && before.Lease.ID == next.Lease.ID {
		if next.Run == terms.RunSucceeded {
			s.stats.Finished++
		} else {
			s.stats.Failed++
		}
	}
	if _, rb := ev.(jobmachine.Rebooked); rb && next.Lease != nil && before.Lease != nil && next.Lease.ID != before.Lease.ID {
		s.stats.Rebooked++
	}
	if next.Phase != before.Phase {
		switch {
		case next.Phase == jobmachine.Unplaceable:
			s.stats.Unplaceable++
		case next.Phase == jobmachine.Cancelled, next.Phase.Final() && next.Run == terms.RunCancelled:
			s.stats.Cancelled++
		case before.Phase == jobmachine.Requeued && next.Phase == jobmachine.Auctioning:
			s.stats.Requeued++
		}
	}
	for _, e := range effs {
		r.do(rec, e)
	}
}

// do carries out one effect of job rec's machine.
func (r *renter) do(rec *jobRecord, e jobmachine.Effect) {
	s, n, id := r.n.s, r.n, rec.M.Job.ID
	jr := r.runs[id]
	switch e := e.(type) {
	case jobmachine.Persist:
		r.save(rec)
	case jobmachine.StartAuction:
		r.auction(id, e.Job)
	case jobmachine.CancelAuction:
		jr.gen++ // its close finds it gone; an award in flight is released when answered, or timed out
		jr.bids = nil
	case jobmachine.GiveUp:
		s.logf("%s job %s given up: %s", n.name, id, e.Reason)
	case jobmachine.ArmTimer:
		jr.timer++
		gen := jr.timer
		n.atLocal(e.At, "job timer "+id, func() {
			if jr.timer == gen && r.runs[id] == jr {
				r.step(rec, jobmachine.TimerDue{})
			}
		})
	case jobmachine.Watch:
		r.watch(rec, e.Lease)
	case jobmachine.StopLease:
		r.sendCancel(e.Lease)
	case jobmachine.Release:
		r.sendCancel(e.Lease)
	case jobmachine.Requeue:
		r.requeue(rec, e)
	case jobmachine.CheckEvidence:
		r.checkEvidence(rec, e.Lease)
	case jobmachine.RecordDispute:
		s.stats.Disputed++
		data, _ := json.Marshal(struct {
			Reason string `json:"reason"`
		}{e.Reason})
		n.led.append(record.Entry{Kind: record.KindDispute, LeaseID: e.Lease.ID, JobID: id, Counterparty: e.Lease.Provider, Data: data})
		r.step(rec, jobmachine.Disputed{LeaseID: e.Lease.ID, Reason: e.Reason})
	case jobmachine.StopGang:
		// No gang jobs in the simulation.
	default:
		panic(fmt.Sprintf("renter %s: effect %T not carried out", n.name, e))
	}
}

// post makes a job and feeds it to its machine (Posted): it is posted
// once its record is on disk, and from then on it may not be lost.
func (r *renter) post(id string) {
	s, now := r.n.s, r.n.now()
	job := terms.Job{
		ID: id, Owner: r.n.id, Tier: terms.Silver, MaxPrice: 10, GPUCount: 1 + s.rng.IntN(2),
		Duration: s.between(time.Minute, 15*time.Minute).Round(time.Second), Deadline: now.Add(startWithin),
		BidWindow: bidWindow, Attempt: 1,
	}
	rec := &jobRecord{}
	r.jobs[id] = rec
	r.runs[id] = &jobRun{}
	s.chk.posted(r.n, id)
	s.stats.Jobs++
	r.step(rec, jobmachine.Posted{Job: job})
}

// cancel is the job's poster cancelling it.
func (r *renter) cancel(id string) {
	if rec := r.jobs[id]; rec != nil {
		r.step(rec, jobmachine.Cancel{})
	}
}

// auction carries out StartAuction: it calls every provider for job and
// decides on their bids after the bid window.
func (r *renter) auction(id string, job terms.Job) {
	jr := r.runs[id]
	jr.gen++
	jr.job, jr.bids = job, nil
	jr.offers++
	gen := jr.gen
	r.call(job, "call ", "")
	r.n.after(bidWindow, "close auction "+id, func() {
		if jr.gen == gen && r.runs[id] == jr {
			r.decide(id)
		}
	})
}

// call sends job's call to every provider (and the hostile peer) but
// except, labelled what+job.ID.
func (r *renter) call(job terms.Job, what, except string) {
	from := r.n
	for _, to := range r.n.s.nodes {
		if (to.prov == nil && to.hostile == nil) || to.id == except {
			continue
		}
		r.n.s.net.send(r.n, to, what+job.ID, func() { to.onCall(job, from) })
	}
}

// eligible is job's bids as auction.RankAt orders them, the rejected
// ones left out.
func (r *renter) eligible(job *terms.Job, bids []terms.Candidate) []terms.Ranked {
	var ok []terms.Ranked
	for _, rk := range auction.RankAt(job, bids, r.n.now()) {
		if rk.Rejected == "" {
			ok = append(ok, rk)
		}
	}
	return ok
}

// nextLease is the lease an award of bid b for job (rec's) offers, under
// the job's next lease id, counted on disk first so that no id is awarded
// twice.
func (r *renter) nextLease(rec *jobRecord, job terms.Job, b terms.Bid) terms.Lease {
	rec.Awards++
	r.save(rec) // a fact of the driver's: no lease id awarded twice
	return terms.Lease{
		ID: fmt.Sprintf("%s/a%d", job.ID, rec.Awards), JobID: job.ID, Attempt: job.Attempt, Renter: r.n.id, Provider: b.Provider,
		Price: b.Price, Start: b.Start, End: b.End, GPUCount: job.GPUCount, Tier: job.Tier, State: terms.RunPending,
	}
}

// inAuction reports whether job id's auction runs.
func (r *renter) inAuction(id string) bool {
	rec := r.jobs[id]
	return rec != nil && (rec.M.Phase == jobmachine.Auctioning || rec.M.Phase == jobmachine.Awarding)
}

// onBid keeps a bid for the job's open auction.
func (r *renter) onBid(b terms.Bid) {
	if rb := r.rebooking; rb != nil && rb.job.ID == b.JobID && rb.job.Attempt == b.Attempt {
		if rb.pending == nil {
			rb.bids = append(rb.bids, terms.Candidate{Bid: b, Reliability: 1})
		}
		return
	}
	jr := r.runs[b.JobID]
	if jr == nil || !r.inAuction(b.JobID) || jr.pending != nil {
		return
	}
	jr.bids = append(jr.bids, terms.Candidate{Bid: b, Reliability: 1})
}

// decide ranks the bids (auction.RankAt) and awards the best.
func (r *renter) decide(id string) {
	jr := r.runs[id]
	if !r.inAuction(id) {
		return
	}
	ok := r.eligible(&jr.job, jr.bids)
	jr.bids = nil
	r.award(id, jr.gen, ok)
}

// award sends the award of the best bid left; with none, the auction
// ended without a lease (NoLease), and the machine says what comes next.
func (r *renter) award(id string, gen int, ranked []terms.Ranked) {
	rec, jr := r.jobs[id], r.runs[id]
	if jr.gen != gen || !r.inAuction(id) {
		return
	}
	if len(ranked) == 0 {
		r.step(rec, jobmachine.NoLease{Reason: "no acceptable bid", Retry: true, Offers: jr.offers})
		return
	}
	b := ranked[0].Bid
	l := r.nextLease(rec, jr.job, b)
	jr.pending = &pendingAward{lease: l, rest: ranked[1:]}
	r.step(rec, jobmachine.Awarded{LeaseID: l.ID})
	to, job := r.n.s.byID(b.Provider), jr.job
	r.n.s.net.send(r.n, to, "award "+l.ID, func() { to.onAward(l, job, r.n) })
	r.n.after(awardTimeout, "award timeout "+l.ID, func() {
		if p := jr.pending; p != nil && p.lease.ID == l.ID && r.runs[id] == jr {
			jr.pending = nil
			r.step(rec, jobmachine.Unused{Lease: l}) // should it confirm yet, it is released
			r.award(id, gen, p.rest)
		}
	})
}

// sendCancel tells the provider of l that its renter does not want it (a
// release, or a request to stop it).
func (r *renter) sendCancel(l terms.Lease) {
	to := r.n.s.byID(l.Provider)
	if to == nil {
		return
	}
	r.n.s.net.send(r.n, to, "cancel "+l.ID, func() { to.onCancel(l.ID, r.n) })
}

func (r *renter) onConfirm(l terms.Lease, from *node) {
	rec, jr := r.jobs[l.JobID], r.runs[l.JobID]
	if rec == nil {
		r.sendCancel(l)
		return
	}
	if rb := r.rebooking; rb != nil && rb.pending != nil && rb.pending.ID == l.ID && from.id == rb.pending.Provider {
		r.rebooking = nil
		lc := *rb.pending
		lc.Devices = append([]int(nil), l.Devices...)
		r.step(rec, jobmachine.Rebooked{Lease: lc, Job: rb.job})
		return
	}
	if p := jr.pending; p != nil && p.lease.ID == l.ID && from.id == p.lease.Provider {
		jr.pending = nil
		lc := p.lease // the terms this renter awarded, on the devices the provider booked
		lc.Devices = append([]int(nil), l.Devices...)
		r.step(rec, jobmachine.Confirmed{Lease: lc, Job: jr.job})
		return
	}
	if cur := rec.M.Lease; cur != nil && cur.ID == l.ID {
		return // a duplicated confirmation
	}
	l.Provider = from.id
	r.step(rec, jobmachine.Unused{Lease: l}) // an award given up, or a lease never awarded
}

func (r *renter) onDecline(l terms.Lease, from *node) {
	if rb := r.rebooking; rb != nil && rb.pending != nil && rb.pending.ID == l.ID && from.id == rb.pending.Provider {
		r.rebooking = nil
		return
	}
	jr := r.runs[l.JobID]
	if jr == nil || jr.pending == nil || jr.pending.lease.ID != l.ID || from.id != jr.pending.lease.Provider {
		return
	}
	rest := jr.pending.rest
	jr.pending = nil
	r.award(l.JobID, jr.gen, rest)
}

// watch carries out Watch: a lease with no final report by lostGrace
// after its end is given up as lost (Lost).
func (r *renter) watch(rec *jobRecord, l terms.Lease) {
	if r.n.s.cfg.NoLostWatch {
		return
	}
	jr := r.runs[l.JobID]
	r.n.atLocal(l.End.Add(lostGrace), "lost watch "+l.ID, func() {
		cur := rec.M.Lease
		if r.runs[l.JobID] != jr || cur == nil || cur.ID != l.ID || rec.M.Run.Terminal() {
			return
		}
		now := r.n.now()
		rec.ObservedEnd = now
		r.step(rec, jobmachine.Lost{LeaseID: l.ID, Detail: "no final report by the lease's end", At: now})
	})
}

// requeue carries out Requeue: once the lease settled (its receipt
// recorded, or none coming: it never ran, or was lost) or settleWait
// passed, the job goes back to auction (Reauctioned) as a new attempt.
func (r *renter) requeue(rec *jobRecord, e jobmachine.Requeue) {
	id, jr := rec.M.Job.ID, r.runs[rec.M.Job.ID]
	wait := settleWait
	if a, ok := rec.M.ArchivedLease(e.Lease.ID); rec.M.Receipt != nil || rec.M.Started.IsZero() || (ok && a.Lost) {
		wait = 0
	}
	r.n.after(wait, "requeue "+e.Lease.ID, func() {
		if r.runs[id] == jr {
			r.reauction(rec, e.Lease.ID)
		}
	})
}

// reauction feeds Reauctioned to a job requeued from lease leaseID, and
// runs its auction again.
func (r *renter) reauction(rec *jobRecord, leaseID string) {
	if rec.M.Phase != jobmachine.Requeued || rec.M.Lease == nil || rec.M.Lease.ID != leaseID {
		return
	}
	job := rec.M.Job
	job.Attempt++
	r.step(rec, jobmachine.Reauctioned{Job: job})
	if rec.M.Phase == jobmachine.Auctioning {
		r.auction(job.ID, rec.M.Job)
	}
}

// checkEvidence carries out CheckEvidence: the run's log is checked (its
// outcome drawn from the seed), and the result fed back (Evidence).
func (r *renter) checkEvidence(rec *jobRecord, l terms.Lease) {
	s, jr := r.n.s, r.runs[l.JobID]
	if jr.checking {
		return
	}
	jr.checking = true
	ok := !s.chance(evidenceFails)
	r.n.after(s.between(0, 2*time.Second), "evidence "+l.ID, func() {
		if r.runs[l.JobID] != jr {
			return
		}
		jr.checking = false
		ev := jobmachine.Evidence{LeaseID: l.ID, OK: ok}
		if !ok {
			ev.Why = "its log does not match its digest"
		}
		r.step(rec, ev)
	})
}

// released is lease id, held by from, as a job of this renter released
// it (false if none did).
func (r *renter) released(id string, from *node) (jobmachine.Released, bool) {
	if rec := r.jobs[r.jobOf(id)]; rec != nil {
		for _, l := range rec.M.Released {
			if l.Lease == id && l.Provider == from.id {
				return l, true
			}
		}
	}
	return jobmachine.Released{}, false
}

// jobOf is the job a lease id names (a lease's id begins with its job's).
func (r *renter) jobOf(leaseID string) string {
	if id, ok := r.byLease[leaseID]; ok {
		return id
	}
	for i := len(leaseID) - 1; i >= 0; i-- {
		if leaseID[i] == '/' {
			return leaseID[:i]
		}
	}
	return ""
}

// leaseOf is the job record whose current lease is id, held by from.
func (r *renter) leaseOf(id string, from *node) (*jobRecord, error) {
	rec := r.jobs[r.byLease[id]]
	if rec == nil || rec.M.Lease == nil || rec.M.Lease.ID != id {
		return nil, fmt.Errorf("no lease %s", id)
	}
	if rec.M.Lease.Provider != from.id {
		return nil, fmt.Errorf("lease %s is not %s's", id, from.name)
	}
	return rec, nil
}

// onHeartbeat: the first heartbeat of a lease is when this renter saw it
// start.
func (r *renter) onHeartbeat(leaseID string, from *node) {
	rec, err := r.leaseOf(leaseID, from)
	if err != nil || rec.M.Run.Terminal() {
		return
	}
	if rec.ObservedStart.IsZero() {
		rec.ObservedStart = r.n.now()
		r.save(rec)
	}
}

// onEvent takes a provider's lease event by the production rules
// (lease.EventTimesValid, terms.RunState.Follows, as Tracker's
// HandleLeaseEvent checks them) and feeds it to the job's machine
// (Reported); a final report is answered with the renter's heartbeat
// summary, and one of a lease the job released with its signed release.
func (r *renter) onEvent(ev wire.LeaseEvent, from *node) {
	s := r.n.s
	rec, err := r.leaseOf(ev.LeaseID, from)
	if err != nil {
		job := r.jobs[r.jobOf(ev.LeaseID)]
		if job != nil && ev.Run.Terminal() {
			if a, ok := job.M.ArchivedLease(ev.LeaseID); ok && !a.Reported {
				r.step(job, jobmachine.LateReport{LeaseID: ev.LeaseID})
			}
		}
		if l, ok := r.released(ev.LeaseID, from); ok && ev.Run.Terminal() {
			// Released: answered with the release, as Tracker.HandleLeaseEvent does.
			b, err := lease.ReleasedAnswer(r.n.signer, l.Lease, l.Job)
			if err != nil {
				panic(fmt.Sprintf("renter %s: seal the release of %s: %v", r.n.name, l.Lease, err))
			}
			s.net.send(r.n, from, "released "+ev.LeaseID, func() { from.onReleased(ev.LeaseID, b, r.n) })
			return
		}
	}
	if err == nil {
		err = lease.EventTimesValid(ev, *rec.M.Lease, r.n.now())
	}
	if err != nil {
		s.stats.Refused++
		s.logf("%s refuses event %s %s: %v", r.n.name, ev.LeaseID, ev.Run, err)
		return
	}
	rec.ProviderClock.Note(ev.Time, r.n.now())
	if s.cfg.Rules.Follows(ev.Run, rec.M.Run) {
		now := r.n.now()
		if ev.Run == terms.RunRunning && rec.ObservedStart.IsZero() {
			rec.ObservedStart = now
		}
		if ev.Run.Terminal() {
			rec.ObservedEnd = now
		}
		r.save(rec) // the facts, should the machine not persist
		r.step(rec, jobmachine.Reported{LeaseID: ev.LeaseID, Run: ev.Run, Fault: ev.Fault, Detail: ev.Detail,
			ExitCode: ev.ExitCode, Started: ev.Started, Ended: ev.Ended})
		if ev.Run.Terminal() {
			r.rebookLater() // a GPU freed
		}
	}
	if ev.Run.Terminal() {
		s.net.send(r.n, from, "final ack "+ev.LeaseID, func() { from.onFinalAck(ev.LeaseID, r.n) })
	}
}

// settledKey is where the renter keeps the countersigned receipt of a
// lease it settled: a retry of it is answered with it, even once the
// lease is no longer its job's current one.
func settledKey(leaseID string) string { return "settled/" + leaseID }

// onReceipt checks a provider's receipt as Tracker.HandleReceipt does
// (attest.CheckReceipt, the final report's outcome, attest.CheckBilled),
// countersigns it, records it and answers with it; the job's machine
// takes the receipt (ReceiptRecorded) or its refusal (ReceiptRefused).
func (r *renter) onReceipt(raw []byte, from *node) {
	s := r.n.s
	sr, err := attest.UnmarshalReceipt(raw)
	var rc attest.Receipt
	if err == nil {
		rc = sr.Receipt
	}
	var refusedOf *jobRecord // the job whose lease's receipt is refused
	answer := func(b []byte, err error) {
		if err != nil {
			s.stats.Refused++
			s.logf("%s refuses receipt from %s: %v", r.n.name, from.name, err)
		}
		s.net.send(r.n, from, "receipt answer "+rc.LeaseID, func() { from.onReceiptAnswer(rc.LeaseID, b, err, r.n) })
		if err != nil && refusedOf != nil {
			if l, ok := r.leaseOfJob(refusedOf, rc.LeaseID, from); ok {
				r.step(refusedOf, jobmachine.ReceiptRefused{Lease: l, Why: err.Error()})
			}
		}
	}
	if err != nil {
		answer(nil, err)
		return
	}
	if prev, ok := r.n.disk.get(settledKey(rc.LeaseID)); ok && rc.Provider == from.id {
		p, perr := attest.UnmarshalReceipt(prev)
		if perr == nil && p.Receipt.Provider == from.id && bytes.Equal(p.Payload, sr.Payload) {
			answer(prev, nil) // a retry: the same countersigned receipt again
			return
		}
		answer(nil, fmt.Errorf("lease %s is already settled", rc.LeaseID))
		return
	}
	refusedOf = r.jobs[r.jobOf(rc.LeaseID)]
	rec, err := r.leaseOf(rc.LeaseID, from)
	if err != nil || rc.Provider != from.id {
		answer(nil, fmt.Errorf("no lease %s from %s", rc.LeaseID, from.name))
		return
	}
	now := r.n.now()
	if err := attest.CheckReceipt(rc, *rec.M.Lease, now); err != nil {
		answer(nil, err)
		return
	}
	if !rec.M.Run.Terminal() {
		answer(nil, fmt.Errorf("lease %s has not reported its end", rc.LeaseID))
		return
	}
	if rec.M.Phase == jobmachine.Verifying {
		// Paid on evidence: a check runs (or begins, the renter having
		// restarted since the final report); the provider retries.
		r.checkEvidence(rec, *rec.M.Lease)
		refusedOf = nil
		answer(nil, fmt.Errorf("lease %s: the evidence of its run is still being checked; retry", rc.LeaseID))
		return
	}
	if rc.Outcome != rec.M.Run || rc.Fault != rec.M.Fault {
		answer(nil, fmt.Errorf("receipt says %s, the record says %s", rc.Outcome, rec.M.Run))
		return
	}
	if err := s.cfg.Rules.CheckBilled(rc, *rec.M.Lease, rec.ObservedStart, rec.ObservedEnd, now, rec.ProviderClock, attest.HeartbeatSummary{}); err != nil {
		answer(nil, err)
		return
	}
	if err := sr.Countersign(r.n.signer); err != nil {
		answer(nil, err)
		return
	}
	full, err := sr.Marshal()
	if err != nil {
		answer(nil, err)
		return
	}
	recordReceipt(r.n, sr.Receipt, full, true)
	r.n.disk.put(settledKey(rc.LeaseID), full)
	rec.Countersigned = full
	s.stats.Settled++
	r.step(rec, jobmachine.ReceiptRecorded{Receipt: sr.Receipt})
	answer(full, nil)
	if rec.M.Phase == jobmachine.Requeued {
		// Settled: no need to wait longer (in a step of its own, the
		// receipt judged while its lease is the job's).
		jr, id := r.runs[rec.M.Job.ID], rec.M.Job.ID
		r.n.after(0, "requeue settled "+rc.LeaseID, func() {
			if r.runs[id] == jr {
				r.reauction(rec, rc.LeaseID)
			}
		})
	}
}

// leaseOfJob is lease id of job rec, held by from: its current lease, or
// one archived before it settled.
func (r *renter) leaseOfJob(rec *jobRecord, id string, from *node) (terms.Lease, bool) {
	if l := rec.M.Lease; l != nil && l.ID == id && l.Provider == from.id {
		return *l, true
	}
	if _, ok := rec.M.ArchivedLease(id); ok && rec.Providers[id] == from.id {
		return terms.Lease{ID: id, JobID: rec.M.Job.ID, Provider: from.id, Renter: r.n.id}, true
	}
	return terms.Lease{}, false
}

// recordReceipt appends a two-party receipt and the payment it implies,
// as node/lease records them.
func recordReceipt(n *node, rc attest.Receipt, full []byte, asRenter bool) {
	n.led.append(lease.ReceiptEntries(rc, full, asRenter)...)
}

// rebookLater is node/lease's late binding: once one of the renter's
// leases ended, and none of its jobs is in auction, its pending lease that
// starts latest (more than rebookAhead from now) is offered again, to the
// other providers, for a start rebookAhead/2 sooner; a lease found
// replaces it (jobmachine.Rebooked).
func (r *renter) rebookLater() {
	if r.rebooking != nil {
		return
	}
	now := r.n.now()
	var pick *jobRecord
	for _, id := range slices.Sorted(maps.Keys(r.jobs)) {
		rec := r.jobs[id]
		if r.inAuction(id) {
			return
		}
		l := rec.M.Lease
		if rec.M.Phase != jobmachine.Leased || rec.M.Run != terms.RunPending || l == nil || !l.Start.After(now.Add(rebookAhead)) {
			continue
		}
		if pick == nil || l.Start.After(pick.M.Lease.Start) {
			pick = rec
		}
	}
	if pick == nil {
		return
	}
	job, cur := pick.M.Job, *pick.M.Lease
	job.Attempt++
	job.Deadline = cur.Start.Add(-rebookAhead / 2)
	job.Exclude = append(slices.Clone(job.Exclude), cur.Provider)
	rb := &rebookRun{job: job}
	r.rebooking = rb
	r.n.s.stats.Rebooks++
	r.call(job, "rebook call ", cur.Provider)
	r.n.after(bidWindow, "close rebook "+job.ID, func() {
		if r.rebooking == rb {
			r.awardRebook(rb)
		}
	})
}

// awardRebook awards the best bid of a rebook auction, if any.
func (r *renter) awardRebook(rb *rebookRun) {
	rec := r.jobs[rb.job.ID]
	ok := r.eligible(&rb.job, rb.bids)
	if rec == nil || len(ok) == 0 {
		r.rebooking = nil
		return
	}
	l := r.nextLease(rec, rb.job, ok[0].Bid)
	rb.pending = &l
	to, job, from := r.n.s.byID(l.Provider), rb.job, r.n
	r.n.s.net.send(r.n, to, "rebook award "+l.ID, func() { to.onAward(l, job, from) })
	r.n.after(awardTimeout, "rebook award timeout "+l.ID, func() {
		if r.rebooking == rb {
			r.rebooking = nil
			r.step(rec, jobmachine.Unused{Lease: l}) // should it confirm yet, it is released
		}
	})
}
