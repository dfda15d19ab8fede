package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// upgrade takes over an API request's connection as the daemon does.
func upgrade(t *testing.T, w http.ResponseWriter, proto string) (net.Conn, *bufio.ReadWriter) {
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", proto)
	_ = rw.Flush()
	return conn, rw
}

// fakeExec answers exec requests as a provider would through the daemon:
// "echo ARGS" prints them, "cat" copies the input, "fail N" prints to
// stderr and exits N, "missing" did not run (127).
func fakeExec(t *testing.T, got *atomic.Value) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Upgrade") != api.ExecUpgrade {
			replyJSON(w, 400, api.ErrorBody{Error: "bad exec request"})
			return
		}
		got.Store(req)
		if r.PathValue("id") == "job-gone" {
			replyJSON(w, 409, api.ErrorBody{Error: "provider refused exec: lease l-1 is not running (succeeded)"})
			return
		}
		conn, rw := upgrade(t, w, api.ExecUpgrade)
		if conn == nil {
			return
		}
		defer conn.Close()
		out := func(kind byte, s string) { _ = wire.WriteExecFrame(rw, kind, []byte(s)) }
		exit := func(x wire.ExecExit) {
			b, _ := json.Marshal(x)
			out(wire.ExecFrameExit, string(b))
			_ = rw.Flush()
		}
		switch req.Command[0] {
		case "echo":
			out(wire.ExecFrameStdout, strings.Join(req.Command[1:], " ")+"\n")
			exit(wire.ExecExit{})
		case "cat":
			var in bytes.Buffer
			buf := make([]byte, wire.MaxExecFrame)
			for {
				kind, p, err := wire.ReadExecFrame(rw, buf)
				if err != nil {
					break
				}
				if kind == wire.ExecFrameStdin {
					in.Write(p)
				}
			}
			out(wire.ExecFrameStdout, in.String())
			exit(wire.ExecExit{})
		case "fail":
			out(wire.ExecFrameStderr, "failing\n")
			var code int
			fmt.Sscan(req.Command[1], &code)
			exit(wire.ExecExit{Code: code})
		case "missing":
			exit(wire.ExecExit{Code: 127, Error: `command "missing" not found in PATH /usr/bin:/bin`})
		case "cut":
			out(wire.ExecFrameStdout, "partial")
			_ = rw.Flush()
		}
	}
}

// TestJobExecCLI: `job exec` prints the command's output and exits with
// its code; -i passes the input on; a refusal or a command that did not
// run is one line on stderr and a non-zero exit.
func TestJobExecCLI(t *testing.T) {
	var got atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs/{id}/exec", fakeExec(t, &got))
	dir := fakeDaemon(t, mux)
	runIn := func(stdin string, args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := runWithInput(append([]string{"gpumesh", "-d", dir}, args...), strings.NewReader(stdin), &o, &e)
		return code, o.String(), e.String()
	}

	code, out, errOut := runIn("", "job", "exec", "job-1", "--", "echo", "-n", "hi")
	if code != 0 || out != "-n hi\n" || errOut != "" {
		t.Fatalf("exec echo: code %d out %q err %q", code, out, errOut)
	}
	if req := got.Load().(api.ExecRequest); req.Stdin || req.TTY || strings.Join(req.Command, " ") != "echo -n hi" {
		t.Fatalf("exec request %+v", req)
	}
	// Flags before the ID, or after it (before --).
	code, out, _ = runIn("line 1\nline 2\n", "job", "exec", "job-1", "-i", "--", "cat")
	if code != 0 || out != "line 1\nline 2\n" {
		t.Fatalf("exec -i cat: code %d out %q", code, out)
	}
	if req := got.Load().(api.ExecRequest); !req.Stdin {
		t.Fatalf("exec -i did not ask for input: %+v", req)
	}
	code, out, errOut = runIn("", "job", "exec", "job-1", "--", "fail", "42")
	if code != 42 || out != "" || errOut != "failing\n" {
		t.Fatalf("exec fail 42: code %d out %q err %q", code, out, errOut)
	}
	code, _, errOut = runIn("", "job", "exec", "job-1", "--", "missing")
	if code != 127 || !strings.Contains(errOut, "not found") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("exec missing: code %d err %q", code, errOut)
	}
	code, _, errOut = runIn("", "job", "exec", "job-gone", "--", "echo")
	if code != 1 || !strings.Contains(errOut, "not running") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("exec in an ended job: code %d err %q", code, errOut)
	}
	code, out, errOut = runIn("", "job", "exec", "job-1", "--", "cut")
	if code != 1 || out != "partial" || !strings.Contains(errOut, "before the command's exit status") {
		t.Fatalf("exec cut short: code %d out %q err %q", code, out, errOut)
	}
	// -it asks for a terminal (the input here is no terminal: not raw).
	runIn("x", "job", "exec", "-it", "job-1", "--", "cat")
	if req := got.Load().(api.ExecRequest); !req.Stdin || !req.TTY {
		t.Fatalf("exec -it: %+v", req)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "exec"}, "missing job ID"},
		{[]string{"job", "exec", "job-1"}, "missing command"},
		{[]string{"job", "exec", "job-1", "--"}, "missing command"},
	} {
		oneLineError(t, tc.want, append([]string{"-d", dir}, tc.args...)...)
	}
}

