package api

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// ServiceSpec is what `gpumesh serve post` asks for: an always-on service
// of Replicas..MaxReplicas replicas, each one lease of Job (whose
// Run.ServicePort is the port the server listens on and whose Duration is
// one lease's length: the service re-leases before each lease ends). With
// Job.Nodes K > 1 each replica is a gang of K members on K providers,
// placed all or nothing; rank 0 serves the port, and the replica is
// replaced as a whole when any member ends.
type ServiceSpec struct {
	ID  string    `json:"id,omitempty" yaml:"id,omitempty"`
	Job terms.Job `json:"job" yaml:"job"`
	// Replicas is the minimum (and initial) number of replicas.
	Replicas    int `json:"replicas" yaml:"replicas"`
	MaxReplicas int `json:"max_replicas,omitempty" yaml:"max_replicas,omitempty"`
	// Health is the readiness probe's HTTP path; empty: a replica is ready
	// once its port accepts connections.
	Health string `json:"health,omitempty" yaml:"health,omitempty"`
	// TargetP95 is the latency the autoscaler keeps the service under;
	// zero: scale on load (outstanding requests per replica) only.
	TargetP95 time.Duration `json:"target_p95,omitempty" yaml:"target_p95,omitempty"`
	// TargetConcurrency is the outstanding requests per replica above which
	// the autoscaler adds one; zero: DefaultTargetConcurrency.
	TargetConcurrency int `json:"target_concurrency,omitempty" yaml:"target_concurrency,omitempty"`
	// ScaleDownAfter is the hysteresis: load must stay low this long before
	// a replica is removed; zero: 2m.
	ScaleDownAfter time.Duration `json:"scale_down_after,omitempty" yaml:"scale_down_after,omitempty"`
	// ProbeInterval is the readiness probe's period; zero: 1s.
	ProbeInterval time.Duration `json:"probe_interval,omitempty" yaml:"probe_interval,omitempty"`
	// ProbeTimeout bounds one readiness probe, for servers slow to answer
	// it; zero: the probe interval (at least 500ms).
	ProbeTimeout time.Duration `json:"probe_timeout,omitempty" yaml:"probe_timeout,omitempty"`
	// StartTimeout bounds how long a leased replica may take to become
	// ready before it is replaced; zero: 2m.
	StartTimeout time.Duration `json:"start_timeout,omitempty" yaml:"start_timeout,omitempty"`
	// Public, when set, also serves the gateway on a public address, over
	// TLS, to end users holding one of the service's API tokens.
	Public *PublicSpec `json:"public,omitempty" yaml:"public,omitempty"`
	// Regions spreads the replicas over regions (each a residency, as
	// Job.Region: "eu" takes eu-west, eu-central...): ReplicasPerRegion of
	// them in each at least, every replica's job taking its region as its
	// Region. The gateway sends each request to the nearest region with a
	// ready replica (Job.Near's region first, then the lowest measured
	// round trip), and to the next when that one has none ready or all of
	// its replicas are at the target concurrency. Replicas is then at
	// least len(Regions) × ReplicasPerRegion (its default), and the job
	// takes no Region of its own.
	Regions           []string `json:"regions,omitempty" yaml:"regions,omitempty"`
	ReplicasPerRegion int      `json:"replicas_per_region,omitempty" yaml:"replicas_per_region,omitempty"`
	// ScaleToZero lets the service run no replica while idle: once no
	// request has come for IdleAfter (zero: DefaultIdleAfter; at least
	// MinIdleAfter), its replicas drain and their leases are cancelled;
	// the next request waits (up to StartTimeout) while Replicas replicas
	// are leased and started again: a cold start, whose time the status
	// reports.
	ScaleToZero bool          `json:"scale_to_zero,omitempty" yaml:"scale_to_zero,omitempty"`
	IdleAfter   time.Duration `json:"idle_after,omitempty" yaml:"idle_after,omitempty"`
}

// ServiceSpec.IdleAfter's default and least value.
const (
	DefaultIdleAfter = 5 * time.Minute
	MinIdleAfter     = time.Second
)

// PostServiceRequest is the body of POST /v1/services: a ServiceSpec, or
// Task, the text of a service file (a task file with a service: section,
// or a YAML service spec), which the daemon converts with
// taskfile.ConvertService. TaskName names it in errors.
type PostServiceRequest struct {
	ServiceSpec
	Task     string `json:"task,omitempty"`
	TaskName string `json:"task_name,omitempty"`
}

