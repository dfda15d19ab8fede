package runtime

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
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

// An image artifact comes from a renter, and a `docker save` tarball names
// the tags `docker load` gives its images: an artifact carrying an extra
// tag (victim:latest) would replace another tenant's image on the host.
// LoadArtifact therefore loads only a tarball that holds exactly one image
// and names no image but the job's own, strips even that name before the
// Engine sees it (no tag on the host ever moves), and returns the image's
// ID: the job runs the image by ID.

// maxArchiveMeta caps the size of a tarball's manifest.json, repositories
// and index.json.
const maxArchiveMeta = 1 << 20

// archiveMeta is what a `docker save` tarball says about its images.
type archiveMeta struct {
	manifest []map[string]json.RawMessage // manifest.json
	index    map[string]json.RawMessage   // index.json (OCI layout), nil if none
	names    []string                     // every image name the tarball gives
	id       string                       // "sha256:<hex>" of the one image's config
}

// archiveName is a tar entry's name as `docker load` extracts it.
func archiveName(n string) string {
	n = path.Clean("/" + n)
	return strings.TrimPrefix(n, "/")
}

// readArchiveMeta reads a `docker save` tarball's metadata and refuses one
// `docker load` might read differently: metadata that is not a plain file
// or that appears twice, more than one image, a config that is not a
// sha256 digest.
func readArchiveMeta(r io.Reader) (archiveMeta, error) {
	var m archiveMeta
	var repositories map[string]map[string]string
	seen := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("not a docker save tarball: %w", err)
		}
		name := archiveName(h.Name)
		var into any
		switch name {
		case "manifest.json":
			into = &m.manifest
		case "repositories":
			into = &repositories
		case "index.json":
			into = &m.index
		default:
			continue
		}
		if seen[name] {
			return m, fmt.Errorf("%s appears twice", name)
		}
		seen[name] = true
		if h.Typeflag != tar.TypeReg {
			return m, fmt.Errorf("%s is not a regular file", name)
		}
		if h.Size > maxArchiveMeta {
			return m, fmt.Errorf("%s is over %d bytes", name, maxArchiveMeta)
		}
		if err := json.NewDecoder(io.LimitReader(tr, maxArchiveMeta)).Decode(into); err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
	}
	if !seen["manifest.json"] {
		return m, errors.New("not a docker save tarball: no manifest.json")
	}
	if len(m.manifest) != 1 {
		return m, fmt.Errorf("holds %d images, want exactly 1", len(m.manifest))
	}
	var config string
	if err := json.Unmarshal(m.manifest[0]["Config"], &config); err != nil {
		return m, fmt.Errorf("manifest.json: no config: %v", err)
	}
	hexID := strings.TrimSuffix(strings.TrimPrefix(archiveName(config), "blobs/sha256/"), ".json")
	if len(hexID) != 64 || strings.Trim(hexID, "0123456789abcdef") != "" {
		return m, fmt.Errorf("manifest.json: config %q is not a sha256 digest", config)
	}
	m.id = "sha256:" + hexID
	if raw, ok := m.manifest[0]["RepoTags"]; ok {
		var tags []string
		if err := json.Unmarshal(raw, &tags); err != nil {
			return m, fmt.Errorf("manifest.json: RepoTags: %v", err)
		}
		m.names = append(m.names, tags...)
	}
	for repo, tags := range repositories {
		for tag := range tags {
			m.names = append(m.names, repo+":"+tag)
		}
	}
	if m.index != nil {
		var idx struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		b, _ := json.Marshal(m.index)
		if err := json.Unmarshal(b, &idx); err != nil {
			return m, fmt.Errorf("index.json: %v", err)
		}
		for _, d := range idx.Manifests {
			for k, v := range d.Annotations {
				if k == "io.containerd.image.name" || k == "org.opencontainers.image.ref.name" {
					m.names = append(m.names, v)
				}
			}
		}
	}
	return m, nil
}

