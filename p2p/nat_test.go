package p2p

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
)

// syncBuf is a log sink safe for the node's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newNodeCfg(t *testing.T, cfg Config) (*Node, *syncBuf) {
	t.Helper()
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	cfg.Key = key
	cfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	n, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n, logs
}

func isCircuit(a string) bool { return strings.Contains(a, "/p2p-circuit") }

func circuits(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if isCircuit(a) {
			out = append(out, a)
		}
	}
	return out
}

// TestRelayReservationAndLimitedStreams: a node configured as private holds
// a slot on its static relay and advertises the circuit; a second one is
// refused because the relay allows one reservation; a public peer that only
// knows the circuit reaches the first through it (a limited connection), and
// a response larger than the relay's data limit is cut off.
func TestRelayReservationAndLimitedStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const dataLimit = 64 << 10
	rl, _ := newNodeCfg(t, Config{Reachability: ReachabilityPublic,
		RelayService: &RelayLimits{MaxReservations: 1, Data: dataLimit, Duration: time.Minute}})
	relayAddr := rl.Addrs()[0]

	home, homeLog := newNodeCfg(t, Config{Reachability: ReachabilityPrivate, Relays: []string{relayAddr}})
	if err := home.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if got := home.Reachability(); got != ReachabilityPrivate {
		t.Fatalf("reachability %q, want private", got)
	}
	if !strings.Contains(homeLog.String(), "reachability=private") {
		t.Fatalf("reachability not logged:\n%s", homeLog)
	}
	// Private: a DHT client, which does not serve the DHT protocol (others
	// cannot dial it); public: a server.
	kad := ProtocolPrefix + "/kad/1.0.0"
	waitServing := func(n *Node, want bool) {
		t.Helper()
		// The host announces each change of the protocols it serves.
		sub, err := n.Host.EventBus().Subscribe(new(event.EvtLocalProtocolsUpdated))
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		deadline := time.After(10 * time.Second)
		for slices.Contains(n.Host.Mux().Protocols(), kad) != want {
			select {
			case <-sub.Out():
			case <-deadline:
				t.Fatalf("%s serves the DHT: %v, want %v", n.ID(), !want, want)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	waitServing(home, false)
	waitServing(rl, true)
	// Undecided (loopback addresses are never tested by AutoNAT): a server.
	undecided := newNode(t)
	if got := undecided.Reachability(); got != ReachabilityUnknown {
		t.Fatalf("default node's reachability %q, want unknown", got)
	}
	waitServing(undecided, true)
	homeCircuits := circuits(home.Addrs())
	if len(homeCircuits) == 0 {
		t.Fatalf("no circuit address after reservation: %v\n%s", home.Addrs(), homeLog)
	}
	want := relayAddr + "/p2p-circuit/p2p/" + home.ID().String()
	if homeCircuits[0] != want {
		t.Fatalf("circuit address %s, want %s", homeCircuits[0], want)
	}

	second, secondLog := newNodeCfg(t, Config{Reachability: ReachabilityPrivate, Relays: []string{relayAddr}})
	if err := second.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if c := circuits(second.Addrs()); len(c) != 0 {
		t.Fatalf("second reservation granted beyond max_reservations=1: %v", c)
	}
	if !strings.Contains(secondLog.String(), "RESERVATION_REFUSED") {
		t.Fatalf("second reservation not refused by the relay:\n%s", secondLog)
	}

	const echo = "/gpumesh/test/echo"
	home.Handle(echo, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
		if string(req) == "big" {
			return bytes.Repeat([]byte("x"), 4*dataLimit), nil
		}
		return append([]byte("echo:"), req...), nil
	})
	renter, _ := newNodeCfg(t, Config{Reachability: ReachabilityPublic})
	renter.AddAddrs(home.ID(), homeCircuits)
	// The bare host refuses to run a stream over the relayed connection
	// (it waits, in vain here, for a direct one).
	rawCtx, rawCancel := context.WithTimeout(ctx, 3*time.Second)
	defer rawCancel()
	if s, err := renter.raw.NewStream(rawCtx, home.ID(), echo); err == nil {
		_ = s.Reset()
		t.Fatal("stream opened over a limited connection without allowing it")
	}
	resp, err := renter.Request(ctx, home.ID(), nil, echo, []byte("hi"))
	if err != nil || string(resp) != "echo:hi" {
		t.Fatalf("request through the relay: %q, %v", resp, err)
	}
	conns := renter.Host.Network().ConnsToPeer(home.ID())
	if len(conns) == 0 || !conns[0].Stat().Limited || !isCircuit(conns[0].RemoteMultiaddr().String()) {
		t.Fatalf("renter's connection to home is not relayed: %v", conns)
	}
	if _, err := renter.Request(ctx, home.ID(), nil, echo, []byte("big")); err == nil {
		t.Fatalf("a %d-byte response crossed a relay limited to %d bytes", 4*dataLimit, dataLimit)
	}
}
