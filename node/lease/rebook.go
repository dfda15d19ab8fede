package lease

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
)

// Late binding. A job's lease is booked when the job is posted, at the end
// of one provider's calendar as the declared durations of the jobs before
// it fill that calendar. Jobs end sooner than declared, some sooner than
// others, so queues booked alike drain unalike: after a burst, one GPU
// still has a job booked behind another while a GPU elsewhere sits idle
// (200 jobs of 2 s posted at once to 20 GPUs: one queue one job longer than
// the rest made the makespan a job longer). A provider moves its own
// queue earlier as its GPUs free (a pending lease "moved earlier"); no
// provider can take another's booking.
//
// So the renter does: whenever one of its leases ends (some GPU is free)
// and none of its jobs is in auction (those take the GPUs that free), it
// offers its pending lease that starts latest, if that starts more than
// RebookAhead from now, to the market again (auction.Renter.Rebook: one
// auction for the job's next attempt, on providers other than the lease's,
// taking only a start RebookAhead/2 sooner). A lease found replaces the
// pending one, which is released before it starts (the job machine's
// Rebooked); none found, nothing changes. A renter whose jobs start when
// posted never rebooks.

// DefaultRebookAhead is TrackerConfig.RebookAhead's default.
const DefaultRebookAhead = 2 * time.Second

// maxRebooks bounds the rebook auctions a renter runs at once.
const maxRebooks = 2

// rebookLater looks, once one of the renter's leases ended, for the pending
// lease that starts latest (more than RebookAhead from now) and offers its
// job again in the background.
func (t *Tracker) rebookLater() {
	ahead := t.cfg.RebookAhead
	if ahead < 0 {
		return
	}
	now := t.now()
	t.mu.Lock()
	if len(t.rebooking) >= maxRebooks {
		t.mu.Unlock()
		return
	}
	var pick string
	var start time.Time
	for key, v := range t.jobs {
		if v.Phase == jobmachine.Auctioning || v.Phase == jobmachine.Awarding {
			// Jobs of this renter's in auction take the GPUs that free
			// first: a rebook would only compete with them.
			t.mu.Unlock()
			return
		}
		if key != v.Job.ID || v.Phase != jobmachine.Leased || v.Run != terms.RunPending || v.Lease == nil ||
			v.Lease.Gang != nil || v.Job.Nodes > 1 || t.rebooking[key] || !v.Lease.Start.After(now.Add(ahead)) {
			continue
		}
		if pick == "" || v.Lease.Start.After(start) {
			pick, start = key, v.Lease.Start
		}
	}
	if pick == "" {
		t.mu.Unlock()
		return
	}
	t.rebooking[pick] = true
	if !t.spawnLocked(func() { t.rebook(pick, start.Add(-ahead/2)) }) {
		delete(t.rebooking, pick)
	}
	t.mu.Unlock()
}

// rebook runs job id's rebook auction for a start by before; its lease, if
// any, reaches the job's machine through onLease (Rebooked), which counts
// renter.rebooked if the job takes it.
func (t *Tracker) rebook(id string, before time.Time) {
	defer func() {
		t.mu.Lock()
		delete(t.rebooking, id)
		t.mu.Unlock()
	}()
	t.cfg.Counters.Add("renter.rebook_offered")
	ctx, cancel := context.WithTimeout(t.ctx, time.Minute)
	defer cancel()
	l, err := t.renter.Rebook(ctx, id, before)
	if err != nil {
		t.log.Debug("not rebooked", "job", id, "err", err)
		return
	}
	t.log.Info("job rebooked", "job", id, "lease", l.ID, "provider", l.Provider, "start", l.Start)
}
