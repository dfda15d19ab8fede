package node

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// readsInput is a job that prints the SHA-256 of its input "data" and
// fails if it can write to it.
func readsInput(id string) terms.Job {
	job := shJob(terms.Silver, 3, `f="$GPUMESH_INPUTS/data"
if ( echo x >> "$f" ) 2>/dev/null; then echo "input is writable"; exit 3; fi
sha256sum "$f" | cut -c1-64`)
	job.BidWindow = 2 * time.Second
	job.Run.Inputs = map[string]string{"data": id}
	return job
}

func jobLog(t *testing.T, n *testNode, id string) string {
	t.Helper()
	resp, err := api.NewClient(n.dir).Raw(context.Background(), http.MethodGet, "/jobs/"+id+"/logs", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// waitHolder waits until from finds holder's DHT provider record for an
// artifact.
func waitHolder(t *testing.T, from *Daemon, id string, holder peer.ID) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		for ai := range from.net.DHT.FindProvidersAsync(ctx, p2p.KeyCID(wire.ArtifactKey(id)), 10) {
			if ai.ID == holder {
				cancel()
				return
			}
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("%s never found %s holding artifact %s", from.ID(), holder, id)
		}
	}
}

// TestJobsReadRenterDataset: a 64 MiB dataset added on the renter only is
// read by a job on a provider (read-only, checksum in its log); a second
// job, on another provider, fetches it from both holders: the renter and
// the first provider, which serves it on the renter's grant.
func TestJobsReadRenterDataset(t *testing.T) {
	t.Parallel()
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), fastConfig(providerConfig("eu-west", 1.0, h100)))
	p1, p2 := ns[0], ns[1]
	waitAdvertised(t, boot, p1, p2)

	data := make([]byte, 64<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "dataset.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	cl := api.NewClient(boot.dir)
	in, err := cl.AddArtifact(context.Background(), api.ArtifactAddRequest{Path: src})
	if err != nil {
		t.Fatal(err)
	}
	// Private, so sealed: its size is the ciphertext's, a little more.
	if !in.Private || !in.Sealed || in.Size < int64(len(data)) || in.Size > int64(len(data))+1<<20 {
		t.Fatalf("added %+v", in)
	}

	job := readsInput(in.ID)
	job.GPUModels = []string{"A100"}
	v := post(t, boot, job)
	if !leased(v) || v.Winner != p1.ID().String() {
		t.Fatalf("first job: state %s winner %s: %v", v.State, v.Winner, v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 60*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("first job %s: %s; log %q", v.Run, v.Detail, jobLog(t, boot, v.Job.ID))
	}
	if got := jobLog(t, boot, v.Job.ID); got != want {
		t.Fatalf("first job read checksum %q, want %q", got, want)
	}
	// The provider keeps the artifact, unpinned once the job is over, and
	// announces it.
	waitChange(t, 10*time.Second, "the provider's copy unpinned after the job", func() bool {
		info, err := p1.artifacts.Store().Info(in.ID)
		if err != nil || !info.Complete {
			t.Fatalf("provider's copy: %+v %v", info, err)
		}
		return info.Pins == 0
	}, p1.artifacts.Store().Changed)
	waitHolder(t, p2.Daemon, in.ID, p1.ID())
	servedBefore := boot.artifacts.Counters()["artifact.served_bytes"]

	job2 := readsInput(in.ID)
	job2.GPUModels = []string{"H100"}
	v2 := post(t, boot, job2)
	if !leased(v2) || v2.Winner != p2.ID().String() {
		t.Fatalf("second job: state %s winner %s: %v", v2.State, v2.Winner, v2.Reasons)
	}
	v2 = waitJob(t, boot, v2.Job.ID, 60*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v2.Run != terms.RunSucceeded || jobLog(t, boot, v2.Job.ID) != want {
		t.Fatalf("second job %s: %s; log %q", v2.Run, v2.Detail, jobLog(t, boot, v2.Job.ID))
	}
	fromRenter := boot.artifacts.Counters()["artifact.served_bytes"] - servedBefore
	fromP1 := p1.artifacts.Counters()["artifact.served_bytes"]
	if fromRenter <= 0 || fromP1 <= 0 || int64(fromRenter+fromP1) != in.Size {
		t.Fatalf("second fetch: %d bytes from the renter, %d from the first provider; want both, %d in all", fromRenter, fromP1, in.Size)
	}

	// A provider that ran a job reading it holds only its ciphertext,
	// which it cannot open; a node without a lease is refused the private
	// dataset.
	if _, err := api.NewClient(p1.dir).GetArtifact(context.Background(), in.ID, api.ArtifactGetRequest{Dest: filepath.Join(t.TempDir(), "x")}, nil); err == nil || !strings.Contains(err.Error(), "is sealed") {
		t.Fatalf("p1 holds it and exports it locally: %v, want a refusal (sealed)", err)
	}
	cl2 := api.NewClient(p2.dir)
	if err := cl2.RemoveArtifact(context.Background(), in.ID); err != nil {
		t.Fatal(err)
	}
	_, err = cl2.GetArtifact(context.Background(), in.ID, api.ArtifactGetRequest{Dest: filepath.Join(t.TempDir(), "x"), Peers: boot.Addrs()}, nil)
	if err == nil || !strings.Contains(err.Error(), "private") {
		t.Fatalf("fetch without a lease: %v, want a refusal", err)
	}
}

// TestPlacementPrefersWarmProvider: providers advertise the artifacts
// their store holds; at an equal price the one holding the job's input
// wins, and a cold one wins when it is cheap enough to pay for the fetch.
func TestPlacementPrefersWarmProvider(t *testing.T) {
	boot, ns := startNet(t,
		fastConfig(providerConfig("eu-west", 1.0, a100)), // warm
		fastConfig(providerConfig("eu-west", 1.0, a100)), // cold, same price
		fastConfig(providerConfig("eu-west", 0.5, h100)), // cold, half the price
	)
	warm, cold, cheap := ns[0], ns[1], ns[2]
	waitAdvertised(t, boot, ns...)
	data := make([]byte, 64<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "dataset.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := api.NewClient(boot.dir).AddArtifact(context.Background(), api.ArtifactAddRequest{Path: src, Public: true})
	if err != nil {
		t.Fatal(err)
	}
	// The warm provider publishes the same dataset: a private copy of its
	// own would be another artifact (sealed under its own key), and would
	// not count for another renter's job anyway (it would have to serve
	// every byte to show it holds them).
	if id, err := api.NewClient(warm.dir).AddArtifact(context.Background(), api.ArtifactAddRequest{Path: src, Public: true}); err != nil || id.ID != in.ID {
		t.Fatalf("warm provider's copy: %v %v", id, err)
	}
	// The renter checks bids' claims against the providers' records.
	waitAdvertisesArtifact(t, boot.Daemon, warm, in.ID)

	// 64 MiB at auction.TransferRate is 0.67s: 3% of a 20s job.
	job := readsInput(in.ID)
	job.Duration = 20 * time.Second
	job.GPUModels = []string{"A100"}
	v := post(t, boot, job)
	if !leased(v) || v.Winner != warm.ID().String() {
		t.Fatalf("equal prices: winner %s, want the warm provider %s; bids %+v", v.Winner, warm.ID(), v.Bids)
	}
	bids, err := boot.market.tracker.Bids(v.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bids.Bids {
		want := int64(0)
		if b.Bid.Provider == cold.ID().String() {
			want = int64(len(data))
		}
		if b.Bid.MissingBytes != want || (want > 0) != (b.Transfer > 0) {
			t.Fatalf("bid of %s: missing %d (transfer %v), want %d", b.Bid.Provider, b.Bid.MissingBytes, b.Transfer, want)
		}
	}
	waitJob(t, boot, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })

	job2 := readsInput(in.ID)
	job2.Duration = 20 * time.Second
	v2 := post(t, boot, job2)
	if !leased(v2) || v2.Winner != cheap.ID().String() {
		t.Fatalf("cold at half the price: winner %s, want %s; bids %+v", v2.Winner, cheap.ID(), v2.Bids)
	}
	v2 = waitJob(t, boot, v2.Job.ID, 60*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v2.Run != terms.RunSucceeded {
		t.Fatalf("job on the cold provider: %s %s", v2.Run, v2.Detail)
	}
}

// helperImage builds the runtime's static test helper into a fresh
// single-file image (/jobhelper) named ref, or skips without Docker.
func helperImage(t *testing.T) string {
	t.Helper()
	if !runtime.DockerAvailable(runtime.DefaultDockerSocket) {
		t.Skip("Docker Engine not reachable")
	}
	b, err := os.ReadFile(goProgram(t, "../runtime/testdata/jobhelper", "-ldflags=-s -w"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "jobhelper", Mode: 0o755, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var sfx [4]byte
	_, _ = rand.Read(sfx[:])
	ref := "gpumesh-artifact-test-" + hex.EncodeToString(sfx[:]) + ":1"
	imp := exec.Command("docker", "import", "-", ref)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
	return ref
}

// TestImageArtifactLoadedOnFirstUse: a container image saved as an
// artifact on the renter is fetched by a provider whose engine lacks it,
// loaded, and runs.
func TestImageArtifactLoadedOnFirstUse(t *testing.T) {
	ref := helperImage(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	prov := ns[0]
	cl := api.NewClient(boot.dir)
	in, err := cl.AddArtifact(context.Background(), api.ArtifactAddRequest{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	if !in.Private || in.Size == 0 || !strings.HasSuffix(in.Name, ".tar") {
		t.Fatalf("image artifact %+v", in)
	}
	if _, err := cl.ShareArtifact(context.Background(), in.ID, prov.ID().String()); err != nil {
		t.Fatal(err)
	}
	// The engine (shared by both daemons on this host) forgets the image.
	if out, err := exec.Command("docker", "rmi", ref).CombinedOutput(); err != nil {
		t.Fatalf("docker rmi: %v: %s", err, out)
	}
	job := terms.Job{ID: "img-job", Owner: boot.ID().String(), OwnerAddrs: boot.Addrs(),
		Run: terms.RunSpec{Image: ref, ImageArtifact: in.ID, Command: []string{"/jobhelper", "echo", "from", "artifact"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	release, image, err := prov.jobArts.Inputs(ctx, job, filepath.Join(t.TempDir(), "inputs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// It runs by ID; the image's name stays off the engine (loads move no
	// tag).
	if !strings.HasPrefix(image, "sha256:") {
		t.Fatalf("image to run %q, want an ID", image)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	if out, err := exec.Command("docker", "image", "inspect", ref).CombinedOutput(); err == nil {
		t.Fatalf("the artifact's load tagged %s: %s", ref, out)
	}
	if info, _ := prov.artifacts.Store().Info(in.ID); info.Pins != 1 {
		t.Fatalf("image artifact not pinned while in use: %+v", info)
	}
	e, err := runtime.NewDockerExecutor(runtime.DefaultDockerSocket, runtime.DockerOptions{Root: filepath.Join(t.TempDir(), "work")})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	h, err := e.Start(ctx, runtime.Spec{ID: "img-job", Image: image, Command: job.Run.Command}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	res := h.Wait()
	_ = h.Cleanup()
	if res.ExitCode != 0 || out.String() != "from artifact\n" {
		t.Fatalf("container from the loaded image: %+v %q", res, out.String())
	}
	release()
	if info, _ := prov.artifacts.Store().Info(in.ID); info.Pins != 0 {
		t.Fatalf("image artifact still pinned: %+v", info)
	}
}

// TestOutputsBecomeRenterArtifact: a job's outputs are stored on the
// provider as an artifact owned by the renter, who fetches it from there;
// another node is refused.
func TestOutputsBecomeRenterArtifact(t *testing.T) {
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), renterConfig())
	prov, other := ns[0], ns[1]
	waitAdvertised(t, boot, prov)
	job := shJob(terms.Silver, 2, `mkdir -p out/sub; echo result > out/r.txt; echo deep > out/sub/d.txt`)
	job.Run.Outputs = "out"
	v := post(t, boot, job)
	if !leased(v) {
		t.Fatalf("not leased: %v", v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v.Run != terms.RunSucceeded || v.OutputsArtifact == "" {
		t.Fatalf("run %s, outputs artifact %q", v.Run, v.OutputsArtifact)
	}
	meta, _, ok := prov.artifacts.Store().Meta(v.OutputsArtifact)
	if !ok || !meta.Private || meta.Owner != boot.ID().String() {
		t.Fatalf("provider holds the outputs as %+v (held %v), want private and owned by the renter", meta, ok)
	}
	dest := t.TempDir()
	res, err := api.NewClient(boot.dir).GetArtifact(context.Background(), v.OutputsArtifact, api.ArtifactGetRequest{Dest: dest, Peers: prov.Addrs()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"r.txt": "result\n", "sub/d.txt": "deep\n"} {
		if b, err := os.ReadFile(filepath.Join(dest, name)); err != nil || string(b) != want {
			t.Fatalf("%s: %q %v", name, b, err)
		}
	}
	if res.FromPeer[prov.ID().String()] == 0 {
		t.Fatalf("fetched from %v", res.FromPeer)
	}
	_, err = api.NewClient(other.dir).GetArtifact(context.Background(), v.OutputsArtifact, api.ArtifactGetRequest{Dest: t.TempDir(), Peers: prov.Addrs()}, nil)
	if err == nil || !strings.Contains(err.Error(), "private") {
		t.Fatalf("another node fetched the renter's outputs: %v", err)
	}
}

// waitAdvertisesArtifact waits until prov has put a capability record
// that lists artifact id (to every other node of the test's DHT), and
// checks that from sees it.
func waitAdvertisesArtifact(t *testing.T, from *Daemon, prov *testNode, id string) {
	t.Helper()
	waitChange(t, 30*time.Second, "the provider advertising the artifact", func() bool {
		adv := prov.disc.Advertised()
		return adv != nil && terms.Holds(adv.Artifacts, from.ID().String(), id)
	}, prov.disc.AdvertisedChanged)
	if held, ok := from.disc.Holdings(context.Background(), prov.ID().String()); !ok || !terms.Holds(held, from.ID().String(), id) {
		t.Fatalf("%s does not see %s's record list the artifact: %v", from.ID(), prov.ID(), held)
	}
}

// TestWarmedProviderWinsAuction: the renter warms one of two equal-price
// providers with its private dataset (artifact warm --provider): the
// provider fetches it on the renter's grant and advertises it, so its bid
// reports nothing missing and it wins over the cold one. Warming the two
// best-ranked providers then warms the cold one too (the warm one counts
// as holding it), not the dearer third; a provider whose policy caps warm
// requests below the artifact's size refuses, clearly.
func TestWarmedProviderWinsAuction(t *testing.T) {
	t.Parallel()
	dear := fastConfig(providerConfig("eu-west", 2.0, h100))
	dear.Provider.WarmMaxGB = 1.0 / 1024 // 1 MiB
	boot, ns := startNet(t,
		fastConfig(providerConfig("eu-west", 1.0, a100)),
		fastConfig(providerConfig("eu-west", 1.0, a100)),
		dear,
	)
	warm, cold, small := ns[0], ns[1], ns[2]
	waitAdvertised(t, boot, ns...)
	data := make([]byte, 24<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "dataset.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cl := api.NewClient(boot.dir)
	in, err := cl.AddArtifact(context.Background(), api.ArtifactAddRequest{Path: src})
	if err != nil || !in.Private {
		t.Fatalf("add: %+v %v", in, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cl.WarmArtifact(ctx, in.ID, api.ArtifactWarmRequest{Providers: []string{warm.ID().String()}, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || res.Results[0].Error != "" || !res.Results[0].Advertised || res.Results[0].Fetching != in.Size {
		t.Fatalf("warm: %+v", res)
	}
	if info, err := warm.artifacts.Store().Info(in.ID); err != nil || !info.Complete || !info.Private || info.Owner != boot.ID().String() {
		t.Fatalf("warmed copy: %+v %v", info, err)
	}
	if _, err := cold.artifacts.Store().Info(in.ID); err == nil {
		t.Fatal("the cold provider holds the artifact")
	}

	job := readsInput(in.ID)
	job.Duration = 20 * time.Second
	job.GPUModels = []string{"A100"}
	v := post(t, boot, job)
	if !leased(v) || v.Winner != warm.ID().String() {
		t.Fatalf("winner %s, want the warmed provider %s; bids %+v", v.Winner, warm.ID(), v.Bids)
	}
	bids, err := boot.market.tracker.Bids(v.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bids.Bids {
		want := int64(0)
		if b.Bid.Provider == cold.ID().String() {
			want = in.Size // the ciphertext's
		}
		if b.Bid.MissingBytes != want || b.Missing != want {
			t.Fatalf("bid of %s: claims %d missing, charged %d; want %d", b.Bid.Provider, b.Bid.MissingBytes, b.Missing, want)
		}
	}
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	sum := sha256.Sum256(data)
	if got := jobLog(t, boot, v.Job.ID); v.Run != terms.RunSucceeded || got != hex.EncodeToString(sum[:]) {
		t.Fatalf("job on the warmed provider: %s %s, log %q", v.Run, v.Detail, got)
	}

	// The two best-ranked (cheapest) providers: warm already holds it,
	// cold is warmed; the dearer one is left alone.
	res, err = cl.WarmArtifact(ctx, in.ID, api.ArtifactWarmRequest{Count: 2, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	byProv := map[string]api.ArtifactWarmResult{}
	for _, r := range res.Results {
		byProv[r.Provider] = r
	}
	if len(res.Results) != 2 || !byProv[warm.ID().String()].Held || byProv[cold.ID().String()].Error != "" || !byProv[cold.ID().String()].Advertised {
		t.Fatalf("warm the best two: %+v", res)
	}
	if _, err := small.artifacts.Store().Info(in.ID); err == nil {
		t.Fatal("the dearer provider was warmed")
	}

	// The dearer provider warms at most 1 MiB.
	res, err = cl.WarmArtifact(ctx, in.ID, api.ArtifactWarmRequest{Providers: small.Addrs()[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || !strings.Contains(res.Results[0].Error, "larger than this node warms") {
		t.Fatalf("warm beyond the policy: %+v", res)
	}
	if _, err := small.artifacts.Store().Info(in.ID); err == nil {
		t.Fatal("a refused warm request left the artifact in the store")
	}
}

// TestRenterPinsInputsOfLiveJobs: the renter's own copy of a job's input
// stays pinned while the job is queued and while it runs, so its store's
// budget cannot evict it; once the job is over (cancelled, finished) it is
// an ordinary, evictable artifact again.
func TestRenterPinsInputsOfLiveJobs(t *testing.T) {
	t.Parallel()
	rc := renterConfig()
	rc.ArtifactBudgetGB = 3.0 / 1024 // 3 MiB: one 2 MiB artifact at a time
	_, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), rc)
	prov, renter := ns[0], ns[1]
	waitAdvertised(t, renter, prov)
	dir := t.TempDir()
	write := func(name string) string {
		b := make([]byte, 2<<20)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inputPath, otherPath := write("input.bin"), write("other.bin")
	ctx := context.Background()
	cl := api.NewClient(renter.dir)
	in, err := cl.AddArtifact(ctx, api.ArtifactAddRequest{Path: inputPath})
	if err != nil {
		t.Fatal(err)
	}
	st := renter.artifacts.Store()
	pins := func() int {
		info, err := st.Info(in.ID)
		if err != nil {
			t.Fatalf("the input left the renter's store: %v", err)
		}
		return info.Pins
	}
	// The renter's view of a job changes before the record of the change
	// is saved, and the pins follow the save: wait for them.
	pinsBecome := func(want int) int {
		waitChange(t, 5*time.Second, "the input pinned "+strconv.Itoa(want)+" times", func() bool { return pins() == want }, st.Changed)
		return pins()
	}

	// Queued: no provider has an H100 (posted with queue, to wait for one).
	job := readsInput(in.ID)
	job.GPUModels = []string{"H100"}
	job.Deadline = time.Now().Add(10 * time.Minute)
	v := postQueued(t, renter, job)
	if v.State != terms.JobQueued {
		t.Fatalf("job %s, want queued: %v", v.State, v.Reasons)
	}
	if n := pins(); n != 1 {
		t.Fatalf("queued job's input pinned %d times, want 1", n)
	}
	_, err = cl.AddArtifact(ctx, api.ArtifactAddRequest{Path: otherPath})
	if err == nil || !strings.Contains(err.Error(), "in use (pinned)") {
		t.Fatalf("adding past the budget while the input is pinned: %v, want a full-store error", err)
	}
	pins()
	if _, err := cl.CancelJob(ctx, v.Job.ID); err != nil {
		t.Fatal(err)
	}
	if n := pins(); n != 0 {
		t.Fatalf("cancelled job's input still pinned %d times", n)
	}
	if _, err := cl.AddArtifact(ctx, api.ArtifactAddRequest{Path: otherPath}); err != nil {
		t.Fatalf("adding once the job is over: %v", err)
	}
	if _, err := st.Info(in.ID); err == nil {
		t.Fatal("the unpinned input was not evicted for the new artifact")
	}

	// Running: pinned until the job ends.
	if in2, err := cl.AddArtifact(ctx, api.ArtifactAddRequest{Path: inputPath}); err != nil || in2.ID != in.ID {
		t.Fatalf("re-add: %+v %v", in2, err)
	}
	job = readsInput(in.ID)
	job.Run.Command = []string{"sh", "-c", `sha256sum "$GPUMESH_INPUTS/data" >/dev/null && sleep 5`}
	v = post(t, renter, job)
	if !leased(v) {
		t.Fatalf("not leased: %v", v.Reasons)
	}
	waitJob(t, renter, v.Job.ID, 30*time.Second, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning || v.Run.Terminal() })
	if n := pinsBecome(1); n != 1 {
		t.Fatalf("running job's input pinned %d times, want 1", n)
	}
	v = waitJob(t, renter, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.State == terms.JobFinished })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("job %s: %s", v.Run, v.Detail)
	}
	if n := pinsBecome(0); n != 0 {
		t.Fatalf("finished job's input still pinned %d times", n)
	}
}

// TestImageArtifactJobThroughAuction (acceptance 2): an image made on the
// renter (docker import of a one-binary rootfs) and added with artifact
// add --image runs as a GPU job's image through a full auction, on a
// provider with declared GPUs whose engine lacks the image: the provider
// fetches the artifact under its lease, loads it and runs it.
func TestImageArtifactJobThroughAuction(t *testing.T) {
	ref := helperImage(t)
	pc := fastConfig(providerConfig("eu-west", 1.0, a100))
	pc.Provider.Executor = "auto"
	boot, ns := startNet(t, pc)
	prov := ns[0]
	waitAdvertised(t, boot, prov)
	if c := prov.Advertised(); c == nil || c.Containers != terms.ContainersGPU {
		t.Fatalf("provider with declared GPUs advertises containers %q, want %q", c.Containers, terms.ContainersGPU)
	}
	cl := api.NewClient(boot.dir)
	in, err := cl.AddArtifact(context.Background(), api.ArtifactAddRequest{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	// The engine (shared by both daemons on this host) forgets the image:
	// only the artifact has it now.
	if out, err := exec.Command("docker", "rmi", ref).CombinedOutput(); err != nil {
		t.Fatalf("docker rmi: %v: %s", err, out)
	}
	job := shJob(terms.Silver, 3, "")
	job.Run = terms.RunSpec{Image: ref, ImageArtifact: in.ID, Command: []string{"/jobhelper", "echo", "ran", "from", "the", "artifact"}}
	v := post(t, boot, job)
	if !leased(v) || v.Winner != prov.ID().String() {
		t.Fatalf("not leased to the provider: %s %v", v.State, v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 90*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if got := jobLog(t, boot, v.Job.ID); v.Run != terms.RunSucceeded || got != "ran from the artifact" {
		t.Fatalf("image job %s: %s, log %q", v.Run, v.Detail, got)
	}
	waitChange(t, 10*time.Second, "the image artifact unpinned after the job", func() bool {
		info, err := prov.artifacts.Store().Info(in.ID)
		if err != nil || !info.Complete {
			t.Fatalf("provider's copy of the image artifact: %+v %v", info, err)
		}
		return info.Pins == 0
	}, prov.artifacts.Store().Changed)
	if n := prov.artifacts.Counters()["artifact.fetched"]; n != 1 {
		t.Fatalf("provider fetched %d artifacts, want the image", n)
	}
	// Loaded without a name: removed by ID.
	prov.imageIDs.Range(func(_, id any) bool {
		_ = exec.Command("docker", "rmi", "-f", id.(string)).Run()
		return true
	})
}

// importImage makes a single-file image named ref from content, or skips
// without Docker.
func importImage(t *testing.T, ref, file, content string) string {
	t.Helper()
	if !runtime.DockerAvailable(runtime.DefaultDockerSocket) {
		t.Skip("needs a Docker Engine: none reachable on " + runtime.DefaultDockerSocket)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	imp := exec.Command("docker", "import", "-", ref)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
	return imageID(t, ref)
}

func imageID(t *testing.T, ref string) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", ref).CombinedOutput()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v: %s", ref, err, out)
	}
	return strings.TrimSpace(string(out))
}

// tagTarball rewrites a `docker save` tarball so that its image carries
// exactly the tags (manifest.json and repositories), as a hostile renter
// can make it.
func tagTarball(t *testing.T, in []byte, tags ...string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(in))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "manifest.json":
			var m []map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m[0]["RepoTags"] = tags
			b, _ = json.Marshal(m)
		case "repositories":
			var r map[string]map[string]string
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			var layer string
			for _, tags := range r {
				for _, l := range tags {
					layer = l
				}
			}
			r = map[string]map[string]string{}
			for _, e := range tags {
				i := strings.LastIndexByte(e, ':')
				r[e[:i]] = map[string]string{e[i+1:]: layer}
			}
			b, _ = json.Marshal(r)
		}
		h.Size = int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestImageArtifactCannotRetagAnotherImage (issue 22): a renter's image
// artifact whose tarball also tags another tenant's image (victim:latest)
// is refused and the victim's image keeps its name; a job whose image
// names the victim's, with its own artifact, runs its own image by ID and
// leaves the victim's name alone.
func TestImageArtifactCannotRetagAnotherImage(t *testing.T) {
	var sfx [4]byte
	_, _ = rand.Read(sfx[:])
	tag := hex.EncodeToString(sfx[:])
	victim := "gpumesh-victim-" + tag + ":latest"
	attacker := "gpumesh-attacker-" + tag + ":1"
	victimID := importImage(t, victim, "who", "victim")
	importImage(t, attacker, "who", "attacker")
	saved, err := exec.Command("docker", "save", attacker).Output()
	if err != nil {
		t.Fatalf("docker save: %v", err)
	}
	if out, err := exec.Command("docker", "rmi", attacker).CombinedOutput(); err != nil {
		t.Fatalf("docker rmi: %v: %s", err, out)
	}

	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	prov := ns[0]
	cl := api.NewClient(boot.dir)
	add := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// A tarball added as a file: public, since a private file is
		// sealed and an image artifact never is.
		in, err := cl.AddArtifact(context.Background(), api.ArtifactAddRequest{Path: p, Public: true})
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prepare := func(image, art string) (string, error) {
		job := terms.Job{ID: "retag-job", Owner: boot.ID().String(), OwnerAddrs: boot.Addrs(),
			Run: terms.RunSpec{Image: image, ImageArtifact: art, Command: []string{"/who"}}}
		release, id, err := prov.jobArts.Inputs(ctx, job, filepath.Join(t.TempDir(), "inputs"), nil)
		if err == nil {
			release()
		}
		return id, err
	}

	hostile := add("hostile.tar", tagTarball(t, saved, attacker, victim))
	if _, err := prepare(attacker, hostile); err == nil || !strings.Contains(err.Error(), victim) || strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("artifact tagging %s besides the job's image: %v", victim, err)
	}
	if got := imageID(t, victim); got != victimID {
		t.Fatalf("%s now names %s, was %s: another tenant's artifact replaced it", victim, got, victimID)
	}
	if out, err := exec.Command("docker", "image", "inspect", attacker).CombinedOutput(); err == nil {
		t.Fatalf("the refused artifact was loaded: %s", out)
	}

	// The same image, its tarball naming the victim's image only, posted
	// as a job that names the victim's image: loaded without names and
	// run by ID; the victim's name stays where it was.
	own := add("own.tar", tagTarball(t, saved, victim))
	id, err := prepare(victim, own)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", id).Run() })
	if id == victimID || !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("job runs %q; the victim's image is %s", id, victimID)
	}
	if got := imageID(t, victim); got != victimID {
		t.Fatalf("%s now names %s, was %s: loading a same-named artifact moved the tag", victim, got, victimID)
	}
}
