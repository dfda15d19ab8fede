package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/jobs"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// startArtifacts opens the artifact store and serves it over libp2p. A
// private artifact is served to the providers of our current leases whose
// jobs name it (the tracker knows them) and to peers it is shared with.
func (d *Daemon) startArtifacts() error {
	budget := d.cfg.ArtifactBudgetGB
	if budget == 0 {
		budget = config.DefaultArtifactBudgetGB
	}
	st, err := artifact.Open(d.paths.Artifacts(), int64(budget*(1<<30)))
	if err != nil {
		return err
	}
	d.artifacts, err = transfer.NewService(transfer.ServiceConfig{
		Store: st, Net: d.net, Signer: d.signer, Log: d.log,
		Authorize: func(id string, from peer.ID) bool {
			m := d.marketRef.Load()
			return m != nil && m.tracker.LeaseNamesInput(from, id)
		},
		// A provider advertises a fresh capability record (its Artifacts)
		// at once when the store completes an artifact, so renters that
		// check bids' missing-bytes claims against it see what it holds.
		OnHeld: d.disc.Readvertise, WarmMax: d.cfg.WarmMax(), Context: d.ctx,
	})
	d.jobArts = jobs.New(jobs.Config{Transfer: d.artifacts, LoadImage: d.loadImageArtifact,
		Changed: d.disc.Readvertise, Announce: d.announceLater, Log: d.log})
	return err
}

// advertisedArtifacts is the renter's holdings check (auction
// RenterConfig.Holdings): the artifacts a provider's signed capability
// record advertises, looked up afresh.
func (d *Daemon) advertisedArtifacts(ctx context.Context, provider string) ([]string, bool) {
	id, err := peer.Decode(provider)
	if err != nil {
		return nil, false
	}
	c, err := d.disc.Lookup(ctx, id)
	if err != nil {
		return nil, false
	}
	return c.Artifacts, true
}

// loadImageArtifact fetches the image artifact id (a `docker save`
// tarball) of a job that names image and makes it available to the
// container engine, returning the ID the job must run. The tarball comes
// from a renter: runtime.Images.LoadArtifact refuses one that names any
// other image (it would re-tag another tenant's image) and loads it
// without names, so the job runs by ID and no tag on the host moves. The
// artifact stays pinned until unpin.
func (d *Daemon) loadImageArtifact(ctx context.Context, id, image string, owner peer.ID) (unpin func(), imageID string, err error) {
	im := runtime.NewImages(runtime.DefaultDockerSocket)
	// The cache is per owner: a hit skips the fetch, and with it the
	// access check (Store.MayRead), so another renter naming the same
	// private artifact must miss it.
	key := owner.String() + "\x00" + id
	if v, ok := d.imageIDs.Load(key); ok {
		if has, err := im.Has(ctx, v.(string)); err == nil && has {
			return func() {}, v.(string), nil
		}
	}
	unpin, err = d.artifacts.FetchForJob(ctx, id, owner, nil)
	if err != nil {
		return nil, "", fmt.Errorf("image artifact: %w", err)
	}
	imageID, err = im.LoadArtifact(ctx, func() (io.ReadCloser, error) { return d.artifacts.Store().Open(id, artifact.For(owner)) }, image)
	if err != nil {
		unpin()
		return nil, "", fmt.Errorf("image artifact %s: %w", id, err)
	}
	d.imageIDs.Store(key, imageID)
	d.log.Info("image loaded from artifact", "image", image, "artifact", id, "id", imageID)
	return unpin, imageID, nil
}

// addImage saves a container image from the engine as an artifact.
func (d *Daemon) addImage(ctx context.Context, ref string, meta artifact.Meta) (string, error) {
	tmp, err := os.MkdirTemp(d.paths.Artifacts(), "image-")
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
		return "", badRequest("artifact add --image %s: %v", ref, err)
	}
	return d.artifacts.Store().Add(p, meta)
}

// announceLoop announces the artifacts held now and again every
// interval, before their provider records expire.
func (d *Daemon) announceLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.announceArtifacts()
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// announceArtifacts puts a provider record in the DHT for each complete
// artifact held (most recently used first), so fetchers find us.
func (d *Daemon) announceArtifacts(ids ...string) {
	if len(ids) == 0 {
		ids = d.artifacts.Store().CompleteIDs(256)
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
		err := d.artifacts.Announce(ctx, id)
		cancel()
		if err != nil && d.ctx.Err() == nil {
			d.log.Debug("announce artifact", "id", id, "err", err)
		}
		if d.ctx.Err() != nil {
			return
		}
	}
}

