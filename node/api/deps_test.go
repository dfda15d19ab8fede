package api

import (
	"os/exec"
	"strings"
	"testing"
)

// identityCore are the only libp2p packages the client may link: the
// identity types (peer ids, keys) and protocol ids that the market's nouns
// and the signing core are written in. No host, DHT, pubsub or transport.
var identityCore = map[string]bool{
	"github.com/libp2p/go-libp2p/core/peer":           true,
	"github.com/libp2p/go-libp2p/core/peer/pb":        true,
	"github.com/libp2p/go-libp2p/core/crypto":         true,
	"github.com/libp2p/go-libp2p/core/crypto/pb":      true,
	"github.com/libp2p/go-libp2p/core/internal/catch": true,
	"github.com/libp2p/go-libp2p/core/record":         true,
	"github.com/libp2p/go-libp2p/core/record/pb":      true,
	"github.com/libp2p/go-libp2p/core/protocol":       true,
	"github.com/libp2p/go-buffer-pool":                true,
}

// TestClientLinksNoDaemon: the control API's client package, which the CLI
// and every program driving a daemon link, links neither Badger nor
// libp2p's network stack (beyond the identity core above), nor any of the
// daemon's engines.
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
			strings.Contains(d, "libp2p") && !identityCore[d],
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
