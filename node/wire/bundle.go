package wire

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// The outputs bundle is the body of a ProtoOutputs stream after its manifest
// frame: a tar archive holding exactly the manifest's files, in manifest
// order, as regular files. The provider writes it with WriteBundle; the
// renter's CLI checks and unpacks it with ExtractBundle.

// ErrExists is wrapped by ExtractBundle's error when a file it would write
// already exists in the destination and overwriting was not allowed.
var ErrExists = errors.New("already exists in the destination")

// WriteBundle writes the files outs, found under dir, to w as a tar
// archive. Each file contributes exactly its manifest size. The same
// files make the same bytes (no times are written: ExtractBundle sets
// none), so that a sealed artifact of the same data is the same.
func WriteBundle(w io.Writer, dir string, outs []terms.OutputFile) error {
	tw := tar.NewWriter(w)
	for _, o := range outs {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(o.Path)))
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: o.Path, Mode: 0o644, Size: o.Size, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err = tw.WriteHeader(hdr); err == nil {
			_, err = io.CopyN(tw, f, o.Size)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("bundle %s: %w", o.Path, err)
		}
	}
	return tw.Close()
}

// bundleName checks that a tar or manifest path names a file inside the
// destination and returns its cleaned slash form.
func bundleName(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) || strings.Contains(name, `\`) {
		return "", fmt.Errorf("bad output path %q", name)
	}
	if path.IsAbs(name) || filepath.IsAbs(name) {
		return "", fmt.Errorf("refusing absolute output path %q", name)
	}
	clean := path.Clean(name)
	if !filepath.IsLocal(filepath.FromSlash(clean)) || clean == "." {
		return "", fmt.Errorf("refusing output path %q: it escapes the destination", name)
	}
	return clean, nil
}

// ExtractBundle reads an outputs bundle from r and writes its regular files
// under dir, after checking each against manifest (same set of paths, sizes
// and SHA-256 sums). Directory entries are skipped; absolute paths, paths
// escaping dir, links and any other entry type are refused, as is
// overwriting an existing file unless force is set (the error then wraps
// ErrExists). Files are staged in a temporary directory inside dir and
// moved into place only once the whole archive has verified, so a failed
// extraction leaves dir as it was. It returns the files written, in archive
// order.
func ExtractBundle(r io.Reader, manifest []terms.OutputFile, dir string, force bool) ([]terms.OutputFile, error) {
	want := make(map[string]terms.OutputFile, len(manifest))
	for _, m := range manifest {
		p, err := bundleName(m.Path)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if _, dup := want[p]; dup {
			return nil, fmt.Errorf("manifest lists %q twice", p)
		}
		if m.Size < 0 {
			return nil, fmt.Errorf("manifest: negative size for %q", p)
		}
		want[p] = m
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	stagingDir, err := os.MkdirTemp(dir, ".gpumesh-fetch-")
	if err != nil {
		return nil, fmt.Errorf("staging directory: %w", err)
	}
	defer os.RemoveAll(stagingDir)
	staging := filepath.Base(stagingDir)
	stage, err := root.OpenRoot(staging)
	if err != nil {
		return nil, err
	}
	defer stage.Close()

	var got []terms.OutputFile
	seen := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		name, err := bundleName(hdr.Name)
		if err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg, tar.TypeRegA:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fmt.Errorf("refusing %q: links are not extracted", hdr.Name)
		default:
			return nil, fmt.Errorf("refusing %q: not a regular file (type %q)", hdr.Name, hdr.Typeflag)
		}
		m, ok := want[name]
		if !ok {
			return nil, fmt.Errorf("%q is not in the manifest", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q appears twice in the archive", name)
		}
		seen[name] = true
		if hdr.Size != m.Size {
			return nil, fmt.Errorf("%q: archive says %d bytes, manifest %d", name, hdr.Size, m.Size)
		}
		if err := checkFree(root, name, force); err != nil {
			return nil, err
		}
		sum, n, err := stageFile(stage, name, tr, hdr.Mode)
		if err != nil {
			return nil, err
		}
		if n != m.Size {
			return nil, fmt.Errorf("%q: got %d bytes, manifest says %d", name, n, m.Size)
		}
		if !strings.EqualFold(sum, m.SHA256) {
			return nil, fmt.Errorf("checksum mismatch for %q: got sha256 %s, manifest says %s", name, sum, m.SHA256)
		}
		got = append(got, terms.OutputFile{Path: name, Size: n, SHA256: sum})
	}
	var missing []string
	for p := range want {
		if !seen[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("missing from the archive: %s", strings.Join(missing, ", "))
	}
	for _, f := range got {
		if err := checkFree(root, f.Path, force); err != nil {
			return nil, err
		}
		if d := path.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("create %s: %w", d, err)
			}
		}
		if err := root.Rename(path.Join(staging, f.Path), f.Path); err != nil {
			return nil, fmt.Errorf("move %s into place: %w", f.Path, err)
		}
	}
	return got, nil
}

// checkFree fails when name exists under root and may not be overwritten.
func checkFree(root *os.Root, name string, force bool) error {
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("check %s: %w", name, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s exists in the destination and is not a regular file", name)
	case !force:
		return fmt.Errorf("%s %w", name, ErrExists)
	}
	return nil
}

// stageFile writes r to name under stage and returns its hex SHA-256 and
// length.
func stageFile(stage *os.Root, name string, r io.Reader, mode int64) (string, int64, error) {
	if d := path.Dir(name); d != "." {
		if err := stage.MkdirAll(d, 0o755); err != nil {
			return "", 0, fmt.Errorf("stage %s: %w", name, err)
		}
	}
	perm := os.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755
	}
	f, err := stage.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", 0, fmt.Errorf("stage %s: %w", name, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("write %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
