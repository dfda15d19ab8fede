package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/wire"
)

// Renter timings.
const (
	bidWindow    = time.Second
	awardTimeout = 3 * time.Second
	retryAuction = 30 * time.Second
	startWithin  = 30 * time.Minute // a job's deadline: the latest it may start
	// lostGrace is how long after its lease's end a renter waits for the
	// final report before it gives the lease up as lost.
	lostGrace = 10 * time.Minute
)

// jobRecord is a renter's persisted record of one job.
type jobRecord struct {
	Job           terms.Job      `json:"job"`
	State         terms.JobState `json:"state"`
	Awards        int            `json:"awards"`
	Lease         *terms.Lease   `json:"lease,omitempty"`
	Run           terms.RunState `json:"run,omitempty"`
	Fault         terms.Fault    `json:"fault,omitempty"`
	ObservedStart time.Time      `json:"observed_start,omitempty"`
	ObservedEnd   time.Time      `json:"observed_end,omitempty"`
	Lost          bool           `json:"lost,omitempty"`
	Receipt       []byte         `json:"receipt,omitempty"` // the countersigned receipt, once settled
	// Released are the job's leases this renter released (a late or
	// unwanted confirm), as node/lease's Tracker remembers them: their
	// final reports are answered with the signed release.
	Released []terms.Lease `json:"released,omitempty"`

	// ProviderClock is the provider's clock as measured from its lease
	// events' times (Tracker's JobView.ProviderClock).
	ProviderClock attest.ClockOffset `json:"provider_clock,omitzero"`
}

// pendingAward is an award sent and not answered yet, with the bids left
// to try after it.
type pendingAward struct {
	lease terms.Lease
	rest  []terms.Ranked
}

// renter posts jobs, runs their auctions, follows their leases and
// countersigns their receipts. What it must not forget is on its disk;
// bids and awards in flight are not.
type renter struct {
	n       *node
	jobs    map[string]*jobRecord
	byLease map[string]string // lease id -> job id
	bids    map[string][]terms.Candidate
	pending map[string]*pendingAward
}

func newRenter(n *node) *renter {
	return &renter{n: n, jobs: map[string]*jobRecord{}, byLease: map[string]string{},
		bids: map[string][]terms.Candidate{}, pending: map[string]*pendingAward{}}
}

// restartRenter loads the renter's jobs from disk and picks up where they
// were: a job in auction starts its auction again, a leased one waits for
// its lease again.
func restartRenter(n *node) *renter {
	r := newRenter(n)
	for _, k := range n.disk.keys("job/") {
		raw, _ := n.disk.get(k)
		var rec jobRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			panic(fmt.Sprintf("renter %s: job record %s: %v", n.name, k, err))
		}
		r.jobs[rec.Job.ID] = &rec
		if rec.Lease != nil {
			r.byLease[rec.Lease.ID] = rec.Job.ID
		}
		switch rec.State {
		case terms.JobBidding:
			r.auction(rec.Job.ID)
		case terms.JobLeased:
			r.watch(&rec)
		}
	}
	return r
}

func (r *renter) save(rec *jobRecord) { r.n.disk.putJSON("job/"+rec.Job.ID, rec) }

// post makes a job and starts its auction. The job is posted once its
// record is on disk: from then on it may not be lost.
func (r *renter) post(id string) {
	s, now := r.n.s, r.n.now()
	job := terms.Job{
		ID: id, Owner: r.n.id, Tier: terms.Silver, MaxPrice: 10, GPUCount: 1 + s.rng.IntN(2),
		Duration: s.between(time.Minute, 15*time.Minute).Round(time.Second), Deadline: now.Add(startWithin),
		BidWindow: bidWindow, Attempt: 1,
	}
	rec := &jobRecord{Job: job, State: terms.JobBidding}
	r.jobs[id] = rec
	r.save(rec)
	s.chk.posted(r.n, id)
	s.stats.Jobs++
	r.auction(id)
}

