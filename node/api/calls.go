package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// The typed calls below are the control API's endpoints, one method each;
// the paths and query parameters live here and nowhere else on the client
// side.

func jobPath(id string, suffix string) string { return "/jobs/" + url.PathEscape(id) + suffix }

// Version is GET /v1/version: the daemon's version.
func (c *Client) Version(ctx context.Context) (string, error) {
	var v map[string]string
	if err := c.Do(ctx, http.MethodGet, "/version", nil, nil, &v); err != nil {
		return "", err
	}
	return v["version"], nil
}

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := c.Do(ctx, http.MethodGet, "/status", nil, nil, &s)
	return s, err
}

// Peers is GET /v1/peers: the connected peers.
func (c *Client) Peers(ctx context.Context) ([]PeerInfo, error) {
	var ps []PeerInfo
	err := c.Do(ctx, http.MethodGet, "/peers", nil, nil, &ps)
	return ps, err
}

// Providers is GET /v1/providers: DHT discovery of providers matching q.
func (c *Client) Providers(ctx context.Context, q terms.Query) ([]ProviderView, error) {
	v := url.Values{}
	if q.GPU != "" {
		v.Set("gpu", q.GPU)
	}
	if q.Region != "" {
		v.Set("region", q.Region)
	}
	if q.MinVRAM != 0 {
		v.Set("min_vram", strconv.Itoa(q.MinVRAM))
	}
	if q.GPUCount != 0 {
		v.Set("count", strconv.Itoa(q.GPUCount))
	}
	var caps []ProviderView
	err := c.Do(ctx, http.MethodGet, "/providers", v, nil, &caps)
	return caps, err
}

// PostJob is POST /v1/jobs: it runs the job's auction and returns when it
// has ended (leased or unplaceable).
func (c *Client) PostJob(ctx context.Context, job terms.Job) (JobView, error) {
	return c.PostJobRequest(ctx, PostJobRequest{Job: job})
}

// PostJobRequest is POST /v1/jobs with the request's options (Queue).
func (c *Client) PostJobRequest(ctx context.Context, req PostJobRequest) (JobView, error) {
	var v JobView
	err := c.Do(ctx, http.MethodPost, "/jobs", nil, req, &v)
	return v, err
}

// PostTask is POST /v1/jobs with a job file's text (a task file or a job
// spec), which the daemon converts (taskfile.Convert) and posts.
func (c *Client) PostTask(ctx context.Context, name, text string) (JobView, error) {
	var v JobView
	err := c.Do(ctx, http.MethodPost, "/jobs", nil, PostJobRequest{Task: text, TaskName: name}, &v)
	return v, err
}

// ConvertTask is POST /v1/tasks/convert: the job a job file's text stands
// for, without posting it.
func (c *Client) ConvertTask(ctx context.Context, name, text string) (terms.Job, error) {
	var j terms.Job
	err := c.Do(ctx, http.MethodPost, "/tasks/convert", nil, ConvertTaskRequest{Task: text, TaskName: name}, &j)
	return j, err
}

// Job is GET /v1/jobs/{id}.
func (c *Client) Job(ctx context.Context, id string) (JobView, error) {
	var v JobView
	err := c.Do(ctx, http.MethodGet, jobPath(id, ""), nil, nil, &v)
	return v, err
}

// JobNext is GET /v1/jobs/{id}?wait=D with If-None-Match: seen, the ETag
// of the view last answered: the job's view as soon as it is not that
// one, however soon after that answer it changed, or after D (at most a
// minute); and its ETag. With no seen ("": a daemon that sent none) the
// daemon waits for a change from the view at the call; with no wait
// (<= 0) it answers at once. A daemon from before the long poll answers
// at once, with no ETag.
func (c *Client) JobNext(ctx context.Context, id string, wait time.Duration, seen string) (JobView, string, error) {
	var q url.Values
	var hdr http.Header
	if wait > 0 {
		q = url.Values{"wait": {wait.String()}}
		if seen != "" {
			hdr = http.Header{"If-None-Match": {seen}}
		}
	}
	resp, err := c.raw(ctx, http.MethodGet, jobPath(id, ""), q, nil, hdr)
	if err != nil {
		return JobView{}, "", err
	}
	defer resp.Body.Close()
	var v JobView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return JobView{}, "", fmt.Errorf("decode daemon answer: %w", err)
	}
	return v, resp.Header.Get("ETag"), nil
}

// Jobs is GET /v1/jobs: this node's jobs, newest first.
func (c *Client) Jobs(ctx context.Context) ([]JobView, error) {
	var vs []JobView
	err := c.Do(ctx, http.MethodGet, "/jobs", nil, nil, &vs)
	return vs, err
}

// CancelJob is POST /v1/jobs/{id}/cancel.
func (c *Client) CancelJob(ctx context.Context, id string) (JobView, error) {
	var v JobView
	err := c.Do(ctx, http.MethodPost, jobPath(id, "/cancel"), nil, nil, &v)
	return v, err
}

// Bids is GET /v1/jobs/{id}/bids.
func (c *Client) Bids(ctx context.Context, id string) (BidsView, error) {
	var v BidsView
	err := c.Do(ctx, http.MethodGet, jobPath(id, "/bids"), nil, nil, &v)
	return v, err
}

// LogsOptions choose what GET /v1/jobs/{id}/logs streams.
type LogsOptions struct {
	// Follow streams on until the run ends.
	Follow bool
	// Attempt is the job's attempt whose log to stream, 1 for its first
	// lease (JobView.Leases); 0 means its current lease.
	Attempt int
}

