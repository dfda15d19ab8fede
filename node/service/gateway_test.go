package service

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"golang.org/x/net/websocket"
)

// serveGateway serves s's gateway on its listener (without its control
// loop, which needs a leaser) until the test ends.
func serveGateway(t testing.TB, s *Service) {
	t.Helper()
	go func() { _ = s.srv.Serve(s.ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
}

// p2pProvider is a provider as the renter reaches it: a libp2p host
// whose wire.ProtoService streams, from the renter's host that open opens
// them on, Serve connects to h (a local server standing in for every
// replica inside its job's sandbox).
func p2pProvider(t testing.TB, h http.Handler) (open Opener, prov peer.ID) {
	t.Helper()
	open, prov, _ = p2pProviderAt(t, h)
	return open, prov
}

// p2pProviderAt is p2pProvider, also returning the local server's
// address.
func p2pProviderAt(t testing.TB, h http.Handler) (open Opener, prov peer.ID, addr string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	provider, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { provider.Close() })
	renter, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { renter.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	provider.SetStreamHandler(wire.ProtoService, func(st network.Stream) {
		_ = Serve(ctx, st, func(lease string, from peer.ID) (Target, error) {
			if from != renter.ID() {
				return nil, fmt.Errorf("lease %s: no such lease of yours", lease)
			}
			return DialFunc(func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
			}), nil
		})
	})
	renter.Peerstore().AddAddrs(provider.ID(), provider.Addrs(), peerstore.PermanentAddrTTL)
	return func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return renter.NewStream(ctx, p, wire.ProtoService)
	}, provider.ID(), srv.Listener.Addr().String()
}

// p2pReplica is a replica reached as in production, over libp2p streams
// to its provider (p2pProvider).
func p2pReplica(t testing.TB, name string, h http.Handler) *replica {
	t.Helper()
	open, prov := p2pProvider(t, h)
	const leaseID = "lease-1"
	return &replica{jobID: name, leaseID: leaseID, provider: prov, state: api.ReplicaReady, stop: make(chan struct{}),
		transport: replicaTransport(open, prov, leaseID)}
}

// wsEcho is a WebSocket server that sends back each message it gets.
var wsEcho = websocket.Handler(func(ws *websocket.Conn) {
	var msg string
	for websocket.Message.Receive(ws, &msg) == nil {
		if websocket.Message.Send(ws, msg) != nil {
			return
		}
	}
})

// TestGatewayCarriesWebSockets: a WebSocket handshake (an HTTP Upgrade)
// goes through the gateway and the libp2p stream to the replica, and
// messages then flow both ways; the owner's token is required for it
// too, and not forwarded.
func TestGatewayCarriesWebSockets(t *testing.T) {
	var sawToken []string
	mux := http.NewServeMux()
	mux.Handle("/ws", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawToken = append(sawToken, r.Header.Get(TokenHeader)+r.URL.Query().Get(TokenParam))
		wsEcho.ServeHTTP(w, r)
	}))
	s := testService(t, p2pReplica(t, "ws", mux))
	serveGateway(t, s)
	dial := func(path string, header http.Header) (*websocket.Conn, error) {
		cfg, err := websocket.NewConfig("ws://"+s.Gateway()+path, "http://"+s.Gateway())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Header = header
		return websocket.DialConfig(cfg)
	}
	if ws, err := dial("/ws", nil); err == nil {
		ws.Close()
		t.Fatal("a WebSocket without the token was let through")
	}
	for _, tc := range []struct {
		path   string
		header http.Header
	}{{"/ws", http.Header{TokenHeader: {s.token}}}, {"/ws?token=" + s.token, nil}} {
		ws, err := dial(tc.path, tc.header)
		if err != nil {
			t.Fatalf("WebSocket handshake through the gateway (%s): %v", tc.path, err)
		}
		_ = ws.SetDeadline(time.Now().Add(10 * time.Second))
		for _, msg := range []string{"hello through libp2p", strings.Repeat("x", 100<<10)} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil {
				t.Fatal(err)
			}
			if got != msg {
				t.Fatalf("echo of %d bytes: got %d bytes", len(msg), len(got))
			}
		}
		ws.Close()
	}
	for _, tok := range sawToken {
		if tok != "" {
			t.Fatalf("the replica saw the gateway token %q", tok)
		}
	}
	if len(sawToken) != 2 {
		t.Fatalf("the replica saw %d handshakes, want 2", len(sawToken))
	}
}

// TestGatewaySplitsLoadEvenly: sequential requests over two healthy
// replicas, one a little slower than the other, are shared about evenly
// (issue 29: 52 of 54 went to the faster one).
func TestGatewaySplitsLoadEvenly(t *testing.T) {
	count := map[string]int{}
	// The replica's own work: hashing its input, 4 MiB for the slow one
	// (a few milliseconds), nothing for the fast one.
	input := make([]byte, 4<<20)
	rep := func(name string, work []byte) *replica {
		return localReplica(t, name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sum := sha256.Sum256(work)
			fmt.Fprint(w, name)
			_ = sum
		}))
	}
	s := testService(t, rep("fast", nil), rep("slow", input))
	serveGateway(t, s)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 100 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Gateway()+"/x", nil)
		req.Header.Set(TokenHeader, s.token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %s %q", i, resp.Status, b)
		}
		count[string(b)]++
	}
	if count["fast"] < 40 || count["fast"] > 60 || count["fast"]+count["slow"] != 100 {
		t.Fatalf("100 requests split %v, want each replica 40..60", count)
	}
}

// TestPickLeastOutstandingThenRoundRobin: a request goes to the replica
// with the fewest requests in flight; among equals, in turn; suspected
// and skipped replicas are passed over.
func TestPickLeastOutstandingThenRoundRobin(t *testing.T) {
	a, b, c := deadReplica("a"), deadReplica("b"), deadReplica("c")
	s := testService(t, a, b, c)
	got := map[*replica]int{}
	for range 30 {
		got[s.pick(nil)]++
	}
	if got[a] != 10 || got[b] != 10 || got[c] != 10 {
		t.Fatalf("ties picked a %d, b %d, c %d times; want 10 each", got[a], got[b], got[c])
	}
	a.outstanding.Store(2)
	b.outstanding.Store(1)
	c.outstanding.Store(1)
	got = map[*replica]int{}
	for range 10 {
		got[s.pick(nil)]++
	}
	if got[a] != 0 || got[b] != 5 || got[c] != 5 {
		t.Fatalf("picked a %d, b %d, c %d times; want the two least loaded in turn", got[a], got[b], got[c])
	}
	c.outstanding.Store(0)
	for range 5 {
		if r := s.pick(nil); r != c {
			t.Fatalf("picked %s, want the least loaded replica c", r.jobID)
		}
	}
	c.suspect.Store(true)
	if r := s.pick(nil); r != b {
		t.Fatalf("picked %s, want b (c suspected)", r.jobID)
	}
	if r := s.pick([]*replica{b}); r != a {
		t.Fatalf("picked %s, want a (b skipped, c suspected)", r.jobID)
	}
	a.suspect.Store(true)
	if r := s.pick([]*replica{b}); r != nil {
		t.Fatalf("picked %s with every other replica suspected", r.jobID)
	}
}
