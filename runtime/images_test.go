package runtime

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestImagesSaveLoad: an image saved as a tarball, removed, then loaded
// from the tarball is back under its name.
func TestImagesSaveLoad(t *testing.T) {
	e := dockerExecutor(t) // imports the helper image, or skips
	ctx := context.Background()
	repo, ref := tagTestImage(t, e, "images")
	t.Cleanup(func() { _ = e.c.do(ctx, http.MethodDelete, "/images/"+ref, nil, nil) })
	im := NewImages(DefaultDockerSocket)
	var tarball bytes.Buffer
	if err := im.Save(ctx, ref, &tarball); err != nil {
		t.Fatal(err)
	}
	if err := e.c.do(ctx, http.MethodDelete, "/images/"+ref, nil, nil); err != nil {
		t.Fatal(err)
	}
	if has, err := im.Has(ctx, ref); err != nil || has {
		t.Fatalf("after removal: has=%v %v", has, err)
	}
	if err := im.Load(ctx, bytes.NewReader(tarball.Bytes())); err != nil {
		t.Fatal(err)
	}
	if has, err := im.Has(ctx, ref); err != nil || !has {
		t.Fatalf("after load: has=%v %v", has, err)
	}
	if err := im.Load(ctx, bytes.NewReader([]byte("not a tarball"))); err == nil {
		t.Fatal("loaded garbage")
	}
	if err := im.Save(ctx, repo+":absent", &bytes.Buffer{}); err == nil {
		t.Fatal("saved an absent image")
	}
	if _, err := im.Has(ctx, "bad ref?"); err == nil {
		t.Fatal("bad reference accepted")
	}
}

// tarOf builds a tarball of entries (name -> content; a name ending in
// "@link" is written as a symlink to the content).
func tarOf(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(e[0], "@link") {
			h = &tar.Header{Name: strings.TrimSuffix(e[0], "@link"), Linkname: e[1], Typeflag: tar.TypeSymlink}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A `docker save` tarball from a renter is read before anything is loaded:
// one naming another image, holding two, or whose metadata docker load
// could read differently (twice, a symlink) is refused with a one-line
// reason. Needs no Docker.
func TestImageArchiveRefusesOtherNames(t *testing.T) {
	cfg := strings.Repeat("ab", 32)
	man := func(tags string) string {
		return `[{"Config":"` + cfg + `.json","RepoTags":` + tags + `,"Layers":["l/layer.tar"]}]`
	}
	ok := [2]string{"manifest.json", man(`["job:1"]`)}
	cases := []struct {
		name    string
		tarball []byte
		want    string // "" = accepted
	}{
		{"own tag", tarOf(t, ok, [2]string{"repositories", `{"job":{"1":"x"}}`}), ""},
		{"own tag spelled in full", tarOf(t, [2]string{"manifest.json", man(`["docker.io/library/job:1"]`)}), ""},
		{"no tag", tarOf(t, [2]string{"manifest.json", man(`null`)}), ""},
		{"OCI ref.name is the tag", tarOf(t, ok, [2]string{"index.json", `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"1"}}]}`}), ""},
		{"extra tag", tarOf(t, [2]string{"manifest.json", man(`["job:1","victim:latest"]`)}), `names "victim:latest"`},
		{"extra tag in repositories", tarOf(t, ok, [2]string{"repositories", `{"job":{"1":"x"},"victim":{"latest":"x"}}`}), `names "victim:latest"`},
		{"other name in index.json", tarOf(t, ok, [2]string{"index.json", `{"manifests":[{"annotations":{"io.containerd.image.name":"docker.io/library/victim:latest"}}]}`}), `names "docker.io/library/victim:latest"`},
		{"same name, other tag", tarOf(t, [2]string{"manifest.json", man(`["job:2"]`)}), `names "job:2"`},
		{"two images", tarOf(t, [2]string{"manifest.json", `[` + man(`["job:1"]`)[1:len(man(`["job:1"]`))-1] + `,` + man(`["job:1"]`)[1:]}), "holds 2 images"},
		{"manifest twice", tarOf(t, ok, [2]string{"./manifest.json", man(`["victim:latest"]`)}), "manifest.json appears twice"},
		{"manifest a symlink", tarOf(t, [2]string{"other.json", man(`["victim:latest"]`)}, [2]string{"manifest.json@link", "other.json"}), "manifest.json is not a regular file"},
		{"config not a digest", tarOf(t, [2]string{"manifest.json", `[{"Config":"../../etc/x.json","RepoTags":["job:1"]}]`}), "is not a sha256 digest"},
		{"no manifest", tarOf(t, [2]string{"x", "y"}), "no manifest.json"},
		{"not a tarball", []byte("not a tarball at all, just some bytes that go on for a while........................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................"), "not a docker save tarball"},
	}
	for _, c := range cases {
		m, err := readArchiveMeta(bytes.NewReader(c.tarball))
		if err == nil {
			err = m.onlyNames("job:1")
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want == "":
			if m.id != "sha256:"+cfg {
				t.Errorf("%s: id %q", c.name, m.id)
			}
		case err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// LoadArtifact against the Engine: a tarball tagging another image is
// refused before the Engine sees it, and an honest one is answered by ID
// without its name coming back (the Engine holds the image under the
// helper's name already, so nothing is loaded: node's
// TestImageArtifactLoadedOnFirstUse covers an actual load).
func TestLoadArtifactByID(t *testing.T) {
	e := dockerExecutor(t) // imports the helper image, or skips
	ctx := context.Background()
	_, ref := tagTestImage(t, e, "loadartifact")
	im := NewImages(DefaultDockerSocket)
	var tarball bytes.Buffer
	if err := im.Save(ctx, ref, &tarball); err != nil {
		t.Fatal(err)
	}
	if err := e.c.do(ctx, http.MethodDelete, "/images/"+ref, nil, nil); err != nil {
		t.Fatal(err)
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarball.Bytes())), nil }
	if _, err := im.LoadArtifact(ctx, open, "victim:latest"); err == nil || !strings.Contains(err.Error(), `names "`+ref+`" besides the job's image "victim:latest"`) {
		t.Fatalf("tarball naming another image: %v", err)
	}
	id, err := im.LoadArtifact(ctx, open, ref)
	if err != nil {
		t.Fatal(err)
	}
	if has, err := im.Has(ctx, id); err != nil || !has || !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("loaded as %q: has=%v %v", id, has, err)
	}
	if has, err := im.Has(ctx, ref); err != nil || has {
		t.Fatalf("the load tagged %s: has=%v %v", ref, has, err)
	}
}

// tagTestImage tags the helper image under a fresh repository name
// (gpumesh-NAME-test-<random>) and returns the repository and its ref ":1".
func tagTestImage(t *testing.T, e *DockerExecutor, name string) (repo, ref string) {
	t.Helper()
	var sfx [4]byte
	_, _ = rand.Read(sfx[:])
	repo = "gpumesh-" + name + "-test-" + hex.EncodeToString(sfx[:])
	ref = repo + ":1"
	if err := e.c.do(context.Background(), http.MethodPost, "/images/"+testImage+"/tag?repo="+repo+"&tag=1", nil, nil); err != nil {
		t.Fatal(err)
	}
	return repo, ref
}
