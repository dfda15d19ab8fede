// Package service runs always-on services on rented GPUs: each replica is
// one lease of a service job (terms.RunSpec.ServicePort), and the
// renter's daemon serves a loopback HTTP gateway that routes requests to
// the replicas over libp2p streams (wire.ProtoService), which the provider
// connects to the replica's port inside the job's sandbox. No replica ever
// listens on a public port; a service may have a public endpoint, the
// same gateway over TLS for its end users' API tokens (public.go).
//
// The renter side is the Manager (services, replicas, routing, health,
// failover, autoscaling); the provider side is Serve, one call per stream.
package service

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// maxMsg bounds a handshake message.
const maxMsg = 4 << 10

// handshakeTimeout bounds the request/answer exchange on a new stream.
const handshakeTimeout = 10 * time.Second

// writeMsg writes v as one frame: a 2-byte big-endian length, then JSON.
func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxMsg {
		return fmt.Errorf("service: handshake message of %d bytes", len(b))
	}
	buf := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(buf, uint16(len(b)))
	copy(buf[2:], b)
	_, err = w.Write(buf)
	return err
}

// readMsg reads one frame written by writeMsg, exactly: nothing after it
// is consumed (the raw bytes that follow belong to the replica).
func readMsg(r io.Reader, v any) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	l := int(binary.BigEndian.Uint16(n[:]))
	if l > maxMsg {
		return fmt.Errorf("service: handshake message of %d bytes", l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Target is one service lease the provider lets a stream through to.
type Target interface {
	// DialService connects to the replica's port inside its sandbox.
	DialService(ctx context.Context) (net.Conn, error)
}

// Authorize answers which lease a ProtoService stream from peer from may
// reach, or why not (only a lease's renter may reach its replica).
type Authorize func(leaseID string, from peer.ID) (Target, error)

// Serve handles one ProtoService stream on the provider: it reads the
// request, authorises the remote peer for the lease, connects to the
// replica's port and then copies bytes both ways until either side is done
// or ctx ends. Every refusal is answered with its reason before the stream
// is reset.
func Serve(ctx context.Context, s network.Stream, authorize Authorize) error {
	var req wire.ServiceRequest
	return serve(ctx, s, &req, func(from peer.ID) (Target, string, error) {
		t, err := authorize(req.LeaseID, from)
		return t, fmt.Sprintf("lease %s: connect to the replica", req.LeaseID), err
	})
}

// DialFunc is a Target that connects with a function.
type DialFunc func(ctx context.Context) (net.Conn, error)

// DialService calls f.
func (f DialFunc) DialService(ctx context.Context) (net.Conn, error) { return f(ctx) }

// PortAuthorize answers what a ProtoPortForward stream from peer from
// asking for req may connect to, or why not.
type PortAuthorize func(req wire.PortForwardRequest, from peer.ID) (Target, error)

// ServePort handles one ProtoPortForward stream on the provider as Serve
// does a service stream, the request naming the job's port.
func ServePort(ctx context.Context, s network.Stream, authorize PortAuthorize) error {
	var req wire.PortForwardRequest
	return serve(ctx, s, &req, func(from peer.ID) (Target, string, error) {
		t, err := authorize(req, from)
		return t, fmt.Sprintf("lease %s: connect to port %d", req.LeaseID, req.Port), err
	})
}

// GangAuthorize answers what a ProtoGang stream from peer from asking for
// req may connect to, or why not.
type GangAuthorize func(req wire.GangRequest, from peer.ID) (Target, error)

// ServeGang handles one ProtoGang stream on a gang member's provider as
// Serve does a service stream, the request naming the gang, the two
// members and the port.
func ServeGang(ctx context.Context, s network.Stream, authorize GangAuthorize) error {
	var req wire.GangRequest
	return serve(ctx, s, &req, func(from peer.ID) (Target, string, error) {
		t, err := authorize(req, from)
		return t, fmt.Sprintf("gang %s: member %d: connect to port %d", req.Gang, req.To, req.Port), err
	})
}

// serve reads the request into req, asks authorize (which reads it) for
// the target, and connects the stream to it; what names the connection in
// its error.
func serve(ctx context.Context, s network.Stream, req any, authorize func(from peer.ID) (Target, string, error)) error {
	_ = s.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := readMsg(s, req); err != nil {
		_ = s.Reset()
		return fmt.Errorf("service: malformed request: %w", err)
	}
	refuse := func(err error) error {
		_ = writeMsg(s, wire.ServiceAck{Error: err.Error()})
		_ = s.CloseWrite()
		_ = s.Reset()
		return err
	}
	t, what, err := authorize(s.Conn().RemotePeer())
	if err != nil {
		return refuse(err)
	}
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	conn, err := t.DialService(dctx)
	cancel()
	if err != nil {
		return refuse(fmt.Errorf("%s: %w", what, err))
	}
	defer conn.Close()
	if err := writeMsg(s, wire.ServiceAck{}); err != nil {
		_ = s.Reset()
		return err
	}
	_ = s.SetDeadline(time.Time{})
	return Pipe(ctx, s, conn)
}

// Pipe copies s and conn into each other, half-closing each direction as
// it ends, until both are done or ctx ends.
func Pipe(ctx context.Context, s network.Stream, conn net.Conn) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, s)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = conn.Close()
		}
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(s, conn)
		_ = s.CloseWrite()
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return s.Close()
	case <-ctx.Done():
		_ = s.Reset()
		_ = conn.Close()
		<-done
		return ctx.Err()
	}
}

