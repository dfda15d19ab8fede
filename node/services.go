package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// serviceLeaser posts service replicas through the tracker, as the
// control API posts jobs.
type serviceLeaser struct{ m *market }

func (l serviceLeaser) Post(job terms.Job) (api.JobView, error) {
	job.OwnerAddrs = l.m.d.Addrs()
	return l.m.tracker.Post(job)
}

func (l serviceLeaser) View(id string) (api.JobView, error)   { return l.m.tracker.View(id) }
func (l serviceLeaser) Cancel(id string) (api.JobView, error) { return l.m.tracker.Cancel(id) }

// newServices starts the renter's service manager.
func (m *market) newServices() error {
	var err error
	m.svc, err = service.NewManager(m.ctx, service.Config{
		Leaser:  serviceLeaser{m},
		Open:    m.openService,
		Now:     m.d.now,
		Log:     m.d.log,
		Store:   m.d.db.State("services"),
		Latency: m.d.net.RTTs(),
	})
	return err
}

// openService opens a service stream to a provider; a provider this node
// has no address of (e.g. after a restart) is looked up by its capability
// record first.
func (m *market) openService(ctx context.Context, p peer.ID) (network.Stream, error) {
	h := m.d.net.Host
	if h.Network().Connectedness(p) != network.Connected && len(h.Peerstore().Addrs(p)) == 0 {
		if c, err := m.d.disc.Lookup(ctx, p); err == nil {
			m.d.net.AddAddrs(p, c.Addrs)
		}
	}
	return h.NewStream(ctx, p, wire.ProtoService)
}

// serveService connects a renter's stream to one of its service
// replicas (provider side).
func (m *market) serveService(s network.Stream) {
	err := service.Serve(m.ctx, s, func(leaseID string, from peer.ID) (service.Target, error) {
		a, ok := m.sup.Authorize(leaseID, from)
		if !ok {
			return nil, fmt.Errorf("lease %s: no such lease of yours", leaseID)
		}
		if a.ServicePort() == 0 {
			return nil, fmt.Errorf("lease %s is not a service", leaseID)
		}
		return a, nil
	})
	if err != nil {
		m.d.log.Debug("service stream", "peer", s.Conn().RemotePeer(), "err", err)
	}
}

func (m *market) serviceRoutes(mux *http.ServeMux) {
	d := m.d
	api.Handle(mux, "POST /v1/services", func(r *http.Request) (any, error) {
		var req api.PostServiceRequest
		dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, api.BadRequest("service spec: %v", err)
		}
		spec := req.ServiceSpec
		if req.Task != "" {
			if !reflect.ValueOf(spec).IsZero() {
				return nil, api.BadRequest("give a service spec or a task, not both")
			}
			var err error
			if spec, err = taskfile.ConvertServiceRequest(req.Task, req.TaskName, d.now()); err != nil {
				return nil, err
			}
		}
		return m.svc.Post(spec)
	})
	api.Handle(mux, "POST /v1/services/{id}/scale", func(r *http.Request) (any, error) {
		var req api.ScaleRequest
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16)).Decode(&req); err != nil {
			return nil, api.BadRequest("scale request: %v", err)
		}
		return m.svc.Scale(r.PathValue("id"), req)
	})
	api.Handle(mux, "POST /v1/services/{id}/stop", func(r *http.Request) (any, error) { return m.svc.Stop(r.PathValue("id")) })
	api.Handle(mux, "POST /v1/services/{id}/tokens", func(r *http.Request) (any, error) {
		var req api.TokenRequest
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16)).Decode(&req); err != nil {
			return nil, api.BadRequest("token request: %v", err)
		}
		return m.svc.AddToken(r.PathValue("id"), req.Name)
	})
	api.Handle(mux, "GET /v1/services/{id}/tokens", func(r *http.Request) (any, error) { return m.svc.Tokens(r.PathValue("id")) })
	api.Handle(mux, "DELETE /v1/services/{id}/tokens/{name}", func(r *http.Request) (any, error) {
		return m.svc.RevokeToken(r.PathValue("id"), r.PathValue("name"))
	})
}
