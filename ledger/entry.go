package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// The ledger's nouns are package record's, defined there so that the
// control API's client links them without Badger; these are the same types
// and values, for the store's code and its callers.
type (
	Kind         = record.Kind
	Direction    = record.Direction
	Entry        = record.Entry
	Filter       = record.Filter
	Balance      = record.Balance
	VerifyReport = record.VerifyReport
)

// Entry kinds and directions (record's).
const (
	KindReceipt          = record.KindReceipt
	KindPaymentOwed      = record.KindPaymentOwed
	KindPaymentEarned    = record.KindPaymentEarned
	KindPreemptionCredit = record.KindPreemptionCredit
	KindSuccession       = record.KindSuccession
	KindDispute          = record.KindDispute

	DirNone           = record.DirNone
	DirOwed           = record.DirOwed
	DirEarned         = record.DirEarned
	DirCreditReceived = record.DirCreditReceived
	DirCreditGranted  = record.DirCreditGranted
)

// ZeroHash is the PrevHash of the first (genesis) entry (record.ZeroHash).
var ZeroHash = record.ZeroHash

// Kinds, KindNames and KnownKind are record's.
func Kinds() []Kind         { return record.Kinds() }
func KindNames() string     { return record.KindNames() }
func KnownKind(k Kind) bool { return record.KnownKind(k) }

// Limits on entry fields.
const (
	MaxFieldLen = 1 << 10 // LeaseID, JobID, Counterparty
	MaxDataLen  = 1 << 20 // Data
	MaxAmount   = 1e12    // USD; keeps every balance sum finite
)

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
