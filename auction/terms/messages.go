package terms

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gpumesh/gpumesh/attest/sign"
)

// MaxMessageSize bounds any wire message a handler accepts.
const MaxMessageSize = 128 << 10

// Decoding errors.
var (
	ErrOversized      = errors.New("auction: message too large")
	ErrMalformed      = errors.New("auction: malformed message")
	ErrSignerMismatch = errors.New("auction: signer does not match the message")
)

// Call is a call for bids as gossiped: the job, sealed by its owner under
// sign.DomainJob, and the topic it was published on.
type Call struct {
	Job   Job
	Topic string
}

type callWire struct {
	Topic string         `json:"topic"`
	Job   *sign.Envelope `json:"job"`
}

// EncodeCall seals job (whose Owner must be the signer) and wraps it with
// its topic for gossip.
func EncodeCall(s *sign.Signer, job Job, topic string) ([]byte, error) {
	if job.Owner != s.ID().String() {
		return nil, fmt.Errorf("%w: job owner %q is not the signer %s", ErrSignerMismatch, job.Owner, s.ID())
	}
	env, err := sign.Seal(s, sign.DomainJob, job)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(callWire{Topic: topic, Job: env})
	if err != nil {
		return nil, fmt.Errorf("auction: encode call: %w", err)
	}
	if len(b) > MaxMessageSize {
		return nil, ErrOversized
	}
	return b, nil
}

// CallAsks reports whether a gossiped call asks provider to answer
// (SampledBidder) as its unverified bytes say, so that a provider outside a
// sampled call's share drops it without checking its signature: a call
// whose sample was forged to leave a provider out only spares that
// provider the work, and one that names it is verified by DecodeCall as
// any other. Bytes that do not parse ask everyone: DecodeCall judges them.
func CallAsks(data []byte, provider string) bool {
	if len(data) > MaxMessageSize {
		return true
	}
	var w callWire
	if json.Unmarshal(data, &w) != nil || w.Job == nil {
		return true
	}
	// Only the sample's fields: the rest of the job is DecodeCall's.
	var j struct {
		BidSample  float64  `json:"bid_sample"`
		BidSeed    string   `json:"bid_seed"`
		BidInvited []string `json:"bid_invited"`
	}
	if json.Unmarshal(w.Job.Payload, &j) != nil {
		return true
	}
	return SampledBidder(&Job{BidSample: j.BidSample, BidSeed: j.BidSeed, BidInvited: j.BidInvited}, provider)
}

// DecodeCall verifies a gossiped call: the job envelope's signature under
// sign.DomainJob, that its signer is the job's Owner, that the job id
// satisfies ValidID and that the job is valid (Job.Validate, which fills
// its defaults; its errors wrap ErrInvalidJob). A call is where a job
// enters a provider: what DecodeCall returns is not validated again.
func DecodeCall(data []byte) (Call, error) {
	if len(data) > MaxMessageSize {
		return Call{}, ErrOversized
	}
	var w callWire
	if err := json.Unmarshal(data, &w); err != nil {
		return Call{}, fmt.Errorf("%w: call: %v", ErrMalformed, err)
	}
	if w.Job == nil {
		return Call{}, fmt.Errorf("%w: call without job", ErrMalformed)
	}
	var c Call
	id, err := sign.Open(w.Job, sign.DomainJob, &c.Job)
	if err != nil {
		return Call{}, fmt.Errorf("auction: call: %w", err)
	}
	if c.Job.Owner != id.String() {
		return Call{}, fmt.Errorf("%w: job owner %q, signed by %s", ErrSignerMismatch, c.Job.Owner, id)
	}
	if err := ValidID(c.Job.ID); err != nil {
		return Call{}, fmt.Errorf("auction: call: job id: %w", err)
	}
	if err := c.Job.Validate(); err != nil {
		return Call{}, err
	}
	c.Topic = w.Topic
	return c, nil
}

func seal(s *sign.Signer, domain string, v any) ([]byte, error) {
	env, err := sign.Seal(s, domain, v)
	if err != nil {
		return nil, err
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("auction: encode %s: %w", domain, err)
	}
	if len(b) > MaxMessageSize {
		return nil, ErrOversized
	}
	return b, nil
}

func open(data []byte, domain string, v any) (sign.ID, error) {
	env, err := parse(data, domain)
	if err != nil {
		return "", err
	}
	return openEnv(env, domain, v)
}

// parse reads a message's envelope, once, without verifying it: what a
// stream that carries several kinds of message tells them apart by (its
// domain).
func parse(data []byte, what string) (*sign.Envelope, error) {
	if len(data) > MaxMessageSize {
		return nil, ErrOversized
	}
	env, err := sign.UnmarshalEnvelope(data)
	if err != nil {
		return nil, fmt.Errorf("auction: %s: %w", what, err)
	}
	return env, nil
}

