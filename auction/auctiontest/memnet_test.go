package auctiontest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// TestMemNetworkProtocols: requests reach the handler of their protocol
// and carry its answer or error; unknown protocols and dropped peers are
// unreachable; a slow handler yields the context's error; topic handlers
// hear only their topic, and never their own publications.
func TestMemNetworkProtocols(t *testing.T) {
	n := NewMemNetwork()
	a, b := n.Join(peer.ID(signtest.New(t).ID())), n.Join(peer.ID(signtest.New(t).ID()))
	bID := b.id
	b.OnRequest("/echo", func(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
		if from != a.id {
			return nil, errors.New("wrong sender")
		}
		return append([]byte("echo:"), data...), nil
	})
	refused := errors.New("refused")
	b.OnRequest("/refuse", func(context.Context, peer.ID, []byte) ([]byte, error) { return nil, refused })
	block := make(chan struct{})
	defer close(block)
	b.OnRequest("/slow", func(context.Context, peer.ID, []byte) ([]byte, error) { <-block; return nil, nil })

	ctx := t.Context()
	tests := []struct {
		name  string
		proto string
		want  string
		err   error
	}{
		{"answer", "/echo", "echo:hi", nil},
		{"handler error", "/refuse", "", refused},
		{"unknown protocol", "/nope", "", ErrUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := a.Request(ctx, bID, protocol.ID(tc.proto), []byte("hi"))
			if !errors.Is(err, tc.err) || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := a.Request(sctx, bID, "/slow", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow handler: %v", err)
	}
	n.Drop(bID)
	if _, err := a.Request(ctx, bID, "/echo", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("dropped peer: %v", err)
	}
	n.Restore(bID)

	heard := make(chan string, 4)
	b.OnTopic("t1", func(_ peer.ID, data []byte) { heard <- "b:" + string(data) })
	a.OnTopic("t1", func(_ peer.ID, data []byte) { heard <- "a:" + string(data) })
	b.OnTopic("t2", func(_ peer.ID, data []byte) { heard <- "b2:" + string(data) })
	if err := a.Publish(ctx, "t1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	n.Wait()
	close(heard)
	var got []string
	for h := range heard {
		got = append(got, h)
	}
	if len(got) != 1 || got[0] != "b:x" {
		t.Fatalf("heard %v, want [b:x]", got)
	}
}
