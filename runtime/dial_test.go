package runtime

import (
	"bufio"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDialReachesJobLoopback: a job's server on its private loopback is
// reachable through Handle.Dial, and (sandboxed) not on the host's loopback.
func TestDialReachesJobLoopback(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	needSandbox(t, e)
	// A port free on the host, so that a host-side listener cannot answer.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "svc-dial", Command: []string{helperBin, "serve", strconv.Itoa(port)}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	d, ok := h.(Dialer)
	if !ok {
		t.Fatalf("process handle %T is not a Dialer", h)
	}
	out.waitFor(t, "listening", 10*time.Second) // the job says so once its socket listens
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, port)
	if err != nil {
		t.Fatalf("dial job port %d: %v (job output %q)", port, err, out.String())
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil {
		t.Fatalf("read the job's greeting: %v", err)
	}
	if !strings.HasPrefix(line, "hello from ") {
		t.Fatalf("greeting = %q", line)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		c.Close()
		t.Fatalf("the job's port %d is reachable on the host's loopback", port)
	}
	if _, err := d.Dial(context.Background(), 0); err == nil {
		t.Fatal("Dial(0) succeeded")
	}
}

// TestDockerDialReachesContainerLoopback: a container without a network
// still serves on its own loopback, reached through Handle.Dial.
func TestDockerDialReachesContainerLoopback(t *testing.T) {
	e := dockerExecutor(t)
	if os.Geteuid() != 0 {
		t.Skip("entering a container's network namespace needs root")
	}
	var out syncBuffer
	h, err := e.Start(context.Background(), Spec{ID: "svc-docker-dial", Image: testImage, Command: []string{"/jobhelper", "serve", "8000"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(time.Second); h.Wait(); _ = h.Cleanup() }()
	d, ok := h.(Dialer)
	if !ok {
		t.Fatalf("docker handle %T is not a Dialer", h)
	}
	out.waitFor(t, "listening", 15*time.Second) // the job says so once its socket listens
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, 8000)
	if err != nil {
		t.Fatalf("dial the container's port: %v (output %q)", err, out.String())
	}
	defer c.Close()
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "hello from ") {
		t.Fatalf("the container's greeting: %q, %v", line, err)
	}
}
