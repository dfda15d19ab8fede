package attest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Slash evidence kinds, and the penalty each applies (see Book.Slash).
const (
	SlashHeartbeatContradictsFingerprint = "heartbeat_contradicts_fingerprint"
	SlashAbandonedLease                  = "abandoned_lease"
	SlashOverclaim                       = "overclaim"
)

// slashPenalty is the fraction of the score a fresh slash removes.
var slashPenalty = map[string]float64{
	SlashHeartbeatContradictsFingerprint: 0.5,
	SlashAbandonedLease:                  0.2,
	SlashOverclaim:                       0.5,
}

// Score blend: weights of the three components.
const (
	weightCompletion = 0.5
	weightUptime     = 0.3
	weightHonesty    = 0.2
	// Prior is the score of an identity the book knows nothing about: the
	// auction's neutral reliability, above which a renter invites a
	// provider to its calls by name.
	Prior = terms.NeutralReliability
)

// Book defaults.
const (
	DefaultHalfLife     = 30 * 24 * time.Hour
	DefaultPriorWeight  = 4
	DefaultRenterCap    = 3
	DefaultRenterWindow = 24 * time.Hour
	DefaultMaxRecords   = 4096
	// DefaultRenterMatureAge and DefaultRenterMatureSpend: a renter has full
	// standing once the book has known it this long and it has owed this
	// much (USD) in kept receipts with providers other than the one scored.
	DefaultRenterMatureAge   = 14 * 24 * time.Hour
	DefaultRenterMatureSpend = 10.0
	// DefaultNewcomerWeight is what a receipt from a renter without standing
	// weighs, and DefaultNewcomerCap the total (in receipts) that all such
	// receipts of one provider may weigh together.
	DefaultNewcomerWeight = 0.05
	DefaultNewcomerCap    = 1.0
	// DefaultMaxIdentities bounds the providers, and separately the renters,
	// the book tracks.
	DefaultMaxIdentities = 1 << 16
)

// Errors returned by Book.
var (
	// ErrConflict: a different receipt for a lease the book already counted.
	ErrConflict = errors.New("attest: conflicting receipt for an already counted lease")
	// ErrBadEvidence: slash evidence that is malformed or does not prove
	// its claim.
	ErrBadEvidence = errors.New("attest: bad slash evidence")
)

// BookOptions configures a Book. The zero value is usable.
type BookOptions struct {
	// Now is the book's clock (default time.Now); the market replay passes a
	// virtual clock.
	Now func() time.Time
	// HalfLife is the age at which a receipt's (or slash's) weight halves
	// (default DefaultHalfLife).
	HalfLife time.Duration
	// PriorWeight is the number of pseudo-receipts at the Prior that every
	// score component starts with: the Bayesian shrinkage that keeps new
	// identities near the prior (default DefaultPriorWeight).
	PriorWeight float64
	// RenterCap and RenterWindow are the tight-cluster rule: the receipts
	// one renter gives one provider whose End falls in the same RenterWindow
	// (aligned to the Unix epoch) count as at most RenterCap receipts in
	// total: if there are n > RenterCap of them, each weighs RenterCap/n.
	// Defaults DefaultRenterCap and DefaultRenterWindow.
	RenterCap    int
	RenterWindow time.Duration
	// MaxRecords bounds the receipts kept per provider (default
	// DefaultMaxRecords); beyond it the one with the oldest End, which
	// weighs least, is forgotten.
	MaxRecords int
	// RenterMatureAge and RenterMatureSpend define a renter's standing (see
	// Book). Defaults DefaultRenterMatureAge and DefaultRenterMatureSpend.
	RenterMatureAge   time.Duration
	RenterMatureSpend float64
	// NewcomerWeight and NewcomerCap bound what renters without standing
	// can do to a provider's score (see Book). Defaults DefaultNewcomerWeight
	// and DefaultNewcomerCap; a negative value means zero.
	NewcomerWeight float64
	NewcomerCap    float64
	// MaxIdentities bounds the providers, and separately the renters, the
	// book tracks (default DefaultMaxIdentities). Beyond it the book forgets
	// the ones with the least standing, least recently seen first.
	MaxIdentities int
	// Self is the book owner's peer ID, if any. A receipt Self countersigned
	// as the renter is first-hand evidence (the owner took part in the lease
	// and owes its amount), so it weighs with full standing.
	Self string
	// Successions is the node's registry of identity successions, shared
	// with the other paths that open signed messages; nil gives the book
	// one of its own. See Book.Succeed.
	Successions *sign.Successions
}

