package node

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpumesh/gpumesh/cmd/gpumesh/gpumeshtest"
	"github.com/gpumesh/gpumesh/testnet/testmain"
)

// programs are the binaries the tests build (the daemon for subprocess
// tests, the test programs jobs run), each built once per test binary:
// a build costs seconds of CPU each time, and the tests that need one
// would otherwise each pay it. They are built into one directory, which
// TestMain removes; a test whose jobs run one gets a copy where its jobs'
// uids can (copyProgram).
var programs struct {
	sync.Mutex
	dir   string
	err   error
	built map[string]*program
}

// program is one built binary, or its build's failure.
type program struct {
	once sync.Once
	path string
	err  error
}

// programDir is programs' directory, made on first use.
func programDir() (string, error) {
	programs.Lock()
	defer programs.Unlock()
	if programs.dir == "" && programs.err == nil {
		programs.dir, programs.err = os.MkdirTemp("", "gpumesh-node-test-bin-")
	}
	return programs.dir, programs.err
}

// builtOnce returns the binary that build makes into the programs'
// directory under name, built by the first caller: later callers get
// the same binary, or the same build failure.
func builtOnce(t testing.TB, name string, build func(dir string) (string, error)) string {
	t.Helper()
	dir, err := programDir()
	if err != nil {
		t.Fatalf("test programs' directory: %v", err)
	}
	programs.Lock()
	if programs.built == nil {
		programs.built = map[string]*program{}
	}
	p := programs.built[name]
	if p == nil {
		p = &program{}
		programs.built[name] = p
	}
	programs.Unlock()
	p.once.Do(func() { p.path, p.err = build(dir) })
	if p.err != nil {
		t.Fatalf("%s: %v", name, p.err)
	}
	return p.path
}

// buildDaemon returns the gpumesh binary for subprocess tests:
// $GPUMESH_BIN (make test's), or built once per test binary.
func buildDaemon(t testing.TB) string {
	t.Helper()
	return builtOnce(t, "gpumesh binary", gpumeshtest.Binary)
}

// goProgram returns the Go program in directory pkg (relative to this
// package's), built once per test binary without cgo (a static binary
// any job, container or uid runs) with go build's extra args. It is
// built without -trimpath, as the other tests' programs and
// cmd/gpumesh/deploy's no-cgo daemon are: -trimpath changes every
// package's build ID, so on CI's empty build cache it compiled the
// standard library's part of svcserver (net/http, crypto/tls) once
// more, about 38 s of CPU, where the same packages built without it
// are shared with those builds.
func goProgram(t testing.TB, pkg string, args ...string) string {
	t.Helper()
	return builtOnce(t, "build "+pkg, func(dir string) (string, error) {
		bin := filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", append(append([]string{"build"}, args...), "-o", bin, pkg)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%w\n%s", err, out)
		}
		return bin, nil
	})
}

// copyProgram copies the binary src into dir, executable by every uid,
// and returns the copy's path: a test that finds its job's process by
// the binary's path needs a path of its own.
func copyProgram(t testing.TB, src, dir string) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, filepath.Base(src))
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return dst
}

// TestMain runs 4 of the package's parallel tests at once (they are real
// daemons on loopback that mostly wait on their timers: 124 s on 2 cores
// instead of 204 s at go test's default of 2, for under half a core
// more), and removes the programs the tests built, if any.
func TestMain(m *testing.M) {
	testmain.Parallel(4)
	code := m.Run()
	if programs.dir != "" {
		_ = os.RemoveAll(programs.dir)
	}
	os.Exit(code)
}
