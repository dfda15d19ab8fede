package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// TestPathLeaseIDsRefused: a lease id from the network that is not a valid
// id (here a path climbing out of the data dir) is refused on the logs and
// outputs streams and in a cancel request, before it names any file.
func TestPathLeaseIDsRefused(t *testing.T) {
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	prov := ns[0]
	const evil = "../../../../tmp/x/evil"
	jobs := prov.paths.Jobs()
	// Where the id would lead if it reached a path.
	targets := []string{filepath.Join(jobs, "logs", evil+".log"), filepath.Join(jobs, "outputs", evil), "/tmp/x/evil"}
	for _, p := range targets {
		if _, err := os.Lstat(p); err == nil {
			t.Skipf("%s exists before the test", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The provider dialled boot; boot learns the provider's listen addresses
	// only when identify completes, so give it them before opening streams.
	ais, err := p2p.ParseAddrInfos(prov.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	if err := boot.net.Host.Connect(ctx, ais[0]); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []protocol.ID{wire.ProtoLogs, wire.ProtoOutputs} {
		t.Run(string(proto), func(t *testing.T) {
			s, err := boot.net.Host.NewStream(ctx, prov.ID(), proto)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			req, _ := json.Marshal(wire.StreamRequest{LeaseID: evil, Follow: true})
			if err := frame.Write(s, req); err != nil {
				t.Fatal(err)
			}
			_ = s.CloseWrite()
			_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(s)
			if len(b) != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("stream answered %q (%v), want a reset", b, err)
			}
		})
	}
	if n := prov.market.counters.Snapshot()["provider.malformed_stream"]; n != 2 {
		t.Fatalf("malformed_stream = %d, want 2", n)
	}
	env, err := sign.Seal(boot.signer, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: evil, JobID: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := env.Marshal()
	if _, err := boot.net.Request(ctx, prov.ID(), nil, wire.ProtoCancel, b); err == nil {
		t.Fatal("cancel of a path lease id accepted")
	}
	if n := prov.market.counters.Snapshot()["provider.cancel_rejected"]; n != 1 {
		t.Fatalf("cancel_rejected = %d, want 1", n)
	}
	for _, p := range targets {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s was created", p)
		}
	}
}