// Evidence is a report of provider misbehaviour.
type Evidence struct {
	// Kind is one of the Slash* constants.
	Kind    string `json:"kind"`
	LeaseID string `json:"lease_id"`
	Detail  string `json:"detail,omitempty"`
	// Reporter is the peer reporting the evidence, if any.
	Reporter string `json:"reporter,omitempty"`
	// Time is when the misbehaviour was observed; zero means now.
	Time time.Time `json:"time,omitempty"`
	// Heartbeat and Fingerprint optionally prove a
	// SlashHeartbeatContradictsFingerprint: when given, both must be the
	// provider's signed envelopes and must contradict each other.
	Heartbeat   *sign.Envelope `json:"heartbeat,omitempty"`
	Fingerprint *sign.Envelope `json:"fingerprint,omitempty"`
}

// ProviderRep is a provider's reputation as the book sees it.
type ProviderRep struct {
	Score      float64 `json:"score"`
	Receipts   int     `json:"receipts"` // kept (at most BookOptions.MaxRecords)
	Completed  int     `json:"completed"`
	Failed     int     `json:"failed"`     // failed or expired through the provider
	JobFaults  int     `json:"job_faults"` // failed or expired through the job itself (not counted against the provider)
	Preempted  int     `json:"preempted"`
	Churned    int     `json:"churned"` // preemptions of a job it had stopped early already: counted as failures
	Cancelled  int     `json:"cancelled"`
	Overclaims int     `json:"overclaims"`
	Renters    int     `json:"renters"` // distinct
	Slashes    int     `json:"slashes"`
	// Completion, Coverage and Honesty are the shrunk, recency-weighted
	// components the score blends.
	Completion float64 `json:"completion"`
	Coverage   float64 `json:"coverage"`
	Honesty    float64 `json:"honesty"`
	// Weight is the effective number of receipts after decay, the
	// per-renter cap and the renters' standing.
	Weight float64 `json:"weight"`
}

type record struct {
	lease    string
	job      string
	renter   string
	amount   float64
	end      time.Time
	bucket   int64
	outcome  terms.RunState
	jobFault bool // failed through the job's own fault: not the provider's
	coverage float64
	hasCov   bool
	honest   bool
}

type slash struct {
	kind string
	at   time.Time
}

type provState struct {
	records []record
	groups  map[groupKey]int
	renters map[string]int
	slashes []slash
	slashed map[string]bool     // lease \x00 kind, for deduplication
	payload map[string][32]byte // lease id -> hash of the signed payload counted
	// verdicts are the GPU challenge verdicts counted, the newest of each
	// verifier per model family (key verifier \x00 family).
	verdicts map[string]verdictRec
	lastSeen time.Time
}

func newProvState() *provState {
	return &provState{groups: make(map[groupKey]int), renters: make(map[string]int),
		slashed: make(map[string]bool), payload: make(map[string][32]byte)}
}

// renterState is what the book knows of a renter's own standing: when it
// first saw a verified receipt of it (by the book's clock, which a renter
// cannot backdate) and what it owes in the receipts the book keeps.
type renterState struct {
	firstSeen time.Time
	lastSeen  time.Time
	total     float64            // USD owed over all kept receipts
	spend     map[string]float64 // provider -> USD owed in its kept receipts
}

type groupKey struct {
	renter string
	bucket int64
}

