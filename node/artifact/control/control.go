// Package control is the control API's artifact calls: add a file, tree
// or container image to the store, list, show, remove and share what it
// holds, get one (fetched to a path, with progress), and warm one (have
// providers fetch it ahead of jobs).
package control

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Providers is what the node knows of the providers it learned of.
type Providers interface {
	// FindProviders lists the providers whose records match q.
	FindProviders(ctx context.Context, q terms.Query) ([]terms.Capability, error)
	// Holdings are the artifacts a provider's record advertises now.
	Holdings(ctx context.Context, provider string) ([]string, bool)
}

// Market is the node's market as the artifacts API reads it.
type Market interface {
	// Reliability is a provider's reputation (auction.WarmTargets).
	Reliability(provider string) float64
	// Jobs are this renter's jobs.
	Jobs() []api.JobView
}

// Advertiser spreads what the node's store holds.
type Advertiser interface {
	// Readvertise is called when the artifacts held change.
	Readvertise()
	// Announce announces artifact id to the DHT, in the background.
	Announce(id string)
}

// Config is what the calls work with.
type Config struct {
	// Transfer is the node's artifact store, served and fetched over
	// libp2p.
	Transfer *transfer.Service
	// Self is this node.
	Self peer.ID
	// Providers is what the node knows of the providers: warm's targets
	// and their holdings.
	Providers Providers
	// Market is the node's market: its reputation book and this renter's
	// jobs (which own checkpoints and outputs).
	Market Market
	// Advertiser spreads what the store holds.
	Advertiser Advertiser
	// TempDir is where a container image is saved before it is added
	// (on the store's file system).
	TempDir string
	Now     func() time.Time
}

// Calls serve the artifact calls.
type Calls struct{ cfg Config }

// New returns the artifact calls.
func New(cfg Config) *Calls { return &Calls{cfg: cfg} }

// Routes registers the artifact calls on mux.
func (c *Calls) Routes(mux *http.ServeMux) {
	st := c.cfg.Transfer.Store()
	api.Handle(mux, "POST /v1/artifacts", func(r *http.Request) (any, error) {
		var req api.ArtifactAddRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, api.BadRequest("bad request body: %v", err)
		}
		var id string
		var err error
		switch {
		case req.Image != "" && req.Path != "":
			return nil, api.BadRequest("give a path or an image, not both")
		case req.Sealed && (req.Public || req.Image != ""):
			return nil, api.BadRequest("a sealed artifact is a private file or tree: not --public, not --image")
		case req.Image != "":
			id, err = c.addImage(r.Context(), req.Image, artifact.Meta{Private: !req.Public})
		case !filepath.IsAbs(req.Path):
			return nil, api.BadRequest("artifact path %q must be absolute", req.Path)
		case req.Public:
			id, err = st.Add(req.Path, artifact.Meta{})
		default:
			// Every private file or tree is sealed (Sealed only says so).
			id, err = st.AddPrivate(req.Path)
		}
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, api.BadRequest("%v", err)
			}
			return nil, err
		}
		c.cfg.Advertiser.Readvertise()
		c.cfg.Advertiser.Announce(id)
		return st.Info(id)
	})
	api.Handle(mux, "GET /v1/artifacts", func(*http.Request) (any, error) { return c.views(st.List()), nil })
	api.Handle(mux, "GET /v1/artifacts/{id}", func(r *http.Request) (any, error) { return artifactInfo(st, r.PathValue("id")) })
	api.Handle(mux, "DELETE /v1/artifacts/{id}", func(r *http.Request) (any, error) {
		id := r.PathValue("id")
		if _, err := artifactInfo(st, id); err != nil {
			return nil, err
		}
		if err := st.Remove(id); err != nil {
			return nil, &api.StatusError{Code: http.StatusConflict, Msg: err.Error()}
		}
		return map[string]string{"removed": id}, nil
	})
	api.Handle(mux, "POST /v1/artifacts/{id}/share", func(r *http.Request) (any, error) {
		id := r.PathValue("id")
		var req api.ArtifactShareRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, api.BadRequest("bad request body: %v", err)
		}
		if _, err := peer.Decode(req.Peer); err != nil {
			return nil, api.BadRequest("not a peer id: %q", req.Peer)
		}
		if _, err := artifactInfo(st, id); err != nil {
			return nil, err
		}
		if err := st.Share(id, req.Peer); err != nil {
			return nil, err
		}
		return st.Info(id)
	})
	mux.HandleFunc("POST /v1/artifacts/{id}/get", c.get)
	api.Handle(mux, "POST /v1/artifacts/{id}/warm", func(r *http.Request) (any, error) {
		var req api.ArtifactWarmRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, api.BadRequest("bad request body: %v", err)
		}
		id := r.PathValue("id")
		if _, err := artifactInfo(st, id); err != nil {
			return nil, err
		}
		return c.warm(r.Context(), id, req)
	})
}