// onlyNames refuses a tarball that names any image other than ref.
func (m archiveMeta) onlyNames(ref string) error {
	for _, n := range m.names {
		if !sameImageName(n, ref) {
			return fmt.Errorf("image tarball names %q besides the job's image %q: refused (it would re-tag that image on this host)", n, ref)
		}
	}
	return nil
}

// normalizeRef spells an image reference the way the Engine resolves it:
// docker.io/library/ and a missing :latest are implied.
func normalizeRef(ref string) string {
	digest := ""
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref, digest = ref[:i], ref[i:]
	}
	name, tag := ref, ""
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		name, tag = ref[:i], ref[i+1:]
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	for _, p := range []string{"docker.io/", "index.docker.io/"} {
		name = strings.TrimPrefix(name, p)
	}
	name = strings.TrimPrefix(name, "library/")
	if tag != "" {
		name += ":" + tag
	}
	return name + digest
}

// sameImageName reports whether name, as a tarball gives it, is ref; an
// OCI ref.name annotation may be the tag alone.
func sameImageName(name, ref string) bool {
	n, r := normalizeRef(name), normalizeRef(ref)
	if n == r {
		return true
	}
	_, tag := splitImageRef(ref)
	return !strings.ContainsAny(name, "/:@") && name == tag
}

// LoadArtifact loads the `docker save` tarball that open reads (it is
// called once to inspect the tarball and, unless the Engine already holds
// its image, once more to load it) as the image of a job that names ref,
// and returns the image's ID, which the job must run. A tarball holding
// more than one image, or naming any image other than ref, is refused; the
// image is loaded without any name, so no tag on the host moves.
func (im *Images) LoadArtifact(ctx context.Context, open func() (io.ReadCloser, error), ref string) (id string, err error) {
	rc, err := open()
	if err != nil {
		return "", err
	}
	m, err := readArchiveMeta(rc)
	rc.Close()
	if err != nil {
		return "", fmt.Errorf("image tarball: %w", err)
	}
	if err := m.onlyNames(ref); err != nil {
		return "", err
	}
	if has, err := im.Has(ctx, m.id); err != nil || has {
		return m.id, err
	}
	rc, err = open()
	if err != nil {
		return "", err
	}
	defer rc.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(stripArchiveNames(rc, pw, m)) }()
	err = im.Load(ctx, pr)
	pr.CloseWithError(errors.New("load ended"))
	if err != nil {
		return "", err
	}
	has, err := im.Has(ctx, m.id)
	if err == nil && !has {
		err = fmt.Errorf("docker load did not produce image %s", m.id)
	}
	if err != nil {
		return "", err
	}
	return m.id, nil
}

// stripArchiveNames copies the tarball r to w without the names of its
// image: manifest.json and index.json are replaced by m's, without
// RepoTags and name annotations, and repositories is left out.
func stripArchiveNames(r io.Reader, w io.Writer, m archiveMeta) error {
	man := make([]map[string]json.RawMessage, len(m.manifest))
	for i, e := range m.manifest {
		man[i] = map[string]json.RawMessage{}
		for k, v := range e {
			if k != "RepoTags" {
				man[i][k] = v
			}
		}
	}
	manifest, err := json.Marshal(man)
	if err != nil {
		return err
	}
	var index []byte
	if m.index != nil {
		idx := map[string]any{}
		for k, v := range m.index {
			idx[k] = v
		}
		var ms []map[string]any
		if err := json.Unmarshal(m.index["manifests"], &ms); err == nil {
			for _, d := range ms {
				if a, ok := d["annotations"].(map[string]any); ok {
					delete(a, "io.containerd.image.name")
					delete(a, "org.opencontainers.image.ref.name")
				}
			}
			idx["manifests"] = ms
		}
		if index, err = json.Marshal(idx); err != nil {
			return err
		}
	}
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		var body []byte
		switch archiveName(h.Name) {
		case "repositories":
			continue
		case "manifest.json":
			body = manifest
		case "index.json":
			body = index
		default:
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
			continue
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	return tw.Close()
}