// PublicSpec is a service's public endpoint: the gateway on a public
// address, over TLS, for end users. Each request must carry one of the
// service's API tokens (`Authorization: Bearer TOKEN`; the owner's
// gateway token is not accepted there) and name one of Hosts, or an IP
// address, as its Host.
type PublicSpec struct {
	// Addr is the address to listen on, e.g. 0.0.0.0:8443.
	Addr string `json:"addr" yaml:"addr"`
	// Hosts are the names clients reach the endpoint by (the Host check
	// accepts these and IP addresses; a self-signed certificate is made
	// for them).
	Hosts []string `json:"hosts,omitempty" yaml:"hosts,omitempty"`
	// TLSCert and TLSKey are PEM files, on the daemon's machine, of the
	// certificate (chain) and its key; neither: a self-signed certificate
	// made when the service starts and kept with it.
	TLSCert string `json:"tls_cert,omitempty" yaml:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty" yaml:"tls_key,omitempty"`
	// MaxBody bounds a request's body, in bytes (413 above); zero:
	// DefaultMaxBody.
	MaxBody int64 `json:"max_body,omitempty" yaml:"max_body,omitempty"`
	// Rate is the requests per second each API token may make on average,
	// Burst how many at once (429 beyond); zero rate: no limit; zero
	// burst: the rate, rounded up.
	Rate  float64 `json:"rate,omitempty" yaml:"rate,omitempty"`
	Burst int     `json:"burst,omitempty" yaml:"burst,omitempty"`
}

// DefaultMaxBody is PublicSpec.MaxBody's default: 10 MiB.
const DefaultMaxBody = 10 << 20

// PublicView is a service's public endpoint as it runs.
type PublicView struct {
	// URL is https:// and the address it listens on.
	URL string `json:"url"`
	// Fingerprint is the SHA-256 of its certificate, as openssl prints it
	// (AB:CD:...).
	Fingerprint string `json:"fingerprint"`
	// CertPEM is the self-signed certificate, for clients to trust
	// (empty with the owner's certificate files).
	CertPEM  string    `json:"cert_pem,omitempty"`
	NotAfter time.Time `json:"not_after"`
	Tokens   int       `json:"tokens"`
	// Error says why the endpoint is not served (after a restart: its
	// address taken, its certificate unreadable).
	Error string `json:"error,omitempty"`
}

// APIToken is one of a service's API tokens, as listed (the secret itself
// is shown once, when it is made).
type APIToken struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Requests and Limited count, since the daemon started, the requests
	// the token was admitted for and those refused by its rate limit.
	Requests int64 `json:"requests"`
	Limited  int64 `json:"limited"`
	// Token is the secret, only in the answer that made it.
	Token string `json:"token,omitempty"`
}

// TokenRequest is the body of POST /v1/services/{id}/tokens.
type TokenRequest struct {
	Name string `json:"name"`
}

// DefaultTargetConcurrency is ServiceSpec.TargetConcurrency's default.
const DefaultTargetConcurrency = 8

// Replica states, in ReplicaView.State.
const (
	ReplicaBidding   = "bidding"   // its auction runs
	ReplicaStarting  = "starting"  // leased, not ready yet
	ReplicaReady     = "ready"     // in routing
	ReplicaUnhealthy = "unhealthy" // failing its probe: out of routing
	ReplicaDraining  = "draining"  // leaving: finishes its requests, then its lease is cancelled
)

// ReplicaView is one replica of a service.
type ReplicaView struct {
	JobID    string    `json:"job_id"`
	LeaseID  string    `json:"lease_id,omitempty"`
	Provider string    `json:"provider,omitempty"`
	State    string    `json:"state"`
	LeaseEnd time.Time `json:"lease_end,omitempty"`
	// PriceUSD is the lease's price per GPU-hour, GPUs its GPUs.
	PriceUSD float64 `json:"price_usd,omitempty"`
	GPUs     int     `json:"gpus,omitempty"`
	// Renewing is set once a successor has been asked for (the lease ends
	// soon).
	Renewing bool      `json:"renewing,omitempty"`
	Since    time.Time `json:"since"`
	// Region is the one of ServiceSpec.Regions the replica was leased in
	// (empty for a service without regions); ProviderRegion the region
	// its provider bid from.
	Region         string `json:"region,omitempty"`
	ProviderRegion string `json:"provider_region,omitempty"`
	// RTTMS is the round trip this node measured to its provider, in
	// milliseconds (0: not measured), which routing goes by.
	RTTMS float64 `json:"rtt_ms,omitempty"`
	// Members are a gang replica's members by rank (Job.Nodes > 1), as
	// its job's view shows them (JobView.Gang): the replica's own lease,
	// provider and region are rank 0's, which serves its port and which
	// the gateway routes to; GPUs and PriceUSD are every member's GPUs
	// and their mean price.
	Members []GangMember `json:"members,omitempty"`
	ReplicaStats
}