// openEnv verifies a parsed envelope under domain and decodes its payload
// into v.
func openEnv(env *sign.Envelope, domain string, v any) (sign.ID, error) {
	id, err := sign.Open(env, domain, v)
	if err != nil {
		return "", fmt.Errorf("auction: %s: %w", domain, err)
	}
	return id, nil
}

// decode parses data's envelope and hands it to dec: a DecodeX of one kind
// of message is decode with that kind's decoder.
func decode[T any](data []byte, domain string, dec func(*sign.Envelope) (T, error)) (T, error) {
	env, err := parse(data, domain)
	if err != nil {
		var zero T
		return zero, err
	}
	return dec(env)
}

// sealAs seals v, a message whose author (its provider or renter field)
// must be the signer.
func sealAs(s *sign.Signer, domain, what, author string, v any) ([]byte, error) {
	if author != s.ID().String() {
		return nil, fmt.Errorf("%w: %s author %q is not the signer %s", ErrSignerMismatch, what, author, s.ID())
	}
	return seal(s, domain, v)
}

// openAs verifies an envelope of a message whose author (its provider or
// renter field, read by author) must be the signer.
func openAs[T any](env *sign.Envelope, domain, what string, author func(*T) string) (T, error) {
	var v, zero T
	id, err := openEnv(env, domain, &v)
	if err != nil {
		return zero, err
	}
	if a := author(&v); a != id.String() {
		return zero, fmt.Errorf("%w: %s claims author %q, signed by %s", ErrSignerMismatch, what, a, id)
	}
	return v, nil
}

// EncodeBid seals a bid; its Provider must be the signer.
func EncodeBid(s *sign.Signer, b Bid) ([]byte, error) {
	return sealAs(s, sign.DomainBid, "bid", b.Provider, b)
}

// DecodeBid verifies a bid envelope, that its signer is Bid.Provider and
// that its job id and nonce satisfy ValidID.
func DecodeBid(data []byte) (Bid, error) { return decode(data, sign.DomainBid, decodeBid) }

func decodeBid(env *sign.Envelope) (Bid, error) {
	b, err := openAs(env, sign.DomainBid, "bid", func(b *Bid) string { return b.Provider })
	if err != nil {
		return Bid{}, err
	}
	if err := validIDs("bid", "job id", b.JobID, "nonce", b.Nonce); err != nil {
		return Bid{}, err
	}
	return b, nil
}

// EncodeAward seals an award; its Renter and Job.Owner must be the signer.
func EncodeAward(s *sign.Signer, a Award) ([]byte, error) {
	if a.Renter != s.ID().String() || a.Job.Owner != a.Renter {
		return nil, fmt.Errorf("%w: award renter %q / job owner %q is not the signer %s", ErrSignerMismatch, a.Renter, a.Job.Owner, s.ID())
	}
	return seal(s, sign.DomainAward, a)
}

// DecodeAward verifies an award envelope and that its signer is both the
// award's Renter and its job's Owner, and that its lease id, job id (in
// the award and in its job) and bid nonce satisfy ValidID.
func DecodeAward(data []byte) (Award, error) { return decode(data, sign.DomainAward, decodeAward) }

func decodeAward(env *sign.Envelope) (Award, error) {
	var a Award
	id, err := openEnv(env, sign.DomainAward, &a)
	if err != nil {
		return Award{}, err
	}
	if a.Renter != id.String() || a.Job.Owner != id.String() {
		return Award{}, fmt.Errorf("%w: award renter %q, job owner %q, signed by %s", ErrSignerMismatch, a.Renter, a.Job.Owner, id)
	}
	if err := validIDs("award", "lease id", a.LeaseID, "job id", a.JobID, "job's id", a.Job.ID, "bid nonce", a.BidNonce); err != nil {
		return Award{}, err
	}
	return a, nil
}

// EncodeBidRelease seals a bid release; its Renter must be the signer.
func EncodeBidRelease(s *sign.Signer, r BidRelease) ([]byte, error) {
	return sealAs(s, sign.DomainBidRelease, "release", r.Renter, r)
}

// DecodeBidRelease verifies a bid release envelope, that its signer is its
// Renter and that its job id and bid nonce satisfy ValidID.
func DecodeBidRelease(data []byte) (BidRelease, error) {
	return decode(data, sign.DomainBidRelease, decodeBidRelease)
}

func decodeBidRelease(env *sign.Envelope) (BidRelease, error) {
	r, err := openAs(env, sign.DomainBidRelease, "release", func(r *BidRelease) string { return r.Renter })
	if err != nil {
		return BidRelease{}, err
	}
	if err := validIDs("bid release", "job id", r.JobID, "bid nonce", r.BidNonce); err != nil {
		return BidRelease{}, err
	}
	return r, nil
}

// EncodeDecline seals a decline; its Provider must be the signer.
func EncodeDecline(s *sign.Signer, d Decline) ([]byte, error) {
	return sealAs(s, sign.DomainDecline, "decline", d.Provider, d)
}

