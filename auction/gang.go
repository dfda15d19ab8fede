package auction

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/sign"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction/callmachine"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultGangHold is how long a provider holds a confirmed gang member for
// its renter's commit (ProviderConfig.GangHold): the renter commits once
// every member confirmed, each within its ConfirmTimeout. A hold not
// committed by then is freed, so a renter that vanishes mid-placement
// leaves no booking behind.
const DefaultGangHold = 5 * time.Second

// gangHold is a confirmed gang member awaiting its renter's decision.
type gangHold struct {
	lease terms.Lease
	sb    *sentBid
	timer *time.Timer
}

// holdGangLocked keeps a confirmed gang member's lease until its decision
// (or its expiry after GangHold). Called with p.mu held.
func (p *Provider) holdGangLocked(lease terms.Lease, sb *sentBid) {
	if p.gangHeld == nil {
		p.gangHeld = map[string]*gangHold{}
	}
	h := &gangHold{lease: lease, sb: sb}
	id := lease.ID
	h.timer = time.AfterFunc(p.cfg.GangHold, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.gangHeld[id] == h {
			p.log.Info("gang hold expired", "lease", id, "job", lease.JobID)
			p.dropGangLocked(id, h)
		}
	})
	p.gangHeld[id] = h
}

// dropGangLocked frees a held gang member's booking; its bid may be
// awarded again (in a new gang) while it has not expired. Called with
// p.mu held.
func (p *Provider) dropGangLocked(id string, h *gangHold) {
	h.timer.Stop()
	delete(p.gangHeld, id)
	p.cfg.Calendar.Release(id)
	if p.cfg.Now().Before(h.sb.bid.ExpiresAt) {
		p.bids[h.sb.bid.Nonce] = h.sb
	}
	p.stats.GangAborted++
	go p.retryParked()
}

// handleGangDecision takes a renter's commit or abort of a gang member it
// holds. A commit starts the lease (OnLease) and is answered with a signed
// Confirm (declined when the hold is gone: expired or aborted); an abort
// frees the booking and is answered with nothing. Only the award's renter
// decides.
func (p *Provider) handleGangDecision(from peer.ID, d terms.GangDecision) ([]byte, error) {
	if d.Renter != from.String() {
		return nil, p.reject("not_job_owner", fmt.Errorf("gang decision from %s signed by %s", from, d.Renter))
	}
	me := p.cfg.Signer.ID().String()
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.gangHeld[d.LeaseID]
	if d.Provider != me || (ok && (h.lease.Renter != d.Renter || h.lease.JobID != d.JobID || h.lease.Attempt != d.Attempt ||
		h.lease.Gang.ID != d.GangID)) {
		return nil, p.rejectLocked("unknown_gang_member", fmt.Errorf("gang decision for lease %q", d.LeaseID))
	}
	if !d.Commit {
		if ok {
			p.dropGangLocked(d.LeaseID, h)
		}
		return nil, nil
	}
	if !ok {
		if l, live := p.leases[d.LeaseID]; live && l.Renter == d.Renter && l.Gang != nil && l.Gang.ID == d.GangID {
			// A repeated commit.
			return terms.EncodeConfirm(p.cfg.Signer, terms.Confirm{LeaseID: d.LeaseID, Accepted: true, Devices: l.Devices})
		}
		return terms.EncodeConfirm(p.cfg.Signer, terms.Confirm{LeaseID: d.LeaseID, Reason: "gang hold expired or aborted"})
	}
	h.timer.Stop()
	delete(p.gangHeld, d.LeaseID)
	lease := h.lease
	p.leases[lease.ID] = &lease
	p.jobs[lease.ID] = h.sb.job
	p.order = append(p.order, lease.ID)
	p.stats.Won++
	p.stats.EarningsUSD += terms.LeaseCost(lease.Price, lease.GPUCount, lease.GPUFraction, lease.End.Sub(lease.Start))
	if p.cfg.Runtime != nil {
		p.cfg.Runtime.OnLease(lease, h.sb.job, nil)
	}
	return terms.EncodeConfirm(p.cfg.Signer, terms.Confirm{LeaseID: lease.ID, Accepted: true, Devices: lease.Devices})
}

// GangTieTolerance is how far above the best remaining bid's score a bid
// may rank and still be preferred for a gang for being closer to its
// first member: in the same region, then at a lower measured round trip.
const GangTieTolerance = 0.05

