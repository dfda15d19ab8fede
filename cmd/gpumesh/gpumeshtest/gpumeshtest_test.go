package gpumeshtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryFromEnv: a set $GPUMESH_BIN is used as it is, and only when
// it names an executable file by its absolute path; nothing is built.
func TestBinaryFromEnv(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "gpumesh-prebuilt")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	t.Setenv(EnvBin, exe)
	if got, err := Binary(out); err != nil || got != exe {
		t.Fatalf("Binary with %s=%s: %q, %v", EnvBin, exe, got, err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("Binary built into %s although %s was set", out, EnvBin)
	}
	for _, bad := range []struct{ path, why string }{
		{"gpumesh-prebuilt", "not an absolute path"},
		{plain, "not an executable"},
		{dir, "not an executable"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		t.Setenv(EnvBin, bad.path)
		if got, err := Binary(out); err == nil || !strings.Contains(err.Error(), bad.why) {
			t.Errorf("Binary with %s=%s: %q, %v; want an error saying %q", EnvBin, bad.path, got, err, bad.why)
		}
	}
}
