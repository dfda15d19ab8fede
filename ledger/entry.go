package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/attest/sign"
)

// Kind is what an entry records.
type Kind string

// Entry kinds.
const (
	// KindReceipt records a completion receipt (Data holds the signed
	// receipt). It is informational: it does not move any balance.
	KindReceipt Kind = "receipt"
	// KindPaymentOwed is, on the renter side, an amount we owe Counterparty.
	KindPaymentOwed Kind = "payment_owed"
	// KindPaymentEarned is, on the provider side, an amount Counterparty
	// owes us.
	KindPaymentEarned Kind = "payment_earned"
	// KindPreemptionCredit is a credit for a preempted lease, either
	// received from Counterparty (DirCreditReceived, in our favour) or
	// granted to it (DirCreditGranted).
	KindPreemptionCredit Kind = "preemption_credit"
	// KindSuccession records that the ledger's owner rotated its identity
	// key: Data holds the succession signed by both the old and the new key
	// (sign.SignedSuccession), Counterparty is the old identity. It moves
	// no money. From it on the ledger's owner is the new identity (Owner),
	// and the next succession must hand over from that one: the chain goes
	// on across rotations, one owner at a time.
	KindSuccession Kind = "succession"
	// KindDispute records a lease whose settlement was given up: its
	// receipt was refused, time after time, by the renter (or from the
	// provider, on the renter's side), so the two parties disagree on it.
	// Data holds why ({"reason": "..."}), Counterparty is the other party.
	// It moves no money; a receipt may still settle the lease later.
	KindDispute Kind = "dispute"
)

// Kinds are every entry kind, in the order they were introduced.
func Kinds() []Kind {
	return []Kind{KindReceipt, KindPaymentOwed, KindPaymentEarned, KindPreemptionCredit, KindSuccession, KindDispute}
}

// KindNames lists every entry kind for messages: "receipt, payment_owed, ...".
func KindNames() string {
	names := make([]string, 0, len(Kinds()))
	for _, k := range Kinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

// KnownKind reports whether k is an entry kind.
func KnownKind(k Kind) bool {
	for _, want := range Kinds() {
		if k == want {
			return true
		}
	}
	return false
}

// Direction is which way an entry moves money between us and Counterparty.
type Direction string

// Directions.
const (
	DirNone           Direction = ""                // no money moves
	DirOwed           Direction = "owed"            // we owe the counterparty
	DirEarned         Direction = "earned"          // the counterparty owes us
	DirCreditReceived Direction = "credit_received" // a credit in our favour
	DirCreditGranted  Direction = "credit_granted"  // a credit we gave
)

// ZeroHash is the PrevHash of the first (genesis) entry.
var ZeroHash = strings.Repeat("0", 2*sha256.Size)

// Limits on entry fields.
const (
	MaxFieldLen = 1 << 10 // LeaseID, JobID, Counterparty
	MaxDataLen  = 1 << 20 // Data
	MaxAmount   = 1e12    // USD; keeps every balance sum finite
)

const hashDomain = "gpumesh-ledger-entry/v1"

// Entry is one record of the ledger.
type Entry struct {
	// Seq is the entry's position in the chain, from 1; assigned by Append.
	Seq uint64 `json:"seq"`
	// Time is when the entry was recorded; Append sets it to now if zero
	// and stores it in UTC.
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// LeaseID and JobID identify what the entry is about.
	LeaseID string `json:"lease_id,omitempty"`
	JobID   string `json:"job_id,omitempty"`
	// Counterparty is the other party's peer ID.
	Counterparty string `json:"counterparty,omitempty"`
	// Amount is in USD, never negative.
	Amount    float64   `json:"amount"`
	Direction Direction `json:"direction,omitempty"`
	// Data is free-form JSON evidence, e.g. the full signed receipt. It is
	// stored compacted.
	Data json.RawMessage `json:"data,omitempty"`
	// PrevHash is the previous entry's Hash (ZeroHash for the first entry)
	// and Hash this entry's ComputeHash; both are set by Append.
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
}

// ComputeHash returns the hex SHA-256 of e's canonical encoding, which
// covers every field except Hash itself (Seq and PrevHash included). An
// auditor can recheck an exported chain with it.
func (e *Entry) ComputeHash() string {
	n := len(hashDomain) + 8*4 + 4*8 + len(e.Kind) + len(e.LeaseID) + len(e.JobID) +
		len(e.Counterparty) + len(e.Direction) + len(e.Data) + len(e.PrevHash)
	b := make([]byte, 0, n)
	b = appendStr(b, hashDomain)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.Unix()))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.Nanosecond()))
	b = appendStr(b, string(e.Kind))
	b = appendStr(b, e.LeaseID)
	b = appendStr(b, e.JobID)
	b = appendStr(b, e.Counterparty)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Amount))
	b = appendStr(b, string(e.Direction))
	b = appendStr(b, string(e.Data))
	b = appendStr(b, e.PrevHash)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// appendStr appends a length-prefixed string, so that field boundaries are
