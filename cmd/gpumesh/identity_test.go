package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/config"
)

func startDaemonIn(t *testing.T, dir string) *node.Daemon {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	d, err := node.Start(context.Background(), node.Options{DataDir: dir, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestIdentityRotate: `identity rotate` refuses a running daemon's data
// dir (and one with no key) in one line; on a stopped one it hands the
// identity over to a new key, keeping the old one 0600; the daemon then
// runs under the new key and `ledger verify` passes across two rotations,
// `ledger list --kind succession` showing each.
func TestIdentityRotate(t *testing.T) {
	oneLineError(t, "no identity key", "-d", t.TempDir(), "identity", "rotate")
	dir := t.TempDir()
	d := startDaemonIn(t, dir)
	first := d.ID().String()
	oneLineError(t, "already running", "-d", dir, "identity", "rotate")
	oneLineError(t, "unexpected argument", "-d", dir, "identity", "rotate", "now")
	d.Close()

	code, out, errOut := runCLI(t, "-d", dir, "identity", "rotate", "--json")
	if code != 0 {
		t.Fatalf("rotate: %d %s", code, errOut)
	}
	var r rotation
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Old != first || r.New == "" || r.New == first {
		t.Fatalf("rotate --json: %q (%v)", out, err)
	}
	if fi, err := os.Stat(r.OldKey); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("old key %s: %v %v, want kept 0600", r.OldKey, fi, err)
	}

	d = startDaemonIn(t, dir)
	if d.ID().String() != r.New {
		t.Fatalf("daemon runs as %s after rotating to %s", d.ID(), r.New)
	}
	d.Close()
	code, out, errOut = runCLI(t, "-d", dir, "identity", "rotate")
	if code != 0 || !strings.Contains(out, "old identity: "+r.New) || !strings.Contains(out, "old key kept: ") {
		t.Fatalf("second rotate: %d %q %q", code, out, errOut)
	}
	d = startDaemonIn(t, dir)
	defer d.Close()
	code, out, errOut = runCLI(t, "-d", dir, "ledger", "verify")
	if code != 0 || !strings.Contains(out, "ledger ok: 2 entries") {
		t.Fatalf("ledger verify across two rotations: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "-d", dir, "ledger", "list", "--kind", "succession")
	if code != 0 || !strings.Contains(out, first) || !strings.Contains(out, r.New) || !strings.Contains(out, "2 entry(ies)") {
		t.Fatalf("ledger list --kind succession: %q", out)
	}
}
