package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/history"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Leaser is the renter's lease side (lease.Tracker): each replica is one
// job posted, watched and cancelled through it.
type Leaser interface {
	Post(job terms.Job) (api.JobView, error)
	View(id string) (api.JobView, error)
	Cancel(id string) (api.JobView, error)
}

// Latency is the round trips from this node to providers.
type Latency interface {
	// Measure is the round trip to provider p: a fresh sample, else one
	// measured now within ctx.
	Measure(ctx context.Context, p peer.ID) (time.Duration, bool)
}

// Config configures a Manager.
type Config struct {
	Leaser Leaser
	// Open opens wire.ProtoService streams to providers.
	Open Opener
	Now  func() time.Time
	Log  *slog.Logger
	// Store persists services across restarts; nil keeps them in memory.
	Store Store
	// Latency is the round trips to providers (p2p.RTTs), by which the
	// gateway ranks a service's regions; nil: regions rank by Near and
	// name alone.
	Latency Latency
}

// Defaults of a ServiceSpec's optional fields.
const (
	DefaultLeaseDuration  = time.Hour
	DefaultScaleDownAfter = 2 * time.Minute
	DefaultProbeInterval  = time.Second
	DefaultStartTimeout   = 2 * time.Minute
	// MaxReplicas bounds a service's max_replicas.
	MaxReplicas = 64
	// EnvPort is set in each replica's environment to its service port.
	EnvPort = "PORT"
)

// Manager is a renter's services: it keeps each service's replicas leased,
// probes them, routes its gateway's requests to them, replaces the ones
// that fail or whose lease ends, and scales them.
type Manager struct {
	cfg Config
	log *slog.Logger
	ctx context.Context

	mu   sync.Mutex
	svcs map[string]*Service
	// changed is notified at each change of a service's state: an event,
	// its routing rebuilt, a turn of its control loop.
	changed broadcast.Signal
}

// Changed returns a channel closed at the next change of a service's
// state (what its View shows but its request figures): take it before
// reading the views, so that no change is missed.
func (m *Manager) Changed() <-chan struct{} { return m.changed.Wait() }

// NewManager returns a Manager; ctx bounds every service's background work.
func NewManager(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Leaser == nil || cfg.Open == nil {
		return nil, errors.New("service: manager needs a leaser and a stream opener")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: cfg.Log, ctx: ctx, svcs: map[string]*Service{}}, nil
}

func badRequest(format string, a ...any) error {
	return &lease.RequestError{Msg: fmt.Sprintf(format, a...)}
}

func notFound(id string) error {
	return &lease.RequestError{Missing: true, Msg: fmt.Sprintf("no service %q", id)}
}

// normalize fills spec's defaults and checks it; the replica job template
// is validated as the auction will validate each replica's job.
func normalize(spec *api.ServiceSpec, now time.Time) error {
	job := &spec.Job
	if spec.ID == "" {
		spec.ID = terms.NewID("svc")
	} else if err := terms.ValidID(spec.ID); err != nil {
		return badRequest("service id: %v", err)
	}
	if job.Run.ServicePort == 0 {
		return badRequest("service: a port is required (the port the server listens on)")
	}
	if err := normalizeRegions(spec); err != nil {
		return err
	}
	if err := normalizeZero(spec); err != nil {
		return err
	}
	if spec.Replicas < 1 {
		return badRequest("service: replicas must be at least 1, got %d", spec.Replicas)
	}
	if spec.MaxReplicas == 0 {
		spec.MaxReplicas = spec.Replicas
	}
	if spec.MaxReplicas < spec.Replicas || spec.MaxReplicas > MaxReplicas {
		return badRequest("service: max replicas must be in [%d, %d], got %d", spec.Replicas, MaxReplicas, spec.MaxReplicas)
	}
	if spec.Health != "" && !strings.HasPrefix(spec.Health, "/") {
		return badRequest("service: health path %q must start with /", spec.Health)
	}
	if spec.TargetP95 < 0 || spec.ScaleDownAfter < 0 || spec.ProbeInterval < 0 || spec.StartTimeout < 0 || spec.TargetConcurrency < 0 || spec.ProbeTimeout < 0 {
		return badRequest("service: durations and targets must not be negative")
	}
	if spec.Public != nil {
		if err := normalizePublic(spec.Public); err != nil {
			return err
		}
	}
	if job.Preemptible {
		return badRequest("service: replicas must not be preemptible (a service is always on)")
	}
	if job.MaxAttempts != 0 || len(job.Exclude) > 0 {
		return badRequest("service: a replica job takes no max_attempts or exclude: the service replaces lost replicas itself, leaving their providers out")
	}
	if job.GPUCount == 0 {
		job.GPUCount = 1
	}
	if job.Duration == 0 {
		job.Duration = DefaultLeaseDuration
	}
	if spec.TargetConcurrency == 0 {
		spec.TargetConcurrency = api.DefaultTargetConcurrency
	}
	if spec.ScaleDownAfter == 0 {
		spec.ScaleDownAfter = DefaultScaleDownAfter
	}
	if spec.ProbeInterval == 0 {
		spec.ProbeInterval = DefaultProbeInterval
	}
	spec.ProbeInterval = max(spec.ProbeInterval, 100*time.Millisecond)
	if spec.StartTimeout == 0 {
		spec.StartTimeout = DefaultStartTimeout
	}
	env := maps.Clone(job.Run.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[EnvPort] = fmt.Sprint(job.Run.ServicePort)
	job.Run.Env = env
	probe := *job
	probe.ID, probe.CreatedAt, probe.Deadline = "", now, time.Time{}
	if err := probe.Validate(); err != nil {
		return badRequest("service: replica job: %v", err)
	}
	job.BidWindow = probe.BidWindow
	return nil
}

// Post starts a service: its gateway listens at once, its replicas are
// leased in the background.
func (m *Manager) Post(spec api.ServiceSpec) (api.ServiceView, error) {
	if err := normalize(&spec, m.cfg.Now()); err != nil {
		return api.ServiceView{}, err
	}
	m.mu.Lock()
	if _, dup := m.svcs[spec.ID]; dup {
		m.mu.Unlock()
		return api.ServiceView{}, badRequest("service id %s already used", spec.ID)
	}
	m.mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return api.ServiceView{}, fmt.Errorf("service gateway: %w", err)
	}
	s := newService(m, spec, ln, "")
	if spec.Public != nil {
		if s.public, err = s.openPublic(spec.Public.Addr, "", ""); err != nil {
			_ = ln.Close()
			return api.ServiceView{}, badRequest("service public endpoint %s: %v", spec.Public.Addr, err)
		}
	}
	m.mu.Lock()
	if _, dup := m.svcs[spec.ID]; dup {
		m.mu.Unlock()
		_ = ln.Close()
		if s.public != nil {
			_ = s.public.srv.Close()
		}
		return api.ServiceView{}, badRequest("service id %s already used", spec.ID)
	}
	m.svcs[spec.ID] = s
	m.mu.Unlock()
	s.mu.Lock()
	s.save()
	s.mu.Unlock()
	s.start()
	m.log.Info("service started", "service", spec.ID, "gateway", s.Gateway(), "replicas", spec.Replicas, "max", spec.MaxReplicas)
	s.logPublic()
	return s.view(), nil
}

