package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestBenchJobReadsLargeDataset is the 1 GiB acceptance run, as a
// benchmark: set GPUMESH_BENCH_DATASET_BYTES (e.g. 1073741824) to run it.
// A dataset added on the renter is read by a job on one provider (fetched
// from the renter), then by a job on a second provider (fetched from the
// renter and the first provider); it logs each run's time and throughput.
//
//	GPUMESH_BENCH_DATASET_BYTES=1073741824 go test -run BenchJobReads -v ./node/
func TestBenchJobReadsLargeDataset(t *testing.T) {
	size, _ := strconv.Atoi(os.Getenv("GPUMESH_BENCH_DATASET_BYTES"))
	if size <= 0 {
		t.Skip("set GPUMESH_BENCH_DATASET_BYTES to run the large dataset benchmark")
	}
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)), fastConfig(providerConfig("eu-west", 1.0, h100)))
	p1, p2 := ns[0], ns[1]
	waitAdvertised(t, boot, p1, p2)

	src := filepath.Join(t.TempDir(), "dataset.bin")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, int64(size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := hex.EncodeToString(h.Sum(nil))
	t0 := time.Now()
	in, err := api.NewClient(boot.dir).AddArtifact(context.Background(), api.ArtifactAddRequest{Path: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("add %d MiB: %v (%.0f MB/s)", size>>20, time.Since(t0).Round(time.Millisecond), float64(size)/1e6/time.Since(t0).Seconds())
	for i, c := range []struct {
		model string
		prov  *testNode
	}{{"A100", p1}, {"H100", p2}} {
		job := readsInput(in.ID)
		job.GPUModels = []string{c.model}
		job.Duration = time.Hour
		t0 := time.Now()
		v := post(t, boot, job)
		if !leased(v) || v.Winner != c.prov.ID().String() {
			t.Fatalf("job %d: winner %s: %v", i+1, v.Winner, v.Reasons)
		}
		// The post returns once the lease is confirmed: the provider is
		// fetching from then until its copy is complete.
		awarded := time.Now()
		st := c.prov.artifacts.Store()
		waitChange(t, 10*time.Minute, "job "+strconv.Itoa(i+1)+": the provider completes the fetch", func() bool {
			info, err := st.Info(in.ID)
			return err == nil && info.Complete
		}, st.Changed)
		fetch := time.Since(awarded)
		v = waitJob(t, boot, v.Job.ID, 10*time.Minute, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
		total := time.Since(t0)
		if v.Run != terms.RunSucceeded || jobLog(t, boot, v.Job.ID) != want {
			t.Fatalf("job %d: %s %s", i+1, v.Run, v.Detail)
		}
		t.Logf("job %d on %s: post→end %v (auction, fetch, export, sha256sum); award→fetched %v: %.0f MB/s; counters %v",
			i+1, c.model, total.Round(time.Millisecond), fetch.Round(time.Millisecond), float64(size)/1e6/fetch.Seconds(), c.prov.artifacts.Counters())
		if i == 0 {
			waitHolder(t, p2.Daemon, in.ID, p1.ID())
		}
	}
	t.Logf("served: renter %d bytes, first provider %d bytes",
		boot.artifacts.Counters()["artifact.served_bytes"], p1.artifacts.Counters()["artifact.served_bytes"])
}
