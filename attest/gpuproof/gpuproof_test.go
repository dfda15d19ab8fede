package gpuproof

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/p2p/frame"
)

// naive is C = A·B^k by the textbook triple loop.
func naive(key uint64, n, k int) []uint32 {
	a, b := Generate(key, 0, n), Generate(key, 1, n)
	for step := 0; step < k; step++ {
		c := make([]uint32, n*n)
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				var s uint32
				for l := 0; l < n; l++ {
					s += a[i*n+l] * b[l*n+j]
				}
				c[i*n+j] = s
			}
		}
		a = c
	}
	return a
}

func TestMatPowCPUIsTheProduct(t *testing.T) {
	for _, k := range []int{1, 3} {
		got, want := MatPowCPU(42, 64, k), naive(42, 64, k)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("k=%d: element %d = %d, want %d", k, i, got[i], want[i])
			}
		}
		if ok, err := Freivalds(42, 64, k, got, 2); err != nil || !ok {
			t.Fatalf("k=%d: Freivalds rejects the right product (%v)", k, err)
		}
	}
	// Different keys, different matrices.
	if MatPowCPU(1, 64, 1)[0] == MatPowCPU(2, 64, 1)[0] && MatPowCPU(1, 64, 1)[1] == MatPowCPU(2, 64, 1)[1] {
		t.Fatal("the key does not change the matrices")
	}
}

// misses counts the trials in which Freivalds with rounds vectors accepts
// C with one element off by err().
func misses(t *testing.T, trials, rounds int, errv func(*rand.Rand) uint32) int {
	const n, k = 128, 2
	key := uint64(7)
	a, b := Generate(key, 0, n), Generate(key, 1, n)
	good := MatPowCPU(key, n, k)
	rng := rand.New(rand.NewPCG(1, 2))
	missed := 0
	for i := 0; i < trials; i++ {
		c := append([]uint32(nil), good...)
		c[rng.IntN(len(c))] += errv(rng)
		ok, err := freivalds(a, b, k, c, n, rounds)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			missed++
		}
	}
	return missed
}

// TestFreivaldsCatchesOneWrongElement checks the stated bound: a single
// element off by e passes one round with probability 2^(v(e)-32): about
// never for a random error, one half for e = 2^31, a quarter with two
// rounds. (The counted intervals are ±6 standard deviations.)
func TestFreivaldsCatchesOneWrongElement(t *testing.T) {
	if m := misses(t, 300, 1, func(r *rand.Rand) uint32 { return r.Uint32() | 1 }); m != 0 {
		t.Fatalf("an odd error passed %d of 300 single rounds; the bound is 2^-32 each", m)
	}
	if m := misses(t, 300, 1, func(r *rand.Rand) uint32 { return 1 << (r.IntN(16)) }); m > 0 {
		t.Fatalf("an error of valuation < 16 passed %d of 300 single rounds; the bound is 2^-16 each", m)
	}
	half := misses(t, 400, 1, func(*rand.Rand) uint32 { return 1 << 31 })
	if half < 140 || half > 260 {
		t.Fatalf("an error of 2^31 passed %d of 400 single rounds, want about 200 (probability 1/2)", half)
	}
	quarter := misses(t, 400, 2, func(*rand.Rand) uint32 { return 1 << 31 })
	if quarter < 45 || quarter > 155 {
		t.Fatalf("an error of 2^31 passed %d of 400 double rounds, want about 100 (probability 1/4)", quarter)
	}
}

// liar computes on the CPU and says it is a GPU.
type liar struct {
	n      int
	mangle func([]uint32)
}

func (l liar) Prepare(_ string, n int) (Runner, error) { return liar{n: n, mangle: l.mangle}, nil }
func (l liar) MatPow(key uint64, k int) ([]uint32, time.Duration, error) {
	start := time.Now()
	c := MatPowCPU(key, l.n, k)
	if l.mangle != nil {
		l.mangle(c)
	}
	return c, time.Since(start), nil
}
func (liar) Backend() string    { return BackendCUDA }
func (liar) DeviceName() string { return "NVIDIA H200" }
func (liar) Close()             {}

type pair struct {
	prover   *Prover
	verifier *Verifier
	psign    *sign.Signer
}

func newPair(t *testing.T, b Backend, pol Policy) *pair {
	vs, ps := signtest.Pair(t)
	return &pair{psign: ps, prover: &Prover{Signer: ps, Backend: b, Devices: func(d string) bool { return d == "GPU-0" }},
		verifier: &Verifier{Signer: vs, Policy: pol}}
}

