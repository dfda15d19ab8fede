package leasestream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// The renter's side of a lease's streams: the control API calls that
// relay them to the CLI (logs, outputs, exec and port-forward of a job).

// Jobs are a renter's jobs as its relay reads them (lease.Tracker).
type Jobs interface {
	// View is a job as this renter tracks it.
	View(jobID string) (api.JobView, error)
	// KeptDir is where this renter keeps the files of a lease it took
	// from a no-persist job's provider.
	KeptDir(leaseID string) (string, bool)
}

// SealedOutputs opens a sealed job's outputs: their manifest and their
// bundle, which the caller closes.
type SealedOutputs interface {
	SealedOutputs(ctx context.Context, v api.JobView) ([]terms.OutputFile, io.ReadCloser, error)
}

// RelayConfig is what a Relay works with.
type RelayConfig struct {
	// Host opens streams to providers.
	Host host.Host
	// Jobs are this renter's jobs.
	Jobs Jobs
	// Sealed opens sealed jobs' outputs.
	Sealed SealedOutputs
}

// Relay serves the renter's calls on its jobs' lease streams.
type Relay struct {
	cfg RelayConfig
	ctx context.Context
}

// NewRelay returns a Relay whose relayed connections end with ctx.
func NewRelay(ctx context.Context, cfg RelayConfig) *Relay { return &Relay{cfg: cfg, ctx: ctx} }

// open asks the provider of one of a job's leases for a stream:
// attempt N's (its Nth lease, api.JobView.Leases), or with attempt 0 its
// current (or last) one's.
func (rl *Relay) open(ctx context.Context, jobID string, proto protocol.ID, follow bool, attempt int) (network.Stream, error) {
	v, err := rl.cfg.Jobs.View(jobID)
	if err != nil {
		return nil, err
	}
	l := v.Lease
	if leases := v.Leases(); attempt > 0 {
		if attempt > len(leases) {
			return nil, api.NotFound("job %s has no attempt %d (it had %d)", jobID, attempt, len(leases))
		}
		l = &leases[attempt-1]
	}
	if l == nil {
		return nil, api.BadRequest("job %s has no lease (state %s)", jobID, v.State)
	}
	prov, err := peer.Decode(l.Provider)
	if err != nil {
		return nil, err
	}
	return Open(ctx, rl.cfg.Host, prov, proto, l.ID, follow)
}

// kept is where this renter keeps the files of job jobID's current
// lease, when it took them from a no-persist job's provider (which deletes
// its copies): its logs and outputs are served from there.
func (rl *Relay) kept(jobID string) (string, bool) {
	v, err := rl.cfg.Jobs.View(jobID)
	if err != nil || v.Lease == nil {
		return "", false
	}
	return rl.cfg.Jobs.KeptDir(v.Lease.ID)
}

// Logs streams a job's log from its provider (or this renter's kept
// copy) to the CLI.
func (rl *Relay) Logs(w http.ResponseWriter, r *http.Request) {
	if dir, ok := rl.kept(r.PathValue("id")); ok {
		f, err := os.Open(lease.KeptLog(dir))
		if err != nil {
			api.WriteError(w, err)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.Copy(w, f)
		return
	}
	follow := r.URL.Query().Get("follow") == "1" || r.URL.Query().Get("follow") == "true"
	attempt := 0
	if a := r.URL.Query().Get("attempt"); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			api.WriteError(w, api.BadRequest("attempt must be a positive integer, got %q", a))
			return
		}
		attempt = n
	}
	s, err := rl.open(r.Context(), r.PathValue("id"), wire.ProtoLogs, follow, attempt)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	defer s.Close()
	go func() {
		<-r.Context().Done()
		_ = s.Reset()
	}()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// writeOutputsHead starts an outputs answer: the manifest in its header,
// the tar body to follow.
func writeOutputsHead(w http.ResponseWriter, outs []terms.OutputFile) {
	hdr, _ := json.Marshal(outs)
	w.Header().Set(api.ManifestHeader, string(hdr))
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
}

