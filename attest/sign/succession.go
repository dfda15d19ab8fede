package sign

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxSuccessionSize bounds a signed succession's wire encoding.
const MaxSuccessionSize = 4 << 10

// maxSuccessionPayload bounds its signed payload: two peer IDs and a time.
const maxSuccessionPayload = 1 << 10

// MaxSuccessionSkew is how far in the future a succession's issue time may
// be when a node learns it: one issued later would let both keys speak for
// the identity until then.
const MaxSuccessionSkew = 2 * time.Minute

// Errors of successions.
var (
	// ErrRetired: a message signed by an identity's old key at or after its
	// succession was issued. The old key no longer speaks for anyone: its
	// use is treated as a compromise of that key.
	ErrRetired = errors.New("sign: identity retired by its succession")
	// ErrCompromised: the identity has two different valid successions,
	// which only a second holder of its key can have made. Neither
	// successor is followed, and nothing its key signed after the earlier
	// succession's issue time is accepted.
	ErrCompromised = errors.New("sign: identity compromised (two different successions)")
)

// Succession is an identity's handover to a new key: from Issued on, New
// speaks for Old, and Old's key is retired. It is signed by both keys
// (SignedSuccession), so neither the holder of the old key alone nor of
// the new one alone can make one: the old key's signature is Old's word,
// the new key's proves the successor exists and agrees.
type Succession struct {
	Old    string    `json:"old"`
	New    string    `json:"new"`
	Issued time.Time `json:"issued"`
}

// SignedSuccession is a succession with the exact bytes both keys signed
// under DomainSuccession.
type SignedSuccession struct {
	Payload []byte `json:"payload"`
	OldSig  []byte `json:"old_sig"`
	NewSig  []byte `json:"new_sig"`
}

// SealSuccession makes old's succession by next, issued at issued, signed
// by both.
func SealSuccession(old, next *Signer, issued time.Time) (*SignedSuccession, error) {
	if old == nil || next == nil {
		return nil, errors.New("sign: succession needs the old and the new key")
	}
	rec := Succession{Old: old.ID().String(), New: next.ID().String(), Issued: issued.UTC().Round(0)}
	if _, _, err := rec.ids(); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("sign: encode succession: %w", err)
	}
	ss := &SignedSuccession{Payload: payload}
	if ss.OldSig, err = old.Sign(DomainSuccession, payload); err != nil {
		return nil, fmt.Errorf("sign: succession: old key: %w", err)
	}
	if ss.NewSig, err = next.Sign(DomainSuccession, payload); err != nil {
		return nil, fmt.Errorf("sign: succession: new key: %w", err)
	}
	return ss, nil
}

// ids checks the succession's fields and returns its two identities.
func (s Succession) ids() (old, next ID, err error) {
	decode := func(role, v string) (ID, error) {
		id, err := Decode(v)
		if err != nil {
			return "", fmt.Errorf("%w: succession: %s identity: %v", ErrMalformed, role, err)
		}
		if _, err := id.PublicKey(); err != nil {
			return "", fmt.Errorf("%w: succession: %s identity has no inline public key: %v", ErrMalformed, role, err)
		}
		return id, nil
	}
	if old, err = decode("old", s.Old); err != nil {
		return "", "", err
	}
	if next, err = decode("new", s.New); err != nil {
		return "", "", err
	}
	if old == next {
		return "", "", fmt.Errorf("%w: succession of %s by itself", ErrMalformed, s.Old)
	}
	if y := s.Issued.Year(); s.Issued.IsZero() || y < 2000 || y > 9999 {
		return "", "", fmt.Errorf("%w: succession issue time %v out of range", ErrMalformed, s.Issued)
	}
	return old, next, nil
}

// Open verifies both signatures (ErrBadSignature names the key that does
// not sign) and returns the succession.
func (ss *SignedSuccession) Open() (Succession, error) {
	if ss == nil || len(ss.Payload) == 0 {
		return Succession{}, fmt.Errorf("%w: empty succession", ErrMalformed)
	}
	if len(ss.Payload) > maxSuccessionPayload {
		return Succession{}, ErrOversized
	}
	var rec Succession
	if err := json.Unmarshal(ss.Payload, &rec); err != nil {
		return Succession{}, fmt.Errorf("%w: succession payload: %v", ErrMalformed, err)
	}
	old, next, err := rec.ids()
	if err != nil {
		return Succession{}, err
	}
	for _, k := range []struct {
		role string
		id   ID
		sig  []byte
	}{{"old", old, ss.OldSig}, {"new", next, ss.NewSig}} {
		if len(k.sig) == 0 {
			return Succession{}, fmt.Errorf("%w: succession of %s is not signed by its %s key", ErrBadSignature, rec.Old, k.role)
		}
		if err := Verify(k.id, DomainSuccession, ss.Payload, k.sig); err != nil {
			return Succession{}, fmt.Errorf("%w: succession of %s: the %s key's signature does not verify", ErrBadSignature, rec.Old, k.role)
		}
	}
	return rec, nil
}

// Marshal encodes the succession for the wire, the DHT and the ledger.
func (ss *SignedSuccession) Marshal() ([]byte, error) {
	b, err := json.Marshal(ss)
	if err != nil {
		return nil, fmt.Errorf("sign: encode succession: %w", err)
	}
	if len(b) > MaxSuccessionSize {
		return nil, ErrOversized
	}
	return b, nil
}