// pickGang chooses k members from the eligible bids, ranked best first:
// each member is the closest among the bids within GangTieTolerance of the
// best remaining score: the first the one at the lowest round trip the
// renter measured, each next one in the first one's region first, then at
// the lowest round trip (unmeasured last; ties: the ranking's order).
// It returns fewer than k when fewer bids are left.
func pickGang(ranked []terms.Ranked, k int) []terms.Ranked {
	left := slices.Clone(ranked)
	var pick []terms.Ranked
	for len(pick) < k && len(left) > 0 {
		best := 0
		band := left[0].Score * (1 + GangTieTolerance)
		closer := func(a, b terms.Ranked) bool {
			if len(pick) > 0 {
				if lead := pick[0].Bid.Region; (a.Bid.Region == lead) != (b.Bid.Region == lead) {
					return a.Bid.Region == lead
				}
			}
			if (a.RTT > 0) != (b.RTT > 0) {
				return a.RTT > 0
			}
			return a.RTT < b.RTT
		}
		for i := 1; i < len(left) && left[i].Score <= band; i++ {
			if closer(left[i], left[best]) {
				best = i
			}
		}
		pick = append(pick, left[best])
		left = slices.Delete(left, best, best+1)
	}
	return pick
}

// gangBackoff is the most a renter waits, jittered, before it tries a
// gang's placement again after a round in which some member declined:
// two gangs racing for the same providers abort and retry at different
// moments instead of colliding again.
const gangBackoff = 200 * time.Millisecond

// awardGang places a gang job (Job.Nodes = K > 1) all or nothing: it picks
// K providers among the eligible bids (pickGang), awards each its member
// with the gang's terms (Gang) at once, and once every member confirmed
// (each provider holds it booked, not running) commits them all; when any
// member declines or fails, it aborts every one that may have booked, so
// no hold is left, and tries again after a jittered pause with the members
// that confirmed and the next bids in place of those that did not. Every
// failed round rules out at least one provider, so it ends. A provider
// never waits on another gang's member, and holds expire by themselves
// (DefaultGangHold): two gangs competing for the same providers cannot
// deadlock. It returns -1 and the error to return (nil once leased) or the
// count of eligible bids with the reason no gang was placed. order is
// the eligible bids in the order the call's machine awards them
// (callmachine.AwardGang).
func (r *Renter) awardGang(ctx context.Context, rj *renterJob, job *terms.Job, ranked []terms.Ranked, order []terms.Bid) (int, string, error) {
	allowed := make(map[string]bool, len(order))
	for _, b := range order {
		allowed[b.Nonce] = true
	}
	pool := slices.DeleteFunc(slices.Clone(ranked), func(c terms.Ranked) bool { return !allowed[c.Bid.Nonce] })
	eligible, k := len(pool), job.Nodes
	actx := context.WithoutCancel(ctx)
	var last string
	for round := 0; ; round++ {
		pick := pickGang(pool, k)
		if len(pick) < k {
			why := fmt.Sprintf("a gang of %d needs %d providers, %d eligible bids", k, k, eligible)
			if last != "" {
				why += " (last round: " + last + ")"
			}
			return eligible, why, nil
		}
		if round > 0 {
			t := time.NewTimer(rand.N(gangBackoff) + time.Millisecond)
			select {
			case <-t.C:
			case <-rj.cancel:
				t.Stop()
				return -1, "", ErrCancelled
			case <-ctx.Done():
				t.Stop()
				return -1, "", r.end(rj, callmachine.ContextDone{Err: ctx.Err().Error()}, ctx.Err())
			}
		}
		leases, failed, why := r.gangRound(actx, rj, job, pick)
		if leases != nil {
			members := make([]terms.Lease, len(leases))
			copy(members, leases)
			r.mu.Lock()
			rj.status.Members = members
			r.counters["gang_placed"]++
			r.mu.Unlock()
			r.end(rj, callmachine.Leased{Lease: members[0]}, nil)
			if r.cfg.Listener != nil {
				for _, l := range members {
					r.cfg.Listener.OnLease(l, *job)
				}
			}
			return -1, "", nil
		}
		r.mu.Lock()
		r.counters["gang_aborted"]++
		r.mu.Unlock()
		last = why
		pool = slices.DeleteFunc(pool, func(c terms.Ranked) bool { return failed[c.Bid.Provider] })
		select {
		case <-rj.cancel:
			return -1, "", ErrCancelled
		case <-ctx.Done():
			return -1, "", r.end(rj, callmachine.ContextDone{Err: ctx.Err().Error()}, ctx.Err())
		default:
		}
	}
}

