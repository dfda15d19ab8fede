package runtime

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// needSandbox skips a test of the job namespaces where they cannot exist.
func needSandbox(t *testing.T, e *ProcessExecutor) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("job namespaces need root: this test runs as uid " + strconv.Itoa(os.Geteuid()))
	}
	if e.sb == nil {
		t.Fatalf("running as root but the executor has no job namespaces: %s", e.Limits())
	}
}

func TestProcessJobHasNoNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	addr := l.Addr().String()

	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	res, out, _, _ := run(t, e, Spec{ID: "net-host", Command: []string{helperBin, "dial", addr}})
	if res.ExitCode != 3 || !strings.Contains(out, "connection refused") {
		t.Fatalf("job reached the host's %s: %+v %q", addr, res, out)
	}
	// Loopback inside the job's own namespace works.
	res, out, _, _ = run(t, e, Spec{ID: "net-self", Command: []string{helperBin, "dial", "self"}})
	if res.ExitCode != 0 || out != "connected\n" {
		t.Fatalf("job's own loopback: %+v %q", res, out)
	}
	select {
	case <-accepted:
		t.Fatal("the test's listener accepted a connection from a job")
	default:
	}

	// Positive control: with the network allowed, the same dial connects.
	open := newTestExecutor(t, ProcessOptions{AllowNetwork: true})
	res, out, _, _ = run(t, open, Spec{ID: "net-allowed", Command: []string{helperBin, "dial", addr}})
	if res.ExitCode != 0 || out != "connected\n" {
		t.Fatalf("network allowed: %+v %q", res, out)
	}
	<-accepted
	if !strings.Contains(e.Limits(), "network: none") || !strings.Contains(open.Limits(), "network: host") {
		t.Fatalf("limits: %q / %q", e.Limits(), open.Limits())
	}
}

func TestProcessWithoutNamespaces(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{NoNamespaces: true})
	if e.sb != nil || !strings.Contains(e.Limits(), "namespaces: none (namespaces disabled)") {
		t.Fatalf("limits: %s", e.Limits())
	}
	res, out, _, _ := run(t, e, Spec{ID: "nons", Command: []string{helperBin, "echo", "ok"}})
	if res.ExitCode != 0 || out != "ok\n" {
		t.Fatalf("%+v %q", res, out)
	}
}
