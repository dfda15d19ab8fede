package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/artifact"
)

// ArtifactInfo is what the daemon's store holds of one artifact.
type ArtifactInfo = artifact.Info

// ArtifactView is one artifact GET /v1/artifacts lists: the store's
// record and, for an artifact of one of this node's jobs, which job and
// what it is to it.
type ArtifactView struct {
	ArtifactInfo
	Job string `json:"job,omitempty"`
	// Use is ArtifactCheckpoint (Checkpoint says which) or ArtifactOutputs.
	Use        string            `json:"use,omitempty"`
	Checkpoint *terms.Checkpoint `json:"checkpoint,omitempty"`
}

// What an artifact is to its job (ArtifactView.Use).
const (
	ArtifactCheckpoint = "checkpoint" // one of the checkpoints kept for it
	ArtifactOutputs    = "outputs"    // its output files
)

// ArtifactFetch says how a fetch went.
type ArtifactFetch = artifact.FetchResult

// ArtifactAddRequest is POST /v1/artifacts: import a file or directory on
// the daemon's host.
type ArtifactAddRequest struct {
	// Path is absolute.
	Path string `json:"path,omitempty"`
	// Image, instead of Path, saves a container image of the daemon's
	// engine (`docker save`) as the artifact.
	Image string `json:"image,omitempty"`
	// Public artifacts are plain and served to any peer. Private ones
	// (the default) are served only to peers leasing a job that names
	// them; a private file or tree is sealed: encrypted end to end, so
	// that providers and other holders store and serve ciphertext, and a
	// job's provider is given the key for its lease alone. An image
	// artifact is never sealed (its provider's engine keeps the image).
	Public bool `json:"public,omitempty"`
	// Sealed changes nothing: a private file or tree is always sealed. It
	// is refused with Public or Image.
	Sealed bool `json:"sealed,omitempty"`
}

// ArtifactGetRequest is POST /v1/artifacts/{id}/get: fetch the artifact
// (when not held) and write it to Dest on the daemon's host.
type ArtifactGetRequest struct {
	// Dest is absolute: the file, or the directory the tree is written in.
	Dest string `json:"dest"`
	// Peers are multiaddrs (with /p2p/ID) of known holders; the DHT is
	// searched too.
	Peers []string `json:"peers,omitempty"`
}

// ArtifactShareRequest is POST /v1/artifacts/{id}/share.
type ArtifactShareRequest struct {
	Peer string `json:"peer"`
}

// ArtifactWarmRequest is POST /v1/artifacts/{id}/warm: have providers
// fetch an artifact this node holds ahead of jobs (cache warming).
type ArtifactWarmRequest struct {
	// Providers are the providers to warm: peer ids, or multiaddrs with
	// /p2p/ID. Without them, the Count best-ranked providers found in the
	// DHT are warmed.
	Providers []string `json:"providers,omitempty"`
	// Count is how many best-ranked providers should hold it (default 1);
	// ones that already advertise it count.
	Count int `json:"count,omitempty"`
	// Wait returns only once each accepting provider advertises the
	// artifact in its capability record (or the request ends).
	Wait bool `json:"wait,omitempty"`
}

// ArtifactWarmResult is how one provider answered a warm request.
type ArtifactWarmResult struct {
	Provider string `json:"provider"`
	// Size is the artifact's size, Fetching what the provider lacked of it.
	Size     int64 `json:"size,omitempty"`
	Fetching int64 `json:"fetching,omitempty"`
	// Held: the provider's capability record already advertised it; no
	// request was sent.
	Held bool `json:"held,omitempty"`
	// Advertised: with Wait, the provider's record now lists it.
	Advertised bool   `json:"advertised,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ArtifactWarmResponse answers ArtifactWarmRequest.
type ArtifactWarmResponse struct {
	ID      string               `json:"id"`
	Results []ArtifactWarmResult `json:"results"`
}

// ArtifactProgress is one line of the get endpoint's NDJSON answer: a
// progress report, then a last line with Result or Error.
type ArtifactProgress struct {
	Done   int64          `json:"done"`
	Total  int64          `json:"total"`
	Result *ArtifactFetch `json:"result,omitempty"`
	Error  string         `json:"error,omitempty"`
}

func artifactPath(id, suffix string) string { return "/artifacts/" + url.PathEscape(id) + suffix }

// AddArtifact is POST /v1/artifacts.
func (c *Client) AddArtifact(ctx context.Context, req ArtifactAddRequest) (ArtifactInfo, error) {
	var v ArtifactInfo
	err := c.Do(ctx, http.MethodPost, "/artifacts", nil, req, &v)
	return v, err
}

// Artifacts is GET /v1/artifacts: every artifact held, most recently used
// first.
func (c *Client) Artifacts(ctx context.Context) ([]ArtifactView, error) {
	var v []ArtifactView
	err := c.Do(ctx, http.MethodGet, "/artifacts", nil, nil, &v)
	return v, err
}

// RemoveArtifact is DELETE /v1/artifacts/{id}.
func (c *Client) RemoveArtifact(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, artifactPath(id, ""), nil, nil, nil)
}

// ShareArtifact is POST /v1/artifacts/{id}/share.
func (c *Client) ShareArtifact(ctx context.Context, id, peer string) (ArtifactInfo, error) {
	var v ArtifactInfo
	err := c.Do(ctx, http.MethodPost, artifactPath(id, "/share"), nil, ArtifactShareRequest{Peer: peer}, &v)
	return v, err
}

// WarmArtifact is POST /v1/artifacts/{id}/warm.
func (c *Client) WarmArtifact(ctx context.Context, id string, req ArtifactWarmRequest) (ArtifactWarmResponse, error) {
	var v ArtifactWarmResponse
	err := c.Do(ctx, http.MethodPost, artifactPath(id, "/warm"), nil, req, &v)
	return v, err
}

// GetArtifact is POST /v1/artifacts/{id}/get; progress (may be nil) sees
// each progress line.
func (c *Client) GetArtifact(ctx context.Context, id string, req ArtifactGetRequest, progress func(ArtifactProgress)) (ArtifactFetch, error) {
	resp, err := c.Raw(ctx, http.MethodPost, artifactPath(id, "/get"), nil, req)
	if err != nil {
		return ArtifactFetch{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var p ArtifactProgress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return ArtifactFetch{}, fmt.Errorf("decode daemon answer: %w", err)
		}
		switch {
		case p.Error != "":
			return ArtifactFetch{}, errors.New(p.Error)
		case p.Result != nil:
			return *p.Result, nil
		case progress != nil:
			progress(p)
		}
	}
	if err := sc.Err(); err != nil {
		return ArtifactFetch{}, err
	}
	return ArtifactFetch{}, errors.New("daemon ended the answer without a result")
}
