// Package leasestream carries a lease's streams between its renter and
// its provider: the job's log (followed as it grows), its outputs (a
// manifest and a tar bundle), a command run in its sandbox (exec) and a
// connection to one of its ports (port-forward) or, for a service
// replica, to its service port (service). The provider serves each
// to the lease's renter alone (lease.Supervisor.Authorize), exec and
// port-forward only while the job runs; the renter opens them.
package leasestream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
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

// HandshakeTimeout bounds the request/answer exchange of an exec or
// port-forward stream.
const HandshakeTimeout = 20 * time.Second

// Leases are a provider's leases as their streams are served.
type Leases interface {
	// Authorize is the lease's access for its renter from (false for
	// anyone else, or no such lease).
	Authorize(leaseID string, from peer.ID) (*lease.Access, bool)
}

// Counter counts protocol events (lease.Counters).
type Counter interface {
	Add(event string)
}

// Config is what a Server works with.
type Config struct {
	// Leases are the provider's leases (lease.Supervisor).
	Leases Leases
	// Counters count protocol events (a malformed stream, an exec).
	Counters Counter
	Log      *slog.Logger
}

// Server serves a provider's lease streams.
type Server struct {
	cfg Config
	ctx context.Context
}

// New returns a Server whose streams end with ctx.
func New(ctx context.Context, cfg Config) *Server { return &Server{cfg: cfg, ctx: ctx} }

// accept reads the request frame and asks the supervisor whether the
// caller may read the lease (only its renter may read a job's logs or
// results).
func (sv *Server) accept(s network.Stream) (*lease.Access, wire.StreamRequest, bool) {
	b, release, err := p2p.ReadFrameOn(s, bufio.NewReader(s), p2p.DefaultFrameTimeout)
	release()
	var req wire.StreamRequest
	if err == nil {
		req, err = wire.DecodeStreamRequest(b)
	}
	if err != nil {
		sv.cfg.Counters.Add("provider.malformed_stream")
		_ = s.Reset()
		return nil, req, false
	}
	r, ok := sv.cfg.Leases.Authorize(req.LeaseID, s.Conn().RemotePeer())
	if !ok {
		_ = s.Reset()
		return nil, req, false
	}
	return r, req, true
}

// Logs streams a lease's log to its renter; with Follow it keeps
// streaming until the job has ended.
func (sv *Server) Logs(s network.Stream) {
	defer s.Close()
	r, req, ok := sv.accept(s)
	if !ok {
		return
	}
	path := r.LogPath()
	// over: the run has ended, so what the log holds now is all of it.
	over := false
	var f *os.File
	for f == nil {
		grew := r.LogGrew()
		var err error
		f, err = os.Open(path)
		if err == nil {
			break
		}
		// Not started yet: wait for the log to appear (or the job to end).
		if !req.Follow || over || r.Ended() {
			return
		}
		select {
		case <-grew:
		case <-r.Done():
			over = true
		case <-sv.ctx.Done():
			return
		}
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		grew := r.LogGrew()
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
			continue
		}
		if err != nil && err != io.EOF {
			return
		}
		if !req.Follow || over {
			return
		}
		if r.Ended() {
			// Drain what the job wrote last, then stop.
			over = true
			continue
		}
		select {
		case <-grew:
		case <-r.Done():
			over = true
		case <-sv.ctx.Done():
			return
		}
	}
}

// Outputs sends a finished lease's output manifest (one frame) and the
// files as a tar stream.
func (sv *Server) Outputs(s network.Stream) {
	defer s.Close()
	r, _, ok := sv.accept(s)
	if !ok {
		return
	}
	outs, done := r.Outputs()
	if !done {
		_ = frame.Write(s, []byte(`{"error":"job has not finished"}`))
		return
	}
	man, _ := json.Marshal(map[string]any{"outputs": outs})
	if err := frame.Write(s, man); err != nil {
		return
	}
	if err := wire.WriteBundle(s, r.OutputDir(), outs); err != nil {
		_ = s.Reset()
	}
}

