package transfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/artifact"
)

// TestPrepareInputsFailureFailsTheLease: a job naming an input its renter
// never serves fails with a clear error (the lease fails), leaves no
// inputs dir behind and pins nothing; it must never panic (the daemon
// would die with it).
func TestPrepareInputsFailureFailsTheLease(t *testing.T) {
	t.Parallel()
	renter, prov := newTestPeer(t, 0), newTestPeer(t, 0)
	prov.net.AddAddrs(renter.net.ID(), renter.addrs())
	missing := strings.Repeat("ab", 32) // an id the renter does not hold
	dir := filepath.Join(t.TempDir(), "inputs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := prov.svc.PrepareInputs(ctx, map[string]string{"data": missing}, renter.net.ID(), renter.addrs(), dir, nil)
	if err == nil || release != nil {
		t.Fatalf("an input no one serves: release %v, err %v", release != nil, err)
	}
	if !strings.Contains(err.Error(), "input data") {
		t.Fatalf("error does not name the input: %v", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("inputs dir left behind: %v", serr)
	}
	if n := prov.store.PinnedBytes(); n != 0 {
		t.Fatalf("%d bytes still pinned", n)
	}
}

// TestDedupBombRefusedBeforeMaterialising: a renter serves a manifest that
// repeats one 1 MiB chunk 200 times (1 MiB stored, 200 MiB of files). The
// provider counts the files' size against its store's budget before it
// fetches or lays out anything, and refuses clearly.
func TestDedupBombRefusedBeforeMaterialising(t *testing.T) {
	t.Parallel()
	renter, prov := newTestPeer(t, 0), newTestPeer(t, 16*artifact.ChunkSize)
	chunk := make([]byte, artifact.ChunkSize)
	sum := sha256.Sum256(chunk)
	h := hex.EncodeToString(sum[:])
	const copies = 200
	e := artifact.Entry{Path: "bomb", Size: copies * artifact.ChunkSize}
	for range copies {
		e.Chunks = append(e.Chunks, h)
	}
	m := artifact.Manifest{Name: "bomb", Size: e.Size, Entries: []artifact.Entry{e}}
	id, _, err := renter.store.Begin(m, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if err := renter.store.PutChunk(id, h, chunk, artifact.Local); err != nil {
		t.Fatal(err)
	}
	if err := renter.store.Complete(id, artifact.Local, artifact.Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, used := renter.store.Budget(); used != artifact.ChunkSize {
		t.Fatalf("the renter stores %d bytes", used)
	}
	dir := filepath.Join(t.TempDir(), "inputs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := prov.svc.PrepareInputs(ctx, map[string]string{"data": id}, renter.net.ID(), renter.addrs(), dir, nil)
	if err == nil {
		release()
		t.Fatalf("a %d MiB dedup bomb was laid out under a %d MiB budget", copies, 16)
	}
	if !errors.Is(err, artifact.ErrFull) || !strings.Contains(err.Error(), "files") {
		t.Fatalf("refusal %q: want ErrFull naming the files' size", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("inputs dir left: %v", serr)
	}
	if n := prov.svc.Counters()["artifact.fetched_bytes"]; n != 0 {
		t.Fatalf("fetched %d bytes before refusing", n)
	}
}
