package jobs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// newArtifacts is a node's jobs' artifacts over a fresh store; changed
// counts the calls of Config.Changed, announced collects Announce's.
func newArtifacts(t *testing.T) (a *Artifacts, st *artifact.Store, changed *int, announced *[]string) {
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
	signer, err := p2p.Signer(key)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = artifact.Open(t.TempDir(), 1<<30); err != nil {
		t.Fatal(err)
	}
	svc, err := transfer.NewService(transfer.ServiceConfig{Store: st, Net: n, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	changed, announced = new(int), new([]string)
	a = New(Config{Transfer: svc, Advertiser: &counting{changed, announced}, Log: slog.New(slog.DiscardHandler)})
	return a, st, changed, announced
}

// counting is the node's advertiser: it counts readvertisements and lists
// the announcements.
type counting struct {
	changed   *int
	announced *[]string
}

func (c *counting) Readvertise()       { *c.changed++ }
func (c *counting) Announce(id string) { *c.announced = append(*c.announced, id) }

func writeDir(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPinLive: a live job's artifacts stay pinned until its state is not
// live any more.
func TestPinLive(t *testing.T) {
	a, st, _, _ := newArtifacts(t)
	id, err := st.Add(writeDir(t, "input"), artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	v := api.JobView{}
	v.Job.ID, v.Job.Run.Inputs, v.State = "j1", map[string]string{"data": id}, terms.JobQueued
	pins := func() int {
		in, err := st.Info(id)
		if err != nil {
			t.Fatal(err)
		}
		return in.Pins
	}
	a.PinLive(v)
	a.PinLive(v) // saved again while live: still one pin
	if n := pins(); n != 1 {
		t.Fatalf("live job: %d pins, want 1", n)
	}
	v.State = terms.JobCancelled
	a.PinLive(v)
	if n := pins(); n != 0 {
		t.Fatalf("ended job: %d pins, want 0", n)
	}
}

// TestOutputsAndCheckpoints: a lease's outputs become its renter's
// private artifact, announced and advertised; a checkpoint is not
// announced and its drop removes it; a held artifact's removal is
// advertised, and removing one already gone is no error.
func TestOutputsAndCheckpoints(t *testing.T) {
	a, st, changed, announced := newArtifacts(t)
	const renter = "12D3KooWRenter"
	id, err := a.Outputs(writeDir(t, "outputs"), renter, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := st.Info(id)
	if err != nil || !in.Private || in.Owner != renter || *changed != 1 || len(*announced) != 1 || (*announced)[0] != id {
		t.Fatalf("outputs %+v (%v), changed %d, announced %v", in, err, *changed, *announced)
	}
	ck, size, drop, err := a.Checkpoint(writeDir(t, "checkpoint!"), renter, nil)
	if err != nil || size <= 0 || len(*announced) != 1 {
		t.Fatalf("checkpoint %s of %d bytes: %v (announced %v)", ck, size, err, *announced)
	}
	drop()
	if _, err := st.Info(ck); err == nil {
		t.Fatal("dropped checkpoint still held")
	}
	if err := a.Remove(id); err != nil || *changed != 2 {
		t.Fatalf("remove: %v, changed %d", err, *changed)
	}
	if err := a.Remove(id); err != nil {
		t.Fatalf("removing an artifact already gone: %v", err)
	}
}

// TestHostileLeaseInput: what a renter or its job names that cannot be
// (an owner that is no peer id, keys that are no keys, an artifact id
// that is none) is refused with an error, before anything is fetched.
func TestHostileLeaseInput(t *testing.T) {
	a, _, _, _ := newArtifacts(t)
	ctx := context.Background()
	job := terms.Job{ID: "j1", Owner: "not a peer"}
	if _, _, err := a.Inputs(ctx, job, t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "is not a peer id") {
		t.Fatalf("owner that is no peer id: %v", err)
	}
	if _, err := a.Restore(ctx, job, strings.Repeat("a", 64), t.TempDir(), nil); err == nil {
		t.Fatal("restore for an owner that is no peer id accepted")
	}
	job.Owner = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
	for _, keys := range []*wire.LeaseKeys{{Lease: "zz"}, {Lease: strings.Repeat("0", 64), Artifacts: map[string]string{"x": "not hex"}}} {
		if _, _, err := a.Inputs(ctx, job, t.TempDir(), keys); err == nil {
			t.Fatalf("keys %+v accepted", keys)
		}
		if _, err := a.Outputs(t.TempDir(), job.Owner, keys); err == nil {
			t.Fatalf("outputs sealed with keys %+v", keys)
		}
	}
	if _, err := a.Restore(ctx, job, "../../etc", t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "not an artifact id") {
		t.Fatalf("restore of a path: %v", err)
	}
}

// TestLeaseKeysToStrangers: a lease keys request that is no request, for
// a lease that is not the sender's, or of a job that is not sealed, gets
// no keys.
func TestLeaseKeysToStrangers(t *testing.T) {
	a, _, _, _ := newArtifacts(t)
	prov := peer.ID("provider")
	h := a.LeaseKeysHandler(func(from peer.ID, leaseID string) (terms.Job, bool) {
		return terms.Job{ID: "j1", Sealed: leaseID == "sealed"}, from == prov && (leaseID == "sealed" || leaseID == "plain")
	})
	for _, c := range []struct {
		from peer.ID
		req  string
		want string
	}{
		{prov, "{", "bad lease keys request"},
		{"stranger", `{"lease_id":"sealed"}`, "is no current lease of"},
		{prov, `{"lease_id":"other"}`, "is no current lease of"},
		{prov, `{"lease_id":"plain"}`, "is not sealed"},
	} {
		if b, err := h(context.Background(), c.from, []byte(c.req)); err == nil || b != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %q %v, want %q", c.from, c.req, b, err, c.want)
		}
	}
}
