package identity

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/p2p"
)

// TestRotate: a stopped node's key is handed over to a new one: the
// ledger's owner becomes the new identity, the old key is kept retired,
// and the old key no longer opens the ledger; nothing to rotate, and a
// rotation stopped half-way, are said so.
func TestRotate(t *testing.T) {
	dir := t.TempDir()
	paths := config.Paths{Dir: dir}
	if _, err := Rotate(dir, time.Now()); err == nil || !strings.Contains(err.Error(), "nothing to rotate") {
		t.Fatalf("rotate without a key: %v", err)
	}
	if _, err := p2p.LoadOrCreateKey(paths.Key()); err != nil {
		t.Fatal(err)
	}
	old, err := loadSigner(paths.Key())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Rotate(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	next, err := loadSigner(paths.Key())
	if err != nil || rec.Old != old.ID().String() || rec.New != next.ID().String() || rec.New == rec.Old {
		t.Fatalf("rotation %+v, key now %v (%v)", rec, next, err)
	}
	if _, err := os.Stat(paths.KeyRetired(rec.Issued)); err != nil {
		t.Fatalf("old key not kept: %v", err)
	}
	db, err := ledger.Open(paths.DB(), ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckOwner(paths, next, db); err != nil {
		t.Fatalf("new key refused: %v", err)
	}
	if err := CheckOwner(paths, old, db); err == nil || !strings.Contains(err.Error(), "not this ledger's key") {
		t.Fatalf("old key accepted: %v", err)
	}
	db.Close()

	if err := Unfinished(paths); err != nil {
		t.Fatalf("finished rotation refused: %v", err)
	}
	if err := os.WriteFile(paths.KeyNext(), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Unfinished(paths); err == nil {
		t.Fatal("a rotation stopped half-way let the node start")
	}
	// A next key that is no key is not taken for one.
	if _, err := Rotate(dir, time.Now()); err == nil || errors.Is(err, config.ErrAlreadyRunning) {
		t.Fatalf("rotate over a corrupt next key: %v", err)
	}
}

// TestHandleHostileSuccession: gossip that is no succession is counted
// and dropped, never a panic.
func TestHandleHostileSuccession(t *testing.T) {
	n := 0
	s := NewSuccessions(t.Context(), SuccessionsConfig{Book: attest.NewBook(attest.BookOptions{Now: time.Now, Self: "self"}),
		Counters: malformed{&n}, Now: time.Now, Log: slog.New(slog.DiscardHandler)})
	for _, data := range []string{"", "{", "null", `{"succession":null}`, strings.Repeat("x", 1<<20)} {
		s.Handle("", []byte(data))
	}
	if n != 5 {
		t.Fatalf("%d of 5 malformed successions counted", n)
	}
	s.Handle("", []byte(`{"succession":{}}`)) // well-formed, forged: the book refuses it
}

// malformed counts the malformed successions.
type malformed struct{ n *int }

func (m malformed) Add(e string) {
	if e == "reputation.succession_malformed" {
		*m.n++
	}
}