// Logs is GET /v1/jobs/{id}/logs: the stdout and stderr of one of the
// job's leases as a stream, which with Follow lasts until that run ends.
// The caller closes it.
func (c *Client) Logs(ctx context.Context, id string, o LogsOptions) (io.ReadCloser, error) {
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "1")
	}
	if o.Attempt > 0 {
		q.Set("attempt", strconv.Itoa(o.Attempt))
	}
	resp, err := c.Raw(ctx, http.MethodGet, jobPath(id, "/logs"), q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Outputs is GET /v1/jobs/{id}/outputs: the provider's manifest of the
// job's output files and the outputs bundle (see wire.ExtractBundle),
// which the caller verifies against the manifest and closes.
func (c *Client) Outputs(ctx context.Context, id string) ([]terms.OutputFile, io.ReadCloser, error) {
	resp, err := c.Raw(ctx, http.MethodGet, jobPath(id, "/outputs"), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	h := resp.Header.Get(ManifestHeader)
	if h == "" {
		resp.Body.Close()
		return nil, nil, fmt.Errorf("outputs of job %s: the daemon sent no %s header", id, ManifestHeader)
	}
	var manifest []terms.OutputFile
	if err := json.Unmarshal([]byte(h), &manifest); err != nil {
		resp.Body.Close()
		return nil, nil, fmt.Errorf("outputs of job %s: bad manifest: %w", id, err)
	}
	return manifest, resp.Body, nil
}

// ProviderStats is GET /v1/provider/stats.
func (c *Client) ProviderStats(ctx context.Context) (ProviderStatsView, error) {
	var s ProviderStatsView
	err := c.Do(ctx, http.MethodGet, "/provider/stats", nil, nil, &s)
	return s, err
}

// ProviderHistory is GET /v1/provider/history.
func (c *Client) ProviderHistory(ctx context.Context) (ProviderHistoryView, error) {
	var v ProviderHistoryView
	err := c.Do(ctx, http.MethodGet, "/provider/history", nil, nil, &v)
	return v, err
}

// Reputation is GET /v1/reputation/{peer}.
func (c *Client) Reputation(ctx context.Context, peer string) (ReputationView, error) {
	var v ReputationView
	err := c.Do(ctx, http.MethodGet, "/reputation/"+url.PathEscape(peer), nil, nil, &v)
	return v, err
}

// Verify is POST /v1/verify: challenge a provider's GPUs and return the
// verdicts (the daemon records and gossips them).
func (c *Client) Verify(ctx context.Context, req VerifyRequest) ([]VerifyResult, error) {
	var out []VerifyResult
	err := c.Do(ctx, http.MethodPost, "/verify", nil, req, &out)
	return out, err
}

// Counters is GET /v1/counters: the market's event counters by name.
func (c *Client) Counters(ctx context.Context) (map[string]int, error) {
	var m map[string]int
	err := c.Do(ctx, http.MethodGet, "/counters", nil, nil, &m)
	return m, err
}

// ledgerQuery is f as the query of GET /v1/ledger and /v1/ledger/export.
func ledgerQuery(f record.Filter) url.Values {
	q := url.Values{}
	if f.Kind != "" {
		q.Set("kind", string(f.Kind))
	}
	if f.Counterparty != "" {
		q.Set("counterparty", f.Counterparty)
	}
	if f.LeaseID != "" {
		q.Set("lease", f.LeaseID)
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.Format(time.RFC3339))
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// Ledger is GET /v1/ledger: the entries matching f.
func (c *Client) Ledger(ctx context.Context, f record.Filter) ([]record.Entry, error) {
	var es []record.Entry
	err := c.Do(ctx, http.MethodGet, "/ledger", ledgerQuery(f), nil, &es)
	return es, err
}

// LedgerEntry is GET /v1/ledger/{seq}.
func (c *Client) LedgerEntry(ctx context.Context, seq uint64) (record.Entry, error) {
	var e record.Entry
	err := c.Do(ctx, http.MethodGet, "/ledger/"+strconv.FormatUint(seq, 10), nil, nil, &e)
	return e, err
}

// LedgerVerify is GET /v1/ledger/verify; on tampering the error names the
// first bad entry.
func (c *Client) LedgerVerify(ctx context.Context) (LedgerVerifyView, error) {
	var rep LedgerVerifyView
	err := c.Do(ctx, http.MethodGet, "/ledger/verify", nil, nil, &rep)
	return rep, err
}

// LedgerBalances is GET /v1/ledger/balances: the money position per
// counterparty.
func (c *Client) LedgerBalances(ctx context.Context) (map[string]record.Balance, error) {
	var bs map[string]record.Balance
	err := c.Do(ctx, http.MethodGet, "/ledger/balances", nil, nil, &bs)
	return bs, err
}

// Ledger export formats.
const (
	ExportJSON = "json"
	ExportCSV  = "csv"
)

// LedgerExport is GET /v1/ledger/export: the entries matching f in format
// (ExportJSON or ExportCSV) as a stream the caller closes.
func (c *Client) LedgerExport(ctx context.Context, f record.Filter, format string) (io.ReadCloser, error) {
	q := ledgerQuery(f)
	q.Set("format", format)
	resp, err := c.Raw(ctx, http.MethodGet, "/ledger/export", q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