// warmTarget is a provider to warm and how to reach it.
type warmTarget struct {
	id    peer.ID
	addrs []string
	held  bool // its record already advertises the artifact
}

// warm has providers fetch an artifact we hold ahead of jobs: the
// named ones, or the req.Count best-ranked ones found in the DHT
// (auction.WarmTargets; those whose records already list it count).
func (c *Calls) warm(ctx context.Context, id string, req api.ArtifactWarmRequest) (api.ArtifactWarmResponse, error) {
	if req.Count < 0 {
		return api.ArtifactWarmResponse{}, api.BadRequest("count must be at least 1, got %d", req.Count)
	}
	if req.Count == 0 {
		req.Count = 1
	}
	var targets []warmTarget
	for _, p := range req.Providers {
		p = strings.TrimSpace(p)
		if pid, err := peer.Decode(p); err == nil {
			targets = append(targets, warmTarget{id: pid})
			continue
		}
		ais, err := p2p.ParseAddrInfos([]string{p})
		if err != nil {
			return api.ArtifactWarmResponse{}, api.BadRequest("provider %q is neither a peer id nor a multiaddr with /p2p/<peer id>", p)
		}
		t := warmTarget{id: ais[0].ID}
		for _, a := range ais[0].Addrs {
			t.addrs = append(t.addrs, a.String())
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 {
		caps, err := c.cfg.Providers.FindProviders(ctx, terms.Query{})
		if err != nil {
			return api.ArtifactWarmResponse{}, err
		}
		self := c.cfg.Self
		for _, cp := range auction.WarmTargets(caps, c.cfg.Market.Reliability, c.cfg.Now()) {
			if len(targets) == req.Count {
				break
			}
			pid, err := peer.Decode(cp.Peer)
			if err != nil || pid == self {
				continue
			}
			targets = append(targets, warmTarget{id: pid, addrs: cp.Addrs, held: terms.Holds(cp.Artifacts, self.String(), id)})
		}
		if len(targets) == 0 {
			return api.ArtifactWarmResponse{}, api.NotFound("no provider found to warm")
		}
	}
	out := api.ArtifactWarmResponse{ID: id, Results: make([]api.ArtifactWarmResult, len(targets))}
	var wg sync.WaitGroup
	for i, t := range targets {
		out.Results[i].Provider = t.id.String()
		if t.held {
			out.Results[i].Held, out.Results[i].Advertised = true, true
			continue
		}
		wg.Add(1)
		go func(res *api.ArtifactWarmResult, t warmTarget) {
			defer wg.Done()
			ack, err := c.cfg.Transfer.Warm(ctx, id, t.id, t.addrs)
			if err != nil {
				res.Error = err.Error()
				return
			}
			res.Size, res.Fetching = ack.Size, ack.Fetching
			if req.Wait {
				res.Advertised = c.waitAdvertises(ctx, t.id.String(), id)
				if !res.Advertised {
					res.Error = "accepted, but does not advertise it yet: " + context.Cause(ctx).Error()
				}
			}
		}(&out.Results[i], t)
	}
	wg.Wait()
	return out, nil
}

// waitAdvertises polls provider's capability record until it lists
// artifact id of ours (by its id or, private, its terms.HeldToken) or
// ctx ends.
func (c *Calls) waitAdvertises(ctx context.Context, provider, id string) bool {
	for {
		if held, ok := c.cfg.Providers.Holdings(ctx, provider); ok && terms.Holds(held, c.cfg.Self.String(), id) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func artifactInfo(st *artifact.Store, id string) (artifact.Info, error) {
	if !artifact.ValidID(id) {
		return artifact.Info{}, api.BadRequest("not an artifact id (64 hex digits): %q", id)
	}
	in, err := st.Info(id)
	if errors.Is(err, artifact.ErrNotFound) {
		return in, api.NotFound("no artifact %s on this node", id)
	}
	return in, err
}

// get fetches an artifact and writes it to the requested path,
// answering NDJSON progress lines and a last line with the result.
func (c *Calls) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.ArtifactGetRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		api.WriteError(w, api.BadRequest("bad request body: %v", err))
		return
	}
	if !artifact.ValidID(id) {
		api.WriteError(w, api.BadRequest("not an artifact id (64 hex digits): %q", id))
		return
	}
	if !filepath.IsAbs(req.Dest) {
		api.WriteError(w, api.BadRequest("destination %q must be absolute", req.Dest))
		return
	}
	peers, err := p2p.ParseAddrInfos(req.Peers)
	if err != nil {
		api.WriteError(w, api.BadRequest("%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	fl, _ := w.(http.Flusher)
	send := func(p api.ArtifactProgress) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(p)
		if fl != nil {
			fl.Flush()
		}
	}
	var last time.Time
	res, err := c.cfg.Transfer.Fetch(r.Context(), id, transfer.FetchOptions{Peers: peers, For: artifact.Local, Progress: func(done, total int64) {
		if now := time.Now(); now.Sub(last) >= 200*time.Millisecond || done == total {
			last = now
			send(api.ArtifactProgress{Done: done, Total: total})
		}
	}})
	if err == nil {
		// One of our sealed artifacts (a private file or tree, a sealed
		// job's checkpoint) is written out opened with its key.
		st := c.cfg.Transfer.Store()
		keys := map[string]artifact.Key{}
		if k, ok := st.Key(id); ok {
			keys[id] = k
		}
		unpin := st.Pin(id)
		err = st.ExportFor(id, req.Dest, artifact.Local, keys)
		unpin()
	}
	if err != nil {
		send(api.ArtifactProgress{Error: err.Error()})
		return
	}
	send(api.ArtifactProgress{Done: res.Size, Total: res.Size, Result: &res})
}

// addImage saves a container image from the engine as an artifact.
func (c *Calls) addImage(ctx context.Context, ref string, meta artifact.Meta) (string, error) {
	tmp, err := os.MkdirTemp(c.cfg.TempDir, "image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	name := strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref) + ".tar"
	p := filepath.Join(tmp, name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	err = runtime.NewImages(runtime.DefaultDockerSocket).Save(ctx, ref, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", api.BadRequest("artifact add --image %s: %v", ref, err)
	}
	return c.cfg.Transfer.Store().Add(p, meta)
}

// views are the store's artifacts with the job each belongs to,
// as this node's renter records say: a checkpoint kept for one of its
// jobs, or a job's outputs.
func (c *Calls) views(list []api.ArtifactInfo) []api.ArtifactView {
	owned := map[string]api.ArtifactView{}
	for _, v := range c.cfg.Market.Jobs() {
		for i := range v.Checkpoints {
			ck := v.Checkpoints[i]
			owned[ck.Artifact] = api.ArtifactView{Job: v.Job.ID, Use: api.ArtifactCheckpoint, Checkpoint: &ck}
		}
		if v.OutputsArtifact != "" {
			owned[v.OutputsArtifact] = api.ArtifactView{Job: v.Job.ID, Use: api.ArtifactOutputs}
		}
	}
	out := make([]api.ArtifactView, len(list))
	for i, in := range list {
		out[i] = owned[in.ID]
		out[i].ArtifactInfo = in
	}
	return out
}
