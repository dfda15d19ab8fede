package node

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func randomPeer(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestProviderKeepsRentersApart: a provider holds renter X's private
// artifact (a checkpoint or outputs it kept for X). Renter Y's job naming
// it as an input or as the checkpoint to restore does not get it from the
// provider's store (Y does not serve it: the lease fails), and the
// provider's capability record does not list it. On the renter side, a
// provider naming an artifact of the renter's as its checkpoint does not
// have the renter's own copy counted as fetched.
func TestProviderKeepsRentersApart(t *testing.T) {
	t.Parallel()
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	prov := ns[0]
	x := randomPeer(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "state"), []byte("renter X's checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := prov.artifacts.Store().Add(src, artifact.Meta{Private: true, Owner: x.String()})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(prov.artifacts.Store().Held(terms.MaxAdvertisedArtifacts), id) {
		t.Error("the provider advertises renter X's private artifact")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := terms.Job{ID: "job-of-y", Owner: boot.ID().String(), OwnerAddrs: boot.Addrs()}
	restoreDir := filepath.Join(t.TempDir(), "restore")
	if release, err := prov.jobArts.Restore(ctx, job, id, restoreDir, nil); err == nil {
		b, _ := os.ReadFile(filepath.Join(restoreDir, "state"))
		release()
		t.Errorf("renter Y's job restored renter X's checkpoint: %q", b)
	}
	job.Run.Inputs = map[string]string{"data": id}
	inputsDir := filepath.Join(t.TempDir(), "inputs")
	if release, _, err := prov.jobArts.Inputs(ctx, job, inputsDir, nil); err == nil {
		b, _ := os.ReadFile(filepath.Join(inputsDir, "data", "state"))
		release()
		t.Errorf("renter Y's job read renter X's artifact as an input: %q", b)
	}

	// The renter's own private artifact, named by the provider as its
	// checkpoint: the provider never held it, so it is not kept.
	mine := t.TempDir()
	if err := os.WriteFile(filepath.Join(mine, "secret"), []byte("the renter's own data"), 0o600); err != nil {
		t.Fatal(err)
	}
	own, err := boot.artifacts.Store().Add(mine, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := boot.jobArts.FetchCheckpoint(ctx, own, prov.ID(), "", false, terms.MaxCheckpointBytes); err == nil {
		t.Fatalf("a provider's claim to the renter's own artifact was kept as a %d-byte checkpoint", n)
	}
	if _, err := boot.artifacts.Store().Info(own); err != nil {
		t.Fatalf("the refused claim cost the renter its artifact: %v", err)
	}

	// A checkpoint handed back in plaintext for a sealed job is refused
	// and not kept: the provider of a sealed job holds none of its
	// plaintext, and the renter takes none back. The same artifact for a
	// job that is not sealed is kept (the path is open).
	plain := t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "state"), []byte("plaintext state of a sealed job"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := prov.artifacts.Store().Add(plain, artifact.Meta{Private: true, Owner: boot.ID().String()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := boot.jobArts.FetchCheckpoint(ctx, cp, prov.ID(), "lease-sealed", true, terms.MaxCheckpointBytes); err == nil || !strings.Contains(err.Error(), "not sealed") {
		t.Fatalf("a plaintext checkpoint of a sealed job: %v, want it refused as not sealed", err)
	}
	if _, err := boot.artifacts.Store().Info(cp); err == nil {
		t.Error("the renter kept the refused plaintext checkpoint")
	}
	if _, err := boot.jobArts.FetchCheckpoint(ctx, cp, prov.ID(), "lease-plain", false, terms.MaxCheckpointBytes); err != nil {
		t.Fatalf("the same checkpoint of a job that is not sealed: %v", err)
	}
}
