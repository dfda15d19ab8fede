package lease

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
)

// DrainSettleWait is how long a drain waits, after a lease it finished or
// handed back ended, for its renter to hear of it (the settlement) before
// it counts the lease as done anyway: a restart settles it later.
const DrainSettleWait = 15 * time.Second

// drainState is the supervisor's last drain.
type drainState struct {
	at      time.Time
	grace   time.Duration
	actions map[string]string // lease id -> api.DrainFinish, DrainHandBack or DrainKeep
}

// Drain plans what happens to each lease not yet ended when the provider
// drains with grace (the auction's provider has stopped taking work):
//   - a lease that has not started keeps its reservation (DrainKeep); when
//     the daemon is stopping it is parked at once, pending in the store,
//     and the next start books and runs it (Recover);
//   - a lease that ends within the grace runs on to its end (DrainFinish);
//   - any other lease is handed back at once (DrainHandBack): stopped as
//     preempted with terms.HandBackDetail, no one's fault, so that its
//     renter requeues it whatever its tier.
//
// It returns at once; DrainView follows the drain and DrainWait waits for
// it. A drain replaces the previous one.
func (s *Supervisor) Drain(grace time.Duration, stopping bool) api.DrainView {
	now := s.now()
	cut := now.Add(max(grace, 0))
	d := &drainState{at: now, grace: grace, actions: map[string]string{}}
	var handBack []*leaseRun
	for _, r := range s.snapshot() {
		r.mu.Lock()
		rec := r.pr.Rec
		r.mu.Unlock()
		if rec.Run.Terminal() {
			continue
		}
		l := rec.Lease
		switch {
		case rec.Run == terms.RunPending && l.Start.After(now) && (stopping || l.End.After(cut)):
			if stopping && !r.keepPending() {
				// It started meanwhile, or was stopped: let it end with
				// the others.
				d.actions[l.ID] = api.DrainFinish
				continue
			}
			d.actions[l.ID] = api.DrainKeep
		case !l.End.After(cut):
			d.actions[l.ID] = api.DrainFinish
		default:
			d.actions[l.ID] = api.DrainHandBack
			handBack = append(handBack, r)
		}
	}
	s.mu.Lock()
	s.drain = d
	s.mu.Unlock()
	s.changed.Notify()
	for _, r := range handBack {
		s.cfg.Counters.Add("provider.drain_handed_back")
		r.abort(terms.RunPreempted, terms.HandBackDetail)
	}
	s.log.Info("draining", "grace", grace, "stopping", stopping, "leases", len(d.actions), "handed_back", len(handBack))
	return s.DrainView()
}

// Undrain forgets the drain (its hand-backs stay handed back).
func (s *Supervisor) Undrain() {
	s.mu.Lock()
	s.drain = nil
	s.mu.Unlock()
	s.changed.Notify()
}

// DrainView is the last drain's progress (Draining is the auction
// provider's to say; the caller fills it).
func (s *Supervisor) DrainView() api.DrainView {
	v, _ := s.drainView()
	return v
}

// drainView is DrainView and, while the drain is not done, the earliest
// time it may be by the clock alone (an ended lease's DrainSettleWait
// running out; zero when none): every other step is a save of a lease's
// record.
func (s *Supervisor) drainView() (api.DrainView, time.Time) {
	s.mu.Lock()
	d := s.drain
	s.mu.Unlock()
	v := api.DrainView{Leases: []api.DrainLease{}, Done: true}
	var next time.Time
	if d == nil {
		return v, next
	}
	v.Since, v.Grace = d.at, d.grace
	now := s.now()
	for id, action := range d.actions {
		r := s.run(id)
		if r == nil {
			continue
		}
		r.mu.Lock()
		rec, settled := r.pr.Rec, r.pr.Rec.Phase.Final()
		r.mu.Unlock()
		v.Leases = append(v.Leases, api.DrainLease{LeaseID: id, JobID: rec.Lease.JobID, Tier: rec.Lease.Tier,
			Start: rec.Lease.Start, End: rec.Lease.End, Action: action, Run: rec.Run, Detail: rec.Detail, Settled: settled})
		if action == api.DrainKeep {
			continue
		}
		switch {
		case !rec.Run.Terminal():
			v.Done = false
		case !settled && now.Sub(rec.Ended) < DrainSettleWait:
			v.Done = false
			if due := rec.Ended.Add(DrainSettleWait); next.IsZero() || due.Before(next) {
				next = due
			}
		}
	}
	sort.Slice(v.Leases, func(i, j int) bool { return v.Leases[i].End.Before(v.Leases[j].End) })
	return v, next
}

// DrainChange is the drain's view at its next change (a save of a lease's
// record, a change of the drain, or a settle wait running out), at once
// when the drain is done, or once wait has passed or ctx ended: GET
// /v1/provider/drain?wait=D, what `gpumesh provider drain` follows.
func (s *Supervisor) DrainChange(ctx context.Context, wait time.Duration) api.DrainView {
	changed := s.changed.Wait()
	v, next := s.drainView()
	if v.Done {
		return v
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	var due <-chan time.Time
	if !next.IsZero() {
		settle := time.NewTimer(next.Sub(s.now()))
		defer settle.Stop()
		due = settle.C
	}
	select {
	case <-ctx.Done():
	case <-timeout.C:
	case <-changed:
	case <-due:
	}
	v, _ = s.drainView()
	return v
}

// DrainWait waits until the drain is done (DrainView.Done) or ctx ends. It
// looks again at each save of a lease's record or change of the drain,
// and once when the first settle wait runs out.
func (s *Supervisor) DrainWait(ctx context.Context) (api.DrainView, error) {
	settle := time.NewTimer(0)
	defer settle.Stop()
	for {
		changed := s.changed.Wait()
		v, next := s.drainView()
		if v.Done {
			return v, nil
		}
		var due <-chan time.Time
		if !next.IsZero() {
			settle.Reset(next.Sub(s.now()))
			due = settle.C
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("drain not done: %w", ctx.Err())
		case <-changed:
		case <-due:
		}
	}
}

func (s *Supervisor) snapshot() []*leaseRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := make([]*leaseRun, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	return runs
}

// keepPending parks a confirmed lease that has not started yet because the
// daemon is stopping: its goroutine ends without reporting anything and the
// lease stays pending in the store, for Recover to book and schedule again.
// It reports whether the lease was parked (false once it started or was
// stopped).
func (r *leaseRun) keepPending() bool { return r.step(lifecycle.Keep{}) }
