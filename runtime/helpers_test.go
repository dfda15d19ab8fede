package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// helperBin is the jobhelper test binary (testdata/jobhelper), built static
// once per test run in a dir any job uid can read.
var helperBin string

func TestMain(m *testing.M) {
	// As root, jobs get a private /tmp: keep the test's files (the helper,
	// work roots, the daemon-side secrets jobs must not read) where jobs
	// see them, so that file permissions are what is tested.
	var base string
	if os.Geteuid() == 0 {
		if d, err := os.MkdirTemp("/run", "gpumesh-runtime-test-"); err == nil {
			base = d
			if err := os.Chmod(base, 0o711); err == nil {
				os.Setenv("TMPDIR", base)
			}
		}
	}
	dir, err := os.MkdirTemp("", "gpumesh-runtime-helper-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		helperBin = filepath.Join(dir, "jobhelper")
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", helperBin, "./testdata/jobhelper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build jobhelper: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	if base != "" {
		os.RemoveAll(base)
	}
	os.Exit(code)
}

// syncBuffer is a goroutine-safe output sink that can wait for content:
// each write wakes the waiters.
type syncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	grew broadcast.Signal // at each write
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.grew.Notify()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// next returns the output so far and a channel closed at the next write.
func (b *syncBuffer) next() (string, <-chan struct{}) {
	grew := b.grew.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), grew
}

func (b *syncBuffer) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		out, grew := b.next()
		if strings.Contains(out, s) {
			return
		}
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %q in output %q", s, b.String())
		}
	}
}

// traversableTempDir is a t.TempDir whose ancestors up to os.TempDir are
// traversable by job uids.
func traversableTempDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != filepath.Clean(os.TempDir()) && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func newTestExecutor(t testing.TB, opts ProcessOptions) *ProcessExecutor {
	t.Helper()
	if opts.Grace == 0 {
		opts.Grace = 300 * time.Millisecond
	}
	e, err := NewProcessExecutor(filepath.Join(traversableTempDir(t), "jobs"), opts)
	if err != nil {
		t.Fatalf("NewProcessExecutor: %v", err)
	}
	return e
}

// run starts spec and waits for it, with a test timeout.
func run(t *testing.T, e Executor, spec Spec) (Result, string, string, Handle) {
	t.Helper()
	var out, errb syncBuffer
	h, err := e.Start(context.Background(), spec, &out, &errb)
	if err != nil {
		t.Fatalf("Start %s: %v", spec.ID, err)
	}
	t.Cleanup(func() { _ = h.Stop(0); _ = h.Cleanup() })
	res := waitTimeout(t, h, 60*time.Second)
	return res, out.String(), errb.String(), h
}

func waitTimeout(t *testing.T, h Handle, d time.Duration) Result {
	t.Helper()
	ch := make(chan Result, 1)
	go func() { ch <- h.Wait() }()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("job did not end within %v", d)
		return Result{}
	}
}

// procsWith lists live processes whose command line contains marker.
func procsWith(t *testing.T, marker string) []int {
	t.Helper()
	pids, err := listPids()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, pid := range pids {
		st, err := readProcStat(pid)
		if err != nil || st.state == 'Z' {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// groupMembers lists live processes in process group pgid.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	pids, err := listPids()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, pid := range pids {
		if st, err := readProcStat(pid); err == nil && st.pgrp == pgid && st.state != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

func waitProcs(t *testing.T, marker string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(procsWith(t, marker)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("want %d processes with %q, have %v", n, marker, procsWith(t, marker))
		}
		time.Sleep(10 * time.Millisecond) // real processes starting: the kernel announces nothing to wait on
	}
}

func uniqueMarker(t *testing.T) string {
	return fmt.Sprintf("gpumesh-mark-%d-%d", os.Getpid(), time.Now().UnixNano())
}
