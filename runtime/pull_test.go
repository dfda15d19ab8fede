package runtime

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startRegistry runs Debian's docker-registry on a free loopback port with
// its storage in a temp dir and returns its host:port. Docker trusts
// registries on 127.0.0.0/8 without TLS.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("docker-registry not installed (Debian package docker-registry; .ci/run installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("registry exited: %v: %s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry on %s never answered: %v %s", addr, err, stderr.String())
		}
	}
}

func docker(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestDockerPullsMissingImageFromLoopbackRegistry: an image that is not on
// the provider is pulled from its registry (a real one, on loopback) and
// the job runs in it, with the pull in the job's log.
func TestDockerPullsMissingImageFromLoopbackRegistry(t *testing.T) {
	e := dockerExecutor(t)
	reg := startRegistry(t)
	ref := reg + "/gpumesh/pull-test:" + fmt.Sprint(time.Now().UnixNano())
	docker(t, "tag", testImage, ref)
	docker(t, "push", ref)
	docker(t, "rmi", ref)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })

	started := time.Now()
	res, out, _, _ := run(t, e, Spec{ID: "d-pull", Image: ref, Command: []string{"/jobhelper", "echo", "pulled"}})
	if res.ExitCode != 0 || !strings.Contains(out, "pulled") {
		t.Fatalf("job in the pulled image: %+v, output %q", res, out)
	}
	if !strings.Contains(out, "gpumesh: pulling image "+ref) {
		t.Fatalf("no pull progress in the job's log: %q", out)
	}
	t.Logf("pull and run took %s", time.Since(started).Round(time.Millisecond))

	// An image no registry has fails the start with a clear error.
	_, err := e.Start(context.Background(), Spec{ID: "d-nopull", Image: reg + "/gpumesh/absent:1", Command: []string{"/jobhelper", "echo", "x"},
		Deadline: time.Now().Add(time.Minute)}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "could not be pulled") {
		t.Fatalf("absent image: %v", err)
	}
}

func TestSplitImageRef(t *testing.T) {
	for ref, want := range map[string][2]string{
		"pytorch":                        {"pytorch", "latest"},
		"pytorch:2.4":                    {"pytorch", "2.4"},
		"127.0.0.1:5000/team/trainer":    {"127.0.0.1:5000/team/trainer", "latest"},
		"127.0.0.1:5000/team/trainer:v1": {"127.0.0.1:5000/team/trainer", "v1"},
		"repo/img@sha256:abc":            {"repo/img@sha256:abc", ""},
	} {
		t.Run(ref, func(t *testing.T) {
			if n, tag := splitImageRef(ref); n != want[0] || tag != want[1] {
				t.Fatalf("splitImageRef(%q) = %q, %q; want %q, %q", ref, n, tag, want[0], want[1])
			}
		})
	}
}
