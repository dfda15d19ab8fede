package adversary

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ChallengeReplay signs one GPU challenge for provider's device (as any
// peer may), sends it, then sends the same signed bytes again on a new
// stream, as a replaying verifier would. It returns the provider's answer
// to each (gpuproof.Ready): the first is prepared, the replay must be
// refused.
func ChallengeReplay(ctx context.Context, p *Peer, provider peer.ID, device string) (first, replay gpuproof.Ready, err error) {
	c, _, err := gpuproof.NewChallenge(p.ID().String(), provider.String(), device, "H100", 80, 128, 1, time.Now())
	if err != nil {
		return first, replay, err
	}
	env, err := sign.Seal(p.Signer, sign.DomainGPUChallenge, c)
	if err != nil {
		return first, replay, err
	}
	msg, err := env.Marshal()
	if err != nil {
		return first, replay, err
	}
	send := func() (gpuproof.Ready, error) {
		var r gpuproof.Ready
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := p.Node.Host.NewStream(sctx, provider, wire.ProtoGPUChallenge)
		if err != nil {
			return r, err
		}
		defer s.Reset()
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		if err := frame.Write(s, msg); err != nil {
			return r, err
		}
		b, err := frame.Read(bufio.NewReader(s))
		if err != nil {
			return r, fmt.Errorf("adversary: challenge answer: %w", err)
		}
		return r, json.Unmarshal(b, &r)
	}
	if first, err = send(); err != nil {
		return first, replay, err
	}
	replay, err = send()
	return first, replay, err
}