// unambiguous.
func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// prepare validates a caller's entry and normalizes it for storage. It does
// not touch Seq, PrevHash or Hash beyond checking they are unset. Its errors
// carry no package prefix; the caller adds it.
func prepare(e Entry, now time.Time) (Entry, error) {
	if e.Seq != 0 || e.PrevHash != "" || e.Hash != "" {
		return e, fmt.Errorf("Seq, PrevHash and Hash are assigned by Append and must be unset")
	}
	switch e.Kind {
	case KindReceipt:
		switch e.Direction {
		case DirNone, DirOwed, DirEarned, DirCreditReceived, DirCreditGranted:
		default:
			return e, fmt.Errorf("unknown direction %q", e.Direction)
		}
	case KindPaymentOwed:
		if err := wantDir(&e, DirOwed); err != nil {
			return e, err
		}
	case KindPaymentEarned:
		if err := wantDir(&e, DirEarned); err != nil {
			return e, err
		}
	case KindPreemptionCredit:
		if e.Direction != DirCreditReceived && e.Direction != DirCreditGranted {
			return e, fmt.Errorf("%s needs direction %q or %q, got %q",
				e.Kind, DirCreditReceived, DirCreditGranted, e.Direction)
		}
	case KindSuccession:
		if err := checkSuccession(&e); err != nil {
			return e, err
		}
	case KindDispute:
		if e.Direction != DirNone || e.Amount != 0 || e.LeaseID == "" {
			return e, fmt.Errorf("%s moves no money and names a lease", e.Kind)
		}
	case "":
		return e, fmt.Errorf("entry has no kind")
	default:
		return e, fmt.Errorf("unknown entry kind %q", e.Kind)
	}
	if math.IsNaN(e.Amount) || math.IsInf(e.Amount, 0) {
		return e, fmt.Errorf("amount %v is not a finite number", e.Amount)
	}
	if e.Amount < 0 {
		return e, fmt.Errorf("amount %v is negative (use the entry's kind and direction for sign)", e.Amount)
	}
	if e.Amount > MaxAmount {
		return e, fmt.Errorf("amount %v exceeds the limit %v", e.Amount, MaxAmount)
	}
	if e.Amount == 0 {
		e.Amount = 0 // normalize -0
		if e.Kind != KindReceipt && e.Kind != KindSuccession && e.Kind != KindDispute {
			return e, fmt.Errorf("%s needs a positive amount", e.Kind)
		}
	}
	if e.Kind != KindReceipt && e.Counterparty == "" {
		return e, fmt.Errorf("%s needs a counterparty", e.Kind)
	}
	for _, f := range []struct{ name, v string }{
		{"lease id", e.LeaseID}, {"job id", e.JobID}, {"counterparty", e.Counterparty},
	} {
		if len(f.v) > MaxFieldLen {
			return e, fmt.Errorf("%s is %d bytes, limit %d", f.name, len(f.v), MaxFieldLen)
		}
		if !utf8.ValidString(f.v) {
			return e, fmt.Errorf("%s is not valid UTF-8", f.name)
		}
	}
	if e.Time.IsZero() {
		e.Time = now
	}
	e.Time = e.Time.UTC().Round(0)
	if y := e.Time.Year(); y < 1 || y > 9999 {
		return e, fmt.Errorf("time %v out of range", e.Time)
	}
	if len(e.Data) > 0 {
		if len(e.Data) > MaxDataLen {
			return e, fmt.Errorf("data is %d bytes, limit %d", len(e.Data), MaxDataLen)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, e.Data); err != nil {
			return e, fmt.Errorf("data is not valid JSON: %w", err)
		}
		if buf.String() == "null" {
			e.Data = nil
		} else {
			e.Data = json.RawMessage(buf.Bytes())
		}
	} else {
		e.Data = nil
	}
	return e, nil
}

// checkSuccession checks a succession entry: no money, no lease, and Data
// a succession both keys signed whose old identity is the Counterparty.
func checkSuccession(e *Entry) error {
	if e.Direction != DirNone || e.Amount != 0 || e.LeaseID != "" || e.JobID != "" {
		return fmt.Errorf("%s moves no money and names no lease or job", e.Kind)
	}
	rec, err := successionOf(e)
	if err != nil {
		return err
	}
	if e.Counterparty != rec.Old {
		return fmt.Errorf("%s counterparty %q is not the succession's old identity %s", e.Kind, e.Counterparty, rec.Old)
	}
	return nil
}

// successionOf verifies a succession entry's Data (both signatures).
func successionOf(e *Entry) (sign.Succession, error) {
	_, rec, err := sign.OpenSuccession(e.Data)
	if err != nil {
		return rec, fmt.Errorf("%s data: %w", e.Kind, err)
	}
	return rec, nil
}

func wantDir(e *Entry, d Direction) error {
	if e.Direction == DirNone {
		e.Direction = d
		return nil
	}
	if e.Direction != d {
		return fmt.Errorf("%s has direction %q, want %q", e.Kind, e.Direction, d)
	}
	return nil
}

// encodeEntry is the stored form of an entry: JSON, compact, HTML not
// escaped. The encoding is deterministic, which Verify relies on to detect
// any change of the stored bytes.
func encodeEntry(e *Entry) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(384 + len(e.Data))
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("ledger: encode entry: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// decodeEntry decodes a stored entry. It is lenient (unknown fields are
// ignored); Verify catches any deviation from the canonical encoding.
func decodeEntry(b []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, err
	}
	return e, nil
}