// Book is a node's reputation ledger, computed from verified receipts and
// slash evidence only. It is safe for concurrent use.
//
// A receipt is only as credible as its renter: anyone can mint identities
// and countersign receipts for leases that never happened. So a receipt's
// weight depends on its renter's standing at scoring time, a number in
// [0,1] the renter cannot fake quickly: min(1, age/RenterMatureAge) ·
// min(1, owed/RenterMatureSpend), where age runs from the first verified
// receipt of the renter this book saw (by the book's own clock) and owed
// is what the renter owes in the kept receipts of providers OTHER than the
// one being scored; the book's owner (BookOptions.Self) has full standing
// in its own book. A receipt from a renter with standing s weighs s (its
// established part), plus NewcomerWeight·(1-s) (its newcomer part); the
// newcomer parts of all of a provider's receipts together weigh at most
// NewcomerCap receipts. The newcomer part may lower a provider but never
// lift it: in every component it counts the receipt's value as
// min(value, Prior). Receipts are two-party signed, so a renter reports
// only on a provider that countersigned with it: fresh renters cannot hurt
// an honest provider, and a provider farming itself up with fresh renter
// identities gets nothing above Prior from them. (Age is the part of
// standing that costs an attacker: owed money can be farmed between fake
// providers, and is only worth something once the identities have aged.)
//
// Score blends three recency-weighted components: completion (succeeded vs
// failed or expired; preempted and cancelled leases are not the provider's
// fault and do not count), uptime (the receipt's heartbeat coverage) and
// throughput honesty (1, or 0 for a receipt claiming more GPU-seconds than
// its span times its GPU count), weighted 0.5, 0.3 and 0.2. Each receipt
// weighs 2^(-age/HalfLife), age measured from its End, times the
// tight-cluster factor (BookOptions.RenterCap), times the standing-based
// factor above. Each component is shrunk toward Prior by PriorWeight pseudo-receipts. The blend is then multiplied
// by (1 - p·2^(-age/HalfLife)) for each slash, with p = 0.5 for
// heartbeat_contradicts_fingerprint and overclaim and 0.2 for
// abandoned_lease.
type Book struct {
	now          func() time.Time
	halfLife     time.Duration
	priorWeight  float64
	renterCap    int
	renterWindow time.Duration
	maxRecords   int
	matureAge    time.Duration
	matureSpend  float64
	newcomerW    float64
	newcomerCap  float64
	maxIdent     int
	self         string
	succ         *sign.Successions

	mu       sync.RWMutex
	provs    map[string]*provState
	renters  map[string]*renterState
	counters map[string]int
}