// OpenSuccession decodes wire bytes, bounding their size, and verifies the
// succession (SignedSuccession.Open).
func OpenSuccession(b []byte) (*SignedSuccession, Succession, error) {
	if len(b) > MaxSuccessionSize {
		return nil, Succession{}, ErrOversized
	}
	var ss SignedSuccession
	if err := json.Unmarshal(b, &ss); err != nil {
		return nil, Succession{}, fmt.Errorf("%w: succession: %v", ErrMalformed, err)
	}
	rec, err := ss.Open()
	if err != nil {
		return nil, Succession{}, err
	}
	return &ss, rec, nil
}

// Successions is what one node knows of identity successions: for each
// retired identity the first valid succession it learned (the first wins:
// a later, different one does not replace it), and the identities a second,
// different succession showed compromised. It is the one place that says
// whether a signer's key still speaks for it (Check) and which identity
// speaks for it now (Heir); every path that opens signed messages asks it.
// A nil *Successions knows of none. Safe for concurrent use.
type Successions struct {
	mu sync.RWMutex
	// retired: old identity -> what the node knows of its succession.
	retired map[string]*retirement
	// pred: new identity -> the old one it follows (followed successions
	// only: not those of a compromised identity).
	pred map[string]string
}

type retirement struct {
	rec         Succession // the first valid succession learned
	compromised bool
	since       time.Time // earliest issue time of its successions
}

// NewSuccessions returns an empty registry.
func NewSuccessions() *Successions {
	return &Successions{retired: map[string]*retirement{}, pred: map[string]string{}}
}

// Learn verifies ss and records it, at now (the clock of the future-time
// bound). It reports whether the registry learned something new. A
// succession it already holds is no news (nil error). A valid one that
// differs from the one held for the same old identity marks that identity
// compromised: the error is ErrCompromised, and its successor is no longer
// followed. A succession whose new identity is itself retired, or already
// succeeds another identity, is refused: an identity's successions form one
// chain. A nil registry verifies ss and learns nothing.
func (s *Successions) Learn(ss *SignedSuccession, now time.Time) (Succession, bool, error) {
	rec, err := ss.Open()
	if err != nil {
		return Succession{}, false, err
	}
	if rec.Issued.After(now.Add(MaxSuccessionSkew)) {
		return rec, false, fmt.Errorf("%w: succession of %s issued in the future (%s)", ErrMalformed, rec.Old, rec.Issued.Format(time.RFC3339))
	}
	if s == nil {
		return rec, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.retired[rec.Old]; r != nil {
		if r.rec.New == rec.New && !r.compromised {
			return rec, false, nil
		}
		if r.compromised {
			r.since = minTime(r.since, rec.Issued)
			return rec, false, fmt.Errorf("%w: %s handed over to more than one identity; following none", ErrCompromised, rec.Old)
		}
		r.compromised = true
		delete(s.pred, r.rec.New)
		r.since = minTime(r.since, rec.Issued)
		return rec, true, fmt.Errorf("%w: %s handed over to both %s and %s; following neither", ErrCompromised, rec.Old, r.rec.New, rec.New)
	}
	if _, ok := s.retired[rec.New]; ok {
		return rec, false, fmt.Errorf("sign: succession of %s by %s, which is itself retired", rec.Old, rec.New)
	}
	if prev, ok := s.pred[rec.New]; ok {
		return rec, false, fmt.Errorf("sign: succession of %s by %s, which already succeeds %s", rec.Old, rec.New, prev)
	}
	s.retired[rec.Old] = &retirement{rec: rec, since: rec.Issued}
	s.pred[rec.New] = rec.Old
	return rec, true, nil
}

// Check says whether a message id signed at time at may be accepted: it
// may unless id is retired and at is at or after its succession's issue
// time (ErrRetired; ErrCompromised for a compromised identity). A message
// of a retired identity that carries no time is refused.
func (s *Successions) Check(id string, at time.Time) error {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.retired[id]
	if r == nil || (!at.IsZero() && at.Before(r.since)) {
		return nil
	}
	if r.compromised {
		return fmt.Errorf("%w: %s, signed at %s", ErrCompromised, id, fmtAt(at))
	}
	return fmt.Errorf("%w: %s was succeeded by %s at %s; its old key signed this at %s",
		ErrRetired, id, r.rec.New, r.since.Format(time.RFC3339), fmtAt(at))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func fmtAt(t time.Time) string {
	if t.IsZero() {
		return "no time"
	}
	return t.Format(time.RFC3339)
}

// Heir is the identity that speaks for id now: id itself, or the end of
// the chain of followed successions from it.
func (s *Successions) Heir(id string) string {
	if s == nil {
		return id
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.heirLocked(id)
}

func (s *Successions) heirLocked(id string) string {
	for range len(s.retired) {
		r := s.retired[id]
		if r == nil || r.compromised {
			break
		}
		id = r.rec.New
	}
	return id
}

// Lineage is id's heir followed by every identity it succeeded, newest
// first: all the identities that are one with id.
func (s *Successions) Lineage(id string) []string {
	if s == nil {
		return []string{id}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []string{s.heirLocked(id)}
	for range len(s.pred) {
		old, ok := s.pred[out[len(out)-1]]
		if !ok {
			break
		}
		out = append(out, old)
	}
	return out
}

// Of is the first valid succession of old the registry learned (also when
// a later one showed old compromised).
func (s *Successions) Of(old string) (Succession, bool) {
	if s == nil {
		return Succession{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.retired[old]
	if r == nil {
		return Succession{}, false
	}
	return r.rec, true
}

// Compromised reports whether id has two different valid successions.
func (s *Successions) Compromised(id string) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.retired[id]
	return r != nil && r.compromised
}

// Len is the number of retired identities the registry knows.
func (s *Successions) Len() int {
	if s == nil {
		return 0
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.retired)
}
