package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultSuccessionRepublish is how often a rotated node publishes its
// identity succession again, in the DHT (whose records expire) and by
// gossip (best-effort; nodes that join later hear it too). Books and the
// DHT take each succession once, however often they hear it.
const DefaultSuccessionRepublish = 10 * time.Minute

// learnOwnSuccessions teaches the book the successions in this node's
// ledger, oldest first, and returns the last: the one that made this
// identity (Start checked that the ledger's owner is this node), or nil
// for a node that never rotated.
func (m *market) learnOwnSuccessions() (*sign.SignedSuccession, error) {
	es, err := m.d.db.List(record.Filter{Kind: record.KindSuccession})
	if err != nil {
		return nil, err
	}
	var last *sign.SignedSuccession
	for _, e := range es {
		ss, _, err := sign.OpenSuccession(e.Data)
		if err != nil {
			return nil, fmt.Errorf("ledger entry %d: %w", e.Seq, err)
		}
		if err := m.book.Succeed(ss); err != nil {
			m.d.log.Warn("own identity succession refused by the book", "seq", e.Seq, "err", err)
		}
		last = ss
	}
	return last, nil
}

// handleSuccession gives a gossiped succession (wire.SuccessionTopic) to
// the book, which verifies it and counts what it made of it.
func (m *market) handleSuccession(from peer.ID, data []byte) {
	var g wire.SuccessionGossip
	if len(data) > 2*sign.MaxSuccessionSize || json.Unmarshal(data, &g) != nil || g.Succession == nil {
		m.counters.Add("reputation.succession_malformed")
		return
	}
	if err := m.book.Succeed(g.Succession); err != nil {
		m.d.log.Debug("gossiped identity succession refused", "from", from, "err", err)
	}
}

// publishSuccessionLoop publishes this node's succession under its old
// identity's key in the DHT and on the successions topic: at start, again
// after 2 s, 4 s, 8 s... while the node joins the network and its gossip
// mesh forms, then every Options.SuccessionRepublish.
func (m *market) publishSuccessionLoop(ss *sign.SignedSuccession) {
	every := m.d.opts.SuccessionRepublish
	if every <= 0 {
		every = DefaultSuccessionRepublish
	}
	wait := min(2*time.Second, every)
	for {
		m.publishSuccession(ss)
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, every)
	}
}

func (m *market) publishSuccession(ss *sign.SignedSuccession) {
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
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.d.net.DHT.PutValue(ctx, attest.SuccessionKey(old), value); err != nil && m.ctx.Err() == nil {
		m.d.log.Debug("put identity succession", "err", err)
	}
	b, err := json.Marshal(wire.SuccessionGossip{Succession: ss, Sent: m.d.now().UTC()})
	if err != nil {
		return
	}
	if err := m.d.net.Publish(ctx, wire.SuccessionTopic, b); err != nil && m.ctx.Err() == nil {
		m.d.log.Debug("gossip identity succession", "err", err)
	}
}