// Outputs relays a job's outputs (manifest header + tar body) from its
// provider, or from this renter's kept copy.
func (rl *Relay) Outputs(w http.ResponseWriter, r *http.Request) {
	if dir, ok := rl.kept(r.PathValue("id")); ok {
		outDir, outs, err := lease.KeptOutputs(dir)
		if err != nil {
			api.WriteError(w, err)
			return
		}
		writeOutputsHead(w, outs)
		_ = wire.WriteBundle(w, outDir, outs)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	if v, err := rl.cfg.Jobs.View(r.PathValue("id")); err == nil && v.Job.Sealed {
		// Its provider holds them sealed: they are opened here.
		outs, body, err := rl.cfg.Sealed.SealedOutputs(ctx, v)
		if err != nil {
			api.WriteError(w, err)
			return
		}
		defer body.Close()
		writeOutputsHead(w, outs)
		_, _ = io.Copy(w, body)
		return
	}
	s, err := rl.open(ctx, r.PathValue("id"), wire.ProtoOutputs, false, 0)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	defer s.Close()
	outs, body, err := ReadOutputs(s)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	writeOutputsHead(w, outs)
	_, _ = io.Copy(w, body)
}

// leaseProvider is a job's current provider and lease id.
func (rl *Relay) leaseProvider(jobID string) (peer.ID, string, error) {
	v, err := rl.cfg.Jobs.View(jobID)
	if err != nil {
		return "", "", err
	}
	if v.Lease == nil {
		return "", "", api.BadRequest("job %s has no lease (state %s)", jobID, v.State)
	}
	prov, err := peer.Decode(v.Lease.Provider)
	if err != nil {
		return "", "", err
	}
	return prov, v.Lease.ID, nil
}

// Exec runs a command in a job's sandbox on its provider: the request
// (api.ExecRequest) must ask to upgrade to api.ExecUpgrade; once the
// provider accepted it, the connection carries exec frames
// (wire.WriteExecFrame) both ways, relayed as they are.
func (rl *Relay) Exec(w http.ResponseWriter, r *http.Request) {
	if !wantsUpgrade(r, api.ExecUpgrade) {
		api.WriteError(w, api.BadRequest("exec needs a connection upgrade (Connection: Upgrade, Upgrade: %s)", api.ExecUpgrade))
		return
	}
	var req api.ExecRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		api.WriteError(w, api.BadRequest("exec request: %v", err))
		return
	}
	if len(req.Command) == 0 || req.Command[0] == "" {
		api.WriteError(w, api.BadRequest("exec: no command given"))
		return
	}
	prov, leaseID, err := rl.leaseProvider(r.PathValue("id"))
	if err != nil {
		api.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), HandshakeTimeout)
	defer cancel()
	s, err := rl.cfg.Host.NewStream(ctx, prov, wire.ProtoExec)
	if err != nil {
		api.WriteError(w, fmt.Errorf("provider %s unreachable: %w", prov, err))
		return
	}
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	b, _ := json.Marshal(wire.ExecRequest{LeaseID: leaseID, Command: req.Command, Stdin: req.Stdin, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols})
	var ack wire.ExecAck
	br := bufio.NewReader(s)
	if err := frame.Write(s, b); err != nil {
		_ = s.Reset()
		api.WriteError(w, fmt.Errorf("exec on provider %s: %w", prov, err))
		return
	}
	ab, err := frame.Read(br)
	if err == nil {
		err = json.Unmarshal(ab, &ack)
	}
	if err != nil {
		_ = s.Reset()
		api.WriteError(w, fmt.Errorf("exec on provider %s: no answer: %w", prov, err))
		return
	}
	if ack.Error != "" {
		_ = s.Reset()
		api.WriteError(w, &api.StatusError{Code: http.StatusConflict, Msg: "provider refused exec: " + ack.Error})
		return
	}
	_ = s.SetDeadline(time.Time{})
	rl.relay(w, api.ExecUpgrade, s, br)
}

// PortForward connects to port ?port= of a job, inside its sandbox on
// its provider: the request must ask to upgrade to
// api.PortForwardUpgrade; once connected, the connection carries the
// port's bytes both ways. One request per forwarded connection.
func (rl *Relay) PortForward(w http.ResponseWriter, r *http.Request) {
	if !wantsUpgrade(r, api.PortForwardUpgrade) {
		api.WriteError(w, api.BadRequest("port-forward needs a connection upgrade (Connection: Upgrade, Upgrade: %s)", api.PortForwardUpgrade))
		return
	}
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		api.WriteError(w, api.BadRequest("port-forward: port must be 1-65535, got %q", r.URL.Query().Get("port")))
		return
	}
	prov, leaseID, err := rl.leaseProvider(r.PathValue("id"))
	if err != nil {
		api.WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), HandshakeTimeout)
	defer cancel()
	open := func(ctx context.Context, p peer.ID) (network.Stream, error) {
		return rl.cfg.Host.NewStream(ctx, p, wire.ProtoPortForward)
	}
	conn, err := service.ConnectPort(ctx, open, prov, leaseID, port)
	if errors.Is(err, service.ErrRefused) {
		why := strings.TrimPrefix(err.Error(), service.ErrRefused.Error()+": ")
		api.WriteError(w, &api.StatusError{Code: http.StatusConflict, Msg: "provider refused port-forward: " + why})
		return
	}
	if err != nil {
		api.WriteError(w, fmt.Errorf("port-forward to provider %s: %w", prov, err))
		return
	}
	hc, ok := conn.(halfCloser)
	if !ok {
		_ = conn.Close()
		api.WriteError(w, errors.New("port-forward: the stream cannot be half-closed"))
		return
	}
	rl.relay(w, api.PortForwardUpgrade, hc, hc)
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

// relay answers 101 Switching Protocols, takes the connection
// over and copies bytes between it and the provider's stream s (read
// through sr) until both directions are done, the stream fails or the
// daemon stops. The client's end of writing is passed on as the stream's.
func (rl *Relay) relay(w http.ResponseWriter, proto string, s halfCloser, sr io.Reader) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = s.Close()
		api.WriteError(w, errors.New("the API server cannot upgrade connections"))
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
	stop := context.AfterFunc(rl.ctx, func() { _ = conn.Close(); _ = s.Close() })
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
