package node

import (
	"context"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/sign"
	"io"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/jobs"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/node/config"
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
		Leases: marketView{d},
		// A provider advertises a fresh capability record (its Artifacts)
		// at once when the store completes an artifact, so renters that
		// check bids' missing-bytes claims against it see what it holds.
		Advertiser: d.disc, WarmMax: d.cfg.WarmMax(), Context: d.ctx,
	})
	d.jobArts = jobs.New(jobs.Config{Transfer: d.artifacts, Images: images{d}, Advertiser: advertiser{d}, Log: d.log})
	return err
}

// images loads the image artifacts of the provider's jobs (jobs.Images).
type images struct{ d *Daemon }

// LoadImage is loadImageArtifact.
func (i images) LoadImage(ctx context.Context, id, image string, owner peer.ID) (unpin func(), imageID string, err error) {
	return i.d.loadImageArtifact(ctx, id, image, owner)
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
	imageID, err = im.LoadArtifact(ctx, func() (io.ReadCloser, error) { return d.artifacts.Store().Open(id, artifact.For(sign.ID(owner))) }, image)
	if err != nil {
		unpin()
		return nil, "", fmt.Errorf("image artifact %s: %w", id, err)
	}
	d.imageIDs.Store(key, imageID)
	d.log.Info("image loaded from artifact", "image", image, "artifact", id, "id", imageID)
	return unpin, imageID, nil
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

// advertiser spreads what the node's store holds (control.Advertiser).
type advertiser struct{ d *Daemon }

// Readvertise advertises the node's capability again, with what the store
// holds now.
func (a advertiser) Readvertise() { a.d.disc.Readvertise() }

// Announce announces artifact id to the DHT, in the background.
func (a advertiser) Announce(id string) { a.d.announceLater(id) }

// marketView is the daemon's market as the artifacts API reads it
// (control.Market): neutral and empty before the market runs.
type marketView struct{ d *Daemon }

// Reliability is a provider's score in the market's reputation book.
func (v marketView) Reliability(p string) float64 {
	if m := v.d.marketRef.Load(); m != nil {
		return m.reputation().Score(p)
	}
	return terms.NeutralReliability
}

// Jobs are this renter's jobs.
func (v marketView) Jobs() []api.JobView {
	if m := v.d.market; m != nil {
		return m.tracker.List()
	}
	return nil
}

// MayFetch says whether peer from holds a current lease of ours whose job
// names artifact id as an input.
func (v marketView) MayFetch(id string, from peer.ID) bool {
	m := v.d.marketRef.Load()
	return m != nil && m.tracker.LeaseNamesInput(from, id)
}
