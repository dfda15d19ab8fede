// Package adversary is gpumesh's hostile-peer harness: peers built from the
// project's own libp2p, signing and message code that attack a running
// network the way a dishonest or broken node would. Each attack is a
// function (FakeProvider, NonConfirmingBidders, CallFlood, ReplayReceipts,
// SybilReceipts, SybilRecords, CallNamingAddrs, MalformedFrames,
// UnsolicitedNotice, MoveIntoPast, ReuseLeaseID) that reports what the
// target answered;
// the package's tests run them against in-process daemons and assert the
// outcome, and cmd/adversary runs them against any testnet.
package adversary

import (
	"context"
	"crypto/rand"
	"fmt"
	record "github.com/libp2p/go-libp2p-record"
	"log/slog"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Peer is one hostile identity on the network: a libp2p node of its own
// and the key it signs with.
type Peer struct {
	Node   *p2p.Node
	Signer *sign.Signer
	Log    *slog.Logger
}

// PeerConfig configures a Peer.
type PeerConfig struct {
	// Listen are the peer's multiaddrs; default a random loopback TCP port.
	Listen []string
	// Bootstrap are multiaddrs (with /p2p/ID) the peer joins through: the
	// target, and any other node it should reach directly.
	Bootstrap []string
	Log       *slog.Logger
}

// NewSigner makes a fresh identity.
func NewSigner() (*sign.Signer, error) {
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	return p2p.Signer(priv)
}

// NewPeer starts a peer with a fresh identity and connects it to its
// bootstrap peers.
func NewPeer(ctx context.Context, cfg PeerConfig) (*Peer, error) {
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	s, err := p2p.Signer(priv)
	if err != nil {
		return nil, err
	}
	if len(cfg.Listen) == 0 {
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n, err := p2p.New(ctx, p2p.Config{Key: priv, ListenAddrs: cfg.Listen, Bootstrap: cfg.Bootstrap,
		Reachability: p2p.ReachabilityPublic, Log: log,
		// The daemons' record validator, so a hostile peer can put a
		// well-formed capability record of its own (BidderConfig.Advertise).
		Validators: map[string]record.Validator{terms.CapabilityNamespace: terms.CapabilityValidator{Now: time.Now}}})
	if err != nil {
		return nil, err
	}
	p := &Peer{Node: n, Signer: s, Log: log.With("adversary", s.ID().String())}
	if len(cfg.Bootstrap) > 0 {
		bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := n.Bootstrap(bctx)
		cancel()
		if err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	return p, nil
}

// ID is the peer's identity.
func (p *Peer) ID() peer.ID { return peer.ID(p.Signer.ID()) }

// Close leaves the network.
func (p *Peer) Close() error { return p.Node.Close() }

// Connect dials the node at a multiaddr (with /p2p/ID) and returns its ID.
func (p *Peer) Connect(ctx context.Context, addr string) (peer.ID, error) {
	ais, err := p2p.ParseAddrInfos([]string{addr})
	if err != nil {
		return "", err
	}
	if len(ais) != 1 {
		return "", fmt.Errorf("adversary: %q is not one peer's address", addr)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Node.Host.Connect(cctx, ais[0]); err != nil {
		return "", fmt.Errorf("adversary: connect %s: %w", addr, err)
	}
	return ais[0].ID, nil
}

// SubscribeCalls makes the peer hear calls for bids for a capability, as
// an honest provider of it does: the calls sent to it directly on
// wire.ProtoCall (a sampled call) go to direct, whose answer (a bid or
// decline, or nil) goes back on the call's stream, those heard on the
// topics it subscribes to go to gossiped.
func (p *Peer) SubscribeCalls(ctx context.Context, c *terms.Capability, direct func(from peer.ID, data []byte) []byte, gossiped func(from peer.ID, data []byte)) error {
	p.Node.Handle(wire.ProtoCall, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return direct(from, req), nil
	})
	for _, t := range auction.ProviderTopics(c) {
		if err := p.Node.Subscribe(ctx, t, gossiped); err != nil {
			return err
		}
	}
	return nil
}
