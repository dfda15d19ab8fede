package auction

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestMissingBytesMatchesHeldTokens: a record lists a private artifact by
// its owner's HeldToken, which counts as held for that owner's jobs only,
// and never shows the id itself.
func TestMissingBytesMatchesHeldTokens(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("ab", 32)
	job := terms.Job{Owner: "renter-x", InputBytes: map[string]int64{id: 100}, Run: terms.RunSpec{Inputs: map[string]string{"data": id}}}
	tok := terms.HeldToken("renter-x", id)
	if tok == id || !terms.ValidArtifactID(tok) {
		t.Fatalf("token %q", tok)
	}
	if n := MissingBytes(&job, []string{tok}); n != 0 {
		t.Fatalf("owner's job: %d missing, want 0", n)
	}
	other := job
	other.Owner = "renter-y"
	if n := MissingBytes(&other, []string{tok}); n != 100 {
		t.Fatalf("another renter's job: %d missing, want 100", n)
	}
	if !terms.Holds([]string{id}, "anyone", id) || terms.Holds([]string{tok}, "renter-y", id) {
		t.Fatal("Holds")
	}
}
