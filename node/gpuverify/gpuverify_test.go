package gpuverify

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestOwnVerdictsBoundedAndExpire: a node republishes at most
// maxOwnVerdicts of its own verdicts, the newest, and only while they
// count.
func TestOwnVerdictsBoundedAndExpire(t *testing.T) {
	var o ownVerdicts
	now := time.Now()
	old := &sign.Envelope{}
	o.add(old, now.Add(-attest.VerdictValidFor))
	envs := make([]*sign.Envelope, maxOwnVerdicts+5)
	for i := range envs {
		envs[i] = &sign.Envelope{}
		o.add(envs[i], now.Add(time.Duration(i)*time.Second))
	}
	got := o.current(now)
	if len(got) != maxOwnVerdicts || got[0] != envs[5] || got[len(got)-1] != envs[len(envs)-1] {
		t.Fatalf("current: %d verdicts, want the newest %d", len(got), maxOwnVerdicts)
	}
	if got := o.current(now.Add(attest.VerdictValidFor + time.Hour)); len(got) != 0 {
		t.Fatalf("%d verdicts still count after their validity", len(got))
	}
}

// TestHandleVerdictHostile: gossip that is no verdict, or a verdict no one
// signed, is dropped, never weighed nor a panic.
func TestHandleVerdictHostile(t *testing.T) {
	book := attest.NewBook(attest.BookOptions{Now: time.Now, Self: "self"})
	s := New(t.Context(), Config{Book: book, Now: time.Now, Log: slog.New(slog.DiscardHandler)})
	for _, data := range []string{"", "null", "{", `{"verdict":null}`, `{"verdict":{}}`, `{"verdict":{"payload":"AAAA","sig":"AAAA"}}`, `[1,2]`} {
		s.HandleVerdict("", []byte(data))
	}
	if c := book.Counters(); c["verdict_accepted"] != 0 || c["verdict_rejected"] == 0 {
		t.Fatalf("book counters after forged gossip: %v", c)
	}
}

// TestVerifyCallRefusals: a verify call that names no peer, this node,
// half of n and k, a provider without a record or GPUs, or a device it
// does not have is refused before any challenge.
func TestVerifyCallRefusals(t *testing.T) {
	key, err := p2p.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(context.Background(), p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	gpuless, withGPU := signtest.New(t).ID(), signtest.New(t).ID()
	s := New(t.Context(), Config{Net: n, Now: time.Now, Log: slog.New(slog.DiscardHandler),
		Directory: records{peer.ID(gpuless): {Peer: gpuless.String()},
			peer.ID(withGPU): {Peer: withGPU.String(), GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}}}}})
	stranger := signtest.New(t).ID()
	for body, want := range map[string]int{
		`{`: 400, `{"peer":"` + withGPU.String() + `","sudo":true}`: 400, `{"peer":"nobody"}`: 400,
		`{"peer":"` + n.ID().String() + `"}`: 400, `{"peer":"` + withGPU.String() + `","n":4}`: 400,
		`{"peer":"` + withGPU.String() + `","n":-1,"k":-1}`: 400, `{"peer":"` + stranger.String() + `"}`: 404,
		`{"peer":"` + gpuless.String() + `"}`: 400, `{"peer":"` + withGPU.String() + `","device":"GPU-7"}`: 404,
	} {
		_, err := s.HandleVerify(httptest.NewRequest("POST", "/v1/verify", strings.NewReader(body)))
		var se *api.StatusError
		if !errors.As(err, &se) || se.Code != want {
			t.Errorf("%s: %v, want %d", body, err, want)
		}
	}
}

// records are the providers' capability records the test knows.
type records map[peer.ID]terms.Capability

func (r records) Lookup(_ context.Context, id peer.ID) (terms.Capability, error) {
	if c, ok := r[id]; ok {
		return c, nil
	}
	return terms.Capability{}, errors.New("no record")
}
