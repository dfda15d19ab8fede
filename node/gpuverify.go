package node

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// serveChallenges answers challenges on this provider's devices: through
// CUDA on NVML-detected GPUs, on the CPU path for declared ones. A device a
// lease holds now is busy (no verdict, no work taken from the tenant).
func (m *market) serveChallenges() {
	d := m.d
	backend := d.opts.ChallengeBackend
	if backend == nil {
		backend = runtime.ChallengeBackend(d.inv)
	}
	m.verify.Serve(&gpuproof.Prover{Signer: d.signer, Backend: backend, Now: d.now,
		Devices: func(dev string) bool { return runtime.ChallengeDeviceIndex(d.inv, dev) >= 0 },
		Busy: func(dev string) bool {
			i := runtime.ChallengeDeviceIndex(d.inv, dev)
			now := d.now()
			return len(m.cal.FreeDevices(now, now.Add(gpuproof.MaxLifetime), []int{i})) == 0
		},
	})
}

// apiVerify challenges one provider's devices (all, or the one named) one
// after another, and returns the verdicts, which it records and gossips.
func (m *market) apiVerify(r *http.Request) (any, error) {
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
	if id == m.d.ID() {
		return nil, api.BadRequest("a node cannot verify itself")
	}
	if req.N < 0 || req.K < 0 || (req.N == 0) != (req.K == 0) {
		return nil, api.BadRequest("give both n and k, or neither")
	}
	ctx := r.Context()
	c, err := m.d.disc.Lookup(ctx, id)
	if err != nil {
		return nil, api.NotFound("no capability record for %s: %v", id, err)
	}
	if len(c.GPUs) == 0 {
		return nil, api.BadRequest("%s offers no GPUs", id)
	}
	m.d.net.AddAddrs(id, c.Addrs)
	var out []api.VerifyResult
	for i, g := range c.GPUs {
		dev := auction.DeviceName(c.GPUs, i)
		if req.Device != "" && req.Device != dev && req.Device != strconv.Itoa(i) {
			continue
		}
		out = append(out, m.verify.Verify(ctx, id, dev, g.Model, g.VRAMGB, req.N, req.K))
	}
	if len(out) == 0 {
		return nil, api.NotFound("%s has no device %q", id, req.Device)
	}
	return out, nil
}
