package node

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

// markerScript writes a random marker (32 hex digits of its own making,
// so that no spec or record holds it) into its log, its outputs and its
// checkpoint dir, then waits to be stopped.
const markerScript = `m=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
echo "marker=$m"
echo "$m" > "$GPUMESH_OUTPUTS/result.txt"
echo "$m" > "$GPUMESH_CHECKPOINT_DIR/state"
while :; do sleep 0.2 & wait; done`

// leftovers lists the files under roots whose name holds one of ids or
// whose content holds marker.
func leftovers(t *testing.T, marker []byte, ids []string, roots ...string) []string {
	t.Helper()
	var found []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			for _, id := range ids {
				if strings.Contains(d.Name(), id) {
					found = append(found, p+" (named after "+id+")")
				}
			}
			if !d.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if bytes.Contains(b, marker) {
				found = append(found, p+" (holds the marker)")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("list %s: %v", root, err)
		}
	}
	return found
}

// TestNoPersistLeavesNothingOnProvider (issue 27, item 2): a no-persist
// job writes a random marker into its log, its outputs and a checkpoint;
// once its lease is settled, nothing under the provider's data dir (its
// job files and artifact store included) or its work root is named after
// the job or holds a byte of the marker, while the renter has the log and
// outputs (and the checkpoint), served by its own daemon. It runs with a
// public input (a plain job) and with a private one (a sealed job, whose
// checkpoint and outputs are sealed to the renter: the strongest privacy
// mode).
func TestNoPersistLeavesNothingOnProvider(t *testing.T) {
	t.Parallel()
	t.Run("public input", func(t *testing.T) { testNoPersistLeavesNothing(t, false) })
	t.Run("private input", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("a sealed job's provider mounts a tmpfs: needs root")
		}
		testNoPersistLeavesNothing(t, true)
	})
}

func testNoPersistLeavesNothing(t *testing.T, private bool) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	cfg := fastConfig(providerConfig("eu-west", 0.5, h100))
	cfg.Provider.Policy.NoPersist = terms.NoPersistOffer
	prov := startWith(t, filepath.Join(root, "prov"), cfg, renter.Daemon, Options{})
	waitAdvertised(t, renter, prov)

	// The job's input: an artifact of the renter's, with a marker of its
	// own.
	inputMarker := []byte(terms.NewID("input"))
	src := filepath.Join(root, "input.txt")
	if err := os.WriteFile(src, inputMarker, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := api.NewClient(renter.dir).AddArtifact(context.Background(), api.ArtifactAddRequest{Path: src, Public: !private})
	if err != nil {
		t.Fatal(err)
	}
	if in.Sealed != private {
		t.Fatalf("added %+v: sealed %v, want %v", in, in.Sealed, private)
	}
	input := in.ID
	j := shJob(terms.Silver, 2, `cat "$GPUMESH_INPUTS/data" >/dev/null && `+markerScript)
	j.NoPersist, j.Run.Outputs, j.CheckpointEvery = true, "out", time.Second
	j.Run.Inputs = map[string]string{"data": input}
	v := post(t, renter, j)
	if !leased(v) || v.Winner != prov.ID().String() {
		t.Fatalf("no-persist job not leased on the provider that offers it: %s %v", v.State, v.Reasons)
	}
	if v.Job.Sealed != private {
		t.Fatalf("job sealed %v, want %v", v.Job.Sealed, private)
	}
	lease, jobID := v.Lease.ID, v.Job.ID
	m := waitLog(t, prov, lease, regexp.MustCompile(`marker=([0-9a-f]{32})\n`), 30*time.Second)
	marker := []byte(m[1])
	waitJob(t, renter, jobID, 30*time.Second, "a checkpoint kept by the renter", func(v api.JobView) bool { return v.Checkpoint != nil })
	cl := api.NewClient(renter.dir)
	ctx := context.Background()
	if _, err := cl.CancelJob(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	v = waitJob(t, renter, jobID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	if v.Run != terms.RunCancelled || !v.Receipt.NoPersist || v.Kept == "" {
		t.Fatalf("run %s (%s), receipt no_persist %v, kept %q", v.Run, v.Detail, v.Receipt.NoPersist, v.Kept)
	}
	waitChange(t, 10*time.Second, "the provider purges the lease", func() bool {
		return prov.market.counters.Snapshot()["provider.no_persist_purged"] == 1
	}, prov.market.counters.Changed)

	work, err := prov.paths.WorkRoot("", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{lease, jobID, input, v.Checkpoint.Artifact}
	if private {
		if v.OutputsArtifact == "" {
			t.Fatal("a sealed job's final report names no sealed outputs artifact")
		}
		names = append(names, v.OutputsArtifact)
	}
	if left := leftovers(t, marker, names, prov.dir, work); len(left) > 0 {
		t.Fatalf("the provider kept files of the no-persist job:\n%s", strings.Join(left, "\n"))
	}
	if left := leftovers(t, inputMarker, nil, prov.dir, work); len(left) > 0 {
		t.Fatalf("the provider kept the no-persist job's input:\n%s", strings.Join(left, "\n"))
	}
	if in, err := renter.artifacts.Store().Info(v.Checkpoint.Artifact); err != nil || !in.Complete {
		t.Fatalf("the renter does not hold the job's checkpoint: %v", err)
	}

	// The renter has the log and the outputs, from its own copy.
	rc, err := cl.Logs(ctx, jobID, api.LogsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logText, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Contains(logText, []byte("marker="+m[1]+"\n")) {
		t.Fatalf("renter's log of the job lacks the marker:\n%s", logText)
	}
	manifest, body, err := cl.Outputs(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if terms.ManifestHash(manifest) != v.Receipt.ResultHash {
		t.Fatalf("outputs manifest %+v is not the receipt's", manifest)
	}
	dst := t.TempDir()
	if _, err := wire.ExtractBundle(body, manifest, dst, false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "result.txt")); err != nil || string(b) != m[1]+"\n" {
		t.Fatalf("renter's outputs: %q, %v", b, err)
	}
}
