package runtime

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// fakeExecEngine is an Engine's exec API over a unix socket, of an exec
// whose output stream ends while the Engine still says it runs (an Engine
// records the exit a moment after the output ends, or the command closed
// its output and runs on): its status says "running" however often it is
// read, and it ends (exec_die, exit code 7) once its events are asked for.
type fakeExecEngine struct {
	socket   string
	inspects atomic.Int32 // reads of the exec's status
}

func newFakeExecEngine(t *testing.T) *fakeExecEngine {
	t.Helper()
	f := &fakeExecEngine{socket: filepath.Join(t.TempDir(), "docker.sock")}
	ln, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+dockerAPI+"/containers/c1/exec", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"Id": "e1"})
	})
	mux.HandleFunc("POST "+dockerAPI+"/exec/e1/start", func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
		_, _ = buf.Write(append([]byte{1, 0, 0, 0, 0, 0, 0, 3}, "hi\n"...))
		_ = buf.Flush()
	})
	mux.HandleFunc("GET "+dockerAPI+"/exec/e1/json", func(w http.ResponseWriter, _ *http.Request) {
		f.inspects.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"Running": true, "ExitCode": 0, "Pid": 0})
	})
	mux.HandleFunc("GET "+dockerAPI+"/events", func(w http.ResponseWriter, r *http.Request) {
		var filters map[string][]string
		if err := json.Unmarshal([]byte(r.URL.Query().Get("filters")), &filters); err != nil ||
			len(filters["event"]) != 1 || filters["event"][0] != "exec_die" || r.URL.Query().Get("since") == "" {
			http.Error(w, "bad events query "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		enc := json.NewEncoder(w)
		_ = enc.Encode(map[string]any{"Type": "container", "Action": "exec_die",
			"Actor": map[string]any{"ID": "c1", "Attributes": map[string]string{"execID": "other", "exitCode": "1"}}})
		_ = enc.Encode(map[string]any{"Type": "container", "Action": "exec_die",
			"Actor": map[string]any{"ID": "c1", "Attributes": map[string]string{"execID": "e1", "exitCode": "7"}}})
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// An exec whose output ended while the Engine says it still runs ends at
// its exec_die event, with the event's exit code, its status read once:
// not polled until it says "not running".
func TestDockerExecWaitsForExecDie(t *testing.T) {
	f := newFakeExecEngine(t)
	h := &dockerHandle{e: &DockerExecutor{c: newDockerClient(f.socket)}, spec: Spec{ID: "j"}, id: "c1",
		handleState: newHandleState(t.TempDir())}
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := h.Exec(ctx, ExecRequest{Command: []string{"/bin/true"}, Stdout: &out})
	if err != nil || code != 7 || out.String() != "hi\n" {
		t.Fatalf("exec: code %d err %v output %q; want 7, hi", code, err, out.String())
	}
	if n := f.inspects.Load(); n != 1 {
		t.Fatalf("the exec's status was read %d times, want once", n)
	}
}
