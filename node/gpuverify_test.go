package node

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fastDevice stands in for a GPU: it computes on the CPU and answers as
// CUDA, so that a verifier whose policy expects a slow rate verifies it.
type fastDevice struct{}

func (fastDevice) Prepare(_ string, n int) (gpuproof.Runner, error) { return fastRunner{n}, nil }

type fastRunner struct{ n int }

func (r fastRunner) MatPow(key uint64, k int) ([]uint32, time.Duration, error) {
	start := time.Now()
	return gpuproof.MatPowCPU(key, r.n, k), time.Since(start), nil
}
func (fastRunner) Backend() string    { return gpuproof.BackendCUDA }
func (fastRunner) DeviceName() string { return "NVIDIA H100 80GB HBM3 (test)" }
func (fastRunner) Close()             {}

func startWith(t *testing.T, dir string, cfg config.Config, boot *Daemon, opts Options) *testNode {
	t.Helper()
	if boot != nil {
		cfg.Bootstrap = append([]string(nil), boot.Addrs()...)
	}
	opts.DataDir, opts.Config, opts.Log = dir, cfg, testLogger(t)
	d, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start node in %s: %v", dir, err)
	}
	n := &testNode{Daemon: d, dir: dir, cfg: cfg}
	t.Cleanup(func() { n.Close() })
	return n
}

func verify(t *testing.T, n *testNode, req api.VerifyRequest) []api.VerifyResult {
	t.Helper()
	res, err := api.NewClient(n.dir).Verify(context.Background(), req)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return res
}

// TestVerifyReachesAnotherNodesBook: a renter runs `gpumesh verify` on a
// provider; the verdict is verified, counts fully in the renter's own book
// (it is first-hand), and reaches an observer's book by gossip, where a
// verifier without standing does not make the provider verified on its own.
func TestVerifyReachesAnotherNodesBook(t *testing.T) {
	root := t.TempDir()
	slow := gpuproof.Policy{Floor: func(string) (float64, bool) { return 1e6, true }}
	// Gossip is best-effort: the verifier gossips its verdict again every
	// 100 ms, as it does every 10 minutes in production.
	verifier := startWith(t, filepath.Join(root, "verifier"), renterConfig(), nil,
		Options{ChallengePolicy: &slow, VerdictRepublish: 100 * time.Millisecond})
	prov := startWith(t, filepath.Join(root, "provider"),
		providerConfig("eu-west", 1, terms.GPU{Model: "H100", VRAMGB: 80}), verifier.Daemon,
		Options{ChallengeBackend: fastDevice{}})
	observer := startWith(t, filepath.Join(root, "observer"), renterConfig(), verifier.Daemon, Options{})
	eventuallyProviders(t, verifier.Daemon, terms.Query{}, idsOf(prov), 30*time.Second)
	pid := prov.ID().String()
	// The observer must hear the verdict topic's gossip from the verifier:
	// each must have the other's subscription (the verifier's reaching the
	// observer means its stream to the observer is open).
	waitTopicPeer(t, verifier, wire.GPUVerdictTopic, observer)
	waitTopicPeer(t, observer, wire.GPUVerdictTopic, verifier)

	res := verify(t, verifier, api.VerifyRequest{Peer: pid, N: 256, K: 2})
	if len(res) != 1 || res[0].Verdict == nil {
		t.Fatalf("verify returned %+v, want one verdict", res)
	}
	v := res[0].Verdict
	if v.Outcome != gpuproof.Verified || v.Challenge.Device != "0" || v.Family() != "h100" {
		t.Fatalf("verdict %s (%s) on device %q family %q, want verified h100 on 0", v.Outcome, v.Reason, v.Challenge.Device, v.Family())
	}
	if !verifier.market.book.Verified(pid, "h100") {
		t.Fatal("the verifier's own book does not hold the provider verified")
	}
	// The observer logs each gossiped verdict it took in or refused.
	waitChange(t, 15*time.Second, "the verdict reaches the observer's book", func() bool {
		gs := observer.market.book.GPUStandings(pid)
		return len(gs) == 1 && gs[0].Passed == 1
	}, loggedNext)
	if gs := observer.market.book.GPUStandings(pid); gs[0].Verified || gs[0].Weight >= 0.5 {
		t.Fatalf("a verifier without standing made the provider verified in another book: %+v", gs[0])
	}
	// Asked again at once, the provider rate-limits this verifier: no verdict.
	res = verify(t, verifier, api.VerifyRequest{Peer: pid, N: 256, K: 2})
	if len(res) != 1 || !res[0].NoVerdict {
		t.Fatalf("an immediate second challenge gave %+v, want no verdict (rate limit)", res)
	}
}

// TestDeclaredGPUsAreUnverifiable: a provider with declared GPUs answers
// on its CPU path, which is never verified and never counted as failed.
func TestDeclaredGPUsAreUnverifiable(t *testing.T) {
	root := t.TempDir()
	verifier := startWith(t, filepath.Join(root, "verifier"), renterConfig(), nil, Options{})
	prov := startWith(t, filepath.Join(root, "provider"),
		providerConfig("eu-west", 1, terms.GPU{Model: "RTX 4090", VRAMGB: 24}), verifier.Daemon, Options{})
	eventuallyProviders(t, verifier.Daemon, terms.Query{}, idsOf(prov), 30*time.Second)
	pid := prov.ID().String()
	before := verifier.market.book.Score(pid)
	res := verify(t, verifier, api.VerifyRequest{Peer: pid})
	if len(res) != 1 || res[0].Verdict == nil || res[0].Verdict.Outcome != gpuproof.Unverifiable {
		t.Fatalf("declared GPU: %+v, want an unverifiable verdict", res)
	}
	if verifier.market.book.Verified(pid, "rtx-4090") || verifier.market.book.Score(pid) != before {
		t.Fatal("an unverifiable verdict moved the provider's standing")
	}
}

func waitTopicPeer(t *testing.T, from *testNode, topic string, n *testNode) {
	t.Helper()
	tp, err := from.net.Topic(topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p2p.WaitTopicPeer(ctx, tp, from.net.Links, func(p peer.ID) bool { return p == n.ID() }); err != nil {
		t.Fatalf("%s never saw %s on %s: %v", from.ID(), n.ID(), topic, err)
	}
}
