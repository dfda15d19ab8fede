package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
)

func startTestDaemon(t *testing.T, boot *node.Daemon) (*node.Daemon, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	if boot != nil {
		cfg.Bootstrap = boot.Addrs()
	}
	d, err := node.Start(context.Background(), node.Options{DataDir: dir, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dir
}

func TestArtifactCLI(t *testing.T) {
	a, adir := startTestDaemon(t, nil)
	b, bdir := startTestDaemon(t, a)
	data := make([]byte, 3<<20+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "weights.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCLI(t, "-d", adir, "artifact", "add", "--public", src)
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 64 {
		t.Fatalf("add: code %d out %q err %q", code, out, errOut)
	}
	dest := filepath.Join(t.TempDir(), "copy.bin")
	peers := func() []string {
		var out []string
		for _, p := range a.Addrs() {
			out = append(out, "--peer", p)
		}
		return out
	}
	args := append(append([]string{"-d", bdir, "artifact", "get"}, peers()...), id, dest)
	code, out, errOut = runCLI(t, args...)
	if code != 0 || !strings.Contains(out, "written to "+dest) || !strings.Contains(errOut, "100%") {
		t.Fatalf("get: code %d out %q err %q", code, out, errOut)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, data) {
		t.Fatal("fetched file differs")
	}
	code, out, _ = runCLI(t, "-d", bdir, "artifact", "ls", "--json")
	var list []api.ArtifactInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != id || !list[0].Complete || list[0].Size != int64(len(data)) {
		t.Fatalf("ls: %q", out)
	}
	code, out, _ = runCLI(t, "-d", bdir, "artifact", "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "weights.bin") || !strings.Contains(out, "3.0 MiB") {
		t.Fatalf("ls text: %q", out)
	}
	if code, out, _ = runCLI(t, "-d", bdir, "artifact", "rm", id); code != 0 {
		t.Fatalf("rm: %q", out)
	}
	if code, out, _ = runCLI(t, "-d", bdir, "artifact", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("ls after rm: %q", out)
	}
	oneLineError(t, "no artifact", "-d", bdir, "artifact", "rm", id)
	oneLineError(t, "not an artifact id", "-d", bdir, "artifact", "rm", "xyz")
	oneLineError(t, "missing destination", "-d", bdir, "artifact", "get", id)

	// A private artifact is sealed: another artifact than the public one
	// of the same bytes, the same one when added again; it needs a lease
	// (a share would hand out ciphertext only, and is refused); its owner
	// gets it back opened.
	code, out, _ = runCLI(t, "-d", adir, "artifact", "add", "--json", src)
	var in api.ArtifactInfo
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || !in.Private || !in.Sealed || in.ID == id {
		t.Fatalf("add as private: %q (public id %s)", out, id)
	}
	if code, out, _ = runCLI(t, "-d", adir, "artifact", "add", "--sealed", src); code != 0 || strings.TrimSpace(out) != in.ID {
		t.Fatalf("re-add as private (--sealed, an alias): %q, want %s", out, in.ID)
	}
	oneLineError(t, "not --public", "-d", adir, "artifact", "add", "--sealed", "--public", src)
	args = append(append([]string{"-d", bdir, "artifact", "get"}, peers()...), in.ID, filepath.Join(t.TempDir(), "p"))
	oneLineError(t, "is private", args...)
	oneLineError(t, "is sealed", "-d", adir, "artifact", "share", in.ID, b.ID().String())
	mine := filepath.Join(t.TempDir(), "mine.bin")
	if code, out, errOut = runCLI(t, "-d", adir, "artifact", "get", in.ID, mine); code != 0 {
		t.Fatalf("owner's get: %q %q", out, errOut)
	}
	if got, _ := os.ReadFile(mine); !bytes.Equal(got, data) {
		t.Fatal("the owner's get of its sealed artifact is not the data")
	}
}

// TestArtifactWarmCLI: artifact warm sends the request to the named peer
// and reports its answer (a renter-only node refuses warm requests), as a
// table or --json, and exits non-zero when a provider was not warmed.
func TestArtifactWarmCLI(t *testing.T) {
	a, adir := startTestDaemon(t, nil)
	b, _ := startTestDaemon(t, a)
	src := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(src, []byte("warm me"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "-d", adir, "artifact", "add", src)
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 64 {
		t.Fatalf("add: code %d out %q err %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "-d", adir, "artifact", "warm", "--provider", b.Addrs()[0], id)
	if code == 0 || !strings.Contains(out, b.ID().String()) || !strings.Contains(out, "does not accept warm requests") || !strings.Contains(errOut, "1 of 1 provider(s) not warmed") {
		t.Fatalf("warm a renter-only node: code %d out %q err %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "-d", adir, "artifact", "warm", "--json", "--provider", b.ID().String(), id)
	var res api.ArtifactWarmResponse
	if code == 0 || json.Unmarshal([]byte(out), &res) != nil || res.ID != id || len(res.Results) != 1 || res.Results[0].Provider != b.ID().String() || res.Results[0].Error == "" {
		t.Fatalf("warm --json: code %d out %q", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--providers", "0", id}, "--providers must be at least 1"},
		{[]string{strings.Repeat("0", 64)}, "no artifact"},
		{[]string{"--provider", "nonsense", id}, "neither a peer id nor a multiaddr"},
		{nil, "missing artifact id"},
	} {
		code, _, errOut := runCLI(t, append([]string{"-d", adir, "artifact", "warm"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Fatalf("warm %v: code %d err %q, want %q", c.args, code, errOut, c.want)
		}
	}
}