// logPublic logs where the public endpoint listens and its certificate's
// fingerprint (which clients of a self-signed one check).
func (s *Service) logPublic() {
	if p := s.public; p != nil {
		s.m.log.Info("service public endpoint", "service", s.spec.ID, "url", "https://"+p.ln.Addr().String(),
			"sha256_fingerprint", p.fingerprint, "self_signed", p.selfCert != "")
	}
}

func (m *Manager) get(id string) (*Service, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.svcs[id]
	if s == nil {
		return nil, notFound(id)
	}
	return s, nil
}

// View is one service's status.
func (m *Manager) View(id string) (api.ServiceView, error) {
	s, err := m.get(id)
	if err != nil {
		return api.ServiceView{}, err
	}
	return s.view(), nil
}

// History is a service's latency over the last day: a sample a minute
// (kept since this daemon started), then one of now.
func (m *Manager) History(id string) (api.ServiceHistoryView, error) {
	s, err := m.get(id)
	if err != nil {
		return api.ServiceHistoryView{}, err
	}
	return api.ServiceHistoryView{ID: id, Every: history.Every,
		Samples: append(s.latency.All(), s.win.sample(s.now()))}, nil
}

// List is every service's status, by id.
func (m *Manager) List() []api.ServiceView {
	m.mu.Lock()
	ids := slices.Sorted(maps.Keys(m.svcs))
	svcs := make([]*Service, len(ids))
	for i, id := range ids {
		svcs[i] = m.svcs[id]
	}
	m.mu.Unlock()
	out := make([]api.ServiceView, 0, len(svcs))
	for _, s := range svcs {
		out = append(out, s.view())
	}
	return out
}

// Scale changes a service's replica bounds.
func (m *Manager) Scale(id string, req api.ScaleRequest) (api.ServiceView, error) {
	s, err := m.get(id)
	if err != nil {
		return api.ServiceView{}, err
	}
	if err := s.scale(req); err != nil {
		return api.ServiceView{}, err
	}
	return s.view(), nil
}

// AddToken makes a new API token for a service's public endpoint; its
// secret is in the answer, and nowhere else.
func (m *Manager) AddToken(id, name string) (api.APIToken, error) {
	s, err := m.get(id)
	if err != nil {
		return api.APIToken{}, err
	}
	return s.addToken(name)
}

// Tokens lists a service's API tokens.
func (m *Manager) Tokens(id string) ([]api.APIToken, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	return s.listTokens()
}

// RevokeToken removes one of a service's API tokens.
func (m *Manager) RevokeToken(id, name string) (api.APIToken, error) {
	s, err := m.get(id)
	if err != nil {
		return api.APIToken{}, err
	}
	return s.revokeToken(name)
}

// Stop closes a service's gateway and cancels its replicas' leases.
func (m *Manager) Stop(id string) (api.ServiceView, error) {
	s, err := m.get(id)
	if err != nil {
		return api.ServiceView{}, err
	}
	s.stop("stopped by its owner")
	return s.view(), nil
}

// Close halts every service because the daemon shuts down: gateways
// close, replicas keep their leases, and Restore serves them again on
// the next start.
func (m *Manager) Close() {
	m.mu.Lock()
	svcs := slices.Collect(maps.Values(m.svcs))
	m.mu.Unlock()
	for _, s := range svcs {
		s.halt()
	}
}