// Opener opens a raw stream speaking wire.ProtoService to a provider.
type Opener func(ctx context.Context, provider peer.ID) (network.Stream, error)

// ErrRefused wraps a provider's refusal of a service stream.
var ErrRefused = errors.New("service: provider refused the stream")

// Connect opens a stream to lease leaseID on provider and returns it as a
// net.Conn once the provider has connected it to the replica's port.
func Connect(ctx context.Context, open Opener, provider peer.ID, leaseID string) (net.Conn, error) {
	return connect(ctx, open, provider, wire.ServiceRequest{LeaseID: leaseID})
}

// ConnectPort opens a ProtoPortForward stream (open must open one) to
// port of lease leaseID's job and returns it as a net.Conn once the
// provider has connected it.
func ConnectPort(ctx context.Context, open Opener, provider peer.ID, leaseID string, port int) (net.Conn, error) {
	return connect(ctx, open, provider, wire.PortForwardRequest{LeaseID: leaseID, Port: port})
}

// ConnectGang opens a ProtoGang stream (open must open one) to the
// provider of member req.To and returns it once that provider has
// connected it to the member's job.
func ConnectGang(ctx context.Context, open Opener, provider peer.ID, req wire.GangRequest) (network.Stream, error) {
	c, err := connect(ctx, open, provider, req)
	if err != nil {
		return nil, err
	}
	return c.(streamConn).Stream, nil
}

func connect(ctx context.Context, open Opener, provider peer.ID, req any) (net.Conn, error) {
	s, err := open(ctx, provider)
	if err != nil {
		return nil, err
	}
	dl := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = s.SetDeadline(dl)
	var ack wire.ServiceAck
	if err := writeMsg(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	if err := readMsg(s, &ack); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("service: handshake with %s: %w", provider, err)
	}
	if ack.Error != "" {
		_ = s.Reset()
		return nil, fmt.Errorf("%w: %s", ErrRefused, ack.Error)
	}
	_ = s.SetDeadline(time.Time{})
	return streamConn{s}, nil
}

// streamConn is a libp2p stream as a net.Conn.
type streamConn struct{ network.Stream }

type p2pAddr string

func (a p2pAddr) Network() string { return "libp2p" }
func (a p2pAddr) String() string  { return string(a) }

func (c streamConn) LocalAddr() net.Addr  { return p2pAddr(c.Conn().LocalPeer().String()) }
func (c streamConn) RemoteAddr() net.Addr { return p2pAddr(c.Conn().RemotePeer().String()) }
