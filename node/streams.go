package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// acceptStream reads the request frame and asks the supervisor whether the
// caller may read the lease (only its renter may read a job's logs or
// results).
func (m *market) acceptStream(s network.Stream) (*lease.Access, wire.StreamRequest, bool) {
	b, release, err := p2p.ReadFrameOn(s, bufio.NewReader(s), p2p.DefaultFrameTimeout)
	release()
	var req wire.StreamRequest
	if err == nil {
		req, err = wire.DecodeStreamRequest(b)
	}
	if err != nil {
		m.counters.Add("provider.malformed_stream")
		_ = s.Reset()
		return nil, req, false
	}
	r, ok := m.sup.Authorize(req.LeaseID, s.Conn().RemotePeer())
	if !ok {
		_ = s.Reset()
		return nil, req, false
	}
	return r, req, true
}

// serveLogs streams a lease's log to its renter; with Follow it keeps
// streaming until the job has ended.
func (m *market) serveLogs(s network.Stream) {
	defer s.Close()
	r, req, ok := m.acceptStream(s)
	if !ok {
		return
	}
	path := r.LogPath()
	var f *os.File
	for f == nil {
		var err error
		f, err = os.Open(path)
		if err == nil {
			break
		}
		// Not started yet: wait for the log to appear (or the job to end).
		if !req.Follow || r.Ended() {
			return
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-m.ctx.Done():
			return
		}
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
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
		if !req.Follow {
			return
		}
		if r.Ended() {
			// Drain what the job wrote last, then stop.
			if n, _ := f.Read(buf); n > 0 {
				_, _ = s.Write(buf[:n])
				continue
			}
			return
		}
		select {
		case <-time.After(150 * time.Millisecond):
		case <-m.ctx.Done():
			return
		}
	}
}

