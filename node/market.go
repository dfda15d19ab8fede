package node

import (
	"net/http"

	"github.com/gpumesh/gpumesh/auction"
)

// market connects the daemon to the auction, the runtime, attestation and
// the ledger.
type market struct{ d *Daemon }

func newMarket(d *Daemon) (*market, error) { return &market{d: d}, nil }

func (m *market) close()                               {}
func (m *market) capabilityChanged(auction.Capability) {}
func (m *market) routes(*http.ServeMux)                {}
func (m *market) executorName() string                 { return "" }
