package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// hijack sends a POST that upgrades the connection to a raw stream (exec
// start, attach) and returns the connection and a reader of what follows
// the answer's header.
func (c *dockerClient) hijack(ctx context.Context, p string, body any) (*net.UnixConn, *bufio.Reader, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, nil, fmt.Errorf("docker: encode request: %w", err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, nil, fmt.Errorf("docker: %w", err)
	}
	conn := nc.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	req, err := http.NewRequest(http.MethodPost, "http://docker"+dockerAPI+p, bytes.NewReader(b))
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("docker: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() || err != nil {
		conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, fmt.Errorf("docker: POST %s: %w", p, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		defer conn.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var m struct{ Message string }
		if json.Unmarshal(msg, &m) != nil || m.Message == "" {
			m.Message = string(bytes.TrimSpace(msg))
		}
		return nil, nil, &dockerError{Status: resp.StatusCode, Message: m.Message}
	}
	return conn, br, nil
}

// Exec runs a command in the job's container through the Engine's exec
// API, as the job's uid, in /work, with the container's environment,
// capabilities (none), no-new-privileges and cgroup. The command is
// killed when ctx ends; it dies with the container at the latest.
func (h *dockerHandle) Exec(ctx context.Context, req ExecRequest) (int, error) {
	id := h.spec.ID
	if err := checkExecCommand(id, req.Command); err != nil {
		return -1, err
	}
	select {
	case <-h.done:
		return -1, fmt.Errorf("runtime: job %s has ended", id)
	default:
	}
	create := map[string]any{
		"AttachStdin":  req.Stdin != nil,
		"AttachStdout": true,
		"AttachStderr": true,
		"Tty":          req.TTY,
		"Cmd":          req.Command,
		"User":         fmt.Sprintf("%d:%d", h.uid, h.uid),
		"WorkingDir":   "/work",
		"Privileged":   false,
	}
	if req.TTY {
		create["Env"] = []string{"TERM=xterm-256color"}
	}
	var created struct{ Id string }
	err := h.e.c.do(ctx, http.MethodPost, "/containers/"+h.id+"/exec", create, &created)
	if isDockerStatus(err, http.StatusConflict) || isDockerStatus(err, http.StatusNotFound) {
		return -1, fmt.Errorf("runtime: job %s has ended (its container is not running)", id)
	}
	if err != nil {
		return -1, fmt.Errorf("runtime: job %s: exec: %w", id, err)
	}
	execPath := "/exec/" + created.Id
	conn, br, err := h.e.c.hijack(ctx, execPath+"/start", map[string]any{"Detach": false, "Tty": req.TTY})
	if err != nil {
		return -1, fmt.Errorf("runtime: job %s: exec: %w", id, err)
	}
	defer conn.Close()
	finished := make(chan struct{})
	defer close(finished)
	resize := func(sz WinSize) {
		if sz.Rows == 0 || sz.Cols == 0 {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q := "?h=" + strconv.Itoa(int(sz.Rows)) + "&w=" + strconv.Itoa(int(sz.Cols))
		_ = h.e.c.do(rctx, http.MethodPost, execPath+"/resize"+q, nil, nil)
	}
	if req.TTY {
		resize(req.Size)
		if req.Resize != nil {
			go func() {
				for {
					select {
					case sz := <-req.Resize:
						resize(sz)
					case <-finished:
						return
					}
				}
			}()
		}
	}
	if req.Stdin != nil {
		go func() {
			_, _ = io.Copy(conn, req.Stdin)
			_ = conn.CloseWrite()
		}()
	}
	// The Engine has no way to stop an exec: at ctx's end its process is
	// killed by its pid (the job's uid's, or it is not the exec's).
	go func() {
		select {
		case <-ctx.Done():
		case <-h.done:
		case <-finished:
			// An Exec that returned for ctx's end still kills.
			if ctx.Err() == nil {
				return
			}
		}
		_ = conn.Close()
		kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var info struct{ Pid int }
		if h.e.c.do(kctx, http.MethodGet, execPath+"/json", nil, &info) == nil && info.Pid > 0 && procUID(info.Pid) == h.uid {
			_ = syscall.Kill(info.Pid, syscall.SIGKILL)
		}
	}()
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if req.TTY {
		_, _ = io.Copy(stdout, br)
	} else {
		_ = demux(br, stdout, stderr)
	}
	return h.execExit(ctx, created.Id)
}

// execExit is exec execID's exit code once its output stream has ended.
// The Engine records the exit a moment after the output ends (and a
// command may close its output and run on): it is read once, and while
// the Engine says the command still runs, its exec_die event says when
// it ends, the job's end or ctx's end at the latest.
func (h *dockerHandle) execExit(ctx context.Context, execID string) (int, error) {
	id := h.spec.ID
	var info struct {
		Running  bool
		ExitCode int
	}
	// Events from a second before the look on are asked for: one that
	// came between the look and the subscription is not missed.
	since := time.Now().Add(-time.Second)
	ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := h.e.c.do(ictx, http.MethodGet, "/exec/"+execID+"/json", nil, &info)
	cancel()
	switch {
	case err != nil:
		return -1, fmt.Errorf("runtime: job %s: exec status: %w", id, err)
	case !info.Running:
		return info.ExitCode, nil
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-h.done:
			stop()
		case <-wctx.Done():
		}
	}()
	code, err := h.e.c.execDied(wctx, h.id, execID, since)
	if err == nil {
		return code, nil
	}
	select {
	case <-h.done:
		// The command died with the job's container: its status is final.
		ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.e.c.do(ictx, http.MethodGet, "/exec/"+execID+"/json", nil, &info)
		cancel()
		if err == nil && !info.Running {
			return info.ExitCode, nil
		}
		return -1, fmt.Errorf("runtime: job %s: exec: the job ended while its command ran", id)
	default:
	}
	if ctx.Err() != nil {
		return -1, fmt.Errorf("runtime: job %s: exec: %w", id, ctx.Err())
	}
	return -1, fmt.Errorf("runtime: job %s: exec status: %w", id, err)
}

// execDied waits for container's exec_die event of exec execID (from since
// on) and returns the exit code it carries.
func (c *dockerClient) execDied(ctx context.Context, container, execID string, since time.Time) (int, error) {
	filters, _ := json.Marshal(map[string][]string{"type": {"container"}, "container": {container}, "event": {"exec_die"}})
	q := url.Values{"filters": {string(filters)}, "since": {strconv.FormatInt(since.Unix(), 10) + "." + fmt.Sprintf("%09d", since.Nanosecond())}}
	resp, err := c.request(ctx, http.MethodGet, "/events?"+q.Encode(), nil)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Action string
			Actor  struct{ Attributes map[string]string }
		}
		if err := dec.Decode(&ev); err != nil {
			return -1, fmt.Errorf("docker: events: %w", err)
		}
		if a := ev.Actor.Attributes; ev.Action == "exec_die" && a["execID"] == execID {
			code, err := strconv.Atoi(a["exitCode"])
			if err != nil {
				return -1, fmt.Errorf("docker: exec_die of %s: exit code %q", execID, a["exitCode"])
			}
			return code, nil
		}
	}
}
