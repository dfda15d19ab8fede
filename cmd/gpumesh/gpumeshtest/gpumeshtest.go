// Package gpumeshtest is test support for the tests that run this
// checkout's gpumesh binary as a process (the daemon, the CLI, the
// install script, the Python client's tests). It is linked into no
// binary.
package gpumeshtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvBin names the variable that gives the binary instead of building
// it: `make test` sets it to the bin/gpumesh its build step has just
// linked from the same tree, so that the test packages that run the
// daemon do not each link it again (seconds of CPU a link). The Python
// client's tests read the same variable.
const EnvBin = "GPUMESH_BIN"

// Binary returns the gpumesh binary: $GPUMESH_BIN when it is set (it
// must be an absolute path to an executable file: tests run in their
// packages' directories), else one built now, with cgo as shipped, into
// dir.
func Binary(dir string) (string, error) {
	if p := os.Getenv(EnvBin); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("%s=%s is not an absolute path", EnvBin, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvBin, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file", EnvBin, p)
		}
		return p, nil
	}
	bin := filepath.Join(dir, "gpumesh")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/gpumesh/gpumesh/cmd/gpumesh")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build gpumesh: %w\n%s", err, out)
	}
	return bin, nil
}