func (r *renter) auction(id string) {
	rec := r.jobs[id]
	r.bids[id] = nil
	delete(r.pending, id)
	for _, to := range r.n.s.nodes {
		if to.prov == nil && to.hostile == nil {
			continue
		}
		job, from := rec.Job, r.n
		r.n.s.net.send(r.n, to, "call "+id, func() { to.onCall(job, from) })
	}
	r.n.after(bidWindow, "close auction "+id, func() { r.decide(id) })
}

// onBid keeps a bid for the job's open auction.
func (r *renter) onBid(b terms.Bid) {
	rec := r.jobs[b.JobID]
	if rec == nil || rec.State != terms.JobBidding || r.pending[b.JobID] != nil {
		return
	}
	r.bids[b.JobID] = append(r.bids[b.JobID], terms.Candidate{Bid: b, Reliability: 1})
}

// decide ranks the bids (auction.RankAt) and awards the best.
func (r *renter) decide(id string) {
	rec := r.jobs[id]
	if rec == nil || rec.State != terms.JobBidding {
		return
	}
	var ok []terms.Ranked
	for _, rk := range auction.RankAt(&rec.Job, r.bids[id], r.n.now()) {
		if rk.Rejected == "" {
			ok = append(ok, rk)
		}
	}
	r.bids[id] = nil
	r.award(rec, ok)
}

func (r *renter) award(rec *jobRecord, ranked []terms.Ranked) {
	id, now := rec.Job.ID, r.n.now()
	if len(ranked) == 0 {
		if now.After(rec.Job.Deadline) {
			r.setState(rec, terms.JobUnplaceable)
			r.save(rec)
			r.n.s.stats.Unplaceable++
			return
		}
		r.n.after(retryAuction, "retry auction "+id, func() {
			if rec := r.jobs[id]; rec != nil && rec.State == terms.JobBidding {
				r.auction(id)
			}
		})
		return
	}
	b := ranked[0].Bid
	rec.Awards++
	r.save(rec)
	l := terms.Lease{
		ID: fmt.Sprintf("%s/a%d", id, rec.Awards), JobID: id, Attempt: rec.Job.Attempt, Renter: r.n.id, Provider: b.Provider,
		Price: b.Price, Start: b.Start, End: b.End, GPUCount: rec.Job.GPUCount, Tier: rec.Job.Tier, State: terms.RunPending,
	}
	r.pending[id] = &pendingAward{lease: l, rest: ranked[1:]}
	to := r.n.s.byID(b.Provider)
	r.n.s.net.send(r.n, to, "award "+l.ID, func() { to.onAward(l, rec.Job, r.n) })
	r.n.after(awardTimeout, "award timeout "+l.ID, func() {
		if p := r.pending[id]; p != nil && p.lease.ID == l.ID {
			r.cancel(l)
			delete(r.pending, id)
			r.award(rec, p.rest)
		}
	})
}

// cancel tells a provider that a lease it may have confirmed is not
// wanted (its confirmation came too late, or after a restart).
func (r *renter) cancel(l terms.Lease) {
	to := r.n.s.byID(l.Provider)
	if to == nil {
		return
	}
	if rec := r.jobs[l.JobID]; rec != nil && (rec.Lease == nil || rec.Lease.ID != l.ID) && r.releasedOf(l.ID, to) == nil {
		rec.Released = append(rec.Released, l)
		r.save(rec)
	}
	r.n.s.net.send(r.n, to, "cancel "+l.ID, func() { to.onCancel(l.ID, r.n) })
}

