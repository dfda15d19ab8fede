package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/config"
)

// testNode is one daemon of an in-process loopback network.
type testNode struct {
	*Daemon
	dir string
	cfg config.Config
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("GPUMESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func providerConfig(region string, floor float64, gpus ...auction.GPU) config.Config {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Region = region
	cfg.Provider.Enabled = true
	cfg.Provider.GPUs = gpus
	cfg.Provider.GPUSource = "declared" // never the host's real GPUs
	cfg.Provider.AdvertiseTTL = 30 * time.Second
	cfg.Provider.Policy = auction.Policy{PriceFloor: floor, AcceptPreemptible: true}
	cfg.Provider.Executor = "process"
	return cfg
}

func renterConfig() config.Config {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	return cfg
}

// startNode starts a daemon in dir with cfg, bootstrapped from boot.
func startNode(t testing.TB, dir string, cfg config.Config, boot *Daemon) *testNode {
	t.Helper()
	if boot != nil {
		cfg.Bootstrap = append([]string(nil), boot.Addrs()...)
	}
	d, err := Start(context.Background(), Options{DataDir: dir, Config: cfg, Log: testLogger(t)})
	if err != nil {
		t.Fatalf("start node in %s: %v", dir, err)
	}
	return &testNode{Daemon: d, dir: dir, cfg: cfg}
}

// startNet starts a bootstrap (renter) node then one node per config.
func startNet(t testing.TB, cfgs ...config.Config) (boot *testNode, nodes []*testNode) {
	t.Helper()
	root := t.TempDir()
	boot = startNode(t, root+"/boot", renterConfig(), nil)
	t.Cleanup(func() { boot.Close() })
	for i, cfg := range cfgs {
		n := startNode(t, fmt.Sprintf("%s/n%02d", root, i), cfg, boot.Daemon)
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	return boot, nodes
}

func peersOf(caps []auction.Capability) []string {
	var out []string
	for _, c := range caps {
		out = append(out, c.Peer)
	}
	sort.Strings(out)
	return out
}

func idsOf(ns ...*testNode) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ID().String())
	}
	sort.Strings(out)
	return out
}

// eventually polls the query until it returns exactly want, or fails.
func eventuallyProviders(t *testing.T, d *Daemon, q auction.Query, want []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		caps, err := d.disc.FindProviders(ctx, q)
		cancel()
		if err != nil {
			t.Fatalf("FindProviders(%+v): %v", q, err)
		}
		got = peersOf(caps)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("FindProviders(%+v) = %v, want exactly %v", q, got, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
