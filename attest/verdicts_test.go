package attest_test

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

// verdict seals a verdict of verifier on provider's H100 at time at; a
// verified one carries the provider's commitment, as the protocol makes it.
func verdict(t *testing.T, verifier, provider *sign.Signer, outcome string, at time.Time) *gpuproof.SignedVerdict {
	t.Helper()
	c, _, err := gpuproof.NewChallenge(verifier.ID().String(), provider.ID().String(), "GPU-0", "NVIDIA H100 80GB HBM3", 80, 4096, 32, at)
	if err != nil {
		t.Fatal(err)
	}
	v := gpuproof.Verdict{Challenge: c, Outcome: outcome, Backend: gpuproof.BackendCUDA, Time: at}
	if outcome != gpuproof.Unverifiable {
		env, err := sign.Seal(provider, sign.DomainGPUCommit, gpuproof.Commit{Challenge: c.ID, Result: "00", Backend: gpuproof.BackendCUDA})
		if err != nil {
			t.Fatal(err)
		}
		v.Commit = env
	}
	sv, err := gpuproof.Seal(verifier, v)
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

// TestVerdictsWeighByVerifierStanding: the book owner's own verdict makes a
// provider verified; a stranger's barely counts; a replay or an older
// verdict of the same verifier changes nothing; a failure lowers the score
// by the verifier's weight.
func TestVerdictsWeighByVerifierStanding(t *testing.T) {
	self, prov := signtest.Pair(t)
	stranger := signtest.New(t)
	now := time.Now()
	book := attest.NewBook(attest.BookOptions{Now: func() time.Time { return now }, Self: self.ID().String()})
	p := prov.ID().String()

	sv := verdict(t, stranger, prov, gpuproof.Verified, now.Add(-time.Minute))
	if err := book.AddVerdict(sv); err != nil {
		t.Fatal(err)
	}
	if book.Verified(p, "h100") {
		t.Fatal("one stranger's verdict made the provider verified")
	}
	// Forty sybil verifiers do not add up to verified either.
	for i := 0; i < 40; i++ {
		if err := book.AddVerdict(verdict(t, signtest.New(t), prov, gpuproof.Verified, now)); err != nil {
			t.Fatal(err)
		}
	}
	gs := book.GPUStandings(p)
	if len(gs) != 1 || gs[0].Passed != 41 {
		t.Fatalf("standings %+v, want 41 passes for h100", gs)
	}
	if gs[0].Verified || gs[0].Weight > attest.VerdictNewcomerCap+1e-9 {
		t.Fatalf("41 fresh verifiers weigh %.2f (verified %v), want at most %.2f", gs[0].Weight, gs[0].Verified, attest.VerdictNewcomerCap)
	}
	// Forty sybils failing another provider take at most
	// GPUFailPenalty × VerdictNewcomerCap off its score.
	_, victim := signtest.Pair(t)
	for i := 0; i < 40; i++ {
		if err := book.AddVerdict(verdict(t, signtest.New(t), victim, gpuproof.Failed, now)); err != nil {
			t.Fatal(err)
		}
	}
	if s, floor := book.Score(victim.ID().String()), attest.Prior*(1-attest.GPUFailPenalty*attest.VerdictNewcomerCap); s < floor-1e-9 {
		t.Fatalf("forty sybil failures took the score to %v, below %v", s, floor)
	}
	if err := book.AddVerdict(verdict(t, self, prov, gpuproof.Verified, now)); err != nil {
		t.Fatal(err)
	}
	if !book.Verified(p, "h100") {
		t.Fatal("the book owner's own verified verdict did not make the provider verified")
	}
	before := book.Score(p)
	// A replay of the stranger's verdict, and an older one, change nothing.
	if err := book.AddVerdict(sv); err != nil {
		t.Fatal(err)
	}
	if err := book.AddVerdict(verdict(t, stranger, prov, gpuproof.Failed, now.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if got := book.GPUStandings(p)[0]; got.Passed != 42 || got.Failed != 0 || book.Score(p) != before {
		t.Fatalf("a replayed or older verdict changed the standing: %+v, score %v → %v", got, before, book.Score(p))
	}
	// The owner's newer failure replaces its pass and costs GPUFailPenalty.
	if err := book.AddVerdict(verdict(t, self, prov, gpuproof.Failed, now.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	after := book.Score(p)
	if want := before * (1 - attest.GPUFailPenalty); after > want+1e-9 || after < want-1e-9 {
		t.Fatalf("score after the owner's failed challenge %v, want %v", after, want)
	}
	// A verdict whose signer is not its verifier, or on oneself, is refused.
	forged := verdict(t, stranger, prov, gpuproof.Verified, now)
	forged.Env.Signer = self.ID().String()
	if err := book.AddVerdict(forged); err == nil {
		t.Fatal("a forged verdict was accepted")
	}
}
