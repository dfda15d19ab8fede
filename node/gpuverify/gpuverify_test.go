package gpuverify

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
)

// TestOwnVerdictsBoundedAndExpire: a node republishes at most
// maxOwnVerdicts of its own verdicts, the newest, and only while they
// count.
func TestOwnVerdictsBoundedAndExpire(t *testing.T) {
	var o ownVerdicts
	now := time.Now()
	old := &sign.Envelope{}
	o.add(old, now.Add(-attest.VerdictValidFor))
	envs := make([]*sign.Envelope, maxOwnVerdicts+5)
	for i := range envs {
		envs[i] = &sign.Envelope{}
		o.add(envs[i], now.Add(time.Duration(i)*time.Second))
	}
	got := o.current(now)
	if len(got) != maxOwnVerdicts || got[0] != envs[5] || got[len(got)-1] != envs[len(envs)-1] {
		t.Fatalf("current: %d verdicts, want the newest %d", len(got), maxOwnVerdicts)
	}
	if got := o.current(now.Add(attest.VerdictValidFor + time.Hour)); len(got) != 0 {
		t.Fatalf("%d verdicts still count after their validity", len(got))
	}
}

// TestHandleVerdictHostile: gossip that is no verdict, or a verdict no one
// signed, is dropped, never weighed nor a panic.
func TestHandleVerdictHostile(t *testing.T) {
	book := attest.NewBook(attest.BookOptions{Now: time.Now, Self: "self"})
	s := New(t.Context(), Config{Book: book, Now: time.Now, Log: slog.New(slog.DiscardHandler)})
	for _, data := range []string{"", "null", "{", `{"verdict":null}`, `{"verdict":{}}`, `{"verdict":{"payload":"AAAA","sig":"AAAA"}}`, `[1,2]`} {
		s.HandleVerdict("", []byte(data))
	}
	if c := book.Counters(); c["verdict_accepted"] != 0 || c["verdict_rejected"] == 0 {
		t.Fatalf("book counters after forged gossip: %v", c)
	}
}
