package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
	"github.com/gpumesh/gpumesh/node/artifact/control"
)

func (d *Daemon) serveAPI() error {
	// Bound and made private under a temporary name, then moved into
	// place: the socket appears listening (api.SocketTempName).
	tmp := filepath.Join(d.paths.Dir, api.SocketTempName)
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return fmt.Errorf("control socket %s: %w", tmp, err)
	}
	// Close must not unlink the name it was bound to: the socket has
	// moved (the daemon's Close removes it).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("control socket: %w", err)
	}
	if err := os.Rename(tmp, d.paths.Socket()); err != nil {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("control socket %s: %w", d.paths.Socket(), err)
	}
	mux := http.NewServeMux()
	api.Handle(mux, "GET /v1/version", func(*http.Request) (any, error) {
		return map[string]string{"version": Version}, nil
	})
	d.viewRoutes(mux, false, false)
	api.Handle(mux, "POST /v1/tasks/convert", func(r *http.Request) (any, error) {
		var req api.ConvertTaskRequest
		dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return nil, api.BadRequest("task: %v", err)
		}
		return taskfile.ConvertRequest(req.Task, req.TaskName, d.now())
	})
	control.New(control.Config{Transfer: d.artifacts, Self: d.ID(), Providers: d.disc, Market: marketView{d},
		Advertiser: advertiser{d}, TempDir: d.paths.Artifacts(), Now: d.now}).Routes(mux)
	if d.market != nil {
		d.market.routes(mux)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: "no such API endpoint: " + r.Method + " " + r.URL.Path})
	})
	d.api = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return d.ctx }}
	d.apiLn = ln
	go func() { _ = d.api.Serve(ln) }()
	return nil
}

// Status reports the node's identity, connectivity and inventory.
func (d *Daemon) Status() api.StatusInfo {
	s := api.StatusInfo{
		Version: Version, PeerID: d.ID().String(), Addrs: d.Addrs(),
		Peers: len(d.net.Host.Network().Peers()), DataDir: d.paths.Dir,
		Uptime: d.now().Sub(d.started).Round(time.Second).String(), Region: d.cfg.Region,
		Provider: d.cfg.Provider.Enabled, GPUSource: d.inv.Source, GPUs: d.inv.GPUs,
		Driver: d.inv.Driver, CUDA: d.inv.CUDA, Advertised: d.Advertised(),
		Reachability: d.net.Reachability(),
	}
	if d.market != nil {
		s.Executor = d.market.executorName()
		if d.market.provider != nil {
			s.Draining = d.market.provider.Draining()
		}
	}
	if s.GPUs == nil {
		s.GPUs = []terms.GPU{}
	}
	return s
}

// Peers lists connected peers.
func (d *Daemon) Peers() []api.PeerInfo {
	var out []api.PeerInfo
	for _, p := range d.net.Host.Network().Peers() {
		pi := api.PeerInfo{ID: p.String()}
		for _, c := range d.net.Host.Network().ConnsToPeer(p) {
			pi.Addrs = append(pi.Addrs, c.RemoteMultiaddr().String())
		}
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if out == nil {
		out = []api.PeerInfo{}
	}
	return out
}

func (d *Daemon) handleProviders(r *http.Request) (any, error) {
	q := terms.Query{GPU: r.URL.Query().Get("gpu"), Region: r.URL.Query().Get("region")}
	var err error
	if v := r.URL.Query().Get("min_vram"); v != "" {
		if q.MinVRAM, err = strconv.Atoi(v); err != nil {
			return nil, api.BadRequest("min_vram must be an integer, got %q", v)
		}
	}
	if v := r.URL.Query().Get("count"); v != "" {
		if q.GPUCount, err = strconv.Atoi(v); err != nil {
			return nil, api.BadRequest("count must be an integer, got %q", v)
		}
	}
	if err := q.Validate(); err != nil {
		return nil, api.BadRequest("%v", err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	caps, err := d.disc.FindProviders(ctx, q)
	if err != nil {
		return nil, err
	}
	now := d.now()
	out := make([]api.ProviderView, len(caps))
	book := d.market.reputation()
	for i, c := range caps {
		out[i] = api.ProviderView{Capability: c, PriceNow: auction.PriceNow(c, now), Reliability: book.Score(c.Peer)}
	}
	return out, nil
}

// noneCanFit fails a job that no provider this node knows could ever run:
// when it holds providers' capability records (verified, unexpired; never
// its own) and the job fails auction.StaticFit on every one, the renter
// says so at once (auction.NoneFits, a 422) rather than queueing it for
// its whole start window. A node that knows no provider lets the job
// through (it cannot tell), and so does POST /v1/jobs with queue set
// (`job post --queue`).
func (d *Daemon) noneCanFit(job *terms.Job) error {
	if err := auction.NoneFits(d.disc.Records(), job); err != nil {
		return &api.StatusError{Code: http.StatusUnprocessableEntity, Msg: err.Error()}
	}
	return nil
}