// gangRound awards one pick of members; it returns the committed leases
// by rank, or nil with the providers that failed (to be left out) and
// why, once every member that may have booked was aborted.
func (r *Renter) gangRound(ctx context.Context, rj *renterJob, job *terms.Job, pick []terms.Ranked) ([]terms.Lease, map[string]bool, string) {
	g := terms.Gang{ID: terms.NewID("gang"), Size: len(pick)}
	for i, c := range pick {
		g.Members = append(g.Members, terms.GangMember{Rank: i, Provider: c.Bid.Provider, LeaseID: terms.NewID("lease")})
	}
	type member struct {
		slot   int
		bid    terms.Bid
		claim  *claim
		lease  terms.Lease
		result string
	}
	ms := make([]member, len(pick))
	failed := map[string]bool{}
	r.mu.Lock()
	for i, c := range pick {
		ms[i] = member{slot: len(rj.status.Attempts), bid: c.Bid}
		rj.status.Attempts = append(rj.status.Attempts, terms.AwardAttempt{Provider: c.Bid.Provider, LeaseID: g.Members[i].LeaseID, Result: "pending"})
	}
	providers := make([]string, len(pick))
	for i, c := range pick {
		providers[i] = c.Bid.Provider
	}
	r.stepLocked(rj, callmachine.GangAwarded{Providers: providers})
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i := range ms {
		m := &ms[i]
		c, ok := r.claim(m.bid, job.BilledGPUs())
		if !ok {
			m.result = callmachine.SkippedClaimed
			continue
		}
		m.claim = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.lease, m.result = r.award(ctx, job, m.bid, g.Members[i].LeaseID, g.WithRank(i))
		}()
	}
	wg.Wait()
	all := !slices.ContainsFunc(ms, func(m member) bool { return m.result != callmachine.Confirmed })
	select {
	case <-rj.cancel:
		all = false // cancelled meanwhile: every held member is aborted
	default:
	}
	committed := make([]bool, len(ms))
	if all {
		// Phase two: every member is held; commit them all.
		for i := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.decideGang(ctx, g.ID, job, ms[i].lease, true); err != nil {
					ms[i].result = "commit failed: " + err.Error()
					return
				}
				committed[i] = true
			}()
		}
		wg.Wait()
		all = !slices.Contains(committed, false)
	}
	var reasons []string
	for i := range ms {
		m := &ms[i]
		switch {
		case all:
			m.lease.Gang = g.WithRank(i)
		case committed[i]:
			// Committed while another member's commit failed: it may be
			// starting already; the lease is given back.
			if r.cfg.Release != nil {
				r.cfg.Release.Release(m.lease)
			}
			m.result = "confirmed, released (gang incomplete)"
		case m.result == callmachine.Confirmed:
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.decideGang(ctx, g.ID, job, m.lease, false)
			}()
			m.result = "confirmed, aborted (gang incomplete)"
		default:
			failed[m.bid.Provider] = true
			reasons = append(reasons, m.result)
			if m.claim != nil {
				r.noConfirm(m.bid.Provider)
			}
			if callmachine.MayHaveBooked(m.result) || strings.HasPrefix(m.result, "commit failed: ") {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.decideGang(ctx, g.ID, job, m.lease, false)
				}()
			}
		}
		var kept *terms.Lease
		if all {
			kept = &m.lease
		}
		r.settleClaim(m.bid.Provider, m.claim, kept)
		r.mu.Lock()
		rj.status.Attempts[m.slot].Result = m.result
		r.mu.Unlock()
	}
	wg.Wait()
	if all {
		leases := make([]terms.Lease, len(ms))
		for i := range ms {
			leases[i] = ms[i].lease
		}
		return leases, nil, ""
	}
	return nil, failed, strings.Join(reasons, "; ")
}

// decideGang sends a gang member's commit (checking the provider's signed
// answer) or abort.
func (r *Renter) decideGang(ctx context.Context, gangID string, job *terms.Job, l terms.Lease, commit bool) error {
	to, err := peer.Decode(l.Provider)
	if err != nil {
		return err
	}
	data, err := terms.EncodeGangDecision(r.cfg.Signer, terms.GangDecision{GangID: gangID, JobID: job.ID, Attempt: job.Attempt, Renter: job.Owner,
		Provider: l.Provider, LeaseID: l.ID, Commit: commit, IssuedAt: r.cfg.Now()})
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.ConfirmTimeout)
	defer cancel()
	reply, err := r.cfg.Transport.SendAward(dctx, to, data)
	if err != nil || !commit {
		return err
	}
	c, signer, err := terms.DecodeConfirm(reply)
	switch {
	case err != nil:
		return err
	case signer != sign.ID(to) || c.LeaseID != l.ID:
		return errors.New("commit answered for another lease or by another peer")
	case !c.Accepted:
		return errors.New(c.Reason)
	}
	return nil
}
