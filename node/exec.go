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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Into a running job: `job exec` and `job port-forward`.
//
// Provider side: ProtoExec and ProtoPortForward streams, each authorised
// for the lease's renter only (Supervisor.Authorize, as logs and outputs),
// and only while the job runs; the command runs, and the port is reached,
// with the job's identity and inside its sandbox (runtime.Execer,
// runtime.Forwarder).
//
// Renter side: the control API upgrades an HTTP request on the unix
// socket (api.ExecUpgrade, api.PortForwardUpgrade) to a raw connection
// that the daemon relays to the provider's stream, once the provider
// accepted it; a refusal is an ordinary JSON error answer.

// execHandshakeTimeout bounds the request/answer exchange of an exec
// stream.
const execHandshakeTimeout = 20 * time.Second

// serveExec runs a renter's command in its running job (provider side).
func (m *market) serveExec(s network.Stream) {
	defer s.Close()
	br := bufio.NewReader(s)
	b, release, err := p2p.ReadFrameOn(s, br, p2p.DefaultFrameTimeout)
	release()
	var req wire.ExecRequest
	if err == nil {
		req, err = wire.DecodeExecRequest(b)
	}
	if err != nil {
		m.counters.Add("provider.malformed_stream")
		_ = s.Reset()
		return
	}
	from := s.Conn().RemotePeer()
	refuse := func(err error) {
		ack, _ := json.Marshal(wire.ExecAck{Error: err.Error()})
		_ = s.SetWriteDeadline(time.Now().Add(execHandshakeTimeout))
		_ = frame.Write(s, ack)
		_ = s.CloseWrite()
		m.d.log.Debug("exec refused", "peer", from, "lease", req.LeaseID, "err", err)
	}
	a, ok := m.sup.Authorize(req.LeaseID, from)
	if !ok {
		refuse(fmt.Errorf("lease %s: no such lease of yours", req.LeaseID))
		return
	}
	if len(req.Command) == 0 || req.Command[0] == "" {
		refuse(errors.New("empty command"))
		return
	}
	if err := a.Running(); err != nil {
		refuse(err)
		return
	}
	ack, _ := json.Marshal(wire.ExecAck{})
	_ = s.SetWriteDeadline(time.Now().Add(execHandshakeTimeout))
	if err := frame.Write(s, ack); err != nil {
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Time{})
	m.counters.Add("provider.exec")

	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	out := &execFrameWriter{s: s}
	var stdin io.Reader
	var stdinW *io.PipeWriter
	if req.Stdin {
		var r *io.PipeReader
		r, stdinW = io.Pipe()
		stdin = r
	}
	resize := make(chan runtime.WinSize, 1)
	go func(stdinW *io.PipeWriter) {
		// The caller's frames: input, and its terminal's size. Its end of
		// writing ends the input; a reset ends the command.
		buf := make([]byte, wire.MaxExecFrame)
		for {
			kind, p, err := wire.ReadExecFrame(br, buf)
			if err != nil {
				if stdinW != nil {
					_ = stdinW.Close()
				}
				if !errors.Is(err, io.EOF) {
					cancel()
				}
				return
			}
			switch kind {
			case wire.ExecFrameStdin:
				if stdinW == nil {
					continue
				}
				if _, err := stdinW.Write(p); err != nil {
					stdinW = nil // the command no longer reads
				}
			case wire.ExecFrameResize:
				rows, cols, err := wire.ParseResize(p)
				if err != nil {
					continue
				}
				select {
				case <-resize:
				default:
				}
				resize <- runtime.WinSize{Rows: rows, Cols: cols}
			}
		}
	}(stdinW)
	code, err := a.Exec(ctx, runtime.ExecRequest{
		Command: req.Command, Stdin: stdin,
		Stdout: out.kind(wire.ExecFrameStdout), Stderr: out.kind(wire.ExecFrameStderr),
		TTY: req.TTY, Size: runtime.WinSize{Rows: req.Rows, Cols: req.Cols}, Resize: resize,
	})
	if stdinW != nil {
		_ = stdinW.CloseWithError(io.ErrClosedPipe)
	}
	exit := wire.ExecExit{Code: code}
	if err != nil {
		exit.Error = err.Error()
	}
	eb, _ := json.Marshal(exit)
	_ = s.SetWriteDeadline(time.Now().Add(execHandshakeTimeout))
	if out.write(wire.ExecFrameExit, eb) == nil {
		_ = s.CloseWrite()
	}
}

