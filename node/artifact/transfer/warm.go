package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Cache warming: a renter asks a provider to fetch an artifact ahead of a
// job, so that the provider's bids report nothing missing.
const (
	// WarmTTL is how long a warm request is valid after it is signed.
	WarmTTL = time.Minute
	// MaxWarming bounds the warm fetches one node runs at once, and
	// MaxWarmingPerPeer those asked for by one peer, so that one renter's
	// slow requests cannot take every slot.
	MaxWarming        = 4
	MaxWarmingPerPeer = 1
	// A warm fetch's deadline is DefaultWarmBaseTimeout to get the
	// manifest, then that plus the bytes to fetch at DefaultWarmMinRate,
	// at most WarmTimeout: a source that trickles (or stalls) loses the
	// slot.
	DefaultWarmBaseTimeout       = 2 * time.Minute
	DefaultWarmMinRate     int64 = 4 << 20 // bytes/s
	WarmTimeout                  = time.Hour
)

// warmDeadline is how long a warm fetch of missing bytes may take in all.
func (s *Service) warmDeadline(missing int64) time.Duration {
	base, rate := s.cfg.WarmBaseTimeout, s.cfg.WarmMinRate
	if base <= 0 {
		base = DefaultWarmBaseTimeout
	}
	if rate <= 0 {
		rate = DefaultWarmMinRate
	}
	return min(base+time.Duration(missing/rate)*time.Second, WarmTimeout)
}

// Warm asks provider (addrs its multiaddrs, may be empty) to fetch
// artifact id, which this node holds complete, into its store; a private
// artifact of ours goes with a grant for the provider. It returns the
// provider's acknowledgement once the provider has accepted (its fetch
// runs on; the provider advertises the artifact when it holds it) or the
// provider's refusal.
func (s *Service) Warm(ctx context.Context, id string, provider peer.ID, addrs []string) (wire.ArtifactWarmAck, error) {
	if !artifact.ValidID(id) {
		return wire.ArtifactWarmAck{}, fmt.Errorf("bad artifact id %q", id)
	}
	if _, complete, err := s.cfg.Store.Manifest(id); err != nil || !complete {
		return wire.ArtifactWarmAck{}, fmt.Errorf("artifact %s is not held complete on this node; add or fetch it first", artifact.ShortID(id))
	}
	meta, _, _ := s.cfg.Store.Meta(id)
	req := wire.ArtifactWarm{ID: id, Provider: provider.String(), Expires: time.Now().Add(WarmTTL)}
	if meta.Private {
		if meta.Owner != "" {
			return wire.ArtifactWarmAck{}, fmt.Errorf("artifact %s is private to its owner %s: only the owner can have it warmed", artifact.ShortID(id), meta.Owner)
		}
		g, err := s.Grant(id, provider)
		if err != nil {
			return wire.ArtifactWarmAck{}, err
		}
		req.Grant = g
	}
	env, err := sign.Seal(s.cfg.Signer, sign.DomainArtifactWarm, req)
	if err != nil {
		return wire.ArtifactWarmAck{}, err
	}
	b, err := env.Marshal()
	if err != nil {
		return wire.ArtifactWarmAck{}, err
	}
	resp, err := s.cfg.Net.Request(ctx, provider, addrs, wire.ProtoWarm, b)
	if err != nil {
		return wire.ArtifactWarmAck{}, err
	}
	var ack wire.ArtifactWarmAck
	if err := json.Unmarshal(resp, &ack); err != nil || ack.ID != id {
		return wire.ArtifactWarmAck{}, fmt.Errorf("provider %s: bad warm answer", provider)
	}
	return ack, nil
}

