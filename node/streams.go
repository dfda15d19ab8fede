package node

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/leasestream"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

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
	return leasestream.Open(ctx, m.d.net.Host, prov, proto, l.ID, follow)
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
	outs, body, err := leasestream.ReadOutputs(s)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeOutputsHead(w, outs)
	_, _ = io.Copy(w, body)
}

// fetchOutputs opens a lease's outputs on its provider (the outputs
// stream; a sealed job's from its sealed outputs artifact): a no-persist
// lease's renter keeps them before it settles
// (lease.TrackerConfig.FetchOutputs). The stream ends by ctx's deadline.
func (d *Daemon) fetchOutputs(ctx context.Context, prov peer.ID, leaseID, sealed string) ([]auction.OutputFile, io.ReadCloser, error) {
	if sealed != "" {
		return d.jobArts.OpenSealedOutputs(ctx, prov, leaseID, sealed)
	}
	return leasestream.FetchOutputs(ctx, d.net.Host, prov, leaseID)
}

// fetchLog opens a lease's whole log on its provider (the logs stream, not
// following): the renter checks a succeeded run's evidence with it
// (lease.TrackerConfig.FetchLog). The stream ends by ctx's deadline.
func (d *Daemon) fetchLog(ctx context.Context, prov peer.ID, leaseID string) (io.ReadCloser, error) {
	return leasestream.Fetch(ctx, d.net.Host, prov, wire.ProtoLogs, leaseID)
}
