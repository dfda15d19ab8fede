// Package gpuverify carries GPU challenges (attest/gpuproof) over the
// network: a provider answers them on its devices; any node issues them
// (gpumesh verify) and gossips the verdicts, which every node's
// reputation book weighs, and gossips its own again while they count.
package gpuverify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultRepublish is how often a node gossips its own GPU verdicts
// again while they count (attest.VerdictValidFor): gossip is best-effort,
// and nodes that join later learn them too. A book counts each verdict
// once, however often it hears it.
const DefaultRepublish = 10 * time.Minute

// maxOwnVerdicts bounds the verdicts a node republishes.
const maxOwnVerdicts = 64

// Directory holds the providers' verified capability records.
type Directory interface {
	// Lookup is a provider's verified capability record (its devices).
	Lookup(ctx context.Context, id peer.ID) (terms.Capability, error)
}

// Counter counts protocol events (lease.Counters).
type Counter interface {
	Add(event string)
}

// Config is what a Service works with.
type Config struct {
	Net    *p2p.Node
	Signer *sign.Signer
	// Book is the node's reputation book, which weighs the verdicts.
	Book *attest.Book
	// Policy judges the answers to this node's challenges; nil is
	// gpuproof's rules.
	Policy *gpuproof.Policy
	// Directory holds the providers' verified capability records.
	Directory Directory
	// Republish is how often the node's own verdicts are gossiped again
	// (DefaultRepublish when not positive).
	Republish time.Duration
	// Counters count protocol events (a challenge answered or refused).
	Counters Counter
	Now      func() time.Time
	Log      *slog.Logger
}

// Service answers, issues and gossips GPU challenges' verdicts.
type Service struct {
	cfg      Config
	ctx      context.Context
	verdicts ownVerdicts
}

// New returns a Service whose gossip ends with ctx.
func New(ctx context.Context, cfg Config) *Service {
	if cfg.Republish <= 0 {
		cfg.Republish = DefaultRepublish
	}
	return &Service{cfg: cfg, ctx: ctx}
}

// Serve answers challenges on this provider's devices with prover.
func (s *Service) Serve(prover *gpuproof.Prover) {
	n := s.cfg.Net
	n.Host.SetStreamHandler(wire.ProtoGPUChallenge, n.Guard(wire.ProtoGPUChallenge, func(st network.Stream) {
		defer st.Close()
		_ = st.SetDeadline(time.Now().Add(gpuproof.MaxLifetime))
		if err := prover.Serve(sign.ID(st.Conn().RemotePeer()), st); err != nil {
			s.cfg.Counters.Add("provider.gpu_challenge_refused")
			s.cfg.Log.Debug("gpu challenge", "from", st.Conn().RemotePeer(), "err", err)
			return
		}
		s.cfg.Counters.Add("provider.gpu_challenge_answered")
	}))
}

// HandleVerdict feeds a gossiped verdict to the reputation book, which
// checks its signatures.
func (s *Service) HandleVerdict(_ peer.ID, data []byte) {
	var g wire.GPUVerdictGossip
	err := json.Unmarshal(data, &g)
	if err == nil {
		err = s.cfg.Book.AddVerdict(&gpuproof.SignedVerdict{Env: g.Verdict})
	}
	if err != nil {
		s.cfg.Log.Debug("gpu verdict rejected", "err", err)
		return
	}
	s.cfg.Log.Debug("gpu verdict recorded", "verifier", g.Verdict.Signer)
}