// Exec runs a renter's command in its running job (provider side).
func (sv *Server) Exec(s network.Stream) {
	defer s.Close()
	br := bufio.NewReader(s)
	b, release, err := p2p.ReadFrameOn(s, br, p2p.DefaultFrameTimeout)
	release()
	var req wire.ExecRequest
	if err == nil {
		req, err = wire.DecodeExecRequest(b)
	}
	if err != nil {
		sv.cfg.Counters.Add("provider.malformed_stream")
		_ = s.Reset()
		return
	}
	from := s.Conn().RemotePeer()
	refuse := func(err error) {
		ack, _ := json.Marshal(wire.ExecAck{Error: err.Error()})
		_ = s.SetWriteDeadline(time.Now().Add(HandshakeTimeout))
		_ = frame.Write(s, ack)
		_ = s.CloseWrite()
		sv.cfg.Log.Debug("exec refused", "peer", from, "lease", req.LeaseID, "err", err)
	}
	a, ok := sv.cfg.Leases.Authorize(req.LeaseID, from)
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
	_ = s.SetWriteDeadline(time.Now().Add(HandshakeTimeout))
	if err := frame.Write(s, ack); err != nil {
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Time{})
	sv.cfg.Counters.Add("provider.exec")

	ctx, cancel := context.WithCancel(sv.ctx)
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
	_ = s.SetWriteDeadline(time.Now().Add(HandshakeTimeout))
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

// PortForward connects a renter's stream to a port of its running
// job, inside the job's own network namespace (provider side).
func (sv *Server) PortForward(s network.Stream) {
	ctx, cancel := context.WithCancel(sv.ctx)
	defer cancel()
	err := service.ServePort(ctx, s, func(req wire.PortForwardRequest, from peer.ID) (service.Target, error) {
		if terms.ValidID(req.LeaseID) != nil {
			sv.cfg.Counters.Add("provider.malformed_stream")
			return nil, errors.New("malformed lease id")
		}
		a, ok := sv.cfg.Leases.Authorize(req.LeaseID, from)
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
		sv.cfg.Counters.Add("provider.port_forward")
		return service.DialFunc(func(ctx context.Context) (net.Conn, error) { return a.DialPort(ctx, req.Port) }), nil
	})
	if err != nil {
		sv.cfg.Log.Debug("port-forward stream", "peer", s.Conn().RemotePeer(), "err", err)
	}
}

// Service connects a renter's stream to one of its service replicas: the
// service port of a lease's job (provider side).
func (sv *Server) Service(s network.Stream) {
	err := service.Serve(sv.ctx, s, func(leaseID string, from peer.ID) (service.Target, error) {
		a, ok := sv.cfg.Leases.Authorize(leaseID, from)
		if !ok {
			return nil, fmt.Errorf("lease %s: no such lease of yours", leaseID)
		}
		if a.ServicePort() == 0 {
			return nil, fmt.Errorf("lease %s is not a service", leaseID)
		}
		return a, nil
	})
	if err != nil {
		sv.cfg.Log.Debug("service stream", "peer", s.Conn().RemotePeer(), "err", err)
	}
}

// ReadOutputs reads an outputs stream's manifest frame and returns the
// manifest and the rest of the stream, the outputs bundle.
func ReadOutputs(s io.Reader) ([]terms.OutputFile, io.Reader, error) {
	br := bufio.NewReader(s)
	man, err := frame.Read(br)
	if err != nil {
		return nil, nil, fmt.Errorf("provider sent no output manifest: %w", err)
	}
	var mf struct {
		Outputs []terms.OutputFile `json:"outputs"`
		Error   string             `json:"error"`
	}
	if err := json.Unmarshal(man, &mf); err != nil {
		return nil, nil, fmt.Errorf("bad output manifest: %w", err)
	}
	if mf.Error != "" {
		return nil, nil, &lease.RequestError{Msg: mf.Error}
	}
	return mf.Outputs, br, nil
}

// Open opens stream proto (wire.ProtoLogs, wire.ProtoOutputs) on a
// lease's provider and asks for the lease's files, with follow its log as
// it grows; ctx bounds opening it.
func Open(ctx context.Context, h host.Host, prov peer.ID, proto protocol.ID, leaseID string, follow bool) (network.Stream, error) {
	return open(ctx, h, prov, proto, leaseID, follow, false)
}

// Fetch opens stream proto on a lease's provider and asks for the lease's
// files (not following), as Open does; the stream ends by ctx's deadline.
func Fetch(ctx context.Context, h host.Host, prov peer.ID, proto protocol.ID, leaseID string) (network.Stream, error) {
	return open(ctx, h, prov, proto, leaseID, false, true)
}

// FetchOutputs opens a finished lease's outputs on its provider: their
// manifest and the bundle (wire.WriteBundle), which ends by ctx's
// deadline; the caller closes it.
func FetchOutputs(ctx context.Context, h host.Host, prov peer.ID, leaseID string) ([]terms.OutputFile, io.ReadCloser, error) {
	s, err := Fetch(ctx, h, prov, wire.ProtoOutputs, leaseID)
	if err != nil {
		return nil, nil, err
	}
	outs, body, err := ReadOutputs(s)
	if err != nil {
		_ = s.Reset()
		return nil, nil, err
	}
	return outs, struct {
		io.Reader
		io.Closer
	}{body, s}, nil
}

func open(ctx context.Context, h host.Host, prov peer.ID, proto protocol.ID, leaseID string, follow, bounded bool) (network.Stream, error) {
	s, err := h.NewStream(ctx, prov, proto)
	if err != nil {
		return nil, fmt.Errorf("provider %s unreachable: %w", prov, err)
	}
	if dl, ok := ctx.Deadline(); ok && bounded {
		_ = s.SetDeadline(dl)
	}
	req, _ := json.Marshal(wire.StreamRequest{LeaseID: leaseID, Follow: follow})
	if err := frame.Write(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	return s, nil
}
