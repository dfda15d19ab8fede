package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/cmd/gpumesh/gpumeshtest"
)

// pythonWithPytest is the first Python 3 that has pytest: $GPUMESH_PYTHON,
// python3 on PATH, /usr/bin/python3 (Debian's python3-pytest installs
// there, under another python3 first on PATH). found reports whether any
// python3 exists at all.
func pythonWithPytest() (python string, found bool) {
	var cands []string
	if p := os.Getenv("GPUMESH_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		found = true
		if exec.Command(p, "-c", "import pytest").Run() == nil {
			return p, true
		}
	}
	return "", found
}

// The Python client (python/gpumesh) against a real renter and provider:
// its pytest suite builds nothing itself here, it runs this checkout's
// daemon, built below.
func TestPythonClient(t *testing.T) {
	python, found := pythonWithPytest()
	switch {
	case !found:
		t.Skip("python3 not found: the Python client's tests (python/tests) did not run")
	case python == "":
		t.Skip("pytest not found for python3: the Python client's tests (python/tests) did not run; install python3-pytest")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := gpumeshtest.Binary(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GPUMESH_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m pytest python/tests: %v\n%s", python, err, out)
	}
	t.Logf("%s", out)
}
