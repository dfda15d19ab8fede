// Package nstest is test support for the tests that run real gpumesh
// daemons in network namespaces (testnet/nat, testnet/latency): starting a
// daemon inside a namespace, driving it through its CLI from the host's
// namespace, running setup commands and waiting for a condition. It is
// imported by tests only.
package nstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"golang.org/x/sys/unix"
)

// CmdTimeout bounds one setup or CLI command.
const CmdTimeout = 2 * time.Minute

// RandHex is n random bytes in hex: unique names for namespaces and links.
func RandHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Run runs a setup command, failing the test if it fails, and returns its
// output.
func Run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Daemon is a gpumesh daemon running in a namespace.
type Daemon struct {
	Name, NS, Dir string
	ID            string // its peer id
	Cmd           *exec.Cmd
}

// LogText is the daemon's log so far.
func (d *Daemon) LogText() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "daemon.log"))
	return string(b)
}

// Net starts daemons of the gpumesh binary Bin, their data dirs under Tmp.
type Net struct {
	T        *testing.T
	Bin, Tmp string
}

// Start writes config and runs `gpumesh daemon` in ns, waiting until its
// control API answers; the daemon is stopped (SIGTERM, then SIGKILL after
// 15 s) in the test's cleanup, and its log's tail shown if the test failed.
func (n *Net) Start(name, ns, config string) *Daemon {
	t := n.T
	t.Helper()
	d := &Daemon{Name: name, NS: ns, Dir: filepath.Join(n.Tmp, name)}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(d.Dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(d.Dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	// `ip netns exec` enters the namespace and execs the daemon: the pid is
	// the daemon's.
	d.Cmd = exec.Command("ip", "netns", "exec", ns, n.Bin, "-d", d.Dir, "daemon", "--config", cfg)
	d.Cmd.Stdout, d.Cmd.Stderr = logf, logf
	if err := d.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = d.Cmd.Wait(); _ = logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = d.Cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- %s log (tail) ---\n%s", name, Tail(d.LogText(), 4000))
		}
	})
	st := Await(t, name+" status", 30*time.Second, func() (api.StatusInfo, error) {
		var st api.StatusInfo
		err := n.CLIJSON(d, &st, "status", "--json")
		if err == nil && st.PeerID == "" {
			err = errors.New("status without peer id")
		}
		return st, err
	})
	d.ID = st.PeerID
	t.Logf("%s up in %s: peer %s", name, ns, d.ID)
	return d
}

// InNetns runs f on a locked OS thread that has entered the network
// namespace ns (named, under /run/netns), then brings the thread back:
// sockets and devices f creates live in ns, and stay there after. A
// thread that could not go back is never reused (it stays locked, and
// ends with its goroutine).
func InNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, back := func() (error, bool) {
			self, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				return err, true
			}
			defer self.Close()
			target, err := os.Open("/run/netns/" + ns)
			if err != nil {
				return err, true
			}
			defer target.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("enter %s: %w", ns, err), true
			}
			err = f()
			return err, unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil
		}()
		if back {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// HTTPClient is an HTTP client whose connections are made in the network
// namespace ns (to reach an address only ns can, such as a daemon's
// loopback gateway), kept alive between requests.
func HTTPClient(ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := InNetns(ns, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64, DisableCompression: true},
		Timeout: CmdTimeout}
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// CLI runs the gpumesh CLI against d's daemon (through its unix socket, so
// from the host's namespace).
func (n *Net) CLI(d *Daemon, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, n.Bin, append([]string{"-d", d.Dir}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("gpumesh %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// CLIJSON runs the CLI (with --json among args) and decodes its answer
// into v.
func (n *Net) CLIJSON(d *Daemon, v any, args ...string) error {
	out, err := n.CLI(d, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("gpumesh %s: %v: %q", strings.Join(args, " "), err, Tail(out, 500))
	}
	return nil
}

// Await polls f until it returns nil error, failing the test after within.
func Await[T any](t *testing.T, what string, within time.Duration, f func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := f()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-tick.C:
		}
	}
}
