package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// TestHalfSentFramesAreBounded: peers that open many streams on a served
// protocol, each with a frame.Max header and a little of its payload, and
// hold them, get no more streams than the protocol's per-peer limit and no
// more frame memory than its limits allow; an honest request is answered
// meanwhile, and the held streams are reset once the frame timeout passes,
// giving all their memory back.
func TestHalfSentFramesAreBounded(t *testing.T) {
	const proto protocol.ID = "/gpumesh-test/req/1.0.0"
	lim := ProtocolLimit{PeerStreams: 8, Streams: 64, PeerMemory: 2 * frame.Max, Memory: 8 * frame.Max}
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(context.Background(), Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		Protocols: map[protocol.ID]ProtocolLimit{proto: lim}, FrameTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	srv.Handle(proto, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return req, nil })
	stat := func() network.ScopeStat {
		var st network.ScopeStat
		_ = srv.raw.Network().ResourceManager().ViewProtocol(proto, func(s network.ProtocolScope) error {
			st = s.Stat()
			return nil
		})
		return st
	}

	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], frame.Max)
	half := append(hdr[:n:n], bytes.Repeat([]byte("x"), 4<<10)...)
	const attackers, perPeer = 3, 12
	var ended sync.WaitGroup
	for range attackers {
		a := newNode(t, srv.Addrs()...)
		if err := a.Bootstrap(context.Background()); err != nil {
			t.Fatal(err)
		}
		for range perPeer {
			s, err := a.Host.NewStream(context.Background(), srv.ID(), proto)
			if err != nil {
				continue // refused: over the limit
			}
			if _, err := s.Write(half); err != nil {
				_ = s.Reset()
				continue
			}
			ended.Add(1)
			go func() {
				defer ended.Done()
				_, _ = io.Copy(io.Discard, s) // until the server resets it
			}()
		}
	}
	honest := newNode(t, srv.Addrs()...)
	if err := honest.Bootstrap(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := honest.Request(ctx, srv.ID(), nil, proto, []byte("hello")); err != nil || string(resp) != "hello" {
		t.Fatalf("honest request during the attack: %q, %v", resp, err)
	}
	st := stat()
	if st.NumStreamsInbound > attackers*lim.PeerStreams {
		t.Fatalf("%d inbound streams held, limit %d per peer", st.NumStreamsInbound, lim.PeerStreams)
	}
	if st.Memory > lim.Memory*6/10 {
		t.Fatalf("%d bytes of frames reserved, over 60%% of the protocol's %d", st.Memory, lim.Memory)
	}
	done := make(chan struct{})
	go func() { ended.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("half-sent frames still held long after the frame timeout")
	}
	waitFor := time.Now().Add(5 * time.Second)
	for st = stat(); st.Memory != 0 || st.NumStreamsInbound != 0; st = stat() {
		if time.Now().After(waitFor) {
			t.Fatalf("after the attack: %d bytes, %d inbound streams still held", st.Memory, st.NumStreamsInbound)
		}
		time.Sleep(20 * time.Millisecond) // libp2p's resource manager frees real streams in its own time, signalling nothing
	}
}

// TestHandlerPanicFailsOnlyItsRequest: a handler that panics fails its
// request with an internal error; the node goes on answering.
func TestHandlerPanicFailsOnlyItsRequest(t *testing.T) {
	a, b := pair(t)
	a.Handle("/gpumesh-test/panic/1.0.0", func(context.Context, peer.ID, []byte) ([]byte, error) { panic("bug") })
	a.Handle("/gpumesh-test/echo/1.0.0", func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return req, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var re *RemoteError
	if _, err := b.Request(ctx, a.ID(), nil, "/gpumesh-test/panic/1.0.0", []byte("x")); !errors.As(err, &re) || re.Msg != ErrInternal.Error() {
		t.Fatalf("panicking handler answered %v", err)
	}
	if resp, err := b.Request(ctx, a.ID(), nil, "/gpumesh-test/echo/1.0.0", []byte("still here")); err != nil || string(resp) != "still here" {
		t.Fatalf("after the panic: %q, %v", resp, err)
	}
}
