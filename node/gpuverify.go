package node

import (
	"github.com/gpumesh/gpumesh/auction"
	"sync"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"net/http"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// GPU challenges (attest/gpuproof): a provider answers them on its
// devices; any node issues them (gpumesh verify) and gossips the verdicts,
// which every node's reputation book weighs.

// serveChallenges answers challenges on this provider's devices: through
// CUDA on NVML-detected GPUs, on the CPU path for declared ones. A device a
// lease holds now is busy (no verdict, no work taken from the tenant).
func (m *market) serveChallenges() {
	d := m.d
	backend := d.opts.ChallengeBackend
	if backend == nil {
		backend = runtime.ChallengeBackend(d.inv)
	}
	prover := &gpuproof.Prover{Signer: d.signer, Backend: backend, Now: d.now,
		Devices: func(dev string) bool { return runtime.ChallengeDeviceIndex(d.inv, dev) >= 0 },
		Busy: func(dev string) bool {
			i := runtime.ChallengeDeviceIndex(d.inv, dev)
			now := d.now()
			return len(m.cal.FreeDevices(now, now.Add(gpuproof.MaxLifetime), []int{i})) == 0
		},
	}
	d.net.Host.SetStreamHandler(wire.ProtoGPUChallenge, d.net.Guard(wire.ProtoGPUChallenge, func(s network.Stream) {
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(gpuproof.MaxLifetime))
		if err := prover.Serve(s.Conn().RemotePeer(), s); err != nil {
			m.counters.Add("provider.gpu_challenge_refused")
			d.log.Debug("gpu challenge", "from", s.Conn().RemotePeer(), "err", err)
			return
		}
		m.counters.Add("provider.gpu_challenge_answered")
	}))
}

// handleVerdict feeds a gossiped verdict to the reputation book, which
// checks its signatures.
func (m *market) handleVerdict(_ peer.ID, data []byte) {
	var g wire.GPUVerdictGossip
	err := json.Unmarshal(data, &g)
	if err == nil {
		err = m.book.AddVerdict(&gpuproof.SignedVerdict{Env: g.Verdict})
	}
	if err != nil {
		m.d.log.Debug("gpu verdict rejected", "err", err)
	}
}

// apiVerify challenges one provider's devices (all, or the one named) one
// after another, and returns the verdicts, which it records and gossips.
func (m *market) apiVerify(r *http.Request) (any, error) {
	var req api.VerifyRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("verify request: %v", err)
	}
	id, err := peer.Decode(req.Peer)
	if err != nil {
		return nil, badRequest("not a peer id: %q", req.Peer)
	}
	if id == m.d.ID() {
		return nil, badRequest("a node cannot verify itself")
	}
	if req.N < 0 || req.K < 0 || (req.N == 0) != (req.K == 0) {
		return nil, badRequest("give both n and k, or neither")
	}
	ctx := r.Context()
	c, err := m.d.disc.Lookup(ctx, id)
	if err != nil {
		return nil, notFound("no capability record for %s: %v", id, err)
	}
	if len(c.GPUs) == 0 {
		return nil, badRequest("%s offers no GPUs", id)
	}
	m.d.net.AddAddrs(id, c.Addrs)
	var out []api.VerifyResult
	for i, g := range c.GPUs {
		dev := auction.DeviceName(c.GPUs, i)
		if req.Device != "" && req.Device != dev && req.Device != strconv.Itoa(i) {
			continue
		}
		out = append(out, m.verifyDevice(ctx, id, dev, g.Model, g.VRAMGB, req.N, req.K))
	}
	if len(out) == 0 {
		return nil, notFound("%s has no device %q", id, req.Device)
	}
	return out, nil
}

func (m *market) verifyDevice(ctx context.Context, id peer.ID, dev, model string, vram, n, k int) api.VerifyResult {
	res := api.VerifyResult{Device: dev, Model: model}
	pol := gpuproof.Policy{}
	if m.d.opts.ChallengePolicy != nil {
		pol = *m.d.opts.ChallengePolicy
	}
	v := &gpuproof.Verifier{Signer: m.d.signer, Policy: pol, Now: m.d.now}
	cctx, cancel := context.WithTimeout(ctx, gpuproof.MaxLifetime)
	defer cancel()
	s, err := m.d.net.Host.NewStream(cctx, id, wire.ProtoGPUChallenge)
	if err != nil {
		res.Error = fmt.Sprintf("open challenge stream: %v", err)
		return res
	}
	defer s.Close()
	stop := context.AfterFunc(cctx, func() { _ = s.Reset() })
	defer stop()
	sv, err := v.Run(cctx, s, id, dev, model, vram, n, k)
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
	if err := m.book.AddVerdict(sv); err != nil {
		m.d.log.Warn("own gpu verdict refused by the book", "err", err)
	}
	m.verdicts.add(sv.Env, verdict.Time)
	m.publishVerdict(sv.Env)
	return res
}

func (m *market) publishVerdict(env *sign.Envelope) {
	b, err := json.Marshal(wire.GPUVerdictGossip{Verdict: env, Sent: m.d.now().UTC()})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	if err := m.d.net.Publish(ctx, wire.GPUVerdictTopic, b); err != nil && m.ctx.Err() == nil {
		m.d.log.Debug("gossip gpu verdict", "err", err)
	}
}

// DefaultVerdictRepublish is how often a node gossips its own GPU
// verdicts again while they count (attest.VerdictValidFor): gossip is
// best-effort, and nodes that join later learn them too. A book counts
// each verdict once, however often it hears it.
const DefaultVerdictRepublish = 10 * time.Minute

// maxOwnVerdicts bounds the verdicts a node republishes.
const maxOwnVerdicts = 64

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

func (m *market) republishVerdicts() {
	every := m.d.opts.VerdictRepublish
	if every <= 0 {
		every = DefaultVerdictRepublish
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			for _, env := range m.verdicts.current(m.d.now()) {
				m.publishVerdict(env)
			}
		}
	}
}
