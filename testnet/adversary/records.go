package adversary

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SybilRecordsReport is what a sybil-records attack published.
type SybilRecordsReport struct {
	// Identities are the fresh provider identities whose records it put.
	Identities []string `json:"identities"`
}

// SybilRecords makes n fresh provider identities and publishes a signed
// capability record for each, claiming what cfg says (by default one
// H100 in eu-west at 0.01/GPU-hour), as an honest provider advertises its
// own: the record under the identity's key in the DHT, and the identity
// as a provider of the record's discovery keys. A DHT server takes a
// provider record only from the provider itself but answers lookups from
// its own store, so p (a DHT server) keeps them there: one peer stands in
// for all, at the cost of a key each. The identities never bid. They only
// crowd renters' lists of the providers that fit a job, from which a
// call's bid sample is drawn: were the whole sample drawn from that list,
// they would push the providers a renter trusts out of its calls.
func SybilRecords(ctx context.Context, p *Peer, n int, cfg BidderConfig) (SybilRecordsReport, error) {
	var rep SybilRecordsReport
	self := peer.AddrInfo{Addrs: p.Node.Host.Addrs()}
	for range n {
		s, err := NewSigner()
		if err != nil {
			return rep, err
		}
		c := cfg.capability(peer.ID(s.ID()))
		b, err := terms.SealCapability(s, c)
		if err != nil {
			return rep, err
		}
		if err := putRecord(ctx, p, terms.CapabilityKey(s.ID()), b); err != nil {
			return rep, fmt.Errorf("adversary: record of %s: %w", s.ID(), err)
		}
		self.ID = peer.ID(s.ID())
		for _, k := range terms.DiscoveryKeys(c) {
			if err := p.Node.DHT.ProviderStore().AddProvider(ctx, p2p.KeyCID(k).Hash(), self); err != nil {
				return rep, fmt.Errorf("adversary: provider record %s: %w", k, err)
			}
		}
		rep.Identities = append(rep.Identities, s.ID().String())
	}
	return rep, nil
}

// putRecord puts a DHT record, trying again while p's routing table holds
// no DHT peer yet (right after joining).
func putRecord(ctx context.Context, p *Peer, key string, value []byte) error {
	for {
		err := p.Node.DHT.PutValue(ctx, key, value)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