// announceLater announces artifact id in the background.
func (d *Daemon) announceLater(id string) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.announceArtifacts(id)
	}()
}

func (d *Daemon) artifactRoutes(mux *http.ServeMux) {
	st := d.artifacts.Store()
	d.route(mux, "POST /v1/artifacts", func(r *http.Request) (any, error) {
		var req api.ArtifactAddRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, badRequest("bad request body: %v", err)
		}
		var id string
		var err error
		switch {
		case req.Image != "" && req.Path != "":
			return nil, badRequest("give a path or an image, not both")
		case req.Sealed && (req.Public || req.Image != ""):
			return nil, badRequest("a sealed artifact is a private file or tree: not --public, not --image")
		case req.Image != "":
			id, err = d.addImage(r.Context(), req.Image, artifact.Meta{Private: !req.Public})
		case !filepath.IsAbs(req.Path):
			return nil, badRequest("artifact path %q must be absolute", req.Path)
		case req.Public:
			id, err = st.Add(req.Path, artifact.Meta{})
		default:
			// Every private file or tree is sealed (Sealed only says so).
			id, err = st.AddPrivate(req.Path)
		}
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, badRequest("%v", err)
			}
			return nil, err
		}
		d.disc.Readvertise()
		d.announceLater(id)
		return st.Info(id)
	})
	d.route(mux, "GET /v1/artifacts", func(*http.Request) (any, error) { return d.artifactViews(st.List()), nil })
	d.route(mux, "GET /v1/artifacts/{id}", func(r *http.Request) (any, error) { return artifactInfo(st, r.PathValue("id")) })
	d.route(mux, "DELETE /v1/artifacts/{id}", func(r *http.Request) (any, error) {
		id := r.PathValue("id")
		if _, err := artifactInfo(st, id); err != nil {
			return nil, err
		}
		if err := st.Remove(id); err != nil {
			return nil, &httpError{code: http.StatusConflict, msg: err.Error()}
		}
		return map[string]string{"removed": id}, nil
	})
	d.route(mux, "POST /v1/artifacts/{id}/share", func(r *http.Request) (any, error) {
		id := r.PathValue("id")
		var req api.ArtifactShareRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, badRequest("bad request body: %v", err)
		}
		if _, err := peer.Decode(req.Peer); err != nil {
			return nil, badRequest("not a peer id: %q", req.Peer)
		}
		if _, err := artifactInfo(st, id); err != nil {
			return nil, err
		}
		if err := st.Share(id, req.Peer); err != nil {
			return nil, err
		}
		return st.Info(id)
	})
	mux.HandleFunc("POST /v1/artifacts/{id}/get", d.apiGetArtifact)
	d.route(mux, "POST /v1/artifacts/{id}/warm", func(r *http.Request) (any, error) {
		var req api.ArtifactWarmRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			return nil, badRequest("bad request body: %v", err)
		}
		id := r.PathValue("id")
		if _, err := artifactInfo(st, id); err != nil {
			return nil, err
		}
		return d.warmArtifact(r.Context(), id, req)
	})
}

// warmTarget is a provider to warm and how to reach it.
type warmTarget struct {
	id    peer.ID
	addrs []string
	held  bool // its record already advertises the artifact
}

