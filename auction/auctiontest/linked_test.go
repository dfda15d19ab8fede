package auctiontest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinkedIntoNoBinary: this package is test support; neither the daemon
// and CLI nor any harness binary links it.
func TestLinkedIntoNoBinary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list dependencies:", err)
	}
	const self = "github.com/gpumesh/gpumesh/auction/auctiontest"
	mains, err := exec.Command(goTool, "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "github.com/gpumesh/gpumesh/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	bins := strings.Fields(string(mains))
	if len(bins) == 0 {
		t.Fatal("go list found no binaries")
	}
	deps, err := exec.Command(goTool, append([]string{"list", "-deps"}, bins...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		if d == self {
			t.Fatalf("one of %s links %s", strings.Join(bins, ", "), self)
		}
	}
	t.Logf("%d binaries, %d packages linked, none of them %s", len(bins), len(strings.Fields(string(deps))), self)
}