// DecodeDecline verifies a decline envelope, that its signer is its
// Provider, that its job id satisfies ValidID and that its kind is short.
func DecodeDecline(data []byte) (Decline, error) {
	return decode(data, sign.DomainDecline, decodeDecline)
}

func decodeDecline(env *sign.Envelope) (Decline, error) {
	d, err := openAs(env, sign.DomainDecline, "decline", func(d *Decline) string { return d.Provider })
	if err != nil {
		return Decline{}, err
	}
	if err := validIDs("decline", "job id", d.JobID, "kind", d.Kind); err != nil {
		return Decline{}, err
	}
	return d, nil
}

// EncodeConfirm seals a provider's answer to an award.
func EncodeConfirm(s *sign.Signer, c Confirm) ([]byte, error) {
	return seal(s, sign.DomainConfirm, c)
}

// DecodeConfirm verifies a confirm envelope and that its lease id satisfies
// ValidID, and returns it with its signer.
func DecodeConfirm(data []byte) (Confirm, sign.ID, error) {
	var c Confirm
	id, err := open(data, sign.DomainConfirm, &c)
	if err != nil {
		return Confirm{}, "", err
	}
	if err := validIDs("confirm", "lease id", c.LeaseID); err != nil {
		return Confirm{}, "", err
	}
	return c, id, nil
}

// validIDs checks name/id pairs of a message with ValidID.
func validIDs(msg string, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := ValidID(pairs[i+1]); err != nil {
			return fmt.Errorf("auction: %s: %s: %w", msg, pairs[i], err)
		}
	}
	return nil
}

// BidMessage is one message on a renter's bid stream (wire.ProtoBid),
// which carries three kinds told apart by their envelope's domain: exactly
// one field is set.
type BidMessage struct {
	Bid     *Bid            // sign.DomainBid
	Decline *Decline        // sign.DomainDecline
	Notice  *CapacityNotice // sign.DomainCapacityNotice
}

// DecodeBidMessage reads the envelope once and decodes it by its kind (its
// domain) with that kind's checks (DecodeBid, DecodeDecline,
// DecodeCapacityNotice). Any other kind is refused: sign.ErrWrongDomain,
// naming it.
func DecodeBidMessage(data []byte) (BidMessage, error) {
	env, err := parse(data, "bid stream")
	if err != nil {
		return BidMessage{}, err
	}
	switch env.Domain {
	case sign.DomainBid:
		b, err := one(decodeBid(env))
		return BidMessage{Bid: b}, err
	case sign.DomainDecline:
		d, err := one(decodeDecline(env))
		return BidMessage{Decline: d}, err
	case sign.DomainCapacityNotice:
		n, err := one(decodeCapacityNotice(env))
		return BidMessage{Notice: n}, err
	}
	return BidMessage{}, unknownKind("bid stream", env.Domain, sign.DomainBid, sign.DomainDecline, sign.DomainCapacityNotice)
}

// AwardMessage is one message on a provider's award stream
// (wire.ProtoAward), which carries two kinds told apart by their
// envelope's domain: exactly one field is set.
type AwardMessage struct {
	Award   *Award        // sign.DomainAward, answered by a Confirm
	Release *BidRelease   // sign.DomainBidRelease, answered by nothing
	Gang    *GangDecision // sign.DomainGangDecision: a commit is answered by a Confirm, an abort by nothing
}

// DecodeAwardMessage reads the envelope once and decodes it by its kind
// (DecodeAward, DecodeBidRelease, DecodeGangDecision); any other kind is
// refused: sign.ErrWrongDomain, naming it.
func DecodeAwardMessage(data []byte) (AwardMessage, error) {
	env, err := parse(data, "award stream")
	if err != nil {
		return AwardMessage{}, err
	}
	switch env.Domain {
	case sign.DomainAward:
		a, err := one(decodeAward(env))
		return AwardMessage{Award: a}, err
	case sign.DomainBidRelease:
		r, err := one(decodeBidRelease(env))
		return AwardMessage{Release: r}, err
	case sign.DomainGangDecision:
		d, err := one(decodeGangDecision(env))
		return AwardMessage{Gang: d}, err
	}
	return AwardMessage{}, unknownKind("award stream", env.Domain, sign.DomainAward, sign.DomainBidRelease, sign.DomainGangDecision)
}

// one is a decoder's answer as a message field: nil when it refused.
func one[T any](v T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// unknownKind is the error for a message whose kind a stream does not
// carry; a hostile kind is cut short so the error stays one short line.
func unknownKind(stream, kind string, carries ...string) error {
	if len(kind) > 40 {
		kind = kind[:40] + "…"
	}
	return fmt.Errorf("auction: %s: %w: unknown message kind %q (it carries %s)", stream, sign.ErrWrongDomain, kind, strings.Join(carries, ", "))
}
