package service

import (
	"context"
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
}

type replicaRecord struct {
	JobID    string    `json:"job_id"`
	LeaseID  string    `json:"lease_id"`
	Provider string    `json:"provider"`
	LeaseEnd time.Time `json:"lease_end"`
	Renewing bool      `json:"renewing,omitempty"`
}

// save persists the service; s.mu is held.
func (s *Service) save() {
	s.dirty = false
	if s.m.cfg.Store == nil {
		return
	}
	rec := record{Spec: s.spec, Desired: s.desired, Gateway: s.Gateway(), Token: s.token, Stopped: s.stopped, Created: s.created, Avoid: s.avoid}
	for _, r := range s.reps {
		if r.leaseID != "" && r.state != api.ReplicaDraining {
			rec.Replicas = append(rec.Replicas, replicaRecord{JobID: r.jobID, LeaseID: r.leaseID, Provider: r.provider.String(),
				LeaseEnd: r.leaseEnd, Renewing: r.renewing})
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
		s.desired = min(max(rec.Desired, rec.Spec.Replicas), rec.Spec.MaxReplicas)
		s.mu.Lock()
		if moved {
			s.event("gateway %s is taken: now on %s", rec.Gateway, s.Gateway())
		}
		for _, rr := range rec.Replicas {
			prov, err := peer.Decode(rr.Provider)
			if err != nil {
				continue
			}
			r := &replica{jobID: rr.JobID, leaseID: rr.LeaseID, provider: prov, leaseEnd: rr.LeaseEnd, renewing: rr.Renewing,
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
	}
	return nil
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