// execFrameWriter writes a command's output to an exec stream, one frame
// per write (split at MaxExecFrame).
type execFrameWriter struct {
	mu sync.Mutex
	s  io.Writer
}

func (w *execFrameWriter) write(kind byte, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return wire.WriteExecFrame(w.s, kind, p)
}

func (w *execFrameWriter) kind(kind byte) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		n := 0
		for len(p) > 0 {
			c := p[:min(len(p), wire.MaxExecFrame)]
			if err := w.write(kind, c); err != nil {
				return n, err
			}
			n += len(c)
			p = p[len(c):]
		}
		return n, nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// servePortForward connects a renter's stream to a port of its running
// job, inside the job's own network namespace (provider side).
func (m *market) servePortForward(s network.Stream) {
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	err := service.ServePort(ctx, s, func(req wire.PortForwardRequest, from peer.ID) (service.Target, error) {
		if auction.ValidID(req.LeaseID) != nil {
			m.counters.Add("provider.malformed_stream")
			return nil, errors.New("malformed lease id")
		}
		a, ok := m.sup.Authorize(req.LeaseID, from)
		if !ok {
			return nil, fmt.Errorf("lease %s: no such lease of yours", req.LeaseID)
		}
		// The connection ends with the job.
		go func() {
			select {
			case <-a.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
		m.counters.Add("provider.port_forward")
		return service.DialFunc(func(ctx context.Context) (net.Conn, error) { return a.DialPort(ctx, req.Port) }), nil
	})
	if err != nil {
		m.d.log.Debug("port-forward stream", "peer", s.Conn().RemotePeer(), "err", err)
	}
}

// leaseProvider is a job's current provider and lease id.
func (m *market) leaseProvider(jobID string) (peer.ID, string, error) {
	v, err := m.tracker.View(jobID)
	if err != nil {
		return "", "", err
	}
	if v.Lease == nil {
		return "", "", badRequest("job %s has no lease (state %s)", jobID, v.State)
	}
	prov, err := peer.Decode(v.Lease.Provider)
	if err != nil {
		return "", "", err
	}
	return prov, v.Lease.ID, nil
}

// apiExec runs a command in a job's sandbox on its provider: the request
// (api.ExecRequest) must ask to upgrade to api.ExecUpgrade; once the
// provider accepted it, the connection carries exec frames
// (wire.WriteExecFrame) both ways, relayed as they are.
func (m *market) apiExec(w http.ResponseWriter, r *http.Request) {
	if !wantsUpgrade(r, api.ExecUpgrade) {
		writeAPIError(w, badRequest("exec needs a connection upgrade (Connection: Upgrade, Upgrade: %s)", api.ExecUpgrade))
		return
	}
	var req api.ExecRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeAPIError(w, badRequest("exec request: %v", err))
		return
	}
	if len(req.Command) == 0 || req.Command[0] == "" {
		writeAPIError(w, badRequest("exec: no command given"))
		return
	}
	prov, leaseID, err := m.leaseProvider(r.PathValue("id"))
	if err != nil {
		writeAPIError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), execHandshakeTimeout)
	defer cancel()
	s, err := m.d.net.Host.NewStream(ctx, prov, wire.ProtoExec)
	if err != nil {
		writeAPIError(w, fmt.Errorf("provider %s unreachable: %w", prov, err))
		return
	}
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	b, _ := json.Marshal(wire.ExecRequest{LeaseID: leaseID, Command: req.Command, Stdin: req.Stdin, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols})
	var ack wire.ExecAck
	br := bufio.NewReader(s)
	if err := frame.Write(s, b); err != nil {
		_ = s.Reset()
		writeAPIError(w, fmt.Errorf("exec on provider %s: %w", prov, err))
		return
	}
	ab, err := frame.Read(br)
	if err == nil {
		err = json.Unmarshal(ab, &ack)
	}
	if err != nil {
		_ = s.Reset()
		writeAPIError(w, fmt.Errorf("exec on provider %s: no answer: %w", prov, err))
		return
	}
	if ack.Error != "" {
		_ = s.Reset()
		writeAPIError(w, &httpError{http.StatusConflict, "provider refused exec: " + ack.Error})
		return
	}
	_ = s.SetDeadline(time.Time{})
	m.relayUpgraded(w, api.ExecUpgrade, s, br)
}

