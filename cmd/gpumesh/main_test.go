package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/config"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"gpumesh"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// oneLineError asserts a non-zero exit with exactly one line on stderr
// containing want.
func oneLineError(t *testing.T, want string, args ...string) {
	t.Helper()
	code, _, stderr := runCLI(t, args...)
	if code == 0 {
		t.Fatalf("gpumesh %v exited 0, want an error", args)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "gpumesh: ") {
		t.Fatalf("gpumesh %v: stderr is not one error line:\n%s", args, stderr)
	}
	if !strings.Contains(lines[0], want) {
		t.Fatalf("gpumesh %v: error %q does not mention %q", args, lines[0], want)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCLIErrors(t *testing.T) {
	dir := t.TempDir()
	emptyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(emptyDir, "config.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		want string
		args []string
	}{
		{"no daemon", "daemon is not running", []string{"-d", dir, "status"}},
		{"no daemon providers", "daemon is not running", []string{"-d", dir, "providers", "--gpu", "H100"}},
		{"unknown flag", "flag provided but not defined: -frobnicate", []string{"-d", dir, "status", "--frobnicate"}},
		{"unknown global flag", "flag provided but not defined", []string{"--nope", "status"}},
		{"unknown command", "unknown command", []string{"-d", dir, "frobnicate"}},
		{"bad int", "invalid value", []string{"-d", dir, "providers", "--min-vram", "lots"}},
		{"negative vram", "invalid --min-vram: must be >= 0, got -4", []string{"-d", dir, "providers", "--min-vram", "-4"}},
		{"negative count", "invalid --count: must be >= 0, got -1", []string{"-d", dir, "providers", "--count", "-1"}},
		{"stray arg", "unexpected argument", []string{"-d", dir, "status", "extra"}},
		{"missing config", "no such file", []string{"-d", dir, "daemon", "--config", filepath.Join(dir, "absent.yaml")}},
		{"unknown config key", "unknown config key 'provider.pricefloor' (line 2); did you mean 'provider.policy.price_floor'?", []string{"-d", dir, "daemon", "--config", writeConfig(t, "provider:\n  pricefloor: 1\n")}},
		{"misspelt config key", "unknown config key 'lisen' (line 2); did you mean 'listen'?", []string{"-d", dir, "daemon", "--config", writeConfig(t, "region: eu-west\nlisen: [/ip4/127.0.0.1/tcp/0]\n")}},
		{"bad yaml", "config", []string{"-d", dir, "daemon", "--config", writeConfig(t, "listen: [unclosed\n")}},
		{"empty config", "is empty: add settings (`gpumesh provider init` writes a provider's) or remove the file", []string{"-d", dir, "daemon", "--config", writeConfig(t, "")}},
		{"comments-only config", "is empty", []string{"-d", dir, "daemon", "--config", writeConfig(t, "# listen: []\n\n# provider:\n")}},
		{"empty config in the data dir", filepath.Join(emptyDir, "config.yaml") + " is empty", []string{"-d", emptyDir, "daemon"}},
		{"bad gpu", "vram_gb must be > 0", []string{"-d", dir, "daemon", "--config", writeConfig(t, "provider:\n  enabled: true\n  gpus: [{model: H100}]\n")}},
		{"negative artifact budget", "artifact_budget_gb must not be negative", []string{"-d", dir, "daemon", "--config", writeConfig(t, "artifact_budget_gb: -1\n")}},
		{"max bidders below -1", "max_bidders must be 1..1024", []string{"-d", dir, "daemon", "--config", writeConfig(t, "max_bidders: -2\n")}},
		{"bad log level", "log_level", []string{"-d", dir, "daemon", "--log-level", "loud"}},
		{"bad listen", "listen address", []string{"-d", dir, "daemon", "--listen", "not-a-multiaddr"}},
		{"bad bootstrap", "bootstrap address", []string{"-d", dir, "daemon", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", "/ip4/127.0.0.1/tcp/1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { oneLineError(t, c.want, c.args...) })
	}
}

func TestCLISecondDaemon(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	d, err := node.Start(context.Background(), node.Options{DataDir: dir, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	oneLineError(t, "already running", "-d", dir, "daemon", "--listen", "/ip4/127.0.0.1/tcp/0")

	// The running daemon still serves the CLI.
	code, out, errOut := runCLI(t, "-d", dir, "status", "--json")
	if code != 0 || !strings.Contains(out, d.ID().String()) {
		t.Fatalf("status after refused second daemon: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "-d", dir, "status")
	if code != 0 || !strings.Contains(out, "peer id:") || !strings.Contains(out, "role:      renter") {
		t.Fatalf("status text: %q", out)
	}
}
