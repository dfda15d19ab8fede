package ledger

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// successionEntry is the ledger entry of old's succession by next.
func successionEntry(t *testing.T, old, next *sign.Signer, at time.Time) record.Entry {
	t.Helper()
	ss, err := sign.SealSuccession(old, next, at)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ss.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return record.Entry{Kind: record.KindSuccession, Time: at, Counterparty: old.ID().String(), Data: b}
}

// appendRange appends sampleEntry(i) for i in [from, to).
func appendRange(t *testing.T, db *DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := db.Append(sampleEntry(i)); err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
	}
}

func wantOwner(t *testing.T, db *DB, id string, seq uint64) {
	t.Helper()
	got, gotSeq, err := db.Owner()
	if err != nil || got != id || gotSeq != seq {
		t.Fatalf("Owner() = %q, %d, %v; want %q, %d", got, gotSeq, err, id, seq)
	}
}

// TestSuccessionContinuesTheChain: the chain goes on across two rotations,
// the owner moving with each succession entry; a succession that does not
// hand over from the owner, or is not signed by both keys, is refused and
// nothing of its batch is written; the owner survives a reopen.
func TestSuccessionContinuesTheChain(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, noSync())
	a, b, c, x := signtest.New(t), signtest.New(t), signtest.New(t), signtest.New(t)
	appendRange(t, db, 0, 3)
	wantOwner(t, db, "", 0)
	ab, err := db.Append(successionEntry(t, a, b, t0))
	if err != nil {
		t.Fatalf("append A->B: %v", err)
	}
	wantOwner(t, db, b.ID().String(), ab.Seq)
	appendRange(t, db, 3, 5)

	headSeq, headHash, _ := db.Head()
	for name, batch := range map[string][]record.Entry{
		"from an identity that does not own it": {successionEntry(t, x, c, t0)},
		"from the owner before the last":        {sampleEntry(9), successionEntry(t, a, c, t0)},
	} {
		if _, err := db.AppendAll(batch); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("%s: %v, want ErrNotOwner", name, err)
		}
	}
	forged := successionEntry(t, b, c, t0)
	var ss sign.SignedSuccession
	if err := json.Unmarshal(forged.Data, &ss); err != nil {
		t.Fatal(err)
	}
	ss.OldSig = nil // only the new key signs
	forged.Data, _ = json.Marshal(ss)
	wrongCP := successionEntry(t, b, c, t0)
	wrongCP.Counterparty = c.ID().String()
	paid := successionEntry(t, b, c, t0)
	paid.Amount = 1
	for name, e := range map[string]record.Entry{"signed by the new key only": forged, "counterparty not the old identity": wrongCP, "with an amount": paid} {
		if _, err := db.Append(e); err == nil {
			t.Fatalf("%s: appended", name)
		}
	}
	if s, h, _ := db.Head(); s != headSeq || h != headHash {
		t.Fatalf("a refused succession moved the head: %d %s -> %d %s", headSeq, headHash, s, h)
	}
	wantOwner(t, db, b.ID().String(), ab.Seq)

	// Two successions in one batch hand over in order.
	y := signtest.New(t)
	out, err := db.AppendAll([]record.Entry{successionEntry(t, b, c, t0.Add(time.Hour)), sampleEntry(10), successionEntry(t, c, y, t0.Add(2*time.Hour))})
	if err != nil {
		t.Fatalf("append B->C, C->Y: %v", err)
	}
	wantOwner(t, db, y.ID().String(), out[2].Seq)
	wantValid(t, db, out[2].Seq)
	bal, err := db.Balances()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := bal[a.ID().String()]; ok {
		t.Fatalf("a succession moved a balance: %v", bal)
	}

	db.Close()
	db = openTest(t, dir, noSync())
	wantOwner(t, db, y.ID().String(), out[2].Seq)
	wantValid(t, db, out[2].Seq)
}

// rewriteFrom replaces the stored entry seq with edit's result and relinks
// every entry after it and the head, as an attacker rewriting the chain
// from seq on would (hashes recomputed), keeping the head's owner fields
// as given.
func rewriteFrom(t *testing.T, db *DB, seq uint64, edit func(*record.Entry), owner string, succession uint64) {
	t.Helper()
	all, err := db.List(record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	prev := record.ZeroHash
	for i := range all {
		e := all[i]
		if e.Seq < seq {
			prev = e.Hash
			continue
		}
		if e.Seq == seq {
			edit(&e)
		}
		e.PrevHash = prev
		e.Hash = e.ComputeHash()
		v, err := encodeEntry(&e)
		if err != nil {
			t.Fatal(err)
		}
		rawSet(t, db, entryKey(e.Seq), v)
		prev = e.Hash
	}
	h, _ := json.Marshal(chainHead{Seq: all[len(all)-1].Seq, Hash: prev, Owner: owner, Succession: succession})
	rawSet(t, db, headKey, h)
}

// TestVerifyDetectsTamperedSuccession: the chain verifies across a
// rotation; a succession entry rewritten to hand the ledger to another
// identity fails verification at that entry even when the whole chain
// after it is rehashed (the forger lacks the old key), and so do a
// rehashed edit of its counterparty and a head that names another owner.
func TestVerifyDetectsTamperedSuccession(t *testing.T) {
	db := openTest(t, "", noSync())
	a, b, thief := signtest.New(t), signtest.New(t), signtest.New(t)
	appendRange(t, db, 0, 3)
	succ, err := db.Append(successionEntry(t, a, b, t0))
	if err != nil {
		t.Fatal(err)
	}
	appendRange(t, db, 3, 6)
	wantValid(t, db, 7)
	restore := func() {
		rewriteFrom(t, db, succ.Seq, func(e *record.Entry) { *e = succ }, b.ID().String(), succ.Seq)
		wantValid(t, db, 7)
	}

	// The thief's succession of A, signed by the thief as the new key and
	// carrying A's old signature of the genuine payload.
	var ss sign.SignedSuccession
	if err := json.Unmarshal(succ.Data, &ss); err != nil {
		t.Fatal(err)
	}
	payload := strings.Replace(string(ss.Payload), b.ID().String(), thief.ID().String(), 1)
	newSig, _ := thief.Sign(sign.DomainSuccession, []byte(payload))
	forged, _ := json.Marshal(sign.SignedSuccession{Payload: []byte(payload), OldSig: ss.OldSig, NewSig: newSig})
	rewriteFrom(t, db, succ.Seq, func(e *record.Entry) { e.Data = forged }, thief.ID().String(), succ.Seq)
	wantTamper(t, db, succ.Seq, "succession does not verify")
	restore()

	rewriteFrom(t, db, succ.Seq, func(e *record.Entry) { e.Counterparty = thief.ID().String() }, b.ID().String(), succ.Seq)
	wantTamper(t, db, succ.Seq, "succession does not verify")
	restore()

	// A head naming the thief as owner over the genuine chain.
	rewriteFrom(t, db, succ.Seq, func(*record.Entry) {}, thief.ID().String(), succ.Seq)
	wantTamper(t, db, 7, "chain head names owner")
	restore()
}
