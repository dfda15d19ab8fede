// Package drainapi is a provider's drain: it stops bidding (the auction's
// provider) and drains its leases (lease.Supervisor.Drain), for the
// control API's drain calls and for a daemon stopped by a signal.
package drainapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/providerstats"
)

// Bidder is what stops and resumes bidding (auction.Provider).
type Bidder interface {
	SetDraining(bool) bool
	Draining() bool
}

// Drainer drains one provider; a nil Drainer is a node that is not a
// provider, and its calls answer providerstats.ErrNotProvider.
type Drainer struct {
	bidder Bidder
	sup    *lease.Supervisor
}

// New returns the drainer of a provider that bids through b and runs its
// leases with sup.
func New(b Bidder, sup *lease.Supervisor) *Drainer { return &Drainer{bidder: b, sup: sup} }

// Drain makes the provider stop taking new work and drains its leases:
// `gpumesh provider drain` (stopping false) and a daemon stopped by a
// signal (stopping true) both come here.
func (d *Drainer) Drain(grace time.Duration, stopping bool) (api.DrainView, error) {
	if d == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	if grace < 0 {
		return api.DrainView{}, api.BadRequest("drain grace must not be negative, got %s", grace)
	}
	d.bidder.SetDraining(true)
	v := d.sup.Drain(grace, stopping)
	v.Draining = true
	return v, nil
}

// Wait waits for the drain under way to be done, or ctx to end
// (lease.Supervisor.DrainWait).
func (d *Drainer) Wait(ctx context.Context) (api.DrainView, error) {
	v, err := d.sup.DrainWait(ctx)
	v.Draining = true
	return v, err
}

// View is the provider's drain state and the last drain's progress.
func (d *Drainer) View() (api.DrainView, error) {
	if d == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	v := d.sup.DrainView()
	v.Draining = d.bidder.Draining()
	return v, nil
}

// Change is the provider's drain state at the drain's next change, or
// after wait (lease.Supervisor.DrainChange): a long poll.
func (d *Drainer) Change(ctx context.Context, wait time.Duration) (api.DrainView, error) {
	if d == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	v := d.sup.DrainChange(ctx, wait)
	v.Draining = d.bidder.Draining()
	return v, nil
}

// Undrain makes the provider bid again.
func (d *Drainer) Undrain() (api.DrainView, error) {
	if d == nil {
		return api.DrainView{}, providerstats.ErrNotProvider
	}
	d.bidder.SetDraining(false)
	d.sup.Undrain()
	return d.View()
}

// Routes registers the drain calls of d (nil on a node that is not a
// provider) on mux.
func Routes(mux *http.ServeMux, d *Drainer) {
	api.Handle(mux, "POST /v1/provider/drain", func(r *http.Request) (any, error) {
		var req api.DrainRequest
		dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, api.BadRequest("drain request: %v", err)
		}
		return d.Drain(req.Grace, false)
	})
	api.Handle(mux, "GET /v1/provider/drain", func(r *http.Request) (any, error) {
		wait, ok, err := api.LongPollWait(r)
		if err != nil {
			return nil, err
		}
		if ok {
			return d.Change(r.Context(), wait)
		}
		return d.View()
	})
	api.Handle(mux, "POST /v1/provider/undrain", func(*http.Request) (any, error) { return d.Undrain() })
}
