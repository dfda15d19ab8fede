package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/config"
)

// TestJobNetworkPolicy: jobs get no network unless the provider's config
// allows it, for both backends.
func TestJobNetworkPolicy(t *testing.T) {
	cfg := config.DefaultConfig()
	po, do := executorOptions(cfg.Provider, "/w", nil)
	if po.AllowNetwork || do.Network != "" || do.Root != "/w" {
		t.Fatalf("default: process network %v, docker network %q", po.AllowNetwork, do.Network)
	}
	p := writeTestConfig(t, "provider:\n  allow_job_network: true\n")
	cfg, err := config.LoadConfig(p, true)
	if err != nil {
		t.Fatal(err)
	}
	po, do = executorOptions(cfg.Provider, "/w", nil)
	if !po.AllowNetwork || do.Network != "bridge" {
		t.Fatalf("allowed: process network %v, docker network %q", po.AllowNetwork, do.Network)
	}
}

// TestBidHoldsOptIn: bids hold GPUs only when the provider's config says
// so (provider.bid_holds), with the auction's default hold grace.
func TestBidHoldsOptIn(t *testing.T) {
	if g := bidHoldGrace(config.DefaultConfig().Provider.BidHolds); g != 0 {
		t.Fatalf("default hold grace %v, want none", g)
	}
	cfg, err := config.LoadConfig(writeTestConfig(t, "provider:\n  bid_holds: true\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if g := bidHoldGrace(cfg.Provider.BidHolds); g != auction.DefaultHoldGrace {
		t.Fatalf("bid_holds: true gives hold grace %v, want %v", g, auction.DefaultHoldGrace)
	}
}

func writeTestConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJobUIDBase: provider.job_uid_base reaches both executors, and an
// out-of-range base is refused with a clear error.
func TestJobUIDBase(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Provider.JobUIDBase = 230000
	po, do := executorOptions(cfg.Provider, t.TempDir(), nil)
	if po.UIDBase != 230000 || do.UIDBase != 230000 {
		t.Fatalf("uid base reached the executors as %d and %d, want 230000", po.UIDBase, do.UIDBase)
	}
	for _, bad := range []int{-1, 999, 1<<30 + 1} {
		cfg.Provider.JobUIDBase = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "job_uid_base") {
			t.Errorf("job_uid_base %d: %v, want an error naming it", bad, err)
		}
	}
}
