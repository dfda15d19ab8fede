package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Into a running job. Both endpoints take a POST that asks to upgrade
// its connection (Connection: Upgrade, Upgrade: ExecUpgrade or
// PortForwardUpgrade); the daemon answers 101 Switching Protocols once the
// job's provider accepted, and the connection then carries the stream,
// or an ordinary JSON error (ErrorBody) when it did not:
//
//	POST /v1/jobs/{id}/exec                 body ExecRequest; then exec
//	                                        frames both ways (wire.WriteExecFrame)
//	POST /v1/jobs/{id}/port-forward?port=N  then the port's bytes both ways,
//	                                        one request per connection
const (
	ExecUpgrade        = "gpumesh-exec/1"
	PortForwardUpgrade = "gpumesh-port-forward/1"
)

// ExecRequest is the body of POST /v1/jobs/{id}/exec.
type ExecRequest struct {
	Command []string `json:"command"`
	// Stdin: the client sends input frames.
	Stdin bool `json:"stdin,omitempty"`
	// TTY: the command runs on a terminal of Rows×Cols.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// Exec starts a command in job id's sandbox; the connection carries exec
// frames (see ExecUpgrade). Close its writing side (CloseWrite) to end the
// command's input.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*UpgradedConn, error) {
	return c.Upgrade(ctx, "/jobs/"+url.PathEscape(id)+"/exec", nil, req, ExecUpgrade)
}

// PortForward connects to port of job id's sandbox.
func (c *Client) PortForward(ctx context.Context, id string, port int) (*UpgradedConn, error) {
	return c.Upgrade(ctx, "/jobs/"+url.PathEscape(id)+"/port-forward", url.Values{"port": {strconv.Itoa(port)}}, nil, PortForwardUpgrade)
}

// UpgradedConn is an API connection taken over by a stream.
type UpgradedConn struct {
	net.Conn
	r io.Reader
}

// Read reads what followed the daemon's answer.
func (u *UpgradedConn) Read(p []byte) (int, error) { return u.r.Read(p) }

// CloseWrite ends the client's side of the stream.
func (u *UpgradedConn) CloseWrite() error {
	if cw, ok := u.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("connection cannot be half-closed")
}

// Upgrade POSTs to path asking to upgrade the connection to proto, and
// returns the connection once the daemon switched; a refusal is the
// daemon's error message. ctx bounds the request only.
func (c *Client) Upgrade(ctx context.Context, path string, q url.Values, body any, proto string) (*UpgradedConn, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	u := "http://gpumesh" + APIVersion + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", proto)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		if isNotRunning(err) {
			return nil, fmt.Errorf("%w (no socket at %s); start it with `gpumesh daemon`", ErrNotRunning, c.socket)
		}
		return nil, fmt.Errorf("talk to daemon: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("talk to daemon: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var ae ErrorBody
		if json.Unmarshal(msg, &ae) == nil && ae.Error != "" {
			return nil, errors.New(ae.Error)
		}
		return nil, fmt.Errorf("daemon answered %s", resp.Status)
	}
	return &UpgradedConn{Conn: conn, r: br}, nil
}