// syncWriter is a goroutine-safe buffer.
type syncWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	grew broadcast.Signal // at each write
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.grew.Notify()
	return w.buf.Write(p)
}

// next returns the output so far and a channel closed at the next write.
func (w *syncWriter) next() (string, <-chan struct{}) {
	grew := w.grew.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String(), grew
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestJobPortForwardCLI: `job port-forward` listens on 127.0.0.1 and
// carries each connection through its own API upgrade to the job's port,
// both ways, and ends once the job has.
func TestJobPortForwardCLI(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = 20 * time.Millisecond
	var ended atomic.Bool
	var ports sync.Map
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		v := leasedView(r.PathValue("id"), terms.RunRunning)
		if ended.Load() || r.PathValue("id") == "job-done" {
			v.State, v.Run = terms.JobFinished, terms.RunSucceeded
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/port-forward", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != api.PortForwardUpgrade {
			replyJSON(w, 400, api.ErrorBody{Error: "no upgrade"})
			return
		}
		ports.Store(r.URL.Query().Get("port"), true)
		conn, rw := upgrade(t, w, api.PortForwardUpgrade)
		if conn == nil {
			return
		}
		defer conn.Close()
		// The "job's server": answers each line in upper case.
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = rw.WriteString(strings.ToUpper(line))
			_ = rw.Flush()
		}
	})
	dir := fakeDaemon(t, mux)

	oneLineError(t, "not running", "-d", dir, "job", "port-forward", "job-done", "8000")
	for _, bad := range []string{"8000:", "x:8000", "8000:0", "70000", "1:2:3"} {
		oneLineError(t, "invalid", "-d", dir, "job", "port-forward", "job-1", bad)
	}
	oneLineError(t, "missing LOCAL:REMOTE", "-d", dir, "job", "port-forward", "job-1")

	var out, errOut syncWriter
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"gpumesh", "-d", dir, "job", "port-forward", "job-1", ":8000"}, &out, &errOut)
	}()
	var addr string
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for addr == "" {
		printed, grew := out.next()
		if _, rest, ok := strings.Cut(printed, "forwarding "); ok {
			addr, _, _ = strings.Cut(rest, " ")
			continue
		}
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatalf("port-forward printed no address: %q %q", out.String(), errOut.String())
		}
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("port-forward listens on %q, not on loopback", addr)
	}
	for i := range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "hello %d\n", i)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != fmt.Sprintf("HELLO %d\n", i) {
			t.Fatalf("connection %d through port-forward: %q %v", i, line, err)
		}
	}
	if _, ok := ports.Load("8000"); !ok {
		t.Fatal("port-forward did not ask for port 8000")
	}
	ended.Store(true)
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errOut.String(), "not running") {
			t.Fatalf("port-forward after the job ended: code %d err %q", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("port-forward kept running after its job ended")
	}
}
