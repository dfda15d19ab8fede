package attest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// MaxReceiptSize bounds a receipt's wire encoding.
const MaxReceiptSize = 64 << 10

// maxReceiptPayload bounds the signed payload so that its base64 wire form
// and both signatures fit in MaxReceiptSize.
const maxReceiptPayload = MaxReceiptSize*3/4 - 512

// Errors returned when a receipt does not verify.
var (
	// ErrIncomplete: a receipt lacks one of its two signatures.
	ErrIncomplete = errors.New("attest: receipt is not signed by both parties")
	// ErrTampered: the receipt's fields differ from the signed payload.
	ErrTampered = errors.New("attest: receipt fields do not match the signed payload")
	// ErrSelfDealing: renter and provider are the same identity.
	ErrSelfDealing = errors.New("attest: renter and provider are the same identity")
	// ErrInvalidReceipt: the receipt is not internally consistent.
	ErrInvalidReceipt = errors.New("attest: invalid receipt")
	// ErrMismatch: the receipt disagrees with the checker's view of the lease.
	ErrMismatch = errors.New("attest: receipt disagrees with the lease")
)

// Receipt is the two-party record of a finished lease. Amount is
// GPUSeconds/3600*Price, in USD.
type Receipt struct {
	LeaseID  string    `json:"lease_id"`
	JobID    string    `json:"job_id"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	GPUCount int       `json:"gpu_count"`
	// GPUFraction is the share of its one device a slice lease held
	// (terms.Lease.GPUFraction); 0 for whole devices. GPUSeconds then
	// count that share: a quarter of a device for an hour is 900.
	GPUFraction float64 `json:"gpu_fraction,omitempty"`
	// Devices names the devices the lease ran on: their UUIDs where known,
	// else their indices on the provider (none for a receipt that does not
	// say; otherwise one per GPU).
	Devices    []string       `json:"devices,omitempty"`
	GPUSeconds float64        `json:"gpu_seconds"`
	Price      float64        `json:"price"` // per GPU-hour
	Amount     float64        `json:"amount"`
	Outcome    terms.RunState `json:"outcome"` // the lease's terminal state
	// Fault says who caused an unsuccessful outcome (the job or the
	// provider); empty for success, preemption and cancellation.
	Fault      terms.Fault `json:"fault,omitempty"`
	ResultHash string      `json:"result_hash,omitempty"`
	// Checkpoint is the artifact id of the last checkpoint of the job the
	// lease saved and its renter acknowledged ("" for none).
	Checkpoint string `json:"checkpoint,omitempty"`
	// LogDigest is the SHA-256 (hex) of the job's log the provider
	// reported and the renter fetched and checked: the evidence a
	// succeeded run is paid on ("" on receipts from before it was kept).
	LogDigest string `json:"log_digest,omitempty"`
	// NoPersist is the provider's word that the lease ran under the
	// no-persistence policy (terms.Job.NoPersist): its log and outputs
	// went to the renter and are deleted once the lease is settled, none
	// were kept as artifacts, and the job's memory could not swap. A
	// renter does not countersign a no-persist job's receipt without it.
	NoPersist bool `json:"no_persist,omitempty"`
	// Scrub says what the provider did to its devices' memory after the
	// lease, before another tenant could use them: ScrubZeroed,
	// ScrubNoneDeclared (declared GPUs: no device memory to clear), a
	// ScrubFailed statement, or "" (not said).
	Scrub      string           `json:"scrub,omitempty"`
	Heartbeats HeartbeatSummary `json:"heartbeats"`
	IssuedAt   time.Time        `json:"issued_at"`
}

// Receipt.Scrub statements. A failed scrub is ScrubFailed followed by why,
// at most MaxScrubStatement bytes in all.
const (
	ScrubZeroed       = "zeroed"
	ScrubNoneDeclared = "none-declared"
	ScrubFailed       = "failed: "
	MaxScrubStatement = 256
)

// ScrubFailure is the Receipt.Scrub statement of a failed scrub: why, on
// one line, cut to fit MaxScrubStatement.
func ScrubFailure(why string) string {
	why = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(why, "?"))
	why = strings.Join(strings.Fields(why), " ")
	if why == "" {
		why = "unknown error"
	}
	s := ScrubFailed + why
	for len(s) > MaxScrubStatement {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return strings.TrimRight(s, " ")
}

// validScrub reports whether s is a Receipt.Scrub statement.
func validScrub(s string) bool {
	switch {
	case s == "", s == ScrubZeroed, s == ScrubNoneDeclared:
		return true
	case !strings.HasPrefix(s, ScrubFailed) || len(s) > MaxScrubStatement || len(s) == len(ScrubFailed):
		return false
	}
	return s == ScrubFailure(strings.TrimPrefix(s, ScrubFailed))
}

// AmountFor is the amount due for gpuSeconds at price per GPU-hour.
func AmountFor(gpuSeconds, price float64) float64 { return gpuSeconds / 3600 * price }

// Overclaimed reports whether the receipt claims more GPU-seconds than its
// span times the GPUs it held (its GPU count, or the fraction of one device
// a slice lease held: terms.BilledGPUs), with a one-second allowance for
// rounding.
func (r Receipt) Overclaimed() bool {
	limit := wallSpan(r.Start, r.End).Seconds()*terms.BilledGPUs(r.GPUCount, r.GPUFraction) + 1
	return r.GPUSeconds > limit
}

// wallSpan is end less start as wall-clock instants: what a receipt's
// signed, serialized times give, whatever monotonic readings they carry.
func wallSpan(start, end time.Time) time.Duration { return end.Round(0).Sub(start.Round(0)) }

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// validate checks what every receipt must satisfy, signed or not.
func (r Receipt) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidReceipt, fmt.Sprintf(format, a...))
	}
	if r.LeaseID == "" {
		return bad("empty lease id")
	}
	if _, err := sign.Decode(r.Renter); err != nil {
		return bad("renter: %v", err)
	}
	if _, err := sign.Decode(r.Provider); err != nil {
		return bad("provider: %v", err)
	}
	if r.Renter == r.Provider {
		return fmt.Errorf("%w: %s", ErrSelfDealing, r.Provider)
	}
	if !r.End.After(r.Start) {
		return bad("end %s not after start %s", r.End.Format(time.RFC3339), r.Start.Format(time.RFC3339))
	}
	if r.GPUCount < 1 {
		return bad("gpu count %d", r.GPUCount)
	}
	if r.GPUFraction != 0 && (!slices.Contains(terms.GPUFractions, r.GPUFraction) || r.GPUCount != 1) {
		return bad("gpu fraction %v of %d gpus (want 0.125, 0.25 or 0.5 of one)", r.GPUFraction, r.GPUCount)
	}
	if len(r.Devices) > 0 && len(r.Devices) != r.GPUCount {
		return bad("%d devices for %d gpus", len(r.Devices), r.GPUCount)
	}
	seenDev := map[string]bool{}
	for _, d := range r.Devices {
		if d == "" || seenDev[d] {
			return bad("device %q empty or repeated", d)
		}
		seenDev[d] = true
	}
	if !finite(r.GPUSeconds) || r.GPUSeconds < 0 {
		return bad("gpu seconds %v", r.GPUSeconds)
	}
	if !finite(r.Price) || r.Price < 0 {
		return bad("price %v", r.Price)
	}
	if !finite(r.Amount) {
		return bad("amount %v", r.Amount)
	}
	want := AmountFor(r.GPUSeconds, r.Price)
	if math.Abs(r.Amount-want) > 1e-9*math.Max(1, math.Abs(want)) {
		return bad("amount %v, gpu seconds and price give %v", r.Amount, want)
	}
	if r.LogDigest != "" && !terms.ValidArtifactID(r.LogDigest) {
		return bad("log digest %q is not a SHA-256", r.LogDigest)
	}
	if r.Checkpoint != "" && !terms.ValidArtifactID(r.Checkpoint) {
		return bad("checkpoint %q is not an artifact id", r.Checkpoint)
	}
	if !validScrub(r.Scrub) {
		return bad("scrub %.64q is not %q, %q or %q followed by why on one line", r.Scrub, ScrubZeroed, ScrubNoneDeclared, ScrubFailed)
	}
	switch r.Outcome {
	case terms.RunSucceeded, terms.RunFailed, terms.RunPreempted, terms.RunExpired, terms.RunCancelled:
	default:
		return bad("outcome %q", r.Outcome)
	}
	if !r.Fault.Valid() || (r.Fault != terms.FaultNone && r.Outcome != terms.RunFailed && r.Outcome != terms.RunExpired) {
		return bad("fault %q with outcome %s", r.Fault, r.Outcome)
	}
	if !r.Heartbeats.inRange() {
		return bad("heartbeat summary out of range")
	}
	return nil
}

// inRange reports whether a summary's figures are ones a monitor can
// give: what a receipt carrying it needs.
func (hs HeartbeatSummary) inRange() bool {
	return hs.Count >= 0 && hs.Expected >= 0 && hs.Rejected >= 0 && hs.RateLimited >= 0 && hs.RateLimited <= hs.Rejected &&
		finite(hs.Coverage) && hs.Coverage >= 0 && hs.Coverage <= 1 && finite(hs.MeanGPUUtil)
}

// DecodeHeartbeatSummary decodes a renter's answer to a lease's final
// report: the summary the provider's receipt carries, so one a receipt
// cannot hold is refused as it comes, not when the receipt is made.
func DecodeHeartbeatSummary(b []byte) (HeartbeatSummary, error) {
	var hs HeartbeatSummary
	if err := json.Unmarshal(b, &hs); err != nil {
		return HeartbeatSummary{}, fmt.Errorf("attest: heartbeat summary: %v", err)
	}
	if !hs.inRange() {
		return HeartbeatSummary{}, errors.New("attest: heartbeat summary out of range")
	}
	return hs, nil
}

// SignedReceipt is a receipt with the exact bytes both parties signed: the
// provider under sign.DomainReceiptProvider, the renter under sign.DomainReceiptRenter.
// Receipt is the decoded payload, kept for convenience; Verify checks that
// it has not drifted from Payload.
type SignedReceipt struct {
	Receipt     Receipt
	Payload     []byte
	ProviderSig []byte
	RenterSig   []byte
}

// NewReceipt encodes r and signs it as its provider. r.Provider may be left
// empty (it is filled with the signer's ID) and a zero r.Amount is computed
// from GPUSeconds and Price. The result still needs the renter's
// Countersign before it is a receipt.
func NewReceipt(s *sign.Signer, r Receipt) (*SignedReceipt, error) {
	if s == nil {
		return nil, errors.New("attest: nil signer")
	}
	if r.Provider == "" {
		r.Provider = s.ID().String()
	}
	if r.Provider != s.ID().String() {
		return nil, fmt.Errorf("%w: provider %s is not the signer %s", ErrInvalidReceipt, r.Provider, s.ID())
	}
	if r.Amount == 0 {
		r.Amount = AmountFor(r.GPUSeconds, r.Price)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	if r.Overclaimed() {
		return nil, fmt.Errorf("%w: %.0f gpu seconds exceed the lease span", ErrInvalidReceipt, r.GPUSeconds)
	}
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("attest: encode receipt: %w", err)
	}
	if len(payload) > maxReceiptPayload {
		return nil, sign.ErrOversized
	}
	sig, err := s.Sign(sign.DomainReceiptProvider, payload)
	if err != nil {
		return nil, fmt.Errorf("attest: sign receipt: %w", err)
	}
	var decoded Receipt
	if err := json.Unmarshal(payload, &decoded); err != nil {
		return nil, fmt.Errorf("attest: decode receipt: %w", err)
	}
	return &SignedReceipt{Receipt: decoded, Payload: payload, ProviderSig: sig}, nil
}

// Countersign verifies the provider's signature and signs the same payload
// as the receipt's renter. The renter should first compare the receipt with
// its own view of the lease (CheckReceipt). Countersign refuses a receipt
// that claims more GPU-seconds than the lease span allows.
func (sr *SignedReceipt) Countersign(s *sign.Signer) error {
	if s == nil {
		return errors.New("attest: nil signer")
	}
	if sr == nil {
		return sign.ErrMalformed
	}
	r, err := sr.decode()
	if err != nil {
		return err
	}
	if r.Renter != s.ID().String() {
		return fmt.Errorf("%w: renter %s is not the signer %s", ErrInvalidReceipt, r.Renter, s.ID())
	}
	if err := verifyRole(r.Provider, sign.DomainReceiptProvider, sr.Payload, sr.ProviderSig, "provider"); err != nil {
		return err
	}
	if r.Overclaimed() {
		return fmt.Errorf("%w: %.0f gpu seconds exceed the lease span", ErrInvalidReceipt, r.GPUSeconds)
	}
	sig, err := s.Sign(sign.DomainReceiptRenter, sr.Payload)
	if err != nil {
		return fmt.Errorf("attest: countersign receipt: %w", err)
	}
	sr.RenterSig = sig
	return nil
}

// decode checks the payload and that Receipt matches it, and returns the
// receipt as signed.
func (sr *SignedReceipt) decode() (Receipt, error) {
	if len(sr.Payload) == 0 {
		return Receipt{}, fmt.Errorf("%w: empty payload", sign.ErrMalformed)
	}
	if len(sr.Payload) > maxReceiptPayload {
		return Receipt{}, sign.ErrOversized
	}
	var r Receipt
	if err := json.Unmarshal(sr.Payload, &r); err != nil {
		return Receipt{}, fmt.Errorf("%w: receipt payload: %v", sign.ErrMalformed, err)
	}
	a, err1 := json.Marshal(r)
	b, err2 := json.Marshal(sr.Receipt)
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		return Receipt{}, ErrTampered
	}
	if err := r.validate(); err != nil {
		return Receipt{}, err
	}
	return r, nil
}

func verifyRole(who, domain string, payload, sig []byte, role string) error {
	id, err := sign.Decode(who)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidReceipt, role, err)
	}
	if err := sign.Verify(id, domain, payload, sig); err != nil {
		return fmt.Errorf("%s signature: %w", role, err)
	}
	return nil
}

// Verify checks a complete receipt: both signatures present (ErrIncomplete)
// and valid, each against the peer ID in its role (sign.ErrBadSignature); the
// payload decodes to Receipt (ErrTampered); renter and provider differ
// (ErrSelfDealing); End after Start, a known outcome and Amount equal to
// GPUSeconds/3600*Price (ErrInvalidReceipt). An overclaim is not a
// verification failure: it is the provider's signed statement, and a Book
// scores it as fraud.
func (sr *SignedReceipt) Verify() error {
	if sr == nil {
		return sign.ErrMalformed
	}
	if len(sr.ProviderSig) == 0 || len(sr.RenterSig) == 0 {
		return ErrIncomplete
	}
	r, err := sr.decode()
	if err != nil {
		return err
	}
	if err := verifyRole(r.Provider, sign.DomainReceiptProvider, sr.Payload, sr.ProviderSig, "provider"); err != nil {
		return err
	}
	return verifyRole(r.Renter, sign.DomainReceiptRenter, sr.Payload, sr.RenterSig, "renter")
}

// CheckReceipt compares a receipt with the checker's own record of the
// lease at now: same lease, job, parties, price, GPU count and fraction, a span
// within the lease's (a lease may end early, not late) and an End that is
// not in the future of now (beyond HeartbeatSkew of clock skew). A renter
// should also bound what it countersigns by what it observed
// (BillableSeconds).
func CheckReceipt(r Receipt, l terms.Lease, now time.Time) error {
	mismatch := func(field string, got, want any) error {
		return fmt.Errorf("%w: %s %v, lease has %v", ErrMismatch, field, got, want)
	}
	switch {
	case r.LeaseID != l.ID:
		return mismatch("lease id", r.LeaseID, l.ID)
	case r.JobID != l.JobID:
		return mismatch("job id", r.JobID, l.JobID)
	case r.Renter != l.Renter:
		return mismatch("renter", r.Renter, l.Renter)
	case r.Provider != l.Provider:
		return mismatch("provider", r.Provider, l.Provider)
	case r.Price != l.Price:
		return mismatch("price", r.Price, l.Price)
	case r.GPUCount != l.GPUCount:
		return mismatch("gpu count", r.GPUCount, l.GPUCount)
	case r.GPUFraction != l.GPUFraction:
		return mismatch("gpu fraction", r.GPUFraction, l.GPUFraction)
	case r.Start.Before(l.Start):
		return mismatch("start", r.Start, l.Start)
	case r.End.After(l.End):
		return mismatch("end", r.End, l.End)
	case r.End.After(now.Add(HeartbeatSkew)):
		return fmt.Errorf("%w: end %s is in the future of %s", ErrMismatch, r.End.Format(time.RFC3339), now.Format(time.RFC3339))
	case r.Overclaimed():
		return fmt.Errorf("%w: %.0f gpu seconds exceed the span", ErrMismatch, r.GPUSeconds)
	}
	return nil
}

// BillableSeconds is the most lease time, in seconds, that a renter can
// vouch for, and so the most it should countersign: a receipt's GPUSeconds
// should not exceed BillableSeconds·Lease.BilledGPUs (plus the one-second rounding
// allowance of Receipt.Overclaimed). It is the span from the later of the
// lease start and observedStart (when the renter saw the run start) to the
// earliest of the lease end, observedEnd (when it saw the run end; zero
// while it is still running) and now, less the heartbeat gaps of hs (the
// renter's own HeartbeatMonitor summary of the lease: spans longer than two
// intervals without a verified heartbeat, clipped to that span). It is 0
// when the renter never saw the run start (zero observedStart), when the
// span is empty, and when heartbeats were expected but none was verified.
//
// Times count as wall-clock instants (their monotonic readings dropped):
// a bill worked out from a process's own clock readings equals the one
// anyone works out from the same times as signed and sent, even when the
// wall clock was stepped or slewed between them.
func BillableSeconds(l terms.Lease, observedStart, observedEnd, now time.Time, hs HeartbeatSummary) float64 {
	if observedStart.IsZero() {
		return 0
	}
	observedStart, observedEnd, now = observedStart.Round(0), observedEnd.Round(0), now.Round(0)
	start := l.Start.Round(0)
	if observedStart.After(start) {
		start = observedStart
	}
	end := l.End.Round(0)
	if !observedEnd.IsZero() && observedEnd.Before(end) {
		end = observedEnd
	}
	if now.Before(end) {
		end = now
	}
	if !end.After(start) || (hs.Expected > 0 && hs.Count == 0) {
		return 0
	}
	billable := end.Sub(start)
	for _, g := range hs.Gaps {
		a, b := g.Start.Round(0), g.End.Round(0)
		if a.Before(start) {
			a = start
		}
		if b.After(end) {
			b = end
		}
		if b.After(a) {
			billable -= b.Sub(a)
		}
	}
	return math.Max(0, billable.Seconds())
}

// ClockOffset is a renter's estimate of how far its provider's clock runs
// ahead of its own (negative: behind), taken from the provider's signed
// times as they arrive. A time cannot arrive before it was stamped, so each
// sample (stamped minus arrived) is at most the true offset, and the
// estimate is the largest sample: within one message's delay of the truth
// for an honest provider. A provider may lie in its stamps; CheckBilled
// bounds what that can earn it (see there). The zero value is no estimate.
type ClockOffset struct {
	Ahead   time.Duration `json:"ahead,omitempty"`
	Samples int           `json:"samples,omitempty"`
}

// Note takes one sample: a time the provider signed, and this renter's
// clock when the message carrying it arrived. Zero times are ignored.
func (o *ClockOffset) Note(signed, arrived time.Time) {
	if signed.IsZero() || arrived.IsZero() {
		return
	}
	d := signed.Round(0).Sub(arrived.Round(0))
	if o.Samples == 0 || d > o.Ahead {
		o.Ahead = d
	}
	o.Samples++
}

// OnProvider is t, a reading of the renter's clock, on its provider's clock
// as far as the estimate goes: moved by it, but never by more than the clock
// skew peers are allowed (HeartbeatSkew either way), so no estimate, however
// wild, moves a time further. A zero t stays zero.
func (o ClockOffset) OnProvider(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(max(-HeartbeatSkew, min(HeartbeatSkew, o.Ahead)))
}

// CheckBilled refuses a receipt that bills more than its renter can
// vouch for: GPUSeconds beyond BillableSeconds (of the renter's own
// observed start and end, at now, less the gaps of its heartbeat summary
// hs) times the lease's billed GPUs, plus the one-second rounding
// allowance.
//
// The renter's times are its own clock's, the lease's and the heartbeats'
// its provider's: the renter's are put on the provider's clock first
// (off.OnProvider: the renter's ClockOffset of the provider), so honest
// peers whose clocks differ by seconds agree. What the renter pays for is
// still at most the span it saw the run for, and at most the lease's
// length: a provider that lies about its clock only moves that span, and
// gains at most HeartbeatSkew of time its renter saw it run, just outside
// the lease.
func CheckBilled(r Receipt, l terms.Lease, observedStart, observedEnd, now time.Time, off ClockOffset, hs HeartbeatSummary) error {
	observedStart, observedEnd, now = off.OnProvider(observedStart), off.OnProvider(observedEnd), off.OnProvider(now)
	billable := BillableSeconds(l, observedStart, observedEnd, now, hs) * l.BilledGPUs()
	if r.GPUSeconds > billable+1 {
		return fmt.Errorf("receipt bills %.1f GPU-seconds; the renter observed at most %.1f", r.GPUSeconds, billable)
	}
	return nil
}

// wireReceipt is the wire form: the signed bytes and the signatures. The
// decoded receipt is not sent; it is rebuilt from the payload.
type wireReceipt struct {
	Payload     []byte `json:"payload"`
	ProviderSig []byte `json:"provider_sig"`
	RenterSig   []byte `json:"renter_sig,omitempty"`
}

// Marshal encodes the receipt for the wire.
func (sr *SignedReceipt) Marshal() ([]byte, error) {
	if sr == nil {
		return nil, sign.ErrMalformed
	}
	b, err := json.Marshal(wireReceipt{Payload: sr.Payload, ProviderSig: sr.ProviderSig, RenterSig: sr.RenterSig})
	if err != nil {
		return nil, fmt.Errorf("attest: encode receipt: %w", err)
	}
	if len(b) > MaxReceiptSize {
		return nil, sign.ErrOversized
	}
	return b, nil
}

// UnmarshalReceipt decodes wire bytes into a SignedReceipt, bounding their
// size and decoding the payload. It does not check signatures: call Verify,
// or use OpenReceipt.
func UnmarshalReceipt(b []byte) (*SignedReceipt, error) {
	if len(b) > MaxReceiptSize {
		return nil, sign.ErrOversized
	}
	var w wireReceipt
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%w: receipt: %v", sign.ErrMalformed, err)
	}
	if len(w.Payload) == 0 || len(w.ProviderSig) == 0 {
		return nil, fmt.Errorf("%w: receipt without payload or provider signature", sign.ErrMalformed)
	}
	sr := &SignedReceipt{Payload: w.Payload, ProviderSig: w.ProviderSig, RenterSig: w.RenterSig}
	if err := json.Unmarshal(w.Payload, &sr.Receipt); err != nil {
		return nil, fmt.Errorf("%w: receipt payload: %v", sign.ErrMalformed, err)
	}
	return sr, nil
}

// OpenReceipt decodes wire bytes and verifies the receipt (Verify).
func OpenReceipt(b []byte) (*SignedReceipt, error) {
	sr, err := UnmarshalReceipt(b)
	if err != nil {
		return nil, err
	}
	if err := sr.Verify(); err != nil {
		return nil, err
	}
	return sr, nil
}