func (r *renter) onConfirm(l terms.Lease, from *node) {
	rec := r.jobs[l.JobID]
	p := r.pending[l.JobID]
	if rec == nil || p == nil || p.lease.ID != l.ID || from.id != p.lease.Provider || rec.State != terms.JobBidding {
		if rec == nil || rec.Lease == nil || rec.Lease.ID != l.ID {
			r.cancel(l)
		}
		return
	}
	delete(r.pending, l.JobID)
	lc := p.lease // the terms this renter awarded, on the devices the provider booked
	lc.Devices = append([]int(nil), l.Devices...)
	rec.Lease = &lc
	rec.Run = terms.RunPending
	rec.ProviderClock = attest.ClockOffset{}
	r.setState(rec, terms.JobLeased)
	r.byLease[lc.ID] = rec.Job.ID
	r.save(rec)
	r.watch(rec)
}

func (r *renter) onDecline(l terms.Lease, from *node) {
	p := r.pending[l.JobID]
	rec := r.jobs[l.JobID]
	if p == nil || rec == nil || p.lease.ID != l.ID || from.id != p.lease.Provider {
		return
	}
	delete(r.pending, l.JobID)
	r.award(rec, p.rest)
}

// watch gives a lease up as lost when no final report came by lostGrace
// after its end.
func (r *renter) watch(rec *jobRecord) {
	if r.n.s.cfg.NoLostWatch {
		return
	}
	l := *rec.Lease
	r.n.atLocal(l.End.Add(lostGrace), "lost watch "+l.ID, func() {
		rec := r.jobs[l.JobID]
		if rec == nil || rec.Lease == nil || rec.Lease.ID != l.ID || rec.Run.Terminal() {
			return
		}
		rec.Run, rec.Fault, rec.Lost = terms.RunFailed, terms.FaultProvider, true
		rec.ObservedEnd = r.n.now()
		r.setState(rec, terms.JobFinished)
		r.save(rec)
		r.n.s.stats.Failed++
	})
}

func (r *renter) setState(rec *jobRecord, st terms.JobState) {
	if rec.State == st {
		return
	}
	r.n.s.logf("%s job %s: %s -> %s", r.n.name, rec.Job.ID, rec.State, st)
	rec.State = st
}

// releasedOf is the lease id, held by from, that this renter released
// (nil if none).
func (r *renter) releasedOf(id string, from *node) *terms.Lease {
	for _, rec := range r.jobs {
		for i, l := range rec.Released {
			if l.ID == id && l.Provider == from.id {
				return &rec.Released[i]
			}
		}
	}
	return nil
}

// leaseOf is the job record whose current lease is id, held by from.
func (r *renter) leaseOf(id string, from *node) (*jobRecord, error) {
	rec := r.jobs[r.byLease[id]]
	if rec == nil || rec.Lease == nil || rec.Lease.ID != id {
		return nil, fmt.Errorf("no lease %s", id)
	}
	if rec.Lease.Provider != from.id {
		return nil, fmt.Errorf("lease %s is not %s's", id, from.name)
	}
	return rec, nil
}

// onHeartbeat: the first heartbeat of a lease is when this renter saw it
// start.
func (r *renter) onHeartbeat(leaseID string, from *node) {
	rec, err := r.leaseOf(leaseID, from)
	if err != nil || rec.Run.Terminal() {
		return
	}
	if rec.ObservedStart.IsZero() {
		rec.ObservedStart = r.n.now()
		r.save(rec)
	}
}

