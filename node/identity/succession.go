package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultRepublish is how often a rotated node publishes its
// identity succession again, in the DHT (whose records expire) and by
// gossip (best-effort; nodes that join later hear it too). Books and the
// DHT take each succession once, however often they hear it.
const DefaultRepublish = 10 * time.Minute

// Counter counts protocol events (lease.Counters).
type Counter interface {
	Add(event string)
}

// SuccessionsConfig is what a Successions works with.
type SuccessionsConfig struct {
	Net *p2p.Node
	// Book is the reputation book that takes the successions in.
	Book *attest.Book
	// Ledger holds this node's own successions.
	Ledger *ledger.DB
	// Republish is how often this node's succession is published again
	// (DefaultRepublish when not positive).
	Republish time.Duration
	// Counters count protocol events (a malformed succession).
	Counters Counter
	Now      func() time.Time
	Log      *slog.Logger
}

// Successions spreads this node's identity succession and takes in the
// ones peers gossip.
type Successions struct {
	cfg SuccessionsConfig
	ctx context.Context
}

// NewSuccessions returns a Successions whose publishing ends with ctx.
func NewSuccessions(ctx context.Context, cfg SuccessionsConfig) *Successions {
	if cfg.Republish <= 0 {
		cfg.Republish = DefaultRepublish
	}
	return &Successions{cfg: cfg, ctx: ctx}
}

// LearnOwn teaches the book the successions in this node's
// ledger, oldest first, and returns the last: the one that made this
// identity (Start checked that the ledger's owner is this node), or nil
// for a node that never rotated.
func (s *Successions) LearnOwn() (*sign.SignedSuccession, error) {
	es, err := s.cfg.Ledger.List(record.Filter{Kind: record.KindSuccession})
	if err != nil {
		return nil, err
	}
	var last *sign.SignedSuccession
	for _, e := range es {
		ss, _, err := sign.OpenSuccession(e.Data)
		if err != nil {
			return nil, fmt.Errorf("ledger entry %d: %w", e.Seq, err)
		}
		if err := s.cfg.Book.Succeed(ss); err != nil {
			s.cfg.Log.Warn("own identity succession refused by the book", "seq", e.Seq, "err", err)
		}
		last = ss
	}
	return last, nil
}

// Handle gives a gossiped succession (wire.SuccessionTopic) to
// the book, which verifies it and counts what it made of it.
func (s *Successions) Handle(from peer.ID, data []byte) {
	var g wire.SuccessionGossip
	if len(data) > 2*sign.MaxSuccessionSize || json.Unmarshal(data, &g) != nil || g.Succession == nil {
		s.cfg.Counters.Add("reputation.succession_malformed")
		return
	}
	if err := s.cfg.Book.Succeed(g.Succession); err != nil {
		s.cfg.Log.Debug("gossiped identity succession refused", "from", from, "err", err)
	}
}

// Publish publishes this node's succession under its old
// identity's key in the DHT and on the successions topic: at start, again
// after 2 s, 4 s, 8 s... while the node joins the network and its gossip
// mesh forms, then every SuccessionsConfig.Republish, until
// NewSuccessions' context ends.
func (s *Successions) Publish(ss *sign.SignedSuccession) {
	every := s.cfg.Republish
	wait := min(2*time.Second, every)
	for {
		s.publish(ss)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, every)
	}
}

func (s *Successions) publish(ss *sign.SignedSuccession) {
	rec, err := ss.Open()
	if err != nil {
		return
	}
	old, err := peer.Decode(rec.Old)
	if err != nil {
		return
	}
	value, err := ss.Marshal()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	if err := s.cfg.Net.DHT.PutValue(ctx, attest.SuccessionKey(sign.ID(old)), value); err != nil && s.ctx.Err() == nil {
		s.cfg.Log.Debug("put identity succession", "err", err)
	}
	b, err := json.Marshal(wire.SuccessionGossip{Succession: ss, Sent: s.cfg.Now().UTC()})
	if err != nil {
		return
	}
	if err := s.cfg.Net.Publish(ctx, wire.SuccessionTopic, b); err != nil && s.ctx.Err() == nil {
		s.cfg.Log.Debug("gossip identity succession", "err", err)
	}
}
