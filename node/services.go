package node

import (
	"context"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
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
