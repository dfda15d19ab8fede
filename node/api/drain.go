package api

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// What a drain does with one of the provider's leases.
const (
	// DrainFinish: the lease ends within the grace; it runs to its end.
	DrainFinish = "finish"
	// DrainHandBack: the lease would outlast the grace; it is stopped and
	// handed back (preempted), and its renter requeues it elsewhere.
	DrainHandBack = "hand_back"
	// DrainKeep: a confirmed reservation that has not started; it stays
	// booked (and, when the daemon stops, survives the restart).
	DrainKeep = "keep"
)

// DrainRequest is the body of POST /v1/provider/drain.
type DrainRequest struct {
	// Grace is how long leases may run on: those that end within it
	// finish, the others are handed back at once.
	Grace time.Duration `json:"grace"`
}

// DrainLease is one lease of a drain.
type DrainLease struct {
	LeaseID string         `json:"lease_id"`
	JobID   string         `json:"job_id"`
	Tier    terms.Tier     `json:"tier"`
	Start   time.Time      `json:"start"`
	End     time.Time      `json:"end"`
	Action  string         `json:"action"`
	Run     terms.RunState `json:"run"`
	Detail  string         `json:"detail,omitempty"`
	// Settled: the renter heard the end and countersigned its receipt.
	Settled bool `json:"settled"`
}

// DrainView is POST /v1/provider/drain, GET /v1/provider/drain and POST
// /v1/provider/undrain.
type DrainView struct {
	// Draining: the provider takes no new work (no bids, awards declined
	// with the reason "draining").
	Draining bool          `json:"draining"`
	Since    time.Time     `json:"since,omitempty"`
	Grace    time.Duration `json:"grace,omitempty"`
	Leases   []DrainLease  `json:"leases"`
	// Done: every lease to finish or hand back has ended and its renter
	// heard of it (or it ended too long ago to keep waiting).
	Done bool `json:"done"`
}

// Drain is POST /v1/provider/drain: the provider stops taking new work,
// lets its leases that end within grace finish and hands back the others.
// It returns at once with the plan; DrainStatus follows it.
func (c *Client) Drain(ctx context.Context, grace time.Duration) (DrainView, error) {
	var v DrainView
	err := c.Do(ctx, http.MethodPost, "/provider/drain", nil, DrainRequest{Grace: grace}, &v)
	return v, err
}

// DrainStatus is GET /v1/provider/drain: the current drain's progress.
func (c *Client) DrainStatus(ctx context.Context) (DrainView, error) {
	var v DrainView
	err := c.Do(ctx, http.MethodGet, "/provider/drain", nil, nil, &v)
	return v, err
}

// DrainChange is GET /v1/provider/drain?wait=D: the drain's progress at
// its next change, or after wait (a long poll; a daemon from before it
// answers at once).
func (c *Client) DrainChange(ctx context.Context, wait time.Duration) (DrainView, error) {
	var v DrainView
	err := c.Do(ctx, http.MethodGet, "/provider/drain", url.Values{"wait": {wait.String()}}, nil, &v)
	return v, err
}

// Undrain is POST /v1/provider/undrain: the provider bids again.
func (c *Client) Undrain(ctx context.Context) (DrainView, error) {
	var v DrainView
	err := c.Do(ctx, http.MethodPost, "/provider/undrain", nil, nil, &v)
	return v, err
}
