package leasestream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

func framed(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := frame.Write(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadOutputs: a provider's manifest frame is read off the stream,
// the bundle left to follow; a refusal is the renter's bad request, and
// garbage an error, never a panic.
func TestReadOutputs(t *testing.T) {
	ok := append(framed(t, []byte(`{"outputs":[{"path":"out/a.txt","size":3}]}`)), "tar"...)
	outs, body, err := ReadOutputs(bytes.NewReader(ok))
	if err != nil || len(outs) != 1 || outs[0].Path != "out/a.txt" {
		t.Fatalf("ReadOutputs = %+v, %v", outs, err)
	}
	if rest, _ := io.ReadAll(body); string(rest) != "tar" {
		t.Fatalf("bundle %q, want what follows the manifest", rest)
	}
	_, _, err = ReadOutputs(bytes.NewReader(framed(t, []byte(`{"error":"job has not finished"}`))))
	var re *lease.RequestError
	if !errors.As(err, &re) || re.Missing || re.Msg != "job has not finished" {
		t.Fatalf("refusal: %#v", err)
	}
	for name, in := range map[string][]byte{
		"empty":          nil,
		"not json":       framed(t, []byte("{")),
		"truncated":      framed(t, []byte(`{"outputs":[]}`))[:5],
		"length too big": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		if _, _, err := ReadOutputs(bytes.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func newNode(t *testing.T) *p2p.Node {
	t.Helper()
	key, err := p2p.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(context.Background(), p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestStrangersGetNothing: a stream with a malformed request, or for a
// lease that is not the caller's, is refused without serving anything:
// the logs and outputs streams are reset, exec answers why.
func TestStrangersGetNothing(t *testing.T) {
	prov, renter := newNode(t), newNode(t)
	renter.AddAddrs(prov.ID(), prov.Addrs())
	var mu sync.Mutex
	counted := map[string]int{}
	var asked []string
	pr := &probe{mu: &mu, asked: &asked, counted: counted}
	srv := New(t.Context(), Config{Leases: pr, Counters: pr, Log: slog.New(slog.DiscardHandler)})
	for p, h := range map[protocol.ID]network.StreamHandler{wire.ProtoLogs: srv.Logs, wire.ProtoOutputs: srv.Outputs, wire.ProtoExec: srv.Exec} {
		prov.Host.SetStreamHandler(p, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(p protocol.ID, req []byte) []byte {
		t.Helper()
		s, err := renter.Host.NewStream(ctx, prov.ID(), p)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = s.Write(req)
		_ = s.CloseWrite()
		b, _ := io.ReadAll(s)
		return b
	}
	for _, p := range []protocol.ID{wire.ProtoLogs, wire.ProtoOutputs, wire.ProtoExec} {
		if b := send(p, framed(t, []byte("not json"))); len(b) != 0 {
			t.Errorf("%s: malformed request answered %q", p, b)
		}
	}
	for _, p := range []protocol.ID{wire.ProtoLogs, wire.ProtoOutputs} {
		req, _ := json.Marshal(wire.StreamRequest{LeaseID: "someone-elses", Follow: true})
		if b := send(p, framed(t, req)); len(b) != 0 {
			t.Errorf("%s: a stranger got %q", p, b)
		}
	}
	req, _ := json.Marshal(wire.ExecRequest{LeaseID: "someone-elses", Command: []string{"id"}})
	ack, err := frame.Read(bufio.NewReader(bytes.NewReader(send(wire.ProtoExec, framed(t, req)))))
	var a wire.ExecAck
	if err != nil || json.Unmarshal(ack, &a) != nil || a.Error != "lease someone-elses: no such lease of yours" {
		t.Fatalf("exec for a stranger: %q, %v", ack, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if counted["provider.malformed_stream"] != 3 || counted["provider.exec"] != 0 || len(asked) != 3 {
		t.Fatalf("counted %v, asked about %v", counted, asked)
	}
}

// probe is a provider that holds no lease: it lists the leases asked for
// and counts the events.
type probe struct {
	mu      *sync.Mutex
	asked   *[]string
	counted map[string]int
}

func (p *probe) Authorize(leaseID string, _ peer.ID) (*lease.Access, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.asked = append(*p.asked, leaseID)
	return nil, false
}

func (p *probe) Add(e string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counted[e]++
}