// Verify challenges provider id's device dev (its model and VRAM as its
// capability record says; n and k as gpuproof's, 0 for its defaults) and
// returns the outcome; a verdict is recorded in the book and gossiped.
func (s *Service) Verify(ctx context.Context, id peer.ID, dev, model string, vram, n, k int) api.VerifyResult {
	res := api.VerifyResult{Device: dev, Model: model}
	pol := gpuproof.Policy{}
	if s.cfg.Policy != nil {
		pol = *s.cfg.Policy
	}
	v := &gpuproof.Verifier{Signer: s.cfg.Signer, Policy: pol, Now: s.cfg.Now}
	cctx, cancel := context.WithTimeout(ctx, gpuproof.MaxLifetime)
	defer cancel()
	st, err := s.cfg.Net.Host.NewStream(cctx, id, wire.ProtoGPUChallenge)
	if err != nil {
		res.Error = fmt.Sprintf("open challenge stream: %v", err)
		return res
	}
	defer st.Close()
	stop := context.AfterFunc(cctx, func() { _ = st.Reset() })
	defer stop()
	sv, err := v.Run(cctx, st, sign.ID(id), dev, model, vram, n, k)
	if err != nil {
		res.Error = err.Error()
		res.NoVerdict = errors.Is(err, gpuproof.ErrNoVerdict)
		return res
	}
	verdict, err := sv.Open()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Verdict = &verdict
	if err := s.cfg.Book.AddVerdict(sv); err != nil {
		s.cfg.Log.Warn("own gpu verdict refused by the book", "err", err)
	}
	s.verdicts.add(sv.Env, verdict.Time)
	s.publish(sv.Env)
	return res
}

// HandleVerify is the control API's verify call (api.VerifyRequest): it
// challenges one provider's devices (all, or the one named), as its
// capability record lists them, one after another, and returns the
// verdicts (Verify), which it records and gossips.
func (s *Service) HandleVerify(r *http.Request) (any, error) {
	var req api.VerifyRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, api.BadRequest("verify request: %v", err)
	}
	id, err := peer.Decode(req.Peer)
	if err != nil {
		return nil, api.BadRequest("not a peer id: %q", req.Peer)
	}
	if id == s.cfg.Net.ID() {
		return nil, api.BadRequest("a node cannot verify itself")
	}
	if req.N < 0 || req.K < 0 || (req.N == 0) != (req.K == 0) {
		return nil, api.BadRequest("give both n and k, or neither")
	}
	ctx := r.Context()
	c, err := s.cfg.Directory.Lookup(ctx, id)
	if err != nil {
		return nil, api.NotFound("no capability record for %s: %v", id, err)
	}
	if len(c.GPUs) == 0 {
		return nil, api.BadRequest("%s offers no GPUs", id)
	}
	s.cfg.Net.AddAddrs(id, c.Addrs)
	var out []api.VerifyResult
	for i, g := range c.GPUs {
		dev := terms.DeviceName(c.GPUs, i)
		if req.Device != "" && req.Device != dev && req.Device != strconv.Itoa(i) {
			continue
		}
		out = append(out, s.Verify(ctx, id, dev, g.Model, g.VRAMGB, req.N, req.K))
	}
	if len(out) == 0 {
		return nil, api.NotFound("%s has no device %q", id, req.Device)
	}
	return out, nil
}

func (s *Service) publish(env *sign.Envelope) {
	b, err := json.Marshal(wire.GPUVerdictGossip{Verdict: env, Sent: s.cfg.Now().UTC()})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if err := s.cfg.Net.Publish(ctx, wire.GPUVerdictTopic, b); err != nil && s.ctx.Err() == nil {
		s.cfg.Log.Debug("gossip gpu verdict", "err", err)
	}
}

// Republish gossips the node's own verdicts that still count again, every
// Config.Republish, until New's context ends.
func (s *Service) Republish() {
	t := time.NewTicker(s.cfg.Republish)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			for _, env := range s.verdicts.current(s.cfg.Now()) {
				s.publish(env)
			}
		}
	}
}

// ownVerdicts are the signed verdicts this node issued, newest last.
type ownVerdicts struct {
	mu   sync.Mutex
	list []ownVerdict
}

type ownVerdict struct {
	env *sign.Envelope
	at  time.Time
}

func (o *ownVerdicts) add(env *sign.Envelope, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, ownVerdict{env, at})
	if len(o.list) > maxOwnVerdicts {
		o.list = o.list[len(o.list)-maxOwnVerdicts:]
	}
}

// current drops the verdicts that no longer count and returns the rest.
func (o *ownVerdicts) current(now time.Time) []*sign.Envelope {
	o.mu.Lock()
	defer o.mu.Unlock()
	keep := o.list[:0]
	var out []*sign.Envelope
	for _, v := range o.list {
		if now.Sub(v.at) < attest.VerdictValidFor {
			keep = append(keep, v)
			out = append(out, v.env)
		}
	}
	o.list = keep
	return out
}
