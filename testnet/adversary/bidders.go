package adversary

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Bidders are hostile identities that bid on every call they hear and
// never confirm an award.
type Bidders struct {
	Peers []*Peer
	provs []*auction.Provider
}

// Bids is how many bids they have sent in all.
func (b *Bidders) Bids() int {
	n := 0
	for _, p := range b.provs {
		n += p.Stats().Bids
	}
	return n
}

// Close takes them off the network.
func (b *Bidders) Close() {
	for _, p := range b.Peers {
		_ = p.Close()
	}
}

// NonConfirmingBidders starts n identities (each its own libp2p node,
// joined through cfg.Bootstrap) that hear calls, bid lowest (cfg.Price,
// default 0.01/GPU-hour) and hold every award's stream open without ever
// confirming, until ctx ends. Close them when done.
func NonConfirmingBidders(ctx context.Context, n int, pc PeerConfig, cfg BidderConfig) (*Bidders, error) {
	b := &Bidders{}
	for i := 0; i < n; i++ {
		p, err := NewPeer(ctx, pc)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.Peers = append(b.Peers, p)
		prov, err := p.bidder(ctx, cfg, nil)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.provs = append(b.provs, prov)
	}
	return b, nil
}

// FloodConfig configures a call flood.
type FloodConfig struct {
	// Owners is how many distinct owner identities sign the calls (default
	// 4). The first is the flooding peer itself, which answers every bid by
	// holding its stream open; the others are identities with no node at
	// all, whose bids cannot be delivered.
	Owners int
	// Rate is calls per second, over all owners (default 200).
	Rate float64
	// Region and GPUModel aim the calls (default "eu", any model).
	Region   string
	GPUModel string
}

// FloodReport counts what a flood published.
type FloodReport struct {
	Calls      int `json:"calls"`
	PublishErr int `json:"publish_errors"`
	// BidsHeld is how many bids reached the flooding owner (and were held
	// until their sender gave up).
	BidsHeld int `json:"bids_held"`
}

// CallFlood publishes calls for bids, signed by owners that never accept
// a bid, at cfg.Rate until ctx ends. Each call is a fresh, valid job (so
// that no provider can drop it as a duplicate).
func CallFlood(ctx context.Context, p *Peer, cfg FloodConfig) (FloodReport, error) {
	if cfg.Owners <= 0 {
		cfg.Owners = 4
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 200
	}
	if cfg.Region == "" {
		cfg.Region = "eu"
	}
	owners := []*sign.Signer{p.Signer}
	for len(owners) < cfg.Owners {
		s, err := NewSigner()
		if err != nil {
			return FloodReport{}, err
		}
		owners = append(owners, s)
	}
	var held atomic.Int64
	p.Node.Handle(wire.ProtoBid, func(hctx context.Context, _ peer.ID, _ []byte) ([]byte, error) {
		held.Add(1)
		select {
		case <-hctx.Done():
		case <-ctx.Done():
		}
		return nil, errors.New("no")
	})
	var rep FloodReport
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			rep.BidsHeld = int(held.Load())
			return rep, nil
		case <-tick.C:
		}
		owner := owners[i%len(owners)]
		job := terms.Job{ID: terms.NewID("flood"), Owner: owner.ID().String(), OwnerAddrs: p.Node.Addrs(),
			Tier: terms.Silver, MaxPrice: 100, GPUCount: 1, Duration: time.Hour, Region: cfg.Region,
			BidWindow: terms.MaxBidWindow, Run: terms.RunSpec{Command: []string{"true"}}, CreatedAt: time.Now()}
		if cfg.GPUModel != "" {
			job.GPUModels = []string{cfg.GPUModel}
		}
		if err := job.Validate(); err != nil {
			return rep, fmt.Errorf("adversary: flood job: %w", err)
		}
		for _, topic := range auction.JobTopics(&job) {
			data, err := terms.EncodeCall(owner, job, topic)
			if err != nil {
				return rep, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				err := p.Node.Publish(pctx, topic, data)
				mu.Lock()
				rep.Calls++
				if err != nil && ctx.Err() == nil {
					rep.PublishErr++
				}
				mu.Unlock()
			}()
		}
	}
}