// warmArtifact has providers fetch an artifact we hold ahead of jobs: the
// named ones, or the req.Count best-ranked ones found in the DHT
// (auction.WarmTargets; those whose records already list it count).
func (d *Daemon) warmArtifact(ctx context.Context, id string, req api.ArtifactWarmRequest) (api.ArtifactWarmResponse, error) {
	if req.Count < 0 {
		return api.ArtifactWarmResponse{}, badRequest("count must be at least 1, got %d", req.Count)
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
			return api.ArtifactWarmResponse{}, badRequest("provider %q is neither a peer id nor a multiaddr with /p2p/<peer id>", p)
		}
		t := warmTarget{id: ais[0].ID}
		for _, a := range ais[0].Addrs {
			t.addrs = append(t.addrs, a.String())
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 {
		caps, err := d.disc.FindProviders(ctx, auction.Query{})
		if err != nil {
			return api.ArtifactWarmResponse{}, err
		}
		var rel func(string) float64
		if m := d.marketRef.Load(); m != nil {
			rel = m.book.Score
		}
		for _, c := range auction.WarmTargets(caps, rel, d.now()) {
			if len(targets) == req.Count {
				break
			}
			pid, err := peer.Decode(c.Peer)
			if err != nil || pid == d.ID() {
				continue
			}
			targets = append(targets, warmTarget{id: pid, addrs: c.Addrs, held: auction.Holds(c.Artifacts, d.ID().String(), id)})
		}
		if len(targets) == 0 {
			return api.ArtifactWarmResponse{}, notFound("no provider found to warm")
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
			ack, err := d.artifacts.Warm(ctx, id, t.id, t.addrs)
			if err != nil {
				res.Error = err.Error()
				return
			}
			res.Size, res.Fetching = ack.Size, ack.Fetching
			if req.Wait {
				res.Advertised = d.waitAdvertises(ctx, t.id.String(), id)
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
// artifact id of ours (by its id or, private, its auction.HeldToken) or
// ctx ends.
func (d *Daemon) waitAdvertises(ctx context.Context, provider, id string) bool {
	for {
		if held, ok := d.advertisedArtifacts(ctx, provider); ok && auction.Holds(held, d.ID().String(), id) {
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
		return artifact.Info{}, badRequest("not an artifact id (64 hex digits): %q", id)
	}
	in, err := st.Info(id)
	if errors.Is(err, artifact.ErrNotFound) {
		return in, notFound("no artifact %s on this node", id)
	}
	return in, err
}

// apiGetArtifact fetches an artifact and writes it to the requested path,
// answering NDJSON progress lines and a last line with the result.
func (d *Daemon) apiGetArtifact(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.ArtifactGetRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeAPIError(w, badRequest("bad request body: %v", err))
		return
	}
	if !artifact.ValidID(id) {
		writeAPIError(w, badRequest("not an artifact id (64 hex digits): %q", id))
		return
	}
	if !filepath.IsAbs(req.Dest) {
		writeAPIError(w, badRequest("destination %q must be absolute", req.Dest))
		return
	}
	peers, err := p2p.ParseAddrInfos(req.Peers)
	if err != nil {
		writeAPIError(w, badRequest("%v", err))
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
	res, err := d.artifacts.Fetch(r.Context(), id, transfer.FetchOptions{Peers: peers, For: artifact.Local, Progress: func(done, total int64) {
		if now := time.Now(); now.Sub(last) >= 200*time.Millisecond || done == total {
			last = now
			send(api.ArtifactProgress{Done: done, Total: total})
		}
	}})
	if err == nil {
		// One of our sealed artifacts (a private file or tree, a sealed
		// job's checkpoint) is written out opened with its key.
		st := d.artifacts.Store()
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

// inputSizes fills a job's InputBytes from the store: this daemon is the
// origin of the job's inputs, so it must hold each of them.
func (d *Daemon) inputSizes(job *auction.Job) error {
	if len(job.Run.Artifacts()) == 0 {
		return nil
	}
	job.InputBytes = map[string]int64{}
	for _, id := range job.Run.Artifacts() {
		if !artifact.ValidID(id) {
			return badRequest("not an artifact id (64 hex digits): %q", id)
		}
		in, err := d.artifacts.Store().Info(id)
		if err != nil || !in.Complete {
			return badRequest("artifact %s is not held on this node; add it first (gpumesh artifact add)", id)
		}
		job.InputBytes[id] = in.Size
		switch {
		case id == job.Run.ImageArtifact:
			// Its image is loaded by the provider's engine, which keeps
			// it on its disk: an image artifact is never sealed.
			if in.Sealed {
				return badRequest("artifact %s is sealed: an image artifact cannot be (its image is loaded by the provider's engine)", id)
			}
		case in.Sealed:
			job.Sealed = true
		case in.Private:
			// Every private file or tree is sealed; a plain one (added
			// before they were) would leave its bytes on the provider's
			// disk.
			return badRequest("artifact %s is private but not sealed (added before private files were sealed, or the outputs or checkpoint of a job that read no private input): add the data again (gpumesh artifact add PATH), or with --public if anyone may read it", id)
		}
	}
	return nil
}

// artifactViews are the store's artifacts with the job each belongs to,
// as this node's renter records say: a checkpoint kept for one of its
// jobs, or a job's outputs.
func (d *Daemon) artifactViews(list []api.ArtifactInfo) []api.ArtifactView {
	owned := map[string]api.ArtifactView{}
	if d.market != nil {
		for _, v := range d.market.tracker.List() {
			for i := range v.Checkpoints {
				c := v.Checkpoints[i]
				owned[c.Artifact] = api.ArtifactView{Job: v.Job.ID, Use: api.ArtifactCheckpoint, Checkpoint: &c}
			}
			if v.OutputsArtifact != "" {
				owned[v.OutputsArtifact] = api.ArtifactView{Job: v.Job.ID, Use: api.ArtifactOutputs}
			}
		}
	}
	out := make([]api.ArtifactView, len(list))
	for i, in := range list {
		out[i] = owned[in.ID]
		out[i].ArtifactInfo = in
	}
	return out
}
