package attest

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
)

// GPU challenge verdicts (attest/gpuproof) in the reputation book.
const (
	// VerdictValidFor is how long a passed challenge keeps a provider
	// verified for its model.
	VerdictValidFor = 7 * 24 * time.Hour
	// VerifiedWeight is the verdict weight that makes a provider verified
	// for a model: one verdict from a verifier with full standing (or from
	// the book's owner), or several from verifiers with some.
	VerifiedWeight = 0.5
	// GPUFailPenalty is the share of the score a failed challenge from a
	// verifier with full standing removes (decaying like a slash).
	GPUFailPenalty = 0.3
	// VerdictNewcomerCap is the most that verdicts from verifiers without
	// standing add up to, together: below VerifiedWeight, so fresh
	// identities can neither make a provider verified nor, by failing it
	// in numbers, take more than GPUFailPenalty × this off its score.
	VerdictNewcomerCap = 0.2
	// maxVerdicts bounds the verdicts kept per provider.
	maxVerdicts = 64
	// verdictSkew is how far in the future a verdict's time may be.
	verdictSkew = 5 * time.Minute
)

// GPUStanding is what a book knows of a provider's GPU challenges for one
// model family.
type GPUStanding struct {
	Family   string `json:"family"`
	Verified bool   `json:"verified"`
	// Weight is the passing verdicts' weight (their verifiers' standing).
	Weight       float64   `json:"weight"`
	Passed       int       `json:"passed"`
	Failed       int       `json:"failed"`
	Unverifiable int       `json:"unverifiable"`
	Last         time.Time `json:"last"`
	LastOutcome  string    `json:"last_outcome"`
	LastReason   string    `json:"last_reason,omitempty"`
	// Rate is the best verified rate (ops/s) seen.
	Rate float64 `json:"rate,omitempty"`
}

type verdictRec struct {
	verifier, family, challenge, outcome, reason string
	at                                           time.Time
	rate                                         float64
}

// AddVerdict counts a signed GPU challenge verdict, gossiped or the book
// owner's own. Only the newest verdict of each verifier on each model
// family of a provider counts; a replay or an older one changes nothing.
// Its weight is its verifier's standing (as a renter's receipt weighs by
// the renter's): verdicts from fresh identities barely count, the book
// owner's own count fully.
func (b *Book) AddVerdict(sv *gpuproof.SignedVerdict) error {
	v, err := sv.Open()
	if err != nil {
		b.count("verdict_rejected")
		return err
	}
	if err := b.succ.Check(v.Verifier(), v.Time); err != nil {
		b.count(CountRetiredKey)
		return fmt.Errorf("attest: verdict: %w", err)
	}
	now := b.now()
	if v.Time.After(now.Add(verdictSkew)) || now.Sub(v.Time) > b.halfLife {
		b.count("verdict_rejected")
		return fmt.Errorf("attest: verdict time %s out of range", v.Time.Format(time.RFC3339))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.provLocked(v.Provider(), now)
	if ps.verdicts == nil {
		ps.verdicts = map[string]verdictRec{}
	}
	key := v.Verifier() + "\x00" + v.Family()
	if old, ok := ps.verdicts[key]; ok && (old.challenge == v.Challenge.ID || !v.Time.After(old.at)) {
		b.counters["verdict_stale"]++
		return nil
	}
	ps.verdicts[key] = verdictRec{verifier: v.Verifier(), family: v.Family(), challenge: v.Challenge.ID,
		outcome: v.Outcome, reason: v.Reason, at: v.Time, rate: v.Rate}
	if len(ps.verdicts) > maxVerdicts {
		oldest := ""
		for k, r := range ps.verdicts {
			if oldest == "" || r.at.Before(ps.verdicts[oldest].at) {
				oldest = k
			}
		}
		delete(ps.verdicts, oldest)
	}
	b.counters["verdict_accepted"]++
	return nil
}

func (b *Book) count(k string) {
	b.mu.Lock()
	b.counters[k]++
	b.mu.Unlock()
}

// verdictWeight is what a verdict weighs: its verifier's standing (in
// renter terms), and a newcomer share of the rest, which is capped in
// total (VerdictNewcomerCap).
func (b *Book) verdictWeight(verifier, provider string, now time.Time) (est, nov float64) {
	s := b.standing(verifier, provider, now)
	return s, (1 - s) * b.newcomerW
}

// gpuLocked is the provider's GPU standing per family, and the factor its
// failed challenges apply to its score.
func (b *Book) gpuLocked(provider string, ps *provState, now time.Time) ([]GPUStanding, float64) {
	by := map[string]*GPUStanding{}
	novPass := map[string]float64{}
	factor, novFail := 1.0, 0.0
	for _, r := range ps.verdicts {
		g := by[r.family]
		if g == nil {
			g = &GPUStanding{Family: r.family}
			by[r.family] = g
		}
		est, nov := b.verdictWeight(r.verifier, provider, now)
		switch r.outcome {
		case gpuproof.Verified:
			g.Passed++
			if now.Sub(r.at) <= VerdictValidFor {
				g.Weight += est
				novPass[r.family] += nov
				g.Rate = max(g.Rate, r.rate)
			}
		case gpuproof.Failed:
			g.Failed++
			d := b.decay(r.at, now)
			factor *= 1 - GPUFailPenalty*est*d
			novFail += nov * d
		default:
			g.Unverifiable++
		}
		if r.at.After(g.Last) {
			g.Last, g.LastOutcome, g.LastReason = r.at, r.outcome, r.reason
		}
	}
	factor *= 1 - GPUFailPenalty*min(novFail, VerdictNewcomerCap)
	out := make([]GPUStanding, 0, len(by))
	for _, g := range by {
		g.Weight += min(novPass[g.Family], VerdictNewcomerCap)
		g.Verified = g.Weight >= VerifiedWeight
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Family < out[j].Family })
	return out, factor
}

// GPUStandings is provider's GPU challenge standing per model family
// (failed challenges also lower its Score), its lineage's verdicts
// included (see Stats).
func (b *Book) GPUStandings(provider string) []GPUStanding {
	now := b.now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	ps := b.provView(provider)
	if ps == nil {
		return nil
	}
	gs, _ := b.gpuLocked(provider, ps, now)
	return gs
}

// Verified reports whether the book holds provider verified for a model
// family ("h100"; gpumodel.FamilyOf of a device name).
func (b *Book) Verified(provider, family string) bool {
	for _, g := range b.GPUStandings(provider) {
		if g.Family == family {
			return g.Verified
		}
	}
	return false
}
