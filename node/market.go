package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// market connects the daemon to the auction (renter and provider roles),
// the runtime, attestation and the ledger.
type market struct {
	d        *Daemon
	book     *attest.Book
	renter   *auction.Renter
	provider *auction.Provider // nil on a renter-only node
	cal      *auction.Calendar
	exec     runtime.Executor
	jobsDir  string
	work     string // job scratch root

	provState *ledger.State // provider leases
	rentState *ledger.State // renter jobs

	mu      sync.Mutex
	runs    map[string]*leaseRun    // provider side, by lease id
	jobs    map[string]*api.JobView // renter side, by job id
	mons    map[string]*attest.HeartbeatMonitor
	byLease map[string]string // renter side: lease id → job id

	counters map[string]int
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
}

func newMarket(d *Daemon) (*market, error) {
	m := &market{
		d:         d,
		book:      attest.NewBook(attest.BookOptions{Now: d.now}),
		jobsDir:   d.paths.Jobs(),
		runs:      map[string]*leaseRun{},
		jobs:      map[string]*api.JobView{},
		mons:      map[string]*attest.HeartbeatMonitor{},
		byLease:   map[string]string{},
		counters:  map[string]int{},
		provState: d.db.State("provider-leases"),
		rentState: d.db.State("renter-jobs"),
	}
	m.ctx, m.cancel = context.WithCancel(d.ctx)
	if err := os.MkdirAll(m.jobsDir, 0o700); err != nil {
		return nil, fmt.Errorf("jobs dir: %w", err)
	}
	if err := m.loadReceipts(); err != nil {
		return nil, err
	}
	tr := &p2pTransport{m: m}
	var err error
	m.renter, err = auction.NewRenter(auction.RenterConfig{
		Signer: d.signer, Transport: tr, Reputation: m.book.Score, Now: d.now, Log: d.log,
		OnLease: m.onRenterLease, OnUnplaceable: m.onUnplaceable, Release: m.releaseLease,
	})
	if err != nil {
		return nil, err
	}
	if err := m.loadRenterJobs(); err != nil {
		return nil, err
	}
	if d.cfg.Provider.Enabled {
		if err := m.startProvider(tr); err != nil {
			return nil, err
		}
	}
	n := d.net
	n.Handle(wire.ProtoBid, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return nil, m.renter.HandleBid(from, req)
	})
	n.Handle(wire.ProtoHeartbeat, m.handleHeartbeat)
	n.Handle(wire.ProtoLeaseEvent, m.handleLeaseEvent)
	n.Handle(wire.ProtoReceipt, m.handleReceipt)
	if err := n.Subscribe(m.ctx, wire.ReputationTopic, m.handleGossipReceipt); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *market) startProvider(tr auction.Transport) error {
	d := m.d
	m.cal = auction.NewCalendar(len(d.inv.GPUs))
	var err error
	if m.work, err = prepareWorkRoot(d.cfg.Provider.WorkDir, d.paths.Dir); err != nil {
		return err
	}
	switch d.cfg.Provider.Executor {
	case "process":
		m.exec, err = runtime.NewProcessExecutor(m.workRoot(), runtime.ProcessOptions{Log: d.log})
	case "docker":
		m.exec, err = runtime.NewDockerExecutor(runtime.DefaultDockerSocket, runtime.DockerOptions{Root: m.workRoot(), Log: d.log})
	default:
		m.exec, err = runtime.Auto(m.workRoot(), d.log)
	}
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	m.provider, err = auction.NewProvider(auction.ProviderConfig{
		Signer: d.signer, Transport: tr, Calendar: m.cal, Now: d.now, Log: d.log,
		Capability: func() auction.Capability {
			if c := d.Advertised(); c != nil {
				return *c
			}
			return d.capability(d.advertiseTTL())
		},
		Sensors:     m.sensors,
		Reliability: func() float64 { return m.book.Score(d.ID().String()) },
		OnLease:     m.onProviderLease,
	})
	if err != nil {
		return err
	}
	if err := m.recoverProviderLeases(); err != nil {
		return err
	}
	d.net.Handle(wire.ProtoAward, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return m.provider.HandleAward(from, req)
	})
	d.net.Handle(wire.ProtoCancel, m.handleCancel)
	d.net.Host.SetStreamHandler(wire.ProtoLogs, m.serveLogs)
	d.net.Host.SetStreamHandler(wire.ProtoOutputs, m.serveOutputs)
	for _, t := range auction.ProviderTopics(ptr(d.capability(time.Minute))) {
		if err := d.net.Subscribe(m.ctx, t, func(from peer.ID, data []byte) {
			if err := m.provider.HandleCall(from, data); err != nil {
				d.log.Debug("call not bid on", "err", err)
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func (m *market) close() {
	m.cancel()
	m.mu.Lock()
	runs := make([]*leaseRun, 0, len(m.runs))
	for _, r := range m.runs {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	for _, r := range runs {
		r.shutdown()
	}
	m.wg.Wait()
}

func (m *market) executorName() string {
	if m.exec == nil {
		return ""
	}
	if a, ok := m.exec.(*runtime.AutoExecutor); ok {
		if a.Docker() != nil {
			return "auto (docker for images, sandboxed process otherwise; " + a.Process().Limits() + ")"
		}
		return "auto (sandboxed process; " + a.Process().Limits() + ")"
	}
	if p, ok := m.exec.(*runtime.ProcessExecutor); ok {
		return "process (" + p.Limits() + ")"
	}
	return m.exec.Name()
}

func (m *market) count(what string) {
	m.mu.Lock()
	m.counters[what]++
	m.mu.Unlock()
}

func (m *market) sensors() (int, int) {
	if m.d.inv.Source != runtime.SourceNVML {
		return 0, 0
	}
	t := runtime.Sample(m.d.inv)
	return t.TempC, t.PowerW
}

// p2pTransport carries the auction's messages over libp2p.
type p2pTransport struct{ m *market }

func (t *p2pTransport) Publish(ctx context.Context, topic string, data []byte) error {
	return t.m.d.net.Publish(ctx, topic, data)
}

func (t *p2pTransport) SendBid(ctx context.Context, to peer.ID, addrs []string, data []byte) error {
	_, err := t.m.d.net.Request(ctx, to, addrs, wire.ProtoBid, data)
	return err
}

func (t *p2pTransport) SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	if to == t.m.d.ID() && t.m.provider != nil {
		return t.m.provider.HandleAward(to, data)
	}
	return t.m.d.net.Request(ctx, to, nil, wire.ProtoAward, data)
}

// sealed marshals a signed envelope of v.
func (m *market) sealed(domain string, v any) ([]byte, error) {
	env, err := sign.Seal(m.d.signer, domain, v)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

func (m *market) routes(mux *http.ServeMux) {
	d := m.d
	d.route(mux, "POST /v1/jobs", m.apiPostJob)
	d.route(mux, "GET /v1/jobs", func(*http.Request) (any, error) { return m.jobList(), nil })
	d.route(mux, "GET /v1/jobs/{id}", func(r *http.Request) (any, error) { return m.jobView(r.PathValue("id")) })
	d.route(mux, "POST /v1/jobs/{id}/cancel", func(r *http.Request) (any, error) { return m.cancelJob(r.PathValue("id")) })
	d.route(mux, "GET /v1/jobs/{id}/bids", func(r *http.Request) (any, error) { return m.bids(r.PathValue("id")) })
	mux.HandleFunc("GET /v1/jobs/{id}/logs", m.apiLogs)
	mux.HandleFunc("GET /v1/jobs/{id}/outputs", m.apiOutputs)
	d.route(mux, "GET /v1/provider/stats", func(*http.Request) (any, error) { return m.providerStats() })
	d.route(mux, "GET /v1/reputation/{peer}", func(r *http.Request) (any, error) {
		p := r.PathValue("peer")
		if _, err := peer.Decode(p); err != nil {
			return nil, badRequest("not a peer id: %q", p)
		}
		return api.ReputationView{Peer: p, Rep: m.book.Stats(p)}, nil
	})
	d.route(mux, "GET /v1/counters", func(*http.Request) (any, error) { return m.allCounters(), nil })
	m.ledgerRoutes(mux)
}

// allCounters merges every rejection counter of the node's roles.
func (m *market) allCounters() map[string]int {
	out := map[string]int{}
	for k, v := range m.renter.Counters() {
		out["renter."+k] += v
	}
	if m.provider != nil {
		st := m.provider.Stats()
		for k, v := range st.Rejected {
			out["provider."+k] += v
		}
	}
	for k, v := range m.book.Counters() {
		out["reputation."+k] += v
	}
	m.mu.Lock()
	for k, v := range m.counters {
		out[k] += v
	}
	m.mu.Unlock()
	if n := m.d.fpChanges.Load(); n > 0 {
		out["discovery.fingerprint_changed"] = int(n)
	}
	return out
}

var errNoProvider = errors.New("this node is not a provider (set provider.enabled in its config)")

// prepareWorkRoot returns the jobs' scratch root: the configured one, or a
// directory under the system temp dir named after the data dir. Job uids
// must be able to traverse to it (0711), and it must be ours: a directory
// planted there by another user is refused.
func prepareWorkRoot(configured, dataDir string) (string, error) {
	root := configured
	if root == "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256([]byte(abs))
		root = filepath.Join(os.TempDir(), "gpumesh-"+hex.EncodeToString(sum[:6]))
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || (ok && int(st.Uid) != os.Geteuid()) {
		return "", fmt.Errorf("work dir %s is not a directory owned by this user; refusing to run jobs there", root)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	return filepath.Join(root, "work"), nil
}
