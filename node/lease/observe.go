package lease

import (
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Auction outcomes an Observer is told of.
const (
	OutcomeLeased      = "leased"
	OutcomeUnplaceable = "unplaceable"
)

// Observer is told of the lifecycle moments the daemon measures (its
// metrics). Every field is optional; calls are made outside the lifecycle's
// locks and must not block.
type Observer struct {
	// AuctionEnded: an auction of one of our jobs ended, with a lease or
	// without; bids is how many valid bids its window drew and wait the
	// time from the post to the outcome.
	AuctionEnded func(job terms.Job, outcome string, bids int, wait time.Duration)
	// HeartbeatReceived: a renter verified a heartbeat of one of its leases
	// at receivedAt.
	HeartbeatReceived func(hb attest.Heartbeat, receivedAt time.Time)
	// HeartbeatSent: a provider signed a heartbeat of one of its leases.
	HeartbeatSent func(hb attest.Heartbeat, l terms.Lease)
	// JobEnded: a renter's lease reached a terminal run state after
	// running for ran (0 when it never started).
	JobEnded func(l terms.Lease, run terms.RunState, ran time.Duration)
	// LeaseEnded: a provider's lease reached a terminal run state.
	LeaseEnded func(l terms.Lease, run terms.RunState, ran time.Duration)
}

func (o *Observer) auctionEnded(job terms.Job, outcome string, bids int, wait time.Duration) {
	if o != nil && o.AuctionEnded != nil {
		o.AuctionEnded(job, outcome, bids, wait)
	}
}

func (o *Observer) heartbeatReceived(hb attest.Heartbeat, at time.Time) {
	if o != nil && o.HeartbeatReceived != nil {
		o.HeartbeatReceived(hb, at)
	}
}

func (o *Observer) heartbeatSent(hb attest.Heartbeat, l terms.Lease) {
	if o != nil && o.HeartbeatSent != nil {
		o.HeartbeatSent(hb, l)
	}
}

func (o *Observer) jobEnded(l terms.Lease, run terms.RunState, started, ended time.Time) {
	if o != nil && o.JobEnded != nil {
		o.JobEnded(l, run, ranFor(started, ended))
	}
}

func (o *Observer) leaseEnded(l terms.Lease, run terms.RunState, started, ended time.Time) {
	if o != nil && o.LeaseEnded != nil {
		o.LeaseEnded(l, run, ranFor(started, ended))
	}
}

func ranFor(started, ended time.Time) time.Duration {
	if started.IsZero() || ended.Before(started) {
		return 0
	}
	return ended.Sub(started)
}

// observeAuction tells the observer how the auction of job id ended, read
// from the job's record.
func (t *Tracker) observeAuction(id, outcome string) {
	if t.cfg.Observe == nil {
		return
	}
	t.mu.Lock()
	v := t.jobs[id]
	var (
		job    terms.Job
		bids   int
		posted time.Time
	)
	if v != nil {
		job, posted = v.Job, v.PostedAt
		for _, b := range v.Bids {
			if b.Rejected == "" {
				bids++
			}
		}
	}
	t.mu.Unlock()
	if v == nil {
		return
	}
	t.cfg.Observe.auctionEnded(job, outcome, bids, ranFor(posted, t.now()))
}
