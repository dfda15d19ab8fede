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
			return
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
	// The stream ends as the command does; its status follows shortly.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var info struct {
			Running  bool
			ExitCode int
		}
		ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.e.c.do(ictx, http.MethodGet, execPath+"/json", nil, &info)
		cancel()
		switch {
		case err != nil:
			return -1, fmt.Errorf("runtime: job %s: exec status: %w", id, err)
		case !info.Running:
			return info.ExitCode, nil
		case time.Now().After(deadline) || ctx.Err() != nil:
			return -1, fmt.Errorf("runtime: job %s: exec: the command's output ended but it still runs", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
