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

// Limits on entry fields.
const (
	MaxFieldLen = 1 << 10 // LeaseID, JobID, Counterparty
	MaxDataLen  = 1 << 20 // Data
	MaxAmount   = 1e12    // USD; keeps every balance sum finite
)

// prepare validates a caller's entry and normalizes it for storage. It does
// not touch Seq, PrevHash or Hash beyond checking they are unset. Its errors
// carry no package prefix; the caller adds it.
func prepare(e record.Entry, now time.Time) (record.Entry, error) {
	if e.Seq != 0 || e.PrevHash != "" || e.Hash != "" {
		return e, fmt.Errorf("Seq, PrevHash and Hash are assigned by Append and must be unset")
	}
	switch e.Kind {
	case record.KindReceipt:
		switch e.Direction {
		case record.DirNone, record.DirOwed, record.DirEarned, record.DirCreditReceived, record.DirCreditGranted:
		default:
			return e, fmt.Errorf("unknown direction %q", e.Direction)
		}
	case record.KindPaymentOwed:
		if err := wantDir(&e, record.DirOwed); err != nil {
			return e, err
		}
	case record.KindPaymentEarned:
		if err := wantDir(&e, record.DirEarned); err != nil {
			return e, err
		}
	case record.KindPreemptionCredit:
		if e.Direction != record.DirCreditReceived && e.Direction != record.DirCreditGranted {
			return e, fmt.Errorf("%s needs direction %q or %q, got %q",
				e.Kind, record.DirCreditReceived, record.DirCreditGranted, e.Direction)
		}
	case record.KindSuccession:
		if err := checkSuccession(&e); err != nil {
			return e, err
		}
	case record.KindDispute:
		if e.Direction != record.DirNone || e.Amount != 0 || e.LeaseID == "" {
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
		if e.Kind != record.KindReceipt && e.Kind != record.KindSuccession && e.Kind != record.KindDispute {
			return e, fmt.Errorf("%s needs a positive amount", e.Kind)
		}
	}
	if e.Kind != record.KindReceipt && e.Counterparty == "" {
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
func checkSuccession(e *record.Entry) error {
	if e.Direction != record.DirNone || e.Amount != 0 || e.LeaseID != "" || e.JobID != "" {
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
func successionOf(e *record.Entry) (sign.Succession, error) {
	_, rec, err := sign.OpenSuccession(e.Data)
	if err != nil {
		return rec, fmt.Errorf("%s data: %w", e.Kind, err)
	}
	return rec, nil
}

func wantDir(e *record.Entry, d record.Direction) error {
	if e.Direction == record.DirNone {
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
func encodeEntry(e *record.Entry) ([]byte, error) {
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
func decodeEntry(b []byte) (record.Entry, error) {
	var e record.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return record.Entry{}, err
	}
	return e, nil
}
