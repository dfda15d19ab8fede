package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// ErrOutputsTooLarge is returned when a job's outputs exceed the cap.
var ErrOutputsTooLarge = errors.New("runtime: outputs exceed size cap")

// ErrTooManyOutputs is returned when a job's outputs hold more than
// MaxOutputFiles files.
var ErrTooManyOutputs = fmt.Errorf("runtime: outputs exceed %d files", MaxOutputFiles)

// ErrOutputsSkipped is returned, with the files that were collected, when
// some entries of the outputs dir were left out (symlinks, entries the job
// swapped or removed while they were read, unreadable entries); the error
// lists them.
var ErrOutputsSkipped = errors.New("runtime: outputs skipped")

// MaxOutputFiles caps the number of files CollectOutputs returns.
const MaxOutputFiles = 1000

// CollectOutputs copies the regular files under workDir/outputsRel into
// destDir, keeping the tree, and returns them with their sizes and SHA-256
// checksums, in lexical order. It must run after the job has ended, but
// does not trust that it did: the tree is read through WalkJobTree, so no
// symlink is ever followed, whenever it appeared. A symlink among the
// outputs is skipped and the other files are still collected: the error
// then wraps ErrOutputsSkipped and names each skipped entry. Other special
// files (fifos, sockets, devices) are skipped silently. An outputs dir that
// is itself a symlink (or below one) is refused. maxBytes caps the total
// size (<= 0: no cap); past it CollectOutputs stops with
// ErrOutputsTooLarge, and past MaxOutputFiles files with
// ErrTooManyOutputs, returning what it had copied. A missing outputs dir
// yields no files.
func CollectOutputs(workDir, outputsRel, destDir string, maxBytes int64) ([]terms.OutputFile, error) {
	s := Spec{Outputs: outputsRel}
	rel, err := s.outputsRel()
	if err != nil {
		return nil, fmt.Errorf("runtime: collect outputs: %w", err)
	}
	if _, err := os.Stat(workDir); err != nil {
		return nil, fmt.Errorf("runtime: collect outputs: work dir: %w", err)
	}
	// destDir is made for the first entry: a job that leaves no outputs
	// (most) costs no directory to make and remove.
	made := false
	mkdest := func() error {
		if made {
			return nil
		}
		made = true
		return os.MkdirAll(destDir, 0o755)
	}
	var out []terms.OutputFile
	var skipped []string
	skip := func(r, why string) { skipped = append(skipped, r+": "+why) }
	var total int64
	err = WalkJobTree(workDir, rel, func(e TreeEntry, err error) error {
		r := filepath.FromSlash(e.Path)
		if err != nil {
			skip(e.Path, errText(err))
			return nil
		}
		dst := filepath.Join(destDir, r)
		if e.Mode.IsDir() || e.Mode.IsRegular() {
			if err := mkdest(); err != nil {
				return err
			}
		}
		switch {
		case e.Mode.IsDir():
			return os.MkdirAll(dst, 0o755)
		case e.Mode&fs.ModeSymlink != 0:
			skip(e.Path, ErrSymlink.Error())
			return nil
		case !e.Mode.IsRegular():
			return nil
		}
		if len(out) == MaxOutputFiles {
			return ErrTooManyOutputs
		}
		in, err := e.Open()
		if err != nil {
			skip(e.Path, errText(err))
			return nil
		}
		f, err := copyCapped(in, dst, maxBytes, &total)
		in.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		f.Path = e.Path
		out = append(out, f)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) && len(out) == 0 && len(skipped) == 0 {
		return nil, nil // no outputs dir
	}
	if err != nil {
		return out, fmt.Errorf("runtime: collect outputs: %w", err)
	}
	if len(skipped) > 0 {
		return out, fmt.Errorf("%w (%d): %s", ErrOutputsSkipped, len(skipped), strings.Join(skipped, "; "))
	}
	return out, nil
}

// within reports whether p is dir or below it (both cleaned, absolute).
func within(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// copyCapped copies in, a file of the job's, to dst, counting it against
// maxBytes in total.
func copyCapped(in *os.File, dst string, maxBytes int64, total *int64) (terms.OutputFile, error) {
	o, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return terms.OutputFile{}, err
	}
	h := sha256.New()
	var r io.Reader = in
	if maxBytes > 0 {
		r = io.LimitReader(in, maxBytes-*total+1)
	}
	n, err := io.Copy(io.MultiWriter(o, h), r)
	*total += n
	if cerr := o.Close(); err == nil {
		err = cerr
	}
	if err == nil && maxBytes > 0 && *total > maxBytes {
		err = fmt.Errorf("%w (%d bytes)", ErrOutputsTooLarge, maxBytes)
	}
	if err != nil {
		_ = os.Remove(dst)
		return terms.OutputFile{}, err
	}
	return terms.OutputFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// WipeOrphans removes the job work dirs under root for which keep returns
// false (keep may be nil: wipe all), e.g. at daemon start for jobs whose
// lease is no longer running. Entries that are not job dirs are left alone.
// It returns how many dirs it removed.
func WipeOrphans(root string, keep func(id string) bool) (int, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("runtime: wipe orphans: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !idRE.MatchString(e.Name()) || (keep != nil && keep(e.Name())) {
			continue
		}
		if err := removeWorkDir(filepath.Join(root, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("runtime: wipe orphans: %w", errors.Join(errs...))
	}
	return n, nil
}

// Prune removes the entries directly under dir (a provider's job logs or
// collected outputs, one per lease) last modified more than olderThan ago,
// and returns how many it removed. Symlinks are removed, never followed. A
// missing dir prunes nothing; olderThan must be positive.
func Prune(dir string, olderThan time.Duration) (int, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("runtime: prune %s: retention %v must be positive", dir, olderThan)
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("runtime: prune: %w", err)
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	var errs []error
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if fi.IsDir() {
			err = removeTree(p)
		} else {
			err = os.Remove(p)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("runtime: prune %s: %w", dir, errors.Join(errs...))
	}
	return n, nil
}

// PruneToSize keeps the entries directly under dirs (a provider's job
// logs and collected outputs, one per lease) within maxBytes in total:
// while they hold more, the least recently written entry goes first,
// except those keep names (nil keeps none). An entry's size is its files'
// sizes, its age its newest file's; symlinks count nothing and are never
// followed. It returns how many entries it removed and the bytes left.
func PruneToSize(dirs []string, maxBytes int64, keep func(name string) bool) (removed int, total int64, err error) {
	type entry struct {
		path, name string
		size       int64
		mod        time.Time
	}
	var ents []entry
	for _, dir := range dirs {
		des, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("runtime: prune: %w", err)
		}
		for _, de := range des {
			e := entry{path: filepath.Join(dir, de.Name()), name: de.Name()}
			_ = filepath.WalkDir(e.path, func(_ string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				fi, err := d.Info()
				if err != nil {
					return nil
				}
				if fi.Mode().IsRegular() {
					e.size += fi.Size()
				}
				if fi.ModTime().After(e.mod) {
					e.mod = fi.ModTime()
				}
				return nil
			})
			total += e.size
			ents = append(ents, e)
		}
	}
	if total <= maxBytes {
		return 0, total, nil
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].mod.Before(ents[j].mod) })
	var errs []error
	for _, e := range ents {
		if total <= maxBytes {
			break
		}
		if keep != nil && keep(e.name) {
			continue
		}
		if err := removeTree(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		total -= e.size
		removed++
	}
	if len(errs) > 0 {
		return removed, total, fmt.Errorf("runtime: prune to size: %w", errors.Join(errs...))
	}
	return removed, total, nil
}
