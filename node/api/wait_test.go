package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"
)

// serveVersion makes dir's control socket the way the daemon does: bound
// under SocketTempName, then moved into place, listening.
func serveVersion(t *testing.T, dir string) {
	t.Helper()
	tmp := filepath.Join(dir, SocketTempName)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"version":"test"}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if err := os.Rename(tmp, SocketPath(dir)); err != nil {
		t.Fatal(err)
	}
}

// WaitReady asks the daemon once at first and then once per change of the
// socket's directory, never on a timer, and answers as soon as the socket
// appears, also when the data dir itself appears only after the wait began.
func TestWaitReadyWaitsForTheSocket(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("off linux WaitReady asks on a timer")
	}
	dir := filepath.Join(t.TempDir(), "data")
	c := NewClient(dir)
	dials := make(chan struct{}, 16)
	tr := c.http.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, n, a string) (net.Conn, error) {
		dials <- struct{}{}
		return dial(ctx, n, a)
	}
	done := make(chan error, 1)
	go func() { done <- c.WaitReady(context.Background(), time.Minute) }()
	next := func(what string) {
		t.Helper()
		select {
		case <-dials:
		case err := <-done:
			t.Fatalf("WaitReady returned %v before %s", err, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("no dial %s", what)
		}
	}
	none := func(what string) {
		t.Helper()
		// A poll every 100 ms would dial a few times in this window.
		select {
		case <-dials:
			t.Fatalf("a dial %s", what)
		case err := <-done:
			t.Fatalf("WaitReady returned %v %s", err, what)
		case <-time.After(400 * time.Millisecond):
		}
	}
	next("at first")
	none("while nothing changed")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	next("once the data dir appeared")
	none("while the data dir holds nothing")
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	next("once the data dir changed")
	serveVersion(t, dir)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitReady: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReady did not answer once the socket appeared")
	}
}

// With no daemon, WaitReady ends at its timeout with the "not running"
// error, and at its context's end with the context's.
func TestWaitReadyEnds(t *testing.T) {
	c := NewClient(t.TempDir())
	start := time.Now()
	if err := c.WaitReady(context.Background(), 200*time.Millisecond); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("no daemon: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("WaitReady gave up after %v, before its timeout", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.WaitReady(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	// A socket that is there already answers at once.
	dir := t.TempDir()
	serveVersion(t, dir)
	if err := NewClient(dir).WaitReady(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
}
