package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/sys/unix"
)

// holdsAny scans every regular file under roots, streaming (a marker
// spanning two reads is found), and lists those holding any of markers.
func holdsAny(t *testing.T, markers [][]byte, roots ...string) []string {
	return scanFor(t, false, markers, roots...)
}

// diskHoldsAny is holdsAny for the files on a disk: it skips the tmpfs
// mounts under roots (a running sealed job's plaintext is there).
func diskHoldsAny(t *testing.T, markers [][]byte, roots ...string) []string {
	return scanFor(t, true, markers, roots...)
}

func onTmpfs(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

func scanFor(t *testing.T, skipTmpfs bool, markers [][]byte, roots ...string) []string {
	t.Helper()
	longest := 0
	for _, m := range markers {
		longest = max(longest, len(m))
	}
	var found []string
	buf := make([]byte, 1<<20+longest)
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if skipTmpfs && d.IsDir() && onTmpfs(p) {
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			defer f.Close()
			carry := 0
			for {
				n, rerr := f.Read(buf[carry:])
				window := buf[:carry+n]
				for i, m := range markers {
					if bytes.Contains(window, m) {
						found = append(found, p+" (holds marker "+string(rune('A'+i))+")")
						return nil
					}
				}
				if rerr == io.EOF {
					return nil
				}
				if rerr != nil {
					return rerr
				}
				carry = min(len(window), longest-1)
				copy(buf, window[len(window)-carry:])
			}
		})
		if err != nil {
			t.Fatalf("scan %s: %v", root, err)
		}
	}
	return found
}

// sealedScript finds the input's marker, derives a second one from it
// (the sha256 of the first, so that no spec, log or record holds it),
// writes both into its outputs and its checkpoint dir and waits to be
// stopped. It prints neither: the job's log is not sealed.
const sealedScript = `m=$(grep -ao 'SEALMARK[0-9a-f]\{32\}' "$GPUMESH_INPUTS/data" | head -n1)
[ -n "$m" ] || { echo "no marker in the input"; exit 3; }
m2=$(printf %s "$m" | sha256sum | cut -c1-64)
printf '%s %s\n' "$m" "$m2" > "$GPUMESH_OUTPUTS/result.txt"
printf '%s %s\n' "$m" "$m2" > "$GPUMESH_CHECKPOINT_DIR/state"
echo "wrote outputs and checkpoint"
while :; do sleep 0.2 & wait; done`

// TestSealedJobLeavesNoPlaintextOnProvider (issue 27, acceptance 1): a
// job reads a private (so sealed) 64 MiB input holding a random marker
// and writes a checkpoint and outputs holding it and a second marker.
// Once it ran, no file under the provider's data dir (its artifact store
// included) or work root holds either marker: the input's chunks there
// are ciphertext, its plaintext and the job's checkpoint and outputs
// lived on tmpfs only (its work dir too), and the checkpoint and outputs
// were sealed to the renter before they reached the provider's store.
// The renter gets both back intact. It runs on the process executor and
// on the Docker executor.
func TestSealedJobLeavesNoPlaintextOnProvider(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a sealed job's provider mounts a tmpfs: needs root")
	}
	t.Run("process", func(t *testing.T) { testSealedNoPlaintext(t, "") })
	t.Run("docker", func(t *testing.T) { testSealedNoPlaintext(t, helperImage(t)) })
}

