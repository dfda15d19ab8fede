package node

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/providerstats"
)

// drain makes the provider stop taking new work and drains its leases
// (lease.Supervisor.Drain): `gpumesh provider drain` (stopping false) and a
// daemon stopped by a signal (stopping true) both come here.
func (m *market) drain(grace time.Duration, stopping bool) (api.DrainView, error) {
	if m.provider == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	if grace < 0 {
		return api.DrainView{}, api.BadRequest("drain grace must not be negative, got %s", grace)
	}
	m.provider.SetDraining(true)
	v := m.sup.Drain(grace, stopping)
	v.Draining = true
	return v, nil
}

// drainView is the provider's drain state and the last drain's progress.
func (m *market) drainView() (api.DrainView, error) {
	if m.provider == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	v := m.sup.DrainView()
	v.Draining = m.provider.Draining()
	return v, nil
}

// undrain makes the provider bid again.
func (m *market) undrain() (api.DrainView, error) {
	if m.provider == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	m.provider.SetDraining(false)
	m.sup.Undrain()
	return m.drainView()
}

func (m *market) drainRoutes(mux *http.ServeMux) {
	api.Handle(mux, "POST /v1/provider/drain", func(r *http.Request) (any, error) {
		var req api.DrainRequest
		dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, api.BadRequest("drain request: %v", err)
		}
		return m.drain(req.Grace, false)
	})
	api.Handle(mux, "GET /v1/provider/drain", func(*http.Request) (any, error) { return m.drainView() })
	api.Handle(mux, "POST /v1/provider/undrain", func(*http.Request) (any, error) { return m.undrain() })
}

// Drain is how a provider daemon stops gracefully: it stops taking work,
// lets the leases that end within grace finish, hands the others back to
// their renters, parks its confirmed reservations that have not started
// (they stay pending in the store, and the next start books them again)
// and returns once the drain is done or ctx ends (a second signal); then
// Close. A node that is not a provider has nothing to drain.
func (d *Daemon) Drain(ctx context.Context, grace time.Duration) (api.DrainView, error) {
	if d.market == nil || d.market.provider == nil {
		return api.DrainView{Leases: []api.DrainLease{}, Done: true}, nil
	}
	if _, err := d.market.drain(grace, true); err != nil {
		return api.DrainView{}, err
	}
	d.log.Info("draining before shutdown", "grace", grace)
	v, err := d.market.sup.DrainWait(ctx)
	v.Draining = true
	return v, err
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