// NewBook returns an empty book.
func NewBook(opts BookOptions) *Book {
	b := &Book{
		now:          opts.Now,
		halfLife:     opts.HalfLife,
		priorWeight:  opts.PriorWeight,
		renterCap:    opts.RenterCap,
		renterWindow: opts.RenterWindow,
		maxRecords:   opts.MaxRecords,
		matureAge:    opts.RenterMatureAge,
		matureSpend:  opts.RenterMatureSpend,
		newcomerW:    opts.NewcomerWeight,
		newcomerCap:  opts.NewcomerCap,
		maxIdent:     opts.MaxIdentities,
		self:         opts.Self,
		succ:         opts.Successions,
		provs:        make(map[string]*provState),
		renters:      make(map[string]*renterState),
		counters:     make(map[string]int),
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.succ == nil {
		b.succ = sign.NewSuccessions()
	}
	if b.halfLife <= 0 {
		b.halfLife = DefaultHalfLife
	}
	if b.priorWeight <= 0 || !finite(b.priorWeight) {
		b.priorWeight = DefaultPriorWeight
	}
	if b.renterCap <= 0 {
		b.renterCap = DefaultRenterCap
	}
	if b.renterWindow <= 0 {
		b.renterWindow = DefaultRenterWindow
	}
	if b.maxRecords <= 0 {
		b.maxRecords = DefaultMaxRecords
	}
	if b.matureAge <= 0 {
		b.matureAge = DefaultRenterMatureAge
	}
	if b.matureSpend <= 0 || !finite(b.matureSpend) {
		b.matureSpend = DefaultRenterMatureSpend
	}
	b.newcomerW = defaultNonNeg(b.newcomerW, DefaultNewcomerWeight)
	b.newcomerCap = defaultNonNeg(b.newcomerCap, DefaultNewcomerCap)
	if b.maxIdent <= 0 {
		b.maxIdent = DefaultMaxIdentities
	}
	return b
}

// Counter keys reported by Book.Counters.
const (
	CountAccepted       = "accepted"
	CountDuplicate      = "duplicate"
	CountConflict       = "conflict"
	CountIncomplete     = "incomplete"
	CountBadSignature   = "bad_signature"
	CountTampered       = "tampered"
	CountSelfDealing    = "self_dealing"
	CountInvalid        = "invalid"
	CountMalformed      = "malformed"
	CountOverclaim      = "overclaim"
	CountSlash          = "slash"
	CountSlashDuplicate = "slash_duplicate"
	CountBadEvidence    = "bad_evidence"
	// Identities forgotten beyond BookOptions.MaxIdentities.
	CountEvictedProvider = "evicted_provider"
	CountEvictedRenter   = "evicted_renter"
	// CountRetiredKey: a receipt or verdict its signer's old key signed
	// after the identity's succession (see Book.Succeed).
	CountRetiredKey = "retired_key"
	// Successions learned, known already, refused (forged, malformed, or
	// breaking the chain of an identity), and second successions of one
	// identity (which mark it compromised).
	CountSuccession          = "succession"
	CountSuccessionDuplicate = "succession_duplicate"
	CountSuccessionRejected  = "succession_rejected"
	CountSuccessionConflict  = "succession_conflict"
)

// defaultNonNeg: zero (unset) means def, negative means zero.
func defaultNonNeg(v, def float64) float64 {
	switch {
	case v == 0 || !finite(v):
		return def
	case v < 0:
		return 0
	}
	return v
}

func rejectReason(err error) string {
	switch {
	case errors.Is(err, ErrIncomplete):
		return CountIncomplete
	case errors.Is(err, sign.ErrBadSignature):
		return CountBadSignature
	case errors.Is(err, ErrTampered):
		return CountTampered
	case errors.Is(err, ErrSelfDealing):
		return CountSelfDealing
	case errors.Is(err, ErrInvalidReceipt):
		return CountInvalid
	}
	return CountMalformed
}

// AddReceipt verifies sr and, if it is valid, counts it for its provider.
// Forged, incomplete, tampered and self-dealing receipts are rejected with
// an error and counted by reason; they do not change any score. So is a
// receipt either party's retired key signed (sign.Successions.Check, at its
// IssuedAt, else its End): counted as "retired_key". Adding a
// receipt the book already counted is a no-op (counted as "duplicate",
// nil error); a different receipt for the same provider and lease is
// rejected with ErrConflict. A receipt that overclaims GPU-seconds is
// counted (with zero honesty) and slashes the provider for overclaim.
func (b *Book) AddReceipt(sr *SignedReceipt) error {
	if err := sr.Verify(); err != nil {
		b.mu.Lock()
		b.counters[rejectReason(err)]++
		b.mu.Unlock()
		return fmt.Errorf("attest: receipt rejected: %w", err)
	}
	r := sr.Receipt
	at := r.IssuedAt
	if at.IsZero() {
		at = r.End
	}
	for _, id := range []string{r.Provider, r.Renter} {
		if err := b.succ.Check(id, at); err != nil {
			b.count(CountRetiredKey)
			return fmt.Errorf("attest: receipt rejected: %w", err)
		}
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.provLocked(r.Provider, now)
	sum := sha256.Sum256(sr.Payload)
	if prev, ok := ps.payload[r.LeaseID]; ok {
		if prev == sum {
			b.counters[CountDuplicate]++
			return nil
		}
		b.counters[CountConflict]++
		return fmt.Errorf("%w: lease %s of %s", ErrConflict, r.LeaseID, r.Provider)
	}
	ps.payload[r.LeaseID] = sum
	rs := b.renters[r.Renter]
	if rs == nil {
		rs = &renterState{firstSeen: now, spend: make(map[string]float64)}
		b.renters[r.Renter] = rs
	}
	rs.lastSeen = now
	rs.spend[r.Provider] += r.Amount
	rs.total += r.Amount
	rec := record{
		lease:    r.LeaseID,
		job:      r.JobID,
		renter:   r.Renter,
		amount:   r.Amount,
		end:      r.End,
		bucket:   floorDiv(r.End.UnixNano(), int64(b.renterWindow)),
		outcome:  r.Outcome,
		jobFault: r.Fault == terms.FaultJob,
		coverage: r.Heartbeats.Coverage,
		hasCov:   r.Heartbeats.Expected > 0,
		honest:   !r.Overclaimed(),
	}
	ps.records = append(ps.records, rec)
	ps.groups[groupKey{rec.renter, rec.bucket}]++
	ps.renters[rec.renter]++
	b.counters[CountAccepted]++
	if len(ps.records) > b.maxRecords {
		b.forgetOldest(r.Provider, ps)
	}
	if !rec.honest {
		b.counters[CountOverclaim]++
		b.slashLocked(ps, Evidence{Kind: SlashOverclaim, LeaseID: r.LeaseID, Time: r.End})
	}
	b.evictLocked(now)
	return nil
}

// provLocked returns provider's state, creating it, and marks it seen.
func (b *Book) provLocked(provider string, now time.Time) *provState {
	ps := b.provs[provider]
	if ps == nil {
		ps = newProvState()
		b.provs[provider] = ps
	}
	ps.lastSeen = now
	return ps
}

// unspend takes a forgotten record's amount off its renter's account.
func (b *Book) unspend(provider string, rec record) {
	rs := b.renters[rec.renter]
	if rs == nil {
		return // the renter was evicted
	}
	rs.total = math.Max(0, rs.total-rec.amount)
	if v := rs.spend[provider] - rec.amount; v > 1e-12 {
		rs.spend[provider] = v
	} else {
		delete(rs.spend, provider)
	}
}

// standing is renter's standing in [0,1] when scoring provider at now (see
// Book); 1 for the book's owner, 0 for a renter the book does not know.
//
// Once the book knows of successions, renter and provider each stand for
// their whole lineage: the renter's standing is that of all its identities
// together (first seen by the earliest, owing what all owe), less what they
// owe any identity of the provider's.
func (b *Book) standing(renter, provider string, now time.Time) float64 {
	if b.succ.Len() == 0 {
		if renter == b.self && renter != "" {
			return 1
		}
		rs := b.renters[renter]
		if rs == nil {
			return 0
		}
		return b.standingOf(rs, rs.total-rs.spend[provider], now)
	}
	if b.self != "" && b.succ.Heir(renter) == b.succ.Heir(b.self) {
		return 1
	}
	provs := b.succ.Lineage(provider)
	var merged *renterState
	var owed float64
	for _, id := range b.succ.Lineage(renter) {
		rs := b.renters[id]
		if rs == nil {
			continue
		}
		if merged == nil || rs.firstSeen.Before(merged.firstSeen) {
			merged = &renterState{firstSeen: rs.firstSeen}
		}
		owed += rs.total
		for _, p := range provs {
			owed -= rs.spend[p]
		}
	}
	if merged == nil {
		return 0
	}
	return b.standingOf(merged, owed, now)
}

func (b *Book) standingOf(rs *renterState, owed float64, now time.Time) float64 {
	age := math.Min(1, float64(now.Sub(rs.firstSeen))/float64(b.matureAge))
	spend := math.Min(1, owed/b.matureSpend)
	return math.Max(0, age) * math.Max(0, spend)
}

// evictLocked forgets identities beyond MaxIdentities: renters with the
// least standing (over all their receipts) and providers with the least
// evidence (kept receipts weighted by their renters' standing, slashes
// counting heavily, so that a slashed provider is not forgotten to make
// room for cheap fresh ones), least recently seen first. It trims an
// eighth below the limit at once, so that the sort is amortized.
func (b *Book) evictLocked(now time.Time) {
	type cand struct {
		id   string
		rank float64
		seen time.Time
	}
	trim := func(n int, cands []cand, counter string, drop func(string)) {
		sort.Slice(cands, func(i, j int) bool {
			if cands[i].rank != cands[j].rank {
				return cands[i].rank < cands[j].rank
			}
			return cands[i].seen.Before(cands[j].seen)
		})
		for _, c := range cands[:n] {
			drop(c.id)
			b.counters[counter]++
		}
	}
	excess := func(n int) int { return n - (b.maxIdent - b.maxIdent/8) }
	if len(b.provs) > b.maxIdent {
		cands := make([]cand, 0, len(b.provs))
		for id, ps := range b.provs {
			ev := 10 * float64(len(ps.slashes))
			for _, rec := range ps.records {
				ev += math.Max(b.newcomerW, b.standing(rec.renter, id, now))
			}
			cands = append(cands, cand{id, ev, ps.lastSeen})
		}
		trim(excess(len(b.provs)), cands, CountEvictedProvider, func(id string) {
			for _, rec := range b.provs[id].records {
				b.unspend(id, rec)
			}
			delete(b.provs, id)
		})
	}
	if len(b.renters) > b.maxIdent {
		cands := make([]cand, 0, len(b.renters))
		for id, rs := range b.renters {
			rank := b.standingOf(rs, rs.total, now)
			if id == b.self {
				rank = 2 // never forget the owner
			}
			cands = append(cands, cand{id, rank, rs.lastSeen})
		}
		trim(excess(len(b.renters)), cands, CountEvictedRenter, func(id string) { delete(b.renters, id) })
	}
}

// forgetOldest drops provider's record with the oldest End.
func (b *Book) forgetOldest(provider string, ps *provState) {
	oldest := 0
	for i, rec := range ps.records {
		if rec.end.Before(ps.records[oldest].end) {
			oldest = i
		}
	}
	rec := ps.records[oldest]
	last := len(ps.records) - 1
	ps.records[oldest] = ps.records[last]
	ps.records = ps.records[:last]
	g := groupKey{rec.renter, rec.bucket}
	if ps.groups[g]--; ps.groups[g] <= 0 {
		delete(ps.groups, g)
	}
	if ps.renters[rec.renter]--; ps.renters[rec.renter] <= 0 {
		delete(ps.renters, rec.renter)
	}
	delete(ps.payload, rec.lease)
	b.unspend(provider, rec)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// Slash records evidence of misbehaviour against provider, lowering its
// score by the kind's penalty (see Book). Evidence is deduplicated per
// (provider, lease, kind): repeating it is a no-op with a nil error, counted
// as "slash_duplicate". Malformed or unproven evidence is rejected with
// ErrBadEvidence.
func (b *Book) Slash(provider string, ev Evidence) error {
	err := checkEvidence(provider, ev)
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.counters[CountBadEvidence]++
		return err
	}
	b.slashLocked(b.provLocked(provider, now), ev)
	b.evictLocked(now)
	return nil
}

func checkEvidence(provider string, ev Evidence) error {
	if provider == "" {
		return fmt.Errorf("%w: empty provider", ErrBadEvidence)
	}
	if _, ok := slashPenalty[ev.Kind]; !ok {
		return fmt.Errorf("%w: unknown kind %q", ErrBadEvidence, ev.Kind)
	}
	if ev.LeaseID == "" {
		return fmt.Errorf("%w: empty lease id", ErrBadEvidence)
	}
	if ev.Heartbeat == nil && ev.Fingerprint == nil {
		return nil
	}
	if ev.Kind != SlashHeartbeatContradictsFingerprint || ev.Heartbeat == nil || ev.Fingerprint == nil {
		return fmt.Errorf("%w: proof needs both a heartbeat and a fingerprint", ErrBadEvidence)
	}
	hb, err := OpenHeartbeat(ev.Heartbeat)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadEvidence, err)
	}
	fp, err := OpenFingerprint(ev.Fingerprint)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadEvidence, err)
	}
	if hb.Provider != provider || fp.Peer != provider {
		return fmt.Errorf("%w: proof is not signed by %s", ErrBadEvidence, provider)
	}
	if hb.LeaseID != ev.LeaseID {
		return fmt.Errorf("%w: heartbeat is for lease %q", ErrBadEvidence, hb.LeaseID)
	}
	if CheckHeartbeatAgainstFingerprint(hb, fp) == nil {
		return fmt.Errorf("%w: heartbeat is consistent with the fingerprint", ErrBadEvidence)
	}
	return nil
}

