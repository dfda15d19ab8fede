// Package record is the ledger's vocabulary: an entry, its kinds and
// directions, its canonical hash, the filter that selects entries, a
// counterparty's balance and a verification's report. It stores nothing
// (package ledger is the Badger store), so the control API's client links
// it without Badger.
package record

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"time"
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

// Filter selects entries for List and the exports. Zero fields match
// everything.
type Filter struct {
	Kind         Kind
	Counterparty string
	LeaseID      string
	// Since keeps entries whose Time is at or after it.
	Since time.Time
	// Limit caps the number of entries returned (the first ones in seq
	// order); 0 means no limit.
	Limit int
}

// Match reports whether e is one of the entries f selects.
func (f *Filter) Match(e *Entry) bool {
	return (f.Kind == "" || e.Kind == f.Kind) &&
		(f.Counterparty == "" || e.Counterparty == f.Counterparty) &&
		(f.LeaseID == "" || e.LeaseID == f.LeaseID) &&
		(f.Since.IsZero() || !e.Time.Before(f.Since))
}

// Balance is the money position with one counterparty, in USD. Amounts are
// float64 sums of entry amounts.
type Balance struct {
	// Owed is what we owe the counterparty (payment_owed).
	Owed float64 `json:"owed"`
	// Earned is what the counterparty owes us (payment_earned).
	Earned float64 `json:"earned"`
	// Credits is preemption credits received from the counterparty minus
	// those granted to it.
	Credits float64 `json:"credits"`
	// Net is Earned - Owed + Credits: positive when the counterparty owes
	// us on balance.
	Net float64 `json:"net"`
}

// VerifyReport summarizes a verified chain.
type VerifyReport struct {
	// Entries is the number of entries that verified.
	Entries uint64
	// HeadSeq and HeadHash are the stored chain head.
	HeadSeq  uint64
	HeadHash string
}
