package runtime

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

const testImage = "gpumesh-test-job:latest"

var (
	imageOnce sync.Once
	imageErr  error
)

// dockerExecutor returns a Docker backend with the jobhelper image imported
// (FROM scratch: just the static helper at /jobhelper), or skips.
func dockerExecutor(t *testing.T) *DockerExecutor {
	t.Helper()
	return dockerExecutorWith(t, DockerOptions{})
}

// dockerExecutorWith is dockerExecutor with opts (Root and Grace are the
// test's).
func dockerExecutorWith(t *testing.T, opts DockerOptions) *DockerExecutor {
	t.Helper()
	if !DockerAvailable(DefaultDockerSocket) {
		t.Skip("Docker Engine not reachable on " + DefaultDockerSocket)
	}
	imageOnce.Do(func() { imageErr = importHelperImage() })
	if imageErr != nil {
		t.Fatalf("import test image: %v", imageErr)
	}
	opts.Root, opts.Grace = filepath.Join(t.TempDir(), "jobs"), 300*time.Millisecond
	e, err := NewDockerExecutor(DefaultDockerSocket, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func importHelperImage() error {
	bin, err := os.ReadFile(helperBin)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "jobhelper", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cmd := exec.Command("docker", "import", "-", testImage)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %v: %s", err, out)
	}
	return nil
}

func TestDemux(t *testing.T) {
	frame := func(kind byte, s string) []byte {
		h := make([]byte, 8, 8+len(s))
		h[0] = kind
		binary.BigEndian.PutUint32(h[4:], uint32(len(s)))
		return append(h, s...)
	}
	var in bytes.Buffer
	in.Write(frame(1, "out1 "))
	in.Write(frame(2, "err1"))
	in.Write(frame(1, "out2"))
	in.Write(frame(1, ""))
	var out, errb bytes.Buffer
	if err := demux(&in, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if out.String() != "out1 out2" || errb.String() != "err1" {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
	// Truncated payload and unknown stream types are errors.
	trunc := frame(1, "hello")
	if err := demux(bytes.NewReader(trunc[:10]), &out, &errb); err == nil {
		t.Fatal("truncated frame accepted")
	}
	if err := demux(bytes.NewReader(frame(9, "x")), &out, &errb); err == nil {
		t.Fatal("unknown stream type accepted")
	}
}

func TestDockerAvailableBadSocket(t *testing.T) {
	if DockerAvailable(filepath.Join(t.TempDir(), "nope.sock")) {
		t.Fatal("a missing socket reported available")
	}
	if _, err := NewDockerExecutor(filepath.Join(t.TempDir(), "nope.sock"), DockerOptions{Root: t.TempDir()}); err == nil {
		t.Fatal("NewDockerExecutor on a missing socket succeeded")
	}
}

func TestDockerEndToEnd(t *testing.T) {
	e := dockerExecutor(t)
	t.Setenv("GPUMESH_TEST_SECRET", "hunter2")

	res, out, errOut, _ := run(t, e, Spec{ID: "d-echo", Image: testImage, Command: []string{"/jobhelper", "echo", "hello", "container"}})
	if res.Err != nil || res.ExitCode != 0 || res.Reason != ReasonExited {
		t.Fatalf("echo: %+v", res)
	}
	if out != "hello container\n" || errOut != "" {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	res, _, _, _ = run(t, e, Spec{ID: "d-exit", Image: testImage, Command: []string{"/jobhelper", "exit", "7"}})
	if res.ExitCode != 7 || res.Err != nil {
		t.Fatalf("exit: %+v", res)
	}
	res, _, errOut, _ = run(t, e, Spec{ID: "d-stderr", Image: testImage, Command: []string{"/jobhelper", "stderr", "oops"}})
	if res.ExitCode != 0 || errOut != "oops\n" {
		t.Fatalf("stderr: %+v %q", res, errOut)
	}

	res, out, _, _ = run(t, e, Spec{ID: "d-env", JobID: "job-d-env", Image: testImage, Command: []string{"/jobhelper", "env"}, Env: map[string]string{"FOO": "bar"}})
	if res.ExitCode != 0 {
		t.Fatalf("env: %+v", res)
	}
	for _, want := range []string{"FOO=bar", "HOME=/work", "GPUMESH_JOB_ID=job-d-env", "GPUMESH_OUTPUTS=/work/outputs", "GPUMESH_CHECKPOINT_DIR=/work/checkpoint", "CUDA_VISIBLE_DEVICES="} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("container env lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Fatalf("daemon env leaked into the container:\n%s", out)
	}
	// A job on an MPS slice gets the slice's limits in its container too.
	mps := SliceMPS(terms.GPU{Model: "L4", VRAMGB: 24, Detected: true, Isolation: terms.IsolationMPS}, 0.25)
	res, out, _, _ = run(t, e, Spec{ID: "d-mps", Image: testImage, Command: []string{"/jobhelper", "env"}, MPS: mps})
	for _, want := range []string{EnvMPSMemLimit + "=0=6144M", EnvMPSThreads + "=25"} {
		if res.ExitCode != 0 || !strings.Contains(out, want+"\n") {
			t.Errorf("slice container env lacks %s: %+v\n%s", want, res, out)
		}
	}

	// No network: only the loopback interface.
	res, out, _, _ = run(t, e, Spec{ID: "d-net", Image: testImage, Command: []string{"/jobhelper", "cat", "/proc/net/dev"}})
	if res.ExitCode != 0 || !strings.Contains(out, "lo:") || strings.Count(out, ":") != 1 {
		t.Fatalf("network interfaces: %+v\n%s", res, out)
	}

	// Outputs land in the bind-mounted work dir and can be collected.
	res, out, _, h := run(t, e, Spec{ID: "d-out", Image: testImage, Command: []string{"/jobhelper", "write", "/work/outputs/sub/result.txt", "42"}})
	if res.ExitCode != 0 {
		t.Fatalf("write: %+v %q", res, out)
	}
	files, err := CollectOutputs(h.WorkDir(), "outputs", t.TempDir(), 1<<20)
	if err != nil || len(files) != 1 || files[0].Path != "sub/result.txt" || files[0].Size != 2 {
		t.Fatalf("collected %+v, %v", files, err)
	}
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.WorkDir()); !os.IsNotExist(err) {
		t.Fatalf("work dir survived cleanup: %v", err)
	}
	// The container is removed once the job has ended.
	dh := h.(*dockerHandle)
	if err := e.c.do(context.Background(), "GET", "/containers/"+dh.id+"/json", nil, nil); !isDockerStatus(err, 404) {
		t.Fatalf("container still exists after the job: %v", err)
	}

	// A missing image whose registry cannot be reached (a closed loopback
	// port: tests never make the engine reach outside) fails the start.
	if _, err := e.Start(context.Background(), Spec{ID: "d-noimg", Image: "127.0.0.1:1/gpumesh-no-such-image:latest", Command: []string{"/x"}}, nil, nil); err == nil || !strings.Contains(err.Error(), "is not on this host and could not be pulled") {
		t.Fatalf("missing image: %v", err)
	}
}

func TestDockerStopAndDeadline(t *testing.T) {
	e := dockerExecutor(t)
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "d-trap", Image: testImage, Command: []string{"/jobhelper", "trap", "/work/ckpt"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	out.waitFor(t, "ready", 20*time.Second)
	if err := h.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	res := h.Wait()
	if res.Reason != ReasonStopped || res.ExitCode != 0 || res.Killed {
		t.Fatalf("trap: %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(h.WorkDir(), "ckpt")); err != nil || string(b) != "checkpoint" {
		t.Fatalf("checkpoint %q %v", b, err)
	}

	var out2 syncBuffer
	h2, err := e.Start(context.Background(), Spec{ID: "d-ignore", Image: testImage, Command: []string{"/jobhelper", "ignore"}}, &out2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Cleanup()
	out2.waitFor(t, "ready", 20*time.Second)
	if err := h2.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if res := h2.Wait(); res.Reason != ReasonStopped || !res.Killed || res.ExitCode != 137 {
		t.Fatalf("ignore: %+v", res)
	}

	res, _, _, _ = run(t, e, Spec{ID: "d-deadline", Image: testImage, Command: []string{"/jobhelper", "sleep", "1h"}, Deadline: time.Now().Add(1500 * time.Millisecond)})
	if res.Reason != ReasonDeadline {
		t.Fatalf("deadline: %+v", res)
	}
}

func TestDockerMemoryLimit(t *testing.T) {
	e := dockerExecutor(t)
	res, _, _, _ := run(t, e, Spec{ID: "d-mem", Image: testImage, Command: []string{"/jobhelper", "alloc", "400"}, MemoryMB: 64})
	if res.Reason != ReasonOOM || !res.Killed || res.ExitCode != 137 {
		t.Fatalf("over limit: %+v", res)
	}
}

// A container gets the executor's memory cap, by default half the host's
// RAM, as a process job does: a job's memory_mb lowers it, never lifts it,
// and a clamped job is told in its log (issue 22).
func TestDockerMemoryCap(t *testing.T) {
	limit := func(t *testing.T, e *DockerExecutor, id string, mb int) (int64, string) {
		t.Helper()
		var errOut syncBuffer
		h, err := e.Start(context.Background(), Spec{ID: id, Image: testImage, Command: []string{"/jobhelper", "sleep", "1h"}, MemoryMB: mb}, nil, &errOut)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = h.Stop(0); h.Wait(); _ = h.Cleanup() }()
		var info struct {
			HostConfig struct{ Memory, MemorySwap int64 }
		}
		if err := e.c.do(context.Background(), "GET", "/containers/"+h.(*dockerHandle).id+"/json", nil, &info); err != nil {
			t.Fatal(err)
		}
		if info.HostConfig.MemorySwap != info.HostConfig.Memory {
			t.Errorf("%s: swap limit %d, memory %d: swap would lift the cap", id, info.HostConfig.MemorySwap, info.HostConfig.Memory)
		}
		return info.HostConfig.Memory, errOut.String()
	}
	byDefault := dockerExecutor(t)
	host := hostMemoryMB()
	if host <= 0 {
		t.Skip("the host's memory is unknown")
	}
	if got, _ := limit(t, byDefault, "d-cap-default", 0); got != int64(host/2)<<20 {
		t.Fatalf("a job asking for no memory limit got %d bytes, want half the host's %d MiB", got, host)
	}
	e := dockerExecutorWith(t, DockerOptions{MemoryMB: 64})
	got, note := limit(t, e, "d-cap-lift", 1024)
	if got != 64<<20 || !strings.Contains(note, "gpumesh: memory_mb 1024 is over this provider's cap of 64 MiB per job; the job is limited to 64 MiB") {
		t.Fatalf("memory_mb 1024 on a 64 MiB cap: %d bytes, log %q", got, note)
	}
	e2 := dockerExecutorWith(t, DockerOptions{MemoryMB: 512})
	if got, note := limit(t, e2, "d-cap-lower", 64); got != 64<<20 || note != "" {
		t.Fatalf("memory_mb 64 under a 512 MiB cap: %d bytes, log %q", got, note)
	}
	none := dockerExecutorWith(t, DockerOptions{MemoryMB: -1})
	if got, _ := limit(t, none, "d-cap-none", 0); got != 0 {
		t.Fatalf("no cap and no request: %d bytes", got)
	}
}

func TestAutoDispatch(t *testing.T) {
	a, err := Auto(filepath.Join(traversableTempDir(t), "jobs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Backend(Spec{Command: []string{"true"}}); got != "process" {
		t.Fatalf("no image: backend %s", got)
	}
	want := "process"
	if DockerAvailable(DefaultDockerSocket) {
		want = "docker"
	}
	if got := a.Backend(Spec{Image: testImage}); got != want {
		t.Fatalf("image: backend %s, want %s", got, want)
	}
	res, out, _, _ := run(t, a, Spec{ID: "auto-proc", Command: []string{helperBin, "echo", "via", "process"}})
	if res.ExitCode != 0 || out != "via process\n" {
		t.Fatalf("%+v %q", res, out)
	}
}

func TestDockerRemoveOrphans(t *testing.T) {
	e := dockerExecutor(t)
	ctx := context.Background()
	// Containers a crashed daemon left behind: created, never removed.
	ids := map[string]string{}
	for _, job := range []string{"orphan-" + uniqueMarker(t), "kept-" + uniqueMarker(t)} {
		var created struct{ Id string }
		body := map[string]any{"Image": testImage, "Cmd": []string{"/jobhelper", "sleep", "1h"}, "Labels": map[string]string{"io.gpumesh.job": job}, "HostConfig": map[string]any{"NetworkMode": "none"}}
		if err := e.c.do(ctx, "POST", "/containers/create", body, &created); err != nil {
			t.Fatal(err)
		}
		ids[job] = created.Id
		t.Cleanup(func() { _ = e.c.do(ctx, "DELETE", "/containers/"+created.Id+"?force=1", nil, nil) })
	}
	n, err := e.RemoveOrphans(ctx, func(id string) bool { return !strings.HasPrefix(id, "orphan-") })
	if err != nil || n != 1 {
		t.Fatalf("removed %d, %v", n, err)
	}
	for job, cid := range ids {
		err := e.c.do(ctx, "GET", "/containers/"+cid+"/json", nil, nil)
		if strings.HasPrefix(job, "orphan-") != isDockerStatus(err, 404) {
			t.Fatalf("%s: inspect after removal: %v", job, err)
		}
	}
}
