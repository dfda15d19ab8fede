package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"testing"
)

// TestImagesSaveLoad: an image saved as a tarball, removed, then loaded
// from the tarball is back under its name.
func TestImagesSaveLoad(t *testing.T) {
	e := dockerExecutor(t) // imports the helper image, or skips
	ctx := context.Background()
	var sfx [4]byte
	_, _ = rand.Read(sfx[:])
	repo := "gpumesh-images-test-" + hex.EncodeToString(sfx[:])
	ref := repo + ":1"
	if err := e.c.do(ctx, http.MethodPost, "/images/"+testImage+"/tag?repo="+repo+"&tag=1", nil, nil); err != nil {
		t.Fatal(err)
	}
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
