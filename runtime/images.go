package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Images moves container images in and out of a Docker Engine as
// `docker save` tarballs, so an image can travel as an artifact.
type Images struct{ c *dockerClient }

// NewImages talks to the Engine at socket.
func NewImages(socket string) *Images { return &Images{c: newDockerClient(socket)} }

// Has reports whether the Engine holds image ref.
func (im *Images) Has(ctx context.Context, ref string) (bool, error) {
	if ref == "" || strings.ContainsAny(ref, "?# \t\n") {
		return false, fmt.Errorf("bad image reference %q", ref)
	}
	err := im.c.do(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil)
	if isDockerStatus(err, http.StatusNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Save writes image ref as a `docker save` tarball to w.
func (im *Images) Save(ctx context.Context, ref string, w io.Writer) error {
	resp, err := im.c.request(ctx, http.MethodGet, "/images/get?names="+url.QueryEscape(ref), nil)
	if err != nil {
		if isDockerStatus(err, http.StatusNotFound) {
			return fmt.Errorf("image %s is not on this host", ref)
		}
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("docker save %s: %w", ref, err)
	}
	return nil
}

// Load loads a `docker save` tarball into the Engine.
func (im *Images) Load(ctx context.Context, tarball io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://docker"+dockerAPI+"/images/load?quiet=1", tarball)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := im.c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("docker load: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("docker load: %d: %s", resp.StatusCode, b)
	}
	// The answer is a JSON stream whose messages may carry an error.
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return nil // not JSON: the Engine answered plainly
		}
		if m.Error != "" {
			return fmt.Errorf("docker load: %s", m.Error)
		}
	}
}
