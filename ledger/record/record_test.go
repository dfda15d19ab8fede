package record

import (
	"testing"
	"time"
)

// TestFilterMatch: the zero filter selects every entry; each field narrows
// the selection; Since keeps entries at or after it.
func TestFilterMatch(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	e := Entry{Kind: KindReceipt, Counterparty: "P", LeaseID: "L", Time: t0}
	for _, c := range []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{Kind: KindReceipt, Counterparty: "P", LeaseID: "L", Since: t0}, true},
		{Filter{Kind: KindPaymentOwed}, false},
		{Filter{Counterparty: "Q"}, false},
		{Filter{LeaseID: "M"}, false},
		{Filter{Since: t0.Add(time.Nanosecond)}, false},
	} {
		if got := c.f.Match(&e); got != c.want {
			t.Errorf("%+v matches: %v, want %v", c.f, got, c.want)
		}
	}
}

// TestComputeHashCoversEveryField: changing any field but Hash changes the
// hash, and Hash itself does not.
func TestComputeHashCoversEveryField(t *testing.T) {
	base := Entry{Seq: 1, Time: time.Unix(100, 5), Kind: KindPaymentOwed, LeaseID: "L", JobID: "J", Counterparty: "P",
		Amount: 1.5, Direction: DirOwed, Data: []byte(`{"a":1}`), PrevHash: ZeroHash}
	h := base.ComputeHash()
	for name, change := range map[string]func(*Entry){
		"seq": func(e *Entry) { e.Seq++ }, "time": func(e *Entry) { e.Time = e.Time.Add(1) },
		"kind": func(e *Entry) { e.Kind = KindReceipt }, "lease": func(e *Entry) { e.LeaseID = "M" },
		"job": func(e *Entry) { e.JobID = "K" }, "counterparty": func(e *Entry) { e.Counterparty = "Q" },
		"amount": func(e *Entry) { e.Amount = 2 }, "direction": func(e *Entry) { e.Direction = DirEarned },
		"data": func(e *Entry) { e.Data = []byte(`{"a":2}`) }, "prev": func(e *Entry) { e.PrevHash = "ab" },
		// field boundaries are length-prefixed: moving a byte across two fields changes the hash
		"boundary": func(e *Entry) { e.LeaseID, e.JobID = "LJ", "" },
	} {
		e := base
		change(&e)
		if e.ComputeHash() == h {
			t.Errorf("changing %s keeps the hash", name)
		}
	}
	e := base
	e.Hash = "anything"
	if e.ComputeHash() != h {
		t.Error("the hash covers Hash itself")
	}
}
