package node

import (
	"context"
	"io"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/leasestream"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// evidence is what the renter fetches of a lease from its provider
// (lease.Evidence).
type evidence struct{ d *Daemon }

// FetchOutputs opens a lease's outputs on its provider (the outputs
// stream; a sealed job's from its sealed outputs artifact): a no-persist
// lease's renter keeps them before it settles. The stream ends by ctx's
// deadline.
func (e evidence) FetchOutputs(ctx context.Context, prov peer.ID, leaseID, sealed string) ([]terms.OutputFile, io.ReadCloser, error) {
	if sealed != "" {
		return e.d.jobArts.OpenSealedOutputs(ctx, prov, leaseID, sealed)
	}
	return leasestream.FetchOutputs(ctx, e.d.net.Host, prov, leaseID)
}

// FetchLog opens a lease's whole log on its provider (the logs stream, not
// following): the renter checks a succeeded run's evidence with it. The
// stream ends by ctx's deadline.
func (e evidence) FetchLog(ctx context.Context, prov peer.ID, leaseID string) (io.ReadCloser, error) {
	return leasestream.Fetch(ctx, e.d.net.Host, prov, wire.ProtoLogs, leaseID)
}

// relay is the renter's side of its jobs' lease streams, for the control
// API.
func (m *market) relay() *leasestream.Relay {
	return leasestream.NewRelay(m.ctx, leasestream.RelayConfig{Host: m.d.net.Host, Jobs: m.tracker,
		Sealed: m.d.jobArts})
}