func (b *Book) slashLocked(ps *provState, ev Evidence) {
	key := ev.LeaseID + "\x00" + ev.Kind
	if ps.slashed[key] {
		b.counters[CountSlashDuplicate]++
		return
	}
	ps.slashed[key] = true
	at := ev.Time
	if at.IsZero() {
		at = b.now()
	}
	ps.slashes = append(ps.slashes, slash{kind: ev.Kind, at: at})
	b.counters[CountSlash]++
}

func (b *Book) decay(at, now time.Time) float64 {
	age := now.Sub(at)
	if age <= 0 {
		return 1
	}
	return math.Exp2(-float64(age) / float64(b.halfLife))
}

// Score is provider's reputation in [0,1]; Prior for an unknown identity.
func (b *Book) Score(provider string) float64 {
	return b.Stats(provider).Score
}

// ReputationFunc adapts the book to the auction's func(provider) float64.
func (b *Book) ReputationFunc() func(provider string) float64 { return b.Score }

// Stats is provider's reputation with its components and counts. An
// identity that succeeded others (Succeed) is scored with their receipts,
// slashes and verdicts, and scoring any of them scores the whole lineage.
func (b *Book) Stats(provider string) ProviderRep {
	now := b.now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	ps := b.provView(provider)
	if ps == nil {
		return ProviderRep{Score: Prior, Completion: Prior, Coverage: Prior, Honesty: Prior}
	}
	rep := ProviderRep{Receipts: len(ps.records), Renters: len(ps.renters), Slashes: len(ps.slashes)}
	// Each receipt's weight: an established part (its renter's standing)
	// and a newcomer part, the latter capped in total per provider.
	est := make([]float64, len(ps.records))
	nov := make([]float64, len(ps.records))
	var novSum float64
	for i, rec := range ps.records {
		w := b.decay(rec.end, now)
		if n := ps.groups[groupKey{rec.renter, rec.bucket}]; n > b.renterCap {
			w *= float64(b.renterCap) / float64(n)
		}
		s := b.standing(rec.renter, provider, now)
		est[i], nov[i] = w*s, w*(1-s)*b.newcomerW
		novSum += nov[i]
	}
	novScale := 1.0
	if novSum > b.newcomerCap {
		novScale = b.newcomerCap / novSum
	}
	var compW, compX, covW, covX, honW, honX float64
	// A provider may stop a job early once (a drain hands it back, gold
	// preempts bronze): no one's fault. Stopping the same job early again
	// is churn, a provider winning attempts it does not run: a failure.
	type renterJob struct{ renter, job string }
	stopped := map[renterJob]bool{}
	for i, rec := range ps.records {
		// What the receipt adds to a component where its value is v: the
		// established part at v, the newcomer part at most at Prior.
		e, n := est[i], nov[i]*novScale
		w := e + n
		x := func(v float64) float64 { return e*v + n*math.Min(v, Prior) }
		if rec.jobFault && rec.honest {
			// The job failed through its own fault: its receipt says
			// nothing about the provider, for better or worse (a renter
			// posting failing jobs cannot move a provider's score).
			rep.JobFaults++
			continue
		}
		rep.Weight += w
		switch rec.outcome {
		case terms.RunSucceeded:
			rep.Completed++
			compW += w
			compX += x(1)
		case terms.RunFailed, terms.RunExpired:
			if rec.jobFault {
				rep.JobFaults++ // and overclaimed: only its honesty counts
				break
			}
			rep.Failed++
			compW += w
		case terms.RunPreempted:
			k := renterJob{rec.renter, rec.job}
			if !stopped[k] || rec.job == "" {
				stopped[k] = true
				rep.Preempted++
				break
			}
			rep.Churned++
			rep.Failed++
			compW += w
		case terms.RunCancelled:
			rep.Cancelled++
		}
		if rec.hasCov {
			covW += w
			covX += x(rec.coverage)
		}
		honW += w
		if rec.honest {
			honX += x(1)
		} else {
			rep.Overclaims++
		}
	}
	p := b.priorWeight
	shrink := func(x, w float64) float64 { return (x + p*Prior) / (w + p) }
	rep.Completion = shrink(compX, compW)
	rep.Coverage = shrink(covX, covW)
	rep.Honesty = shrink(honX, honW)
	score := weightCompletion*rep.Completion + weightUptime*rep.Coverage + weightHonesty*rep.Honesty
	for _, s := range ps.slashes {
		score *= 1 - slashPenalty[s.kind]*b.decay(s.at, now)
	}
	_, gpuFactor := b.gpuLocked(provider, ps, now)
	score *= gpuFactor
	rep.Score = math.Max(0, math.Min(1, score))
	return rep
}

