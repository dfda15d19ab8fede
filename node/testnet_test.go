package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// testNode is one daemon of an in-process loopback network.
type testNode struct {
	*Daemon
	dir string
	cfg config.Config
}

// testLogger is a test daemon's log: each line notifies logged (what a
// daemon's timers and handlers do is logged), and is written to stderr
// when GPUMESH_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	var out slog.Handler = slog.DiscardHandler
	if os.Getenv("GPUMESH_TEST_LOG") != "" {
		out = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	return slog.New(notifyLog{out})
}

// logged is notified at each line any test daemon logs.
var logged broadcast.Signal

// loggedNext is logged's next change, for waitChange.
func loggedNext() <-chan struct{} { return logged.Wait() }

type notifyLog struct{ slog.Handler }

func (notifyLog) Enabled(context.Context, slog.Level) bool { return true }

func (l notifyLog) Handle(ctx context.Context, r slog.Record) error {
	defer logged.Notify()
	if !l.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

func (l notifyLog) WithAttrs(as []slog.Attr) slog.Handler {
	return notifyLog{l.Handler.WithAttrs(as)}
}
func (l notifyLog) WithGroup(g string) slog.Handler { return notifyLog{l.Handler.WithGroup(g)} }

// waitChange waits until cond holds, checking it again at each change
// that one of next announces (each returns the channel closed at its
// subject's next change: a tracker's, counters', receipts', or
// loggedNext), failing the test with what after within.
func waitChange(t testing.TB, within time.Duration, what string, cond func() bool, next ...func() <-chan struct{}) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	cases := make([]reflect.SelectCase, len(next)+1)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}
	for {
		for i, n := range next {
			cases[i+1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n())}
		}
		if cond() {
			return
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("%s: not reached within %s", what, within)
		}
	}
}

func providerConfig(region string, floor float64, gpus ...terms.GPU) config.Config {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Region = region
	cfg.Provider.Enabled = true
	cfg.Provider.GPUs = gpus
	cfg.Provider.GPUSource = "declared" // never the host's real GPUs
	cfg.Provider.AdvertiseTTL = 30 * time.Second
	cfg.Provider.Policy = terms.Policy{PriceFloor: floor, AcceptPreemptible: true}
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
	return startNetWith(t, renterConfig(), cfgs...)
}

// startNetWith is startNet with the bootstrap renter's config.
func startNetWith(t testing.TB, rc config.Config, cfgs ...config.Config) (boot *testNode, nodes []*testNode) {
	t.Helper()
	root := t.TempDir()
	boot = startNode(t, root+"/boot", rc, nil)
	t.Cleanup(func() { boot.Close() })
	for i, cfg := range cfgs {
		n := startNode(t, fmt.Sprintf("%s/n%02d", root, i), cfg, boot.Daemon)
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	return boot, nodes
}

func peersOf(caps []terms.Capability) []string {
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
func eventuallyProviders(t *testing.T, d *Daemon, q terms.Query, want []string, within time.Duration) {
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
		time.Sleep(300 * time.Millisecond) // DHT lookups over real sockets; providers that are subprocesses announce nothing here
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
