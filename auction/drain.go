package auction

import (
	"errors"
	"fmt"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Draining: a provider that is about to stop (its operator drains it, or
// its daemon got SIGTERM) takes no new work. It neither bids nor accepts
// awards for bids it made before, and says so to the calls that ask
// (Decline.Kind KindDraining); its leases that end soon finish, the others
// are handed back (RunPreempted with HandBackDetail, FaultNone), and their
// renters requeue them, whatever their tier.
const (
	// KindDraining is the Ineligible and Decline kind of a draining
	// provider.
	KindDraining = "draining"
)

// SetDraining starts (on) or ends (!on) draining; it reports whether the
// state changed. While draining the provider is ineligible for every call
// (kind KindDraining, declined when the call asks) and declines awards.
func (p *Provider) SetDraining(on bool) bool {
	changed := p.draining.Swap(on) != on
	if changed {
		p.log.Info("draining", "on", on)
	}
	return changed
}

// Draining reports whether the provider is draining.
func (p *Provider) Draining() bool { return p.draining.Load() }

// Rebook books a lease this provider confirmed before its daemon
// restarted (the daemon persists its confirmed leases, the calendar lives
// in memory): the lease holds its devices over its span again, so no new
// bid is offered them; job is the lease's job (so the lease may move
// earlier). It fails when the lease is not this provider's or
// the calendar cannot hold it (ErrOverbooked, ErrDuplicateLease).
func (p *Provider) Rebook(l terms.Lease, job terms.Job) error {
	if me := p.cfg.Signer.ID().String(); l.Provider != me {
		return fmt.Errorf("auction: rebook lease %s: it is %s's, not ours", l.ID, l.Provider)
	}
	if l.State.Terminal() {
		return fmt.Errorf("auction: rebook lease %s: it already ended (%s)", l.ID, l.State)
	}
	if len(l.Devices) > 0 && len(l.Devices) != l.GPUCount {
		return errors.New("auction: rebook lease " + l.ID + ": its devices do not match its gpu count")
	}
	b := Booking{LeaseID: l.ID, Start: l.Start, End: l.End, GPUs: l.GPUCount, Fraction: l.GPUFraction, Tier: l.Tier,
		Preemptible: l.Preemptible, Devices: l.Devices}
	if err := p.cfg.Calendar.Reserve(b); err != nil {
		return fmt.Errorf("auction: rebook: %w", err)
	}
	booked, _ := p.cfg.Calendar.Booking(l.ID)
	lease := l
	lease.Devices = booked.Devices
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.leases[l.ID]; !dup {
		p.order = append(p.order, l.ID)
	}
	p.leases[l.ID] = &lease
	p.jobs[l.ID] = job
	p.stats.EarningsUSD += terms.LeaseCost(lease.Price, lease.GPUCount, lease.GPUFraction, lease.End.Sub(lease.Start))
	return nil
}
