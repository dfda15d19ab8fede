package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"
)

// ErrNotRunning is returned by the client when no daemon answers.
var ErrNotRunning = errors.New("gpumesh daemon is not running")

// Client talks to a local daemon's control API over its unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the daemon whose data dir is dataDir.
func NewClient(dataDir string) *Client {
	sock := SocketPath(dataDir)
	return &Client{socket: sock, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

// Do calls method path with an optional JSON body and decodes the JSON
// answer into out (if non-nil).
func (c *Client) Do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := c.Raw(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode daemon answer: %w", err)
	}
	return nil
}

// Raw calls the API and returns the response for streaming; a non-2xx
// answer is turned into an error carrying the daemon's message.
func (c *Client) Raw(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	return c.raw(ctx, method, path, q, body, nil)
}

// raw is Raw with request headers.
func (c *Client) raw(ctx context.Context, method, path string, q url.Values, body any, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://gpumesh" + APIVersion + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if isNotRunning(err) {
			return nil, fmt.Errorf("%w (no socket at %s); start it with `gpumesh daemon`", ErrNotRunning, c.socket)
		}
		return nil, fmt.Errorf("talk to daemon: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var ae ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &ae) == nil && ae.Error != "" {
			return nil, errors.New(ae.Error)
		}
		return nil, fmt.Errorf("daemon answered %s", resp.Status)
	}
	return resp, nil
}

// WaitReady waits until the daemon answers, or the timeout passes: it
// asks at once, and again each time the socket's directory changes (the
// daemon moves its socket into place once it listens, SocketTempName),
// never on a timer. An answer other than "not running" ends the wait.
func (c *Client) WaitReady(ctx context.Context, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, werr := newPathWatch(c.socket)
	if werr != nil {
		return fmt.Errorf("watch for the daemon's socket %s: %w", c.socket, werr)
	}
	defer w.close()
	for {
		_, err := c.Version(wctx)
		if err == nil || !errors.Is(err, ErrNotRunning) {
			return err
		}
		if werr := w.wait(wctx); werr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if werr := w.arm(); werr != nil {
			return fmt.Errorf("watch for the daemon's socket %s: %w", c.socket, werr)
		}
	}
}

func isNotRunning(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist)
}
