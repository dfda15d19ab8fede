package node

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
)

// Drain is how a provider daemon stops gracefully: it stops taking work,
// lets the leases that end within grace finish, hands the others back to
// their renters, parks its confirmed reservations that have not started
// (they stay pending in the store, and the next start books them again)
// and returns once the drain is done or ctx ends (a second signal); then
// Close. A node that is not a provider has nothing to drain.
func (d *Daemon) Drain(ctx context.Context, grace time.Duration) (api.DrainView, error) {
	if d.market == nil || d.market.drainer == nil {
		return api.DrainView{Leases: []api.DrainLease{}, Done: true}, nil
	}
	if _, err := d.market.drainer.Drain(grace, true); err != nil {
		return api.DrainView{}, err
	}
	d.log.Info("draining before shutdown", "grace", grace)
	return d.market.drainer.Wait(ctx)
}

// MaxDrainTime is the longest a daemon stopped by a signal drains with
// the given grace before it closes: the grace, then lease.DrainSettleWait
// for the renters to hear of the leases' ends. Whatever stops the daemon
// must wait longer than that (for provider.drain_grace), with room to
// close the ledger, or it kills the drain half way: systemd's
// TimeoutStopSec, Kubernetes' terminationGracePeriodSeconds and docker
// stop's timeout in cmd/gpumesh/deploy are set for DefaultDrainGrace, and
// their test holds them to it.
func MaxDrainTime(grace time.Duration) time.Duration { return grace + lease.DrainSettleWait }

// DrainGrace is the configured drain grace (provider.drain_grace).
func (d *Daemon) DrainGrace() time.Duration { return d.cfg.Provider.DrainGrace }