// challenge runs one challenge over an in-memory connection.
func (p *pair) challenge(t *testing.T, model string, n, k int) (Verdict, error, error) {
	t.Helper()
	vc, pc := net.Pipe()
	defer vc.Close()
	perr := make(chan error, 1)
	go func() {
		defer pc.Close()
		perr <- p.prover.Serve(p.verifier.Signer.ID(), pc)
	}()
	sv, err := p.verifier.Run(context.Background(), vc, p.psign.ID(), "GPU-0", model, 141, n, k)
	vc.Close()
	serr := <-perr
	if err != nil {
		return Verdict{}, err, serr
	}
	v, oerr := sv.Open()
	if oerr != nil {
		t.Fatalf("the verifier's own verdict does not open: %v", oerr)
	}
	return v, nil, serr
}

func TestCPUResultTooSlowForClaimedModelIsNotVerified(t *testing.T) {
	// 2·8·512³ = 2.1 G multiply-adds: an H200's floor does them in under a
	// millisecond; no CPU does them within the budget (overhead 1 ms).
	p := newPair(t, liar{}, Policy{Overhead: time.Millisecond})
	v, err, _ := p.challenge(t, "NVIDIA H200", 512, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Failed on time either way: its commitment came after the budget, or
	// not before the verifier stopped waiting (twice the budget plus 1 s).
	slow := strings.Contains(v.Reason, "too slow") && v.Commit != nil
	late := strings.Contains(v.Reason, "no commitment after")
	if v.Outcome != Failed || !(slow || late) || v.Elapsed <= v.Budget {
		t.Fatalf("a CPU posing as an H200 got %s (%s) in %s of %s, want failed on time", v.Outcome, v.Reason, v.Elapsed, v.Budget)
	}
}

func TestFastEnoughRightResultIsVerified(t *testing.T) {
	slow := Policy{Floor: func(string) (float64, bool) { return 1e6, true }} // 1 Mop/s: anything passes
	p := newPair(t, liar{}, slow)
	v, err, serr := p.challenge(t, "NVIDIA H200", 256, 2)
	if err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if v.Outcome != Verified || v.Family() != "h200" || v.Rate <= 0 {
		t.Fatalf("verdict %s (%s) family %q rate %v, want verified h200", v.Outcome, v.Reason, v.Family(), v.Rate)
	}
	// A wrong element anywhere fails it.
	p = newPair(t, liar{mangle: func(c []uint32) { c[len(c)/3] ^= 0x10 }}, slow)
	if v, _, _ = p.challenge(t, "NVIDIA H200", 256, 2); v.Outcome != Failed || !strings.Contains(v.Reason, "Freivalds") {
		t.Fatalf("a wrong result got %s (%s)", v.Outcome, v.Reason)
	}
}

func TestCPUPathIsNeverVerified(t *testing.T) {
	p := newPair(t, CPU{}, Policy{Floor: func(string) (float64, bool) { return 1, true }})
	v, err, _ := p.challenge(t, "NVIDIA H200", 256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != Unverifiable || v.Backend != BackendCPU {
		t.Fatalf("the CPU path got %s via %q, want unverifiable", v.Outcome, v.Backend)
	}
}

// TestChallengeCannotBeReplayed: the challenge frame a provider answered
// once is refused when its verifier (or anyone) sends it again.
func TestChallengeCannotBeReplayed(t *testing.T) {
	p := newPair(t, liar{}, Policy{Floor: func(string) (float64, bool) { return 1e6, true }})
	p.prover.PerVerifier = time.Nanosecond
	c, _, err := NewChallenge(p.verifier.Signer.ID().String(), p.psign.ID().String(), "GPU-0", "H200", 141, 128, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	env, _ := sign.Seal(p.verifier.Signer, sign.DomainGPUChallenge, c)
	msg, _ := env.Marshal()
	send := func(from *sign.Signer) Ready {
		vc, pc := net.Pipe()
		defer vc.Close()
		go func() { defer pc.Close(); _ = p.prover.Serve(from.ID(), pc) }()
		if err := frame.Write(vc, msg); err != nil {
			t.Fatal(err)
		}
		var r Ready
		if err := readJSON(bufioReader(vc), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := send(p.verifier.Signer); r.Refused != "" {
		t.Fatalf("first challenge refused: %s", r.Refused)
	}
	if r := send(p.verifier.Signer); !strings.Contains(r.Refused, ErrReplay.Error()) {
		t.Fatalf("replayed challenge answered %+v, want refused as replay", r)
	}
	// Relayed by a third party: the prover does not even answer (the
	// signer is not the sender).
	third := signtest.New(t)
	vc, pc := net.Pipe()
	go func() { defer pc.Close(); _ = p.prover.Serve(third.ID(), pc) }()
	_ = frame.Write(vc, msg)
	if _, err := frame.Read(bufioReader(vc)); err == nil {
		t.Fatal("a challenge relayed by another peer was answered")
	}
	vc.Close()
}

func TestProverRefusesBadChallenges(t *testing.T) {
	p := newPair(t, liar{}, Policy{})
	now := time.Now()
	vs := p.verifier.Signer
	mk := func(edit func(*Challenge)) Challenge {
		c, _, _ := NewChallenge(vs.ID().String(), p.psign.ID().String(), "GPU-0", "H200", 141, 128, 1, now)
		edit(&c)
		return c
	}
	for name, c := range map[string]Challenge{
		"another provider": mk(func(c *Challenge) { c.Provider = vs.ID().String() }),
		"unknown device":   mk(func(c *Challenge) { c.Device = "GPU-9" }),
		"expired":          mk(func(c *Challenge) { c.Issued, c.Expires = now.Add(-time.Hour), now.Add(-time.Minute) }),
		"too large":        mk(func(c *Challenge) { c.N = 16384 }),
		"too many powers":  mk(func(c *Challenge) { c.K = 1000 }),
	} {
		env, _ := sign.Seal(vs, sign.DomainGPUChallenge, c)
		msg, _ := env.Marshal()
		vc, pc := net.Pipe()
		done := make(chan error, 1)
		go func() { defer pc.Close(); done <- p.prover.Serve(vs.ID(), pc) }()
		_ = frame.Write(vc, msg)
		var r Ready
		if err := readJSON(bufioReader(vc), &r); err != nil || r.Refused == "" {
			t.Errorf("%s: answered %+v (%v), want a refusal", name, r, err)
		}
		vc.Close()
		if err := <-done; err == nil {
			t.Errorf("%s: Serve returned no error", name)
		}
	}
}

// TestRateLimitPerVerifierAndDevice: a verifier may challenge each device
// of a provider in turn, but the same device only once a minute.
func TestRateLimitPerVerifierAndDevice(t *testing.T) {
	p := newPair(t, liar{}, Policy{Floor: func(string) (float64, bool) { return 1e6, true }})
	p.prover.Devices = func(string) bool { return true }
	// Each challenge's Serve has returned before the next starts: the
	// prover runs one challenge at a time and refuses another as busy
	// (TestBusyDeviceGivesNoVerdict), which is not what this test asks.
	run := func(dev string) error {
		vc, pc := net.Pipe()
		served := make(chan struct{})
		go func() { defer close(served); defer pc.Close(); _ = p.prover.Serve(p.verifier.Signer.ID(), pc) }()
		_, err := p.verifier.Run(context.Background(), vc, p.psign.ID(), dev, "H200", 141, 128, 1)
		vc.Close()
		<-served
		return err
	}
	if err := run("GPU-0"); err != nil {
		t.Fatal(err)
	}
	if err := run("GPU-1"); err != nil {
		t.Fatalf("the provider's second device was refused: %v", err)
	}
	if err := run("GPU-0"); !errors.Is(err, ErrNoVerdict) || !strings.Contains(err.Error(), "too many") {
		t.Fatalf("the same device again at once: %v, want no verdict (rate limit)", err)
	}
}

func TestBusyDeviceGivesNoVerdict(t *testing.T) {
	p := newPair(t, liar{}, Policy{})
	p.prover.Busy = func(string) bool { return true }
	_, err, _ := p.challenge(t, "H200", 128, 1)
	if !errors.Is(err, ErrNoVerdict) {
		t.Fatalf("busy device: %v, want ErrNoVerdict", err)
	}
}

func TestVerdictForgeriesRejected(t *testing.T) {
	p := newPair(t, liar{}, Policy{Floor: func(string) (float64, bool) { return 1e6, true }})
	v, err, _ := p.challenge(t, "H200", 128, 1)
	if err != nil || v.Outcome != Verified {
		t.Fatal(err, v.Outcome)
	}
	// Signed by someone else than the challenge's verifier.
	other := signtest.New(t)
	sv, _ := Seal(other, v)
	if _, err := sv.Open(); err == nil {
		t.Fatal("a verdict signed by a peer other than its verifier opened")
	}
	// "Verified" without the provider's commitment.
	v.Commit = nil
	sv, _ = Seal(p.verifier.Signer, v)
	if _, err := sv.Open(); err == nil {
		t.Fatal("a verified verdict without commitment opened")
	}
	// Self-verification.
	self, _, _ := NewChallenge(p.psign.ID().String(), p.psign.ID().String(), "GPU-0", "H200", 141, 128, 1, time.Now())
	sv, _ = Seal(p.psign, Verdict{Challenge: self, Outcome: Unverifiable})
	if _, err := sv.Open(); err == nil {
		t.Fatal("a provider's verdict on itself opened")
	}
}