// provView is provider's state as scored: its own while the book knows of
// no succession; else the states of every identity of its lineage merged,
// each renter and verifier named by its heir, so that an identity and its
// successors count as one (toward the tight-cluster cap and the distinct
// renters, and as one verifier's newest verdict).
func (b *Book) provView(provider string) *provState {
	if b.succ.Len() == 0 {
		return b.provs[provider]
	}
	var v *provState
	for _, id := range b.succ.Lineage(provider) {
		ps := b.provs[id]
		if ps == nil {
			continue
		}
		if v == nil {
			v = newProvState()
		}
		for _, rec := range ps.records {
			rec.renter = b.succ.Heir(rec.renter)
			v.records = append(v.records, rec)
			v.groups[groupKey{rec.renter, rec.bucket}]++
			v.renters[rec.renter]++
		}
		v.slashes = append(v.slashes, ps.slashes...)
		for _, r := range ps.verdicts {
			r.verifier = b.succ.Heir(r.verifier)
			key := r.verifier + "\x00" + r.family
			if v.verdicts == nil {
				v.verdicts = map[string]verdictRec{}
			}
			if old, ok := v.verdicts[key]; !ok || r.at.After(old.at) {
				v.verdicts[key] = r
			}
		}
	}
	return v
}

// Successions is the book's registry of identity successions, for the
// other paths that open signed messages.
func (b *Book) Successions() *sign.Successions { return b.succ }