// testSealedNoPlaintext runs the sealed job as a process job, or with
// image (helperImage's) as a container job.
func testSealedNoPlaintext(t *testing.T, image string) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	pc := fastConfig(providerConfig("eu-west", 0.5, h100))
	if image != "" {
		pc.Provider.Executor = "docker"
	}
	prov := startWith(t, filepath.Join(root, "prov"), pc, renter.Daemon, Options{})
	waitAdvertised(t, renter, prov)
	if c := prov.Advertised(); c == nil || !c.Policy.Sealed {
		t.Fatal("a provider running as root does not advertise that it runs sealed jobs")
	}

	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	marker := []byte("SEALMARK" + hex.EncodeToString(rnd[:]))
	sum := sha256.Sum256(marker)
	marker2 := []byte(hex.EncodeToString(sum[:]))
	data := make([]byte, 64<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	copy(data[37<<20+12345:], marker)
	src := filepath.Join(root, "data")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var add api.ArtifactInfo
	if err := api.NewClient(renter.dir).Do(context.Background(), "POST", "/artifacts", nil,
		api.ArtifactAddRequest{Path: src}, &add); err != nil {
		t.Fatal(err)
	}
	if !add.Sealed || !add.Private {
		t.Fatalf("added %+v", add)
	}
	if err := os.Remove(src); err != nil { // only the renter's store holds it now
		t.Fatal(err)
	}

	j := shJob(terms.Silver, 2, sealedScript)
	if image != "" {
		j.Run.Image, j.Run.Command = image, []string{"/jobhelper", "sealmark", "/inputs/data"}
	}
	j.Run.Outputs, j.CheckpointEvery = "out", time.Second
	j.Run.Inputs = map[string]string{"data": add.ID}
	v := post(t, renter, j)
	if !leased(v) || v.Winner != prov.ID().String() {
		t.Fatalf("job not leased: %s %v", v.State, v.Reasons)
	}
	if !v.Job.Sealed {
		t.Fatal("a job reading a sealed input is not sealed")
	}
	jobID, leaseID := v.Job.ID, v.Lease.ID
	waitLog(t, prov, leaseID, regexp.MustCompile(`wrote outputs and checkpoint\n`), 60*time.Second)
	v = waitJob(t, renter, jobID, 30*time.Second, "a checkpoint kept by the renter", func(v api.JobView) bool { return v.Checkpoint != nil })
	// The lease's keys go to its provider alone: a stranger asking for
	// them (its peer id is authenticated by the stream), a request for
	// another lease and a malformed one are refused.
	req, _ := json.Marshal(wire.LeaseKeysRequest{LeaseID: leaseID})
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := renter.jobArts.LeaseKeysHandler(renter.market.tracker.LeaseJob)(context.Background(), stranger, req); err == nil {
		t.Fatal("the lease's keys were handed to a peer that is not its provider")
	}
	other, _ := json.Marshal(wire.LeaseKeysRequest{LeaseID: "lease-" + leaseID})
	for _, bad := range [][]byte{other, []byte("{"), nil} {
		if _, err := renter.jobArts.LeaseKeysHandler(renter.market.tracker.LeaseJob)(context.Background(), prov.ID(), bad); err == nil {
			t.Fatalf("lease keys request %q answered", bad)
		}
	}
	if b, err := renter.jobArts.LeaseKeysHandler(renter.market.tracker.LeaseJob)(context.Background(), prov.ID(), req); err != nil || !bytes.Contains(b, []byte(add.ID)) {
		t.Fatalf("the lease's provider is refused its keys: %v", err)
	}
	work, err := prov.paths.WorkRoot("", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	// While it runs, its plaintext is on the provider's tmpfs mounts
	// (the lease's scratch and the job's work dir) and on no disk.
	if onTmpfs(prov.dir) || onTmpfs(work) {
		t.Log("the provider's dirs are on a tmpfs: the scan while the job runs is skipped")
	} else {
		if left := holdsAny(t, [][]byte{marker, marker2}, prov.dir, work); len(left) == 0 {
			t.Fatal("no file under the provider's dirs holds the running job's plaintext: the scan finds nothing")
		}
		if left := diskHoldsAny(t, [][]byte{marker, marker2}, prov.dir, work); len(left) > 0 {
			t.Fatalf("while the job runs, the provider's disk holds its plaintext:\n%s", strings.Join(left, "\n"))
		}
	}
	cl := api.NewClient(renter.dir)
	ctx := context.Background()
	if _, err := cl.CancelJob(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	v = waitJob(t, renter, jobID, 30*time.Second, "ended with its outputs", func(v api.JobView) bool {
		return v.Run.Terminal() && v.OutputsArtifact != ""
	})

	// The data dir holds the artifact store.
	if left := holdsAny(t, [][]byte{marker, marker2}, prov.dir, work); len(left) > 0 {
		t.Fatalf("the provider holds plaintext of the sealed job:\n%s", strings.Join(left, "\n"))
	}
	if in, err := prov.artifacts.Store().Info(add.ID); err != nil || !in.Complete {
		t.Fatalf("the provider does not hold the (sealed) input: %v", err)
	}

	// The renter opens both.
	want := string(marker) + " " + string(marker2) + "\n"
	st := renter.artifacts.Store()
	ck, ok := st.Key(v.Checkpoint.Artifact)
	if !ok {
		t.Fatal("the renter holds no key for its sealed checkpoint")
	}
	ckDir := filepath.Join(t.TempDir(), "ckpt")
	if err := st.Unseal(v.Checkpoint.Artifact, ckDir, artifact.Local, ck); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ckDir, "state")); err != nil || string(b) != want {
		t.Fatalf("checkpoint state %q, %v; want %q", b, err, want)
	}
	manifest, body, err := cl.Outputs(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	dst := t.TempDir()
	if _, err := wire.ExtractBundle(body, manifest, dst, false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "result.txt")); err != nil || string(b) != want {
		t.Fatalf("outputs %q, %v; want %q", b, err, want)
	}
}