// apiPortForward connects to port ?port= of a job, inside its sandbox on
// its provider: the request must ask to upgrade to
// api.PortForwardUpgrade; once connected, the connection carries the
// port's bytes both ways. One request per forwarded connection.
func (m *market) apiPortForward(w http.ResponseWriter, r *http.Request) {
	if !wantsUpgrade(r, api.PortForwardUpgrade) {
		writeAPIError(w, badRequest("port-forward needs a connection upgrade (Connection: Upgrade, Upgrade: %s)", api.PortForwardUpgrade))
		return
	}
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		writeAPIError(w, badRequest("port-forward: port must be 1-65535, got %q", r.URL.Query().Get("port")))
		return
	}
	prov, leaseID, err := m.leaseProvider(r.PathValue("id"))
	if err != nil {
		writeAPIError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), execHandshakeTimeout)
	defer cancel()
	open := func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return m.d.net.Host.NewStream(ctx, p, wire.ProtoPortForward)
	}
	conn, err := service.ConnectPort(ctx, open, prov, leaseID, port)
	if errors.Is(err, service.ErrRefused) {
		why := strings.TrimPrefix(err.Error(), service.ErrRefused.Error()+": ")
		writeAPIError(w, &httpError{http.StatusConflict, "provider refused port-forward: " + why})
		return
	}
	if err != nil {
		writeAPIError(w, fmt.Errorf("port-forward to provider %s: %w", prov, err))
		return
	}
	hc, ok := conn.(halfCloser)
	if !ok {
		_ = conn.Close()
		writeAPIError(w, errors.New("port-forward: the stream cannot be half-closed"))
		return
	}
	m.relayUpgraded(w, api.PortForwardUpgrade, hc, hc)
}

// halfCloser is a connection whose writing side closes on its own.
type halfCloser interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// wantsUpgrade reports whether r asks to upgrade its connection to proto.
func wantsUpgrade(r *http.Request, proto string) bool {
	return headerHas(r.Header, "Connection", "upgrade") && headerHas(r.Header, "Upgrade", proto)
}

func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// relayUpgraded answers 101 Switching Protocols, takes the connection
// over and copies bytes between it and the provider's stream s (read
// through sr) until both directions are done, the stream fails or the
// daemon stops. The client's end of writing is passed on as the stream's.
func (m *market) relayUpgraded(w http.ResponseWriter, proto string, s halfCloser, sr io.Reader) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = s.Close()
		writeAPIError(w, errors.New("the API server cannot upgrade connections"))
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		_ = s.Close()
		return
	}
	defer conn.Close()
	defer s.Close()
	_ = conn.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", proto); err != nil {
		return
	}
	if err := rw.Flush(); err != nil {
		return
	}
	stop := context.AfterFunc(m.ctx, func() { _ = conn.Close(); _ = s.Close() })
	defer stop()
	up := make(chan struct{})
	go func() {
		defer close(up)
		// Bytes the client sent with its request are in rw's buffer.
		if _, err := io.Copy(s, rw.Reader); err != nil {
			if rs, ok := s.(interface{ Reset() error }); ok {
				_ = rs.Reset()
			}
			return
		}
		_ = s.CloseWrite()
	}()
	_, err = io.Copy(conn, sr)
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && err == nil {
		_ = cw.CloseWrite()
	} else {
		_ = conn.Close()
	}
	<-up
}
