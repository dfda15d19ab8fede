package api

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientLinksNoDaemon: the control API's client package, which the CLI
// and every program driving a daemon link, links neither Badger nor any
// of libp2p (the market's nouns name peers with the signing core's own
// sign.ID), nor any of the daemon's engines.
func TestClientLinksNoDaemon(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the package's dependencies:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	var bad []string
	for _, d := range deps {
		switch {
		case strings.Contains(d, "badger"),
			strings.Contains(d, "libp2p"),
			d == "github.com/gpumesh/gpumesh/p2p", d == "github.com/gpumesh/gpumesh/ledger",
			d == "github.com/gpumesh/gpumesh/auction", // the engines: the nouns are auction/terms
			strings.HasPrefix(d, "github.com/gpumesh/gpumesh/node/lease"),
			strings.HasPrefix(d, "github.com/gpumesh/gpumesh/runtime"),
			d == "github.com/gpumesh/gpumesh/node/artifact/transfer":
			bad = append(bad, d)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("node/api links %d packages, %d of them the daemon's: %s", len(deps), len(bad), strings.Join(bad, ", "))
	}
	t.Logf("node/api links %d packages", len(deps))
}