// RegionView is one of a service's regions: its replicas ready and
// wanted, and the round trip routing ranks it by (its nearest ready
// replica's; 0: none measured). Rank is its place in routing now, 1 for
// the region requests go to first (0: it has no ready replica).
type RegionView struct {
	Region string  `json:"region"`
	Ready  int     `json:"ready"`
	Want   int     `json:"want"`
	RTTMS  float64 `json:"rtt_ms,omitempty"`
	Rank   int     `json:"rank"`
}

// ReplicaStats are a replica's (or a service's) routing figures: totals
// since it joined, rate and latency percentiles over the last minute.
type ReplicaStats struct {
	Outstanding int     `json:"outstanding"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	RatePerSec  float64 `json:"rate_per_sec"`
	ErrorRate   float64 `json:"error_rate"`
	P50MS       float64 `json:"p50_ms"`
	P95MS       float64 `json:"p95_ms"`
	P99MS       float64 `json:"p99_ms"`
	LastError   string  `json:"last_error,omitempty"`
	// GPUSeconds is the GPU time of the lease(s) so far (a service's:
	// every replica's, gone ones' too) and CostUSD what it costs at the
	// lease price: the renter's estimate, receipts settle the actual sums.
	// USDPer1kRequests is CostUSD per 1,000 requests.
	GPUSeconds       float64 `json:"gpu_seconds"`
	CostUSD          float64 `json:"cost_usd"`
	USDPer1kRequests float64 `json:"usd_per_1k_requests"`
	// PromptTokens and CompletionTokens add up the usage of answers that
	// carry one (OpenAI-compatible servers: a JSON "usage" field, in the
	// body or in the last server-sent event that has one);
	// TokensPerSec is completion tokens per second over the last 10 s,
	// USDPer1MTokens CostUSD per million tokens (prompt and completion).
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	TokensPerSec     float64 `json:"tokens_per_sec"`
	USDPer1MTokens   float64 `json:"usd_per_1m_tokens"`
}

// ServiceEvent is one entry of a service's recent history.
type ServiceEvent struct {
	Time time.Time `json:"time"`
	What string    `json:"what"`
}

// ServiceView is the answer of the /v1/services endpoints.
type ServiceView struct {
	ID   string      `json:"id"`
	Spec ServiceSpec `json:"spec"`
	// Gateway is the loopback HTTP address that routes to the replicas.
	Gateway string `json:"gateway"`
	// Token is the gateway's secret: every request must carry it, in the
	// X-Gpumesh-Token header or as ?token=.
	Token string `json:"token,omitempty"`
	// Public is the public endpoint, when the spec asks for one.
	Public   *PublicView   `json:"public,omitempty"`
	Stopped  bool          `json:"stopped,omitempty"`
	Desired  int           `json:"desired"`
	Ready    int           `json:"ready"`
	Replicas []ReplicaView `json:"replicas"`
	Regions  []RegionView  `json:"regions,omitempty"`
	// ScaledToZero is set while a ScaleToZero service runs no replica
	// for being idle. ColdStarts counts the times a request woke it, and
	// LastColdStartMS is how long the latest took: from the request to
	// its first replica ready.
	ScaledToZero    bool           `json:"scaled_to_zero,omitempty"`
	ColdStarts      int            `json:"cold_starts,omitempty"`
	LastColdStartMS float64        `json:"last_cold_start_ms,omitempty"`
	Totals          ReplicaStats   `json:"totals"`
	Retries         int64          `json:"retries"`
	Events          []ServiceEvent `json:"events,omitempty"`
	Created         time.Time      `json:"created"`
}

// LatencySample is a service's requests through its gateway over the
// minute before Time, as its status showed them then (Totals): how many,
// how many failed, and the latency percentiles of the others.
type LatencySample struct {
	Time     time.Time `json:"time"`
	Requests int       `json:"requests"`
	Errors   int       `json:"errors"`
	P50MS    float64   `json:"p50_ms"`
	P95MS    float64   `json:"p95_ms"`
}

// ServiceHistoryView is GET /v1/services/{id}/history: a sample every
// Every over the last day (kept in memory: since the daemon started at
// most), oldest first, the last one taken at the call.
type ServiceHistoryView struct {
	ID      string          `json:"id"`
	Every   time.Duration   `json:"every"`
	Samples []LatencySample `json:"samples"`
}

// ScaleRequest is the body of POST /v1/services/{id}/scale: new bounds
// (zero leaves one as it is).
type ScaleRequest struct {
	Replicas    int `json:"replicas,omitempty"`
	MaxReplicas int `json:"max_replicas,omitempty"`
}

func servicePath(id, suffix string) string { return "/services/" + url.PathEscape(id) + suffix }

// PostService is POST /v1/services: start a service; it returns once the
// service exists (its replicas are leased in the background).
func (c *Client) PostService(ctx context.Context, spec ServiceSpec) (ServiceView, error) {
	var v ServiceView
	err := c.Do(ctx, http.MethodPost, "/services", nil, spec, &v)
	return v, err
}

// PostServiceTask is POST /v1/services with a service file's text, which
// the daemon converts (taskfile.ConvertService) and starts.
func (c *Client) PostServiceTask(ctx context.Context, name, text string) (ServiceView, error) {
	var v ServiceView
	err := c.Do(ctx, http.MethodPost, "/services", nil, PostServiceRequest{Task: text, TaskName: name}, &v)
	return v, err
}

// Services is GET /v1/services.
func (c *Client) Services(ctx context.Context) ([]ServiceView, error) {
	var vs []ServiceView
	err := c.Do(ctx, http.MethodGet, "/services", nil, nil, &vs)
	return vs, err
}

// Service is GET /v1/services/{id}.
func (c *Client) Service(ctx context.Context, id string) (ServiceView, error) {
	var v ServiceView
	err := c.Do(ctx, http.MethodGet, servicePath(id, ""), nil, nil, &v)
	return v, err
}

// ServiceHistory is GET /v1/services/{id}/history.
func (c *Client) ServiceHistory(ctx context.Context, id string) (ServiceHistoryView, error) {
	var v ServiceHistoryView
	err := c.Do(ctx, http.MethodGet, servicePath(id, "/history"), nil, nil, &v)
	return v, err
}

// ScaleService is POST /v1/services/{id}/scale.
func (c *Client) ScaleService(ctx context.Context, id string, req ScaleRequest) (ServiceView, error) {
	var v ServiceView
	err := c.Do(ctx, http.MethodPost, servicePath(id, "/scale"), nil, req, &v)
	return v, err
}

// StopService is POST /v1/services/{id}/stop: the gateway closes and every
// replica's lease is cancelled.
func (c *Client) StopService(ctx context.Context, id string) (ServiceView, error) {
	var v ServiceView
	err := c.Do(ctx, http.MethodPost, servicePath(id, "/stop"), nil, nil, &v)
	return v, err
}

// AddServiceToken is POST /v1/services/{id}/tokens: a new API token for
// the service's public endpoint, its secret in the answer (only there).
func (c *Client) AddServiceToken(ctx context.Context, id, name string) (APIToken, error) {
	var t APIToken
	err := c.Do(ctx, http.MethodPost, servicePath(id, "/tokens"), nil, TokenRequest{Name: name}, &t)
	return t, err
}

// ServiceTokens is GET /v1/services/{id}/tokens.
func (c *Client) ServiceTokens(ctx context.Context, id string) ([]APIToken, error) {
	var ts []APIToken
	err := c.Do(ctx, http.MethodGet, servicePath(id, "/tokens"), nil, nil, &ts)
	return ts, err
}

// RevokeServiceToken is DELETE /v1/services/{id}/tokens/{name}: the token
// is refused from then on.
func (c *Client) RevokeServiceToken(ctx context.Context, id, name string) (APIToken, error) {
	var t APIToken
	err := c.Do(ctx, http.MethodDelete, servicePath(id, "/tokens/"+url.PathEscape(name)), nil, nil, &t)
	return t, err
}
