package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/leasestream"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/frame"
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
	ctx, cancel := context.WithTimeout(r.Context(), leasestream.HandshakeTimeout)
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
	ctx, cancel := context.WithTimeout(r.Context(), leasestream.HandshakeTimeout)
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