// Succeed learns an identity succession into the book's registry, which
// verifies it (both keys must have signed it; sign.Successions.Learn).
// From then on the new identity is scored with the old one's receipts,
// slashes and verdicts as a provider and the old one's standing as a
// renter (Stats), and what the old key signed after the succession's issue
// time is refused (AddReceipt, AddVerdict). A second, different succession
// of the same identity shows its key compromised (sign.ErrCompromised):
// neither successor inherits anything. Each outcome is counted
// (CountSuccession*).
func (b *Book) Succeed(ss *sign.SignedSuccession) error {
	_, fresh, err := b.succ.Learn(ss, b.now())
	switch {
	case errors.Is(err, sign.ErrCompromised):
		if fresh {
			b.count(CountSuccessionConflict)
		} else {
			b.count(CountSuccessionDuplicate)
		}
	case err != nil:
		b.count(CountSuccessionRejected)
	case fresh:
		b.count(CountSuccession)
	default:
		b.count(CountSuccessionDuplicate)
	}
	if err != nil {
		return fmt.Errorf("attest: succession: %w", err)
	}
	return nil
}

// Counters returns how many receipts and slashes the book accepted and
// rejected, by reason (the Count* keys).
func (b *Book) Counters() map[string]int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]int, len(b.counters))
	for k, v := range b.counters {
		out[k] = v
	}
	return out
}