// HandleWarm answers a peer's warm request (wire.ProtoWarm): signed by the
// requesting peer, naming this node, unexpired, for an artifact of at most
// WarmMax bytes that fits the store's budget, while fewer than MaxWarming
// warm fetches run and none for the same peer (MaxWarmingPerPeer). The
// fetch is given up at its deadline (warmDeadline). The manifest is fetched from the requester before the
// answer, so that a refusal is reported; the chunks follow in the
// background, from the requester and any other holder.
func (s *Service) HandleWarm(ctx context.Context, from peer.ID, data []byte) ([]byte, error) {
	req, err := openWarm(data, from, s.cfg.Net.ID(), time.Now())
	switch {
	case err != nil:
		return nil, err
	case s.cfg.WarmMax <= 0:
		s.count("artifact.warm_refused", 1)
		return nil, errors.New("this node does not accept warm requests")
	}
	if m, complete, err := s.cfg.Store.Manifest(req.ID); err == nil && complete && s.cfg.Store.MayRead(req.ID, artifact.For(sign.ID(from))) == nil {
		s.cfg.Store.Pin(req.ID)() // wanted again: recently used, last out
		return json.Marshal(wire.ArtifactWarmAck{ID: req.ID, Size: m.Size})
	}
	s.mu.Lock()
	_, already := s.warming[req.ID]
	mine := 0
	for _, p := range s.warming {
		if p == from {
			mine++
		}
	}
	busy := !already && len(s.warming) >= MaxWarming
	perPeer := !already && !busy && mine >= MaxWarmingPerPeer
	if !busy && !already && !perPeer {
		s.warming[req.ID] = from
	}
	s.mu.Unlock()
	switch {
	case already:
		return nil, fmt.Errorf("artifact %s is already being warmed here", artifact.ShortID(req.ID))
	case busy:
		s.count("artifact.warm_refused", 1)
		return nil, fmt.Errorf("busy: %d warm fetches under way; try again later", MaxWarming)
	case perPeer:
		s.count("artifact.warm_refused", 1)
		return nil, fmt.Errorf("busy: your %d warm fetch(es) here are already under way; try again when done", mine)
	}
	accepted := make(chan wire.ArtifactWarmAck, 1)
	failed := make(chan error, 1)
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.warming, req.ID)
			s.mu.Unlock()
			s.changed.Notify()
		}()
		fctx, cancel := context.WithCancel(s.cfg.Context)
		defer cancel()
		// Until the manifest came, the base deadline; then one for the
		// bytes to fetch.
		deadline := time.AfterFunc(s.warmDeadline(0), cancel)
		defer deadline.Stop()
		origin := peer.AddrInfo{ID: from}
		_, err := s.Fetch(fctx, req.ID, FetchOptions{Origin: &origin, Grant: req.Grant, For: artifact.For(sign.ID(from)), Accept: func(m *artifact.Manifest, missing int64) error {
			if err := s.warmFits(m.Size, missing); err != nil {
				return err
			}
			deadline.Reset(s.warmDeadline(missing))
			accepted <- wire.ArtifactWarmAck{ID: req.ID, Size: m.Size, Fetching: missing}
			return nil
		}})
		if err != nil {
			failed <- err
			s.count("artifact.warm_failed", 1)
			s.log.Info("warm fetch failed", "artifact", artifact.ShortID(req.ID), "for", from, "err", err)
			return
		}
		s.count("artifact.warmed", 1)
		s.log.Info("artifact warmed", "artifact", artifact.ShortID(req.ID), "for", from)
	}()
	select {
	case ack := <-accepted:
		return json.Marshal(ack)
	case err := <-failed:
		return nil, fmt.Errorf("warm %s: %w", artifact.ShortID(req.ID), err)
	case <-ctx.Done():
		return nil, fmt.Errorf("warm %s: manifest not received: %w", artifact.ShortID(req.ID), ctx.Err())
	}
}

// openWarm decodes a warm request sent by from to self at now: signed by
// its sender, naming self, unexpired (and not valid implausibly long), for
// a well-formed artifact id.
func openWarm(data []byte, from, self peer.ID, now time.Time) (wire.ArtifactWarm, error) {
	env, err := sign.UnmarshalEnvelope(data)
	if err != nil {
		return wire.ArtifactWarm{}, fmt.Errorf("bad warm request: %v", err)
	}
	var req wire.ArtifactWarm
	signer, err := sign.Open(env, sign.DomainArtifactWarm, &req)
	switch {
	case err != nil:
		return wire.ArtifactWarm{}, fmt.Errorf("bad warm request: %v", err)
	case signer != sign.ID(from):
		return wire.ArtifactWarm{}, fmt.Errorf("warm request signed by %s, sent by %s", signer, from)
	case req.Provider != self.String():
		return wire.ArtifactWarm{}, fmt.Errorf("warm request is for %q, not this node", req.Provider)
	case !now.Before(req.Expires) || req.Expires.After(now.Add(2*WarmTTL)):
		return wire.ArtifactWarm{}, errors.New("warm request expired (or its expiry is implausibly far off: check clocks)")
	case !artifact.ValidID(req.ID):
		return wire.ArtifactWarm{}, fmt.Errorf("bad artifact id %q", req.ID)
	}
	return req, nil
}

// warmFits is the warm policy on size: at most WarmMax, and no more
// missing bytes than the store could hold were every unpinned artifact
// evicted.
func (s *Service) warmFits(size, missing int64) error {
	if size > s.cfg.WarmMax {
		s.count("artifact.warm_refused", 1)
		return fmt.Errorf("artifact of %d bytes is larger than this node warms (%d bytes at most)", size, s.cfg.WarmMax)
	}
	if budget, _ := s.cfg.Store.Budget(); budget > 0 && missing > budget-s.cfg.Store.PinnedBytes() {
		s.count("artifact.warm_refused", 1)
		return fmt.Errorf("%w: %d bytes to fetch do not fit beside the artifacts in use", artifact.ErrFull, missing)
	}
	return nil
}
