package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// execResult is how a command run with `job exec` ended.
type execResult struct {
	code           int
	stdout, stderr string
	err            string // the provider's reason it did not run
}

// execJob runs cmd in job id through the renter's control API, as the
// CLI does, with stdin as its input ("" with noInput: none).
func execJob(t *testing.T, c *api.Client, id string, stdin string, cmd ...string) (execResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := c.Exec(ctx, id, api.ExecRequest{Command: cmd, Stdin: stdin != ""})
	if err != nil {
		return execResult{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if stdin != "" {
		if err := wire.WriteExecFrame(conn, wire.ExecFrameStdin, []byte(stdin)); err != nil {
			t.Fatal(err)
		}
		if err := conn.CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	var res execResult
	var out, errOut strings.Builder
	buf := make([]byte, wire.MaxExecFrame)
	for {
		kind, p, err := wire.ReadExecFrame(conn, buf)
		if err != nil {
			t.Fatalf("exec %v: the stream ended without an exit status: %v (stdout %q)", cmd, err, out.String())
		}
		switch kind {
		case wire.ExecFrameStdout:
			out.Write(p)
		case wire.ExecFrameStderr:
			errOut.Write(p)
		case wire.ExecFrameExit:
			var x wire.ExecExit
			if err := json.Unmarshal(p, &x); err != nil {
				t.Fatal(err)
			}
			res.code, res.err, res.stdout, res.stderr = x.Code, x.Error, out.String(), errOut.String()
			return res, nil
		}
	}
}

// processOf finds the live process running binary bin: its pid and uid.
func processOf(t *testing.T, bin string) (pid, uid int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || strings.TrimRight(string(b), "\x00") != bin {
			continue
		}
		return p, procOwner(t, p)
	}
	t.Fatalf("no process runs %s", bin)
	return 0, 0
}

func procOwner(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}

// httpGet sends GET path over conn and returns the answer's body.
func httpGet(t *testing.T, conn net.Conn, path string) (int, string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://job"+path, nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("GET %s through the forwarded port: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestExecAndPortForwardIntoAJob: the renter of a running process job runs
// commands in it (`job exec`) and reaches a server that listens only on
// the job's own loopback (`job port-forward`), through its daemon and
// libp2p; the command has the job's uid (not root), environment and
// confinement, its exit code, input and output pass through. Another
// peer's exec and port-forward streams are refused, and nothing reaches
// the job once it has ended.
func TestExecAndPortForwardIntoAJob(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a job's own uid and network namespace need a provider running as root; this test runs as uid " + strconv.Itoa(os.Geteuid()))
	}
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	prov := ns[0]
	waitAdvertised(t, boot, prov)
	job := terms.Job{Tier: terms.Gold, MaxPrice: 2, Region: "eu", GPUCount: 1, Duration: 10 * time.Minute, BidWindow: time.Second,
		Run: terms.RunSpec{Command: []string{bin}, Env: map[string]string{"PORT": "8000", "MODEL": "m1"}}}
	v := post(t, boot, job)
	if !leased(v) {
		t.Fatalf("job not leased: %+v", v)
	}
	id := v.Job.ID
	v = waitJob(t, boot, id, 30*time.Second, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	c := api.NewClient(boot.dir)
	_, jobUID := processOf(t, bin)

	// The job's uid, not root and not the daemon's.
	r, err := execJob(t, c, id, "", "id", "-u")
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || r.err != "" || r.stdout != strconv.Itoa(jobUID)+"\n" || jobUID == 0 {
		t.Fatalf("exec id -u: %+v, want the job's uid %d", r, jobUID)
	}
	// The job's environment, CUDA_VISIBLE_DEVICES included.
	r, _ = execJob(t, c, id, "", "sh", "-c", `echo "$MODEL $CUDA_VISIBLE_DEVICES $GPUMESH_JOB_ID"`)
	want := fmt.Sprintf("m1 %d %s\n", v.Lease.Devices[0], v.Job.ID)
	if len(v.Lease.Devices) != 1 || r.stdout != want {
		t.Fatalf("exec env: %+v, want %q (lease devices %v)", r, want, v.Lease.Devices)
	}
	// Exit codes, stderr and input pass through.
	if r, _ = execJob(t, c, id, "", "sh", "-c", "echo oops >&2; exit 42"); r.code != 42 || r.stderr != "oops\n" {
		t.Fatalf("exec exit 42: %+v", r)
	}
	if r, _ = execJob(t, c, id, "one\ntwo\n", "cat"); r.code != 0 || r.stdout != "one\ntwo\n" {
		t.Fatalf("exec cat: %+v", r)
	}
	if r, _ = execJob(t, c, id, "", "no-such-command-anywhere"); r.code != 127 || !strings.Contains(r.err, "not found") {
		t.Fatalf("exec of a missing command: %+v, want 127 and why", r)
	}
	// The job's network: loopback only, where its server listens.
	if r, _ = execJob(t, c, id, "", "sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"); r.stdout != "lo\n" {
		t.Fatalf("the exec'd command's network interfaces: %+v, want only lo", r)
	}

	// Never the daemon's identity: no_new_privs, and the provider's
	// files (its key, its control socket) are out of reach.
	if r, _ = execJob(t, c, id, "", "grep", "NoNewPrivs", "/proc/self/status"); r.stdout != "NoNewPrivs:\t1\n" {
		t.Fatalf("exec no_new_privs: %+v", r)
	}
	for _, f := range []string{prov.paths.Key(), prov.paths.Socket()} {
		if r, _ = execJob(t, c, id, "", "cat", f); r.code == 0 || r.stdout != "" {
			t.Fatalf("exec read the provider's %s: %+v", f, r)
		}
	}

	// Port-forward reaches the server on the job's own loopback, once
	// it listens there ("running" means its process started): the server
	// says so in its log.
	waitLog(t, prov, v.Lease.ID, regexp.MustCompile(`listening on 127\.0\.0\.1:8000\n`), 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc, err := c.PortForward(ctx, id, 8000)
	if err != nil {
		t.Fatal(err)
	}
	code, body := httpGet(t, fc, "/healthz")
	fc.Close()
	if code != 200 || body != "ok\n" {
		t.Fatalf("GET /healthz through port-forward: %d %q", code, body)
	}
	fc, err = c.PortForward(ctx, id, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if code, body = httpGet(t, fc, "/work"); code != 200 || !strings.HasPrefix(body, "ok ") {
		t.Fatalf("GET /work through port-forward: %d %q", code, body)
	}
	fc.Close()
	// Only the job's network: the job's server is not on the host's.
	if hc, err := net.DialTimeout("tcp", "127.0.0.1:8000", time.Second); err == nil {
		hc.Close()
		t.Log("something listens on the host's 127.0.0.1:8000 (not the job's server)")
	}
	// A port nothing listens on in the job is refused with the reason.
	if _, err := c.PortForward(ctx, id, 8001); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("port-forward to a closed port: %v, want a refusal", err)
	}
	if _, err := c.PortForward(ctx, id, 0); err == nil || !strings.Contains(err.Error(), "port") {
		t.Fatalf("port-forward to port 0: %v", err)
	}

	// A stranger (not the lease's renter) is refused both.
	stranger := startNode(t, t.TempDir(), renterConfig(), boot.Daemon)
	defer stranger.Close()
	ais, err := p2p.ParseAddrInfos(prov.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.net.Host.Connect(ctx, ais[0]); err != nil {
		t.Fatal(err)
	}
	s, err := stranger.net.Host.NewStream(ctx, prov.ID(), wire.ProtoExec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(wire.ExecRequest{LeaseID: v.Lease.ID, Command: []string{"id", "-u"}})
	if err := frame.Write(s, b); err != nil {
		t.Fatal(err)
	}
	_ = s.SetDeadline(time.Now().Add(20 * time.Second))
	ab, err := frame.Read(bufio.NewReader(s))
	var ack wire.ExecAck
	if err != nil || json.Unmarshal(ab, &ack) != nil || !strings.Contains(ack.Error, "no such lease of yours") {
		t.Fatalf("a stranger's exec: answer %q (%v), want a refusal", ab, err)
	}
	if rest, _ := io.ReadAll(s); len(rest) != 0 {
		t.Fatalf("a stranger's exec got %q after the refusal", rest)
	}
	s.Close()
	open := func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return stranger.net.Host.NewStream(ctx, p, wire.ProtoPortForward)
	}
	if sc, err := service.ConnectPort(ctx, open, prov.ID(), v.Lease.ID, 8000); !errors.Is(err, service.ErrRefused) {
		if sc != nil {
			sc.Close()
		}
		t.Fatalf("a stranger's port-forward: %v, want a refusal", err)
	}
	// The stranger's own daemon knows no such job.
	if _, err := api.NewClient(stranger.dir).Exec(ctx, id, api.ExecRequest{Command: []string{"id"}}); err == nil {
		t.Fatal("the stranger's daemon ran exec for a job it does not have")
	}

	// Once the job has ended, nothing reaches it.
	if _, err := c.CancelJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitJob(t, boot, id, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if _, err := execJob(t, c, id, "", "id", "-u"); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("exec after the job ended: %v, want a refusal saying it is not running", err)
	}
	if _, err := c.PortForward(ctx, id, 8000); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("port-forward after the job ended: %v", err)
	}
}

// TestExecAPIBadRequests: the control API answers a malformed exec or
// port-forward request with a one-line error, never an upgrade.
func TestExecAPIBadRequests(t *testing.T) {
	boot := startNode(t, t.TempDir(), renterConfig(), nil)
	defer boot.Close()
	c := api.NewClient(boot.dir)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"no command", func() error { _, err := c.Exec(ctx, "job-1", api.ExecRequest{}); return err }, "no command"},
		{"unknown job", func() error { _, err := c.Exec(ctx, "job-none", api.ExecRequest{Command: []string{"id"}}); return err }, "job-none"},
		{"bad port", func() error {
			_, err := c.Upgrade(ctx, "/jobs/job-1/port-forward", map[string][]string{"port": {"http"}}, nil, api.PortForwardUpgrade)
			return err
		}, "port must be 1-65535"},
		{"no upgrade", func() error {
			return c.Do(ctx, http.MethodPost, "/jobs/job-1/exec", nil, api.ExecRequest{Command: []string{"id"}}, nil)
		}, "connection upgrade"},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error with %q", tc.name, err, tc.want)
		}
	}
}