// serveOutputs sends a finished lease's output manifest (one frame) and the
// files as a tar stream.
func (m *market) serveOutputs(s network.Stream) {
	defer s.Close()
	r, _, ok := m.acceptStream(s)
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

// openLeaseStream asks the provider of one of a job's leases for a stream:
// attempt N's (its Nth lease, api.JobView.Leases), or with attempt 0 its
// current (or last) one's.
func (m *market) openLeaseStream(ctx context.Context, jobID string, proto protocol.ID, follow bool, attempt int) (network.Stream, error) {
	v, err := m.tracker.View(jobID)
	if err != nil {
		return nil, err
	}
	l := v.Lease
	if leases := v.Leases(); attempt > 0 {
		if attempt > len(leases) {
			return nil, notFound("job %s has no attempt %d (it had %d)", jobID, attempt, len(leases))
		}
		l = &leases[attempt-1]
	}
	if l == nil {
		return nil, badRequest("job %s has no lease (state %s)", jobID, v.State)
	}
	prov, err := peer.Decode(l.Provider)
	if err != nil {
		return nil, err
	}
	s, err := m.d.net.Host.NewStream(ctx, prov, proto)
	if err != nil {
		return nil, fmt.Errorf("provider %s unreachable: %w", l.Provider, err)
	}
	req, _ := json.Marshal(wire.StreamRequest{LeaseID: l.ID, Follow: follow})
	if err := frame.Write(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	return s, nil
}

// keptLease is where this renter keeps the files of job jobID's current
// lease, when it took them from a no-persist job's provider (which deletes
// its copies): its logs and outputs are served from there.
func (m *market) keptLease(jobID string) (string, bool) {
	v, err := m.tracker.View(jobID)
	if err != nil || v.Lease == nil {
		return "", false
	}
	return m.tracker.KeptDir(v.Lease.ID)
}

// apiLogs streams a job's log from its provider (or this renter's kept
// copy) to the CLI.
func (m *market) apiLogs(w http.ResponseWriter, r *http.Request) {
	if dir, ok := m.keptLease(r.PathValue("id")); ok {
		f, err := os.Open(lease.KeptLog(dir))
		if err != nil {
			writeAPIError(w, err)
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
			writeAPIError(w, badRequest("attempt must be a positive integer, got %q", a))
			return
		}
		attempt = n
	}
	s, err := m.openLeaseStream(r.Context(), r.PathValue("id"), wire.ProtoLogs, follow, attempt)
	if err != nil {
		writeAPIError(w, err)
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
func writeOutputsHead(w http.ResponseWriter, outs []auction.OutputFile) {
	hdr, _ := json.Marshal(outs)
	w.Header().Set(api.ManifestHeader, string(hdr))
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
}

// apiOutputs relays a job's outputs (manifest header + tar body) from its
// provider, or from this renter's kept copy.
func (m *market) apiOutputs(w http.ResponseWriter, r *http.Request) {
	if dir, ok := m.keptLease(r.PathValue("id")); ok {
		outDir, outs, err := lease.KeptOutputs(dir)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		writeOutputsHead(w, outs)
		_ = wire.WriteBundle(w, outDir, outs)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	if v, err := m.tracker.View(r.PathValue("id")); err == nil && v.Job.Sealed {
		// Its provider holds them sealed: they are opened here.
		outs, body, err := m.d.sealedOutputs(ctx, v)
		if err != nil {
			writeAPIError(w, err)
			return
		}
		defer body.Close()
		writeOutputsHead(w, outs)
		_, _ = io.Copy(w, body)
		return
	}
	s, err := m.openLeaseStream(ctx, r.PathValue("id"), wire.ProtoOutputs, false, 0)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	defer s.Close()
	outs, body, err := readOutputs(s)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeOutputsHead(w, outs)
	_, _ = io.Copy(w, body)
}

// readOutputs reads an outputs stream's manifest frame and returns the
// manifest and the rest of the stream, the outputs bundle.
func readOutputs(s io.Reader) ([]auction.OutputFile, io.Reader, error) {
	br := bufio.NewReader(s)
	man, err := frame.Read(br)
	if err != nil {
		return nil, nil, fmt.Errorf("provider sent no output manifest: %w", err)
	}
	var mf struct {
		Outputs []auction.OutputFile `json:"outputs"`
		Error   string               `json:"error"`
	}
	if err := json.Unmarshal(man, &mf); err != nil {
		return nil, nil, fmt.Errorf("bad output manifest: %w", err)
	}
	if mf.Error != "" {
		return nil, nil, badRequest("%s", mf.Error)
	}
	return mf.Outputs, br, nil
}

// fetchOutputs opens a lease's outputs on its provider (the outputs
// stream; a sealed job's from its sealed outputs artifact): a no-persist
// lease's renter keeps them before it settles
// (lease.TrackerConfig.FetchOutputs). The stream ends by ctx's deadline.
func (d *Daemon) fetchOutputs(ctx context.Context, prov peer.ID, leaseID, sealed string) ([]auction.OutputFile, io.ReadCloser, error) {
	if sealed != "" {
		return d.openSealedOutputs(ctx, prov, leaseID, sealed)
	}
	s, err := d.fetchLeaseStream(ctx, prov, wire.ProtoOutputs, leaseID)
	if err != nil {
		return nil, nil, err
	}
	outs, body, err := readOutputs(s)
	if err != nil {
		_ = s.Reset()
		return nil, nil, err
	}
	return outs, struct {
		io.Reader
		io.Closer
	}{body, s}, nil
}

// fetchLog opens a lease's whole log on its provider (the logs stream, not
// following): the renter checks a succeeded run's evidence with it
// (lease.TrackerConfig.FetchLog). The stream ends by ctx's deadline.
func (d *Daemon) fetchLog(ctx context.Context, prov peer.ID, leaseID string) (io.ReadCloser, error) {
	return d.fetchLeaseStream(ctx, prov, wire.ProtoLogs, leaseID)
}

// fetchLeaseStream opens stream proto on a lease's provider and asks for
// the lease's files (not following); the stream ends by ctx's deadline.
func (d *Daemon) fetchLeaseStream(ctx context.Context, prov peer.ID, proto protocol.ID, leaseID string) (network.Stream, error) {
	s, err := d.net.Host.NewStream(ctx, prov, proto)
	if err != nil {
		return nil, fmt.Errorf("provider %s unreachable: %w", prov, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	req, _ := json.Marshal(wire.StreamRequest{LeaseID: leaseID})
	if err := frame.Write(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	return s, nil
}
