package terms

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLeaf: the market's nouns link, of this module, only the signing core
// and the GPU model catalogue, and of libp2p only the identity types the
// signing core is written in: whoever needs a job, a lease or a bid (attest,
// runtime, node/wire, the control API's client) links no engine.
func TestLeaf(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the package's dependencies:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	ours := []string{"github.com/gpumesh/gpumesh/attest/sign", "github.com/gpumesh/gpumesh/auction/gpumodel", "github.com/gpumesh/gpumesh/auction/terms"}
	var bad []string
	for _, d := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(d, "github.com/gpumesh/gpumesh/") && !slices.Contains(ours, d),
			strings.Contains(d, "libp2p") && !strings.HasPrefix(d, "github.com/libp2p/go-libp2p/core/") && d != "github.com/libp2p/go-buffer-pool",
			strings.Contains(d, "libp2p/go-libp2p/core/") && (strings.Contains(d, "/host") || strings.Contains(d, "/network")):
			bad = append(bad, d)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("auction/terms links %s", strings.Join(bad, ", "))
	}
}