// onEvent takes a provider's lease event by the production rules
// (lease.EventTimesValid, terms.RunState.Follows) and answers a final
// report with the renter's heartbeat summary.
func (r *renter) onEvent(ev wire.LeaseEvent, from *node) {
	s := r.n.s
	rec, err := r.leaseOf(ev.LeaseID, from)
	if l := r.releasedOf(ev.LeaseID, from); err != nil && l != nil && ev.Run.Terminal() {
		// Released: answered with the release, as Tracker.HandleLeaseEvent does.
		b, err := lease.ReleasedAnswer(r.n.signer, l.ID, l.JobID)
		if err != nil {
			panic(fmt.Sprintf("renter %s: seal the release of %s: %v", r.n.name, l.ID, err))
		}
		s.net.send(r.n, from, "released "+ev.LeaseID, func() { from.onReleased(ev.LeaseID, b, r.n) })
		return
	}
	if err == nil {
		err = lease.EventTimesValid(ev, *rec.Lease, r.n.now())
	}
	if err != nil {
		s.stats.Refused++
		s.logf("%s refuses event %s %s: %v", r.n.name, ev.LeaseID, ev.Run, err)
		return
	}
	rec.ProviderClock.Note(ev.Time, r.n.now())
	if s.cfg.Rules.Follows(ev.Run, rec.Run) {
		rec.Run, rec.Fault = ev.Run, ev.Fault
		if ev.Run == terms.RunRunning && rec.ObservedStart.IsZero() {
			rec.ObservedStart = r.n.now()
		}
		if ev.Run.Terminal() {
			rec.ObservedEnd = r.n.now()
			r.setState(rec, terms.JobFinished)
			if ev.Run == terms.RunSucceeded {
				s.stats.Finished++
			} else {
				s.stats.Failed++
			}
		} else {
			r.setState(rec, terms.JobLeased)
		}
		r.save(rec)
	}
	if ev.Run.Terminal() {
		s.net.send(r.n, from, "final ack "+ev.LeaseID, func() { from.onFinalAck(ev.LeaseID, r.n) })
	}
}

// onReceipt checks a provider's receipt as Tracker.HandleReceipt does
// (attest.CheckReceipt, the final report's outcome, attest.CheckBilled),
// countersigns it, records it and answers with it.
func (r *renter) onReceipt(raw []byte, from *node) {
	s := r.n.s
	sr, err := attest.UnmarshalReceipt(raw)
	var rc attest.Receipt
	if err == nil {
		rc = sr.Receipt
	}
	answer := func(b []byte, err error) {
		if err != nil {
			s.stats.Refused++
			s.logf("%s refuses receipt from %s: %v", r.n.name, from.name, err)
		}
		s.net.send(r.n, from, "receipt answer "+rc.LeaseID, func() { from.onReceiptAnswer(rc.LeaseID, b, err, r.n) })
	}
	if err != nil {
		answer(nil, err)
		return
	}
	rec, err := r.leaseOf(rc.LeaseID, from)
	if err != nil || rc.Provider != from.id {
		answer(nil, fmt.Errorf("no lease %s from %s", rc.LeaseID, from.name))
		return
	}
	if rec.Receipt != nil {
		prev, perr := attest.UnmarshalReceipt(rec.Receipt)
		if perr == nil && bytes.Equal(prev.Payload, sr.Payload) {
			answer(rec.Receipt, nil) // a retry: the same countersigned receipt again
			return
		}
		answer(nil, fmt.Errorf("lease %s is already settled", rc.LeaseID))
		return
	}
	now := r.n.now()
	if err := attest.CheckReceipt(rc, *rec.Lease, now); err != nil {
		answer(nil, err)
		return
	}
	if !rec.Run.Terminal() {
		answer(nil, fmt.Errorf("lease %s has not reported its end", rc.LeaseID))
		return
	}
	if rc.Outcome != rec.Run || rc.Fault != rec.Fault {
		answer(nil, fmt.Errorf("receipt says %s, the final report said %s", rc.Outcome, rec.Run))
		return
	}
	if err := s.cfg.Rules.CheckBilled(rc, *rec.Lease, rec.ObservedStart, rec.ObservedEnd, now, rec.ProviderClock, attest.HeartbeatSummary{}); err != nil {
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
	rec.Receipt = full
	r.save(rec)
	s.stats.Settled++
	answer(full, nil)
}

// recordReceipt appends a two-party receipt and the payment it implies,
// as node/lease records them.
func recordReceipt(n *node, rc attest.Receipt, full []byte, asRenter bool) {
	n.led.append(lease.ReceiptEntries(rc, full, asRenter)...)
}
