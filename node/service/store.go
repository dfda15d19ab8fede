package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Store persists one record per service (ledger.State).
type Store interface {
	Put(key string, v any) error
	List(fn func(key string, raw []byte) error) error
}

// record is a service as persisted: what a restarted daemon needs to
// serve it again on the same gateway address and adopt its replicas.
type record struct {
	Spec     api.ServiceSpec `json:"spec"`
	Desired  int             `json:"desired"`
	Gateway  string          `json:"gateway"`
	Token    string          `json:"token,omitempty"`
	Stopped  bool            `json:"stopped,omitempty"`
	Created  time.Time       `json:"created"`
	Replicas []replicaRecord `json:"replicas,omitempty"`
	// Avoid is the providers left out of new replicas' auctions.
	Avoid []string `json:"avoid,omitempty"`
	// Public is the public endpoint as it ran; Tokens its API tokens.
	Public *publicRecord `json:"public,omitempty"`
	Tokens []tokenRecord `json:"tokens,omitempty"`
	// SpentGPUSeconds and SpentUSD are the gone replicas' GPU time and
	// cost.
	SpentGPUSeconds float64 `json:"spent_gpu_seconds,omitempty"`
	SpentUSD        float64 `json:"spent_usd,omitempty"`
	// Asleep is set while a ScaleToZero service is scaled to zero;
	// ColdStarts and LastColdStart are its cold starts so far.
	Asleep        bool          `json:"asleep,omitempty"`
	ColdStarts    int           `json:"cold_starts,omitempty"`
	LastColdStart time.Duration `json:"last_cold_start,omitempty"`
}

