package gpuproof

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/gpumodel"
)

// Timing rules.
const (
	// KernelEfficiency is the share of a device's peak INT32 rate the
	// challenge kernel is expected to reach: on an H200 a whole challenge,
	// timed as the verifier times it, reached 15.5 of the catalogue's 30.2
	// T ops/s (0.51, testnet/gpu-check.md); 0.45 leaves room for other
	// architectures.
	KernelEfficiency = 0.45
	// FloorShare is the share of that expected rate a device must reach:
	// slack for clocks, other architectures and a busy host.
	FloorShare = 0.4
	// Overhead is the fixed allowance for what is timed besides the
	// products: the round trip, launching, generating the matrices and
	// copying C back.
	Overhead = 250 * time.Millisecond
	// HashRate is the rate (bytes/s) at which the provider is expected to
	// hash C before it commits.
	HashRate = 400e6
	// MaxRTTAllowance caps the round trip the verifier measured before the
	// seed and adds to the budget, so a provider that delays its pong
	// gains little.
	MaxRTTAllowance = 250 * time.Millisecond
	// Rounds is the number of Freivalds vectors a verifier checks.
	Rounds = 2
)

// Floor is the slowest rate (ops/s) the challenge accepts from a device of
// model name: the catalogue's peak INT32 rate × KernelEfficiency ×
// FloorShare; false when the catalogue has no rate for it.
func Floor(model string) (float64, bool) {
	peak, ok := gpumodel.PeakInt32TOPS(gpumodel.Identify(model))
	if !ok {
		return 0, false
	}
	return peak * 1e12 * KernelEfficiency * FloorShare, true
}

// Policy is how a verifier judges; the zero value is the rules above.
type Policy struct {
	// Floor overrides the floor rate of a model (tests).
	Floor func(model string) (float64, bool)
	// Overhead overrides the fixed allowance (0: Overhead).
	Overhead time.Duration
}

func (p Policy) floor(model string) (float64, bool) {
	if p.Floor != nil {
		return p.Floor(model)
	}
	return Floor(model)
}

// Budget is the longest the verifier waits, from revealing the seed to
// the commitment, for a challenge on model with round trip rtt.
func (p Policy) Budget(c Challenge, rtt time.Duration) (time.Duration, bool) {
	rate, ok := p.floor(c.Model)
	if !ok || rate <= 0 {
		return 0, false
	}
	over := p.Overhead
	if over <= 0 {
		over = Overhead
	}
	work := time.Duration(c.Ops() / rate * float64(time.Second))
	hash := time.Duration(float64(c.ResultBytes()) / HashRate * float64(time.Second))
	return over + hash + min(max(rtt, 0), MaxRTTAllowance) + work, true
}

// Verdict is a verifier's finding on one challenge (sign.DomainGPUVerdict).
type Verdict struct {
	Challenge Challenge `json:"challenge"`
	// Commit is the provider's signed commitment, when it sent one: the
	// provider's own word that it took part.
	Commit  *sign.Envelope `json:"commit,omitempty"`
	Outcome string         `json:"outcome"`
	Reason  string         `json:"reason,omitempty"`
	Backend string         `json:"backend,omitempty"`
	// DeviceName is the name the provider's driver gave the device.
	DeviceName string `json:"device_name,omitempty"`
	// Elapsed is the verifier's time from seed to commitment, Budget what
	// the model allowed, RTT the round trip measured before the seed.
	Elapsed time.Duration `json:"elapsed,omitempty"`
	Budget  time.Duration `json:"budget,omitempty"`
	RTT     time.Duration `json:"rtt,omitempty"`
	// Rate is the challenge's ops per second over Elapsed.
	Rate float64   `json:"rate,omitempty"`
	Time time.Time `json:"time"`
}

// Provider and Verifier name the parties.
func (v Verdict) Provider() string { return v.Challenge.Provider }
func (v Verdict) Verifier() string { return v.Challenge.Verifier }

// Family is the claimed model's family ("h200"), what "verified" is for.
func (v Verdict) Family() string { return gpumodel.FamilyOf(v.Challenge.Model) }

func (v Verdict) String() string {
	s := fmt.Sprintf("%s on %s (%s): %s", v.Challenge.Device, v.Challenge.Model, v.Backend, v.Outcome)
	if v.Elapsed > 0 {
		s += fmt.Sprintf(" in %s of %s budget, %.2f Tops/s", v.Elapsed.Round(time.Millisecond),
			v.Budget.Round(time.Millisecond), v.Rate/1e12)
	}
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	return s
}

// SignedVerdict is a verdict as its verifier signed it.
type SignedVerdict struct {
	Env *sign.Envelope `json:"env"`
}

// Seal signs v.
func Seal(s *sign.Signer, v Verdict) (*SignedVerdict, error) {
	env, err := sign.Seal(s, sign.DomainGPUVerdict, v)
	if err != nil {
		return nil, err
	}
	return &SignedVerdict{Env: env}, nil
}

// Open verifies the verdict's signature and returns it: the signer must be
// the challenge's verifier, and an embedded commitment must be the
// provider's, for this challenge.
func (sv *SignedVerdict) Open() (Verdict, error) {
	var v Verdict
	if sv == nil || sv.Env == nil {
		return v, sign.ErrMalformed
	}
	signer, err := sign.Open(sv.Env, sign.DomainGPUVerdict, &v)
	if err != nil {
		return v, err
	}
	if signer.String() != v.Challenge.Verifier {
		return v, fmt.Errorf("gpuproof: verdict signed by %s for verifier %s", signer, v.Challenge.Verifier)
	}
	if v.Challenge.Provider == v.Challenge.Verifier {
		return v, fmt.Errorf("gpuproof: a provider cannot verify itself")
	}
	switch v.Outcome {
	case Verified, Failed, Unverifiable:
	default:
		return v, fmt.Errorf("gpuproof: unknown outcome %q", v.Outcome)
	}
	if v.Commit != nil {
		var c Commit
		p, err := sign.Open(v.Commit, sign.DomainGPUCommit, &c)
		if err != nil {
			return v, fmt.Errorf("gpuproof: verdict's commitment: %w", err)
		}
		if p.String() != v.Challenge.Provider || c.Challenge != v.Challenge.ID {
			return v, fmt.Errorf("gpuproof: verdict's commitment is not the provider's for this challenge")
		}
	} else if v.Outcome == Verified {
		return v, fmt.Errorf("gpuproof: a verified verdict needs the provider's commitment")
	}
	return v, nil
}