// TestPostRefusesUnsealedPrivateInput: a job is refused at once, in one
// line, when it reads a plain private artifact (one added before private
// files were sealed: its bytes would lie on the provider's disk) or names
// a sealed artifact as its image; a job reading a sealed input is sealed
// whatever its spec says, and a public input leaves it as it was.
func TestPostRefusesUnsealedPrivateInput(t *testing.T) {
	renter := startWith(t, filepath.Join(t.TempDir(), "renter"), renterConfig(), nil, Options{})
	src := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(src, []byte("some data"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := renter.artifacts.Store()
	plain, err := st.Add(src, artifact.Meta{Private: true})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := st.AddPrivate(src)
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), "public")
	if err := os.WriteFile(pub, []byte("anyone's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	public, err := st.Add(pub, artifact.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	post := func(mut func(*terms.Job)) (terms.Job, error) {
		j := shJob(terms.Silver, 2, "true")
		mut(&j)
		err := renter.jobArts.InputSizes(&j)
		return j, err
	}
	for _, c := range []struct {
		name string
		mut  func(*terms.Job)
		want string
	}{
		{"plain private input", func(j *terms.Job) { j.Run.Inputs = map[string]string{"data": plain} }, "is private but not sealed"},
		{"sealed image artifact", func(j *terms.Job) { j.Run.Image, j.Run.ImageArtifact = "x:1", sealed }, "an image artifact cannot be"},
	} {
		if _, err := post(c.mut); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line saying %q", c.name, err, c.want)
		}
	}
	if j, err := post(func(j *terms.Job) { j.Run.Inputs = map[string]string{"data": sealed} }); err != nil || !j.Sealed {
		t.Fatalf("sealed input: sealed %v, %v", j.Sealed, err)
	}
	if j, err := post(func(j *terms.Job) { j.Run.Inputs = map[string]string{"data": public} }); err != nil || j.Sealed {
		t.Fatalf("public input: sealed %v, %v", j.Sealed, err)
	}
	// Through the API too: the refusal is the post's answer.
	j := shJob(terms.Silver, 2, "true")
	j.Run.Inputs = map[string]string{"data": plain}
	if _, err := api.NewClient(renter.dir).PostJob(context.Background(), j); err == nil || !strings.Contains(err.Error(), "is private but not sealed") {
		t.Fatalf("post through the API: %v", err)
	}
}