type publicRecord struct {
	// Addr is where it listened (its port chosen, when the spec's was 0).
	Addr string `json:"addr"`
	// Cert and Key are its self-signed certificate and key (PEM).
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// tokenRecord is an API token as persisted: its SHA-256, never itself.
type tokenRecord struct {
	Name    string    `json:"name"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
}

type replicaRecord struct {
	JobID      string    `json:"job_id"`
	LeaseID    string    `json:"lease_id"`
	Provider   string    `json:"provider"`
	LeaseEnd   time.Time `json:"lease_end"`
	Renewing   bool      `json:"renewing,omitempty"`
	LeaseStart time.Time `json:"lease_start,omitzero"`
	Price      float64   `json:"price,omitempty"`
	GPUs       int       `json:"gpus,omitempty"`
	// Region and ProviderRegion are the replica's region of the spec's
	// regions, and its provider's.
	Region         string `json:"region,omitempty"`
	ProviderRegion string `json:"provider_region,omitempty"`
}

// save persists the service; s.mu is held.
func (s *Service) save() {
	s.dirty = false
	if s.m.cfg.Store == nil {
		return
	}
	rec := record{Spec: s.spec, Desired: s.desired, Gateway: s.Gateway(), Token: s.token, Stopped: s.stopped, Created: s.created, Avoid: s.avoid,
		SpentGPUSeconds: s.spentGPUSeconds, SpentUSD: s.spentUSD, Asleep: s.asleep, ColdStarts: s.coldStarts, LastColdStart: s.lastColdStart}
	if p := s.public; p != nil {
		rec.Public = &publicRecord{Addr: p.ln.Addr().String(), Cert: p.selfCert, Key: p.selfKey}
	} else if s.spec.Public != nil {
		rec.Public = s.publicRec // not served this run: kept for the next
	}
	for _, t := range *s.tokens.Load() {
		rec.Tokens = append(rec.Tokens, tokenRecord{Name: t.name, SHA256: hex.EncodeToString(t.hash[:]), Created: t.created})
	}
	for _, r := range s.reps {
		if r.leaseID != "" && r.state != api.ReplicaDraining {
			rec.Replicas = append(rec.Replicas, replicaRecord{JobID: r.jobID, LeaseID: r.leaseID, Provider: r.provider.String(),
				LeaseEnd: r.leaseEnd, Renewing: r.renewing, LeaseStart: r.leaseStart, Price: r.price, GPUs: r.gpus,
				Region: r.region, ProviderRegion: r.providerRegion})
		}
	}
	if err := s.m.cfg.Store.Put(s.spec.ID, rec); err != nil {
		s.m.log.Error("service: persist", "service", s.spec.ID, "err", err)
	}
}

// Restore serves again the services a previous run of the daemon left
// running: each on its old gateway address where it is still free, with
// its leased replicas adopted (probed before they are routed to; those
// whose lease has ended are replaced as usual).
func (m *Manager) Restore() error {
	if m.cfg.Store == nil {
		return nil
	}
	var recs []record
	err := m.cfg.Store.List(func(id string, raw []byte) error {
		var rec record
		if err := json.Unmarshal(raw, &rec); err != nil {
			m.log.Warn("service: unreadable record", "service", id, "err", err)
			return nil
		}
		if !rec.Stopped && rec.Spec.ID == id {
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("service: restore: %w", err)
	}
	for _, rec := range recs {
		ln, err := net.Listen("tcp", rec.Gateway)
		moved := err != nil
		if moved {
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return fmt.Errorf("service %s gateway: %w", rec.Spec.ID, err)
			}
		}
		s := newService(m, rec.Spec, ln, rec.Token) // a record from before tokens gets a new one
		s.created, s.avoid = rec.Created, rec.Avoid
		s.spentGPUSeconds, s.spentUSD = rec.SpentGPUSeconds, rec.SpentUSD
		s.desired = min(max(rec.Desired, rec.Spec.Replicas), rec.Spec.MaxReplicas)
		s.coldStarts, s.lastColdStart = rec.ColdStarts, rec.LastColdStart
		if rec.Asleep && rec.Spec.ScaleToZero {
			s.asleep, s.desired = true, 0
		}
		s.mu.Lock()
		if moved {
			s.event("gateway %s is taken: now on %s", rec.Gateway, s.Gateway())
		}
		s.restoreTokens(rec.Tokens)
		if rec.Spec.Public != nil {
			s.restorePublic(rec.Public)
		}
		for _, rr := range rec.Replicas {
			prov, err := peer.Decode(rr.Provider)
			if err != nil {
				continue
			}
			r := &replica{jobID: rr.JobID, leaseID: rr.LeaseID, provider: prov, leaseEnd: rr.LeaseEnd, renewing: rr.Renewing,
				leaseStart: rr.LeaseStart, price: rr.Price, gpus: rr.GPUs, region: rr.Region, providerRegion: rr.ProviderRegion,
				state: api.ReplicaStarting, since: s.now(), leasedAt: s.now(), stop: make(chan struct{})}
			r.transport = s.newTransport(prov, rr.LeaseID)
			s.reps = append(s.reps, r)
			s.event("replica %s adopted after a restart: lease %s on %s", r.jobID, r.leaseID, shortPeer(prov))
			s.startProbes(r)
		}
		s.save()
		s.mu.Unlock()
		m.mu.Lock()
		m.svcs[rec.Spec.ID] = s
		m.mu.Unlock()
		s.start()
		m.log.Info("service restored", "service", rec.Spec.ID, "gateway", s.Gateway(), "replicas", len(rec.Replicas))
		s.logPublic()
	}
	return nil
}

// restoreTokens takes a record's API tokens; s.mu is held.
func (s *Service) restoreTokens(recs []tokenRecord) {
	ts := make([]*apiToken, 0, len(recs))
	for _, tr := range recs {
		b, err := hex.DecodeString(tr.SHA256)
		if err != nil || len(b) != sha256.Size {
			s.m.log.Warn("service: unreadable API token record", "service", s.spec.ID, "token", tr.Name)
			continue
		}
		ts = append(ts, s.newAPIToken(tr.Name, [sha256.Size]byte(b), tr.Created))
	}
	s.tokens.Store(&ts)
}

// restorePublic serves the public endpoint again where it listened, else
// on the spec's address; when neither works (or its certificate does not
// load) the service runs without it, its status saying why; s.mu is held.
func (s *Service) restorePublic(rec *publicRecord) {
	addr, cert, key := s.spec.Public.Addr, "", ""
	if rec != nil {
		addr, cert, key = rec.Addr, rec.Cert, rec.Key
	}
	p, err := s.openPublic(addr, cert, key)
	if err != nil && addr != s.spec.Public.Addr {
		p, err = s.openPublic(s.spec.Public.Addr, cert, key)
	}
	if err != nil {
		s.publicRec, s.publicErr = rec, err.Error()
		s.event("public endpoint not served: %v", err)
		return
	}
	s.public = p
	if got := p.ln.Addr().String(); got != addr {
		s.event("public endpoint %s is taken: now on %s", addr, got)
	}
}

// newTransport is the HTTP transport to one replica: each connection is
// a wire.ProtoService stream to its provider.
func (s *Service) newTransport(prov peer.ID, leaseID string) *http.Transport {
	return replicaTransport(s.m.cfg.Open, prov, leaseID)
}

func replicaTransport(open Opener, prov peer.ID, leaseID string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return Connect(ctx, open, prov, leaseID)
		},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}
