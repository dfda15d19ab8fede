package runtime

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// mountPoints keeps the emptied mount points of ended jobs' work dirs for
// the next jobs, which rename one into place rather than create a
// directory. A work dir with a quota is a tmpfs mounted on a directory of
// the work root that the job never sees (the mount covers it from before
// the job starts), so once the tmpfs is unmounted that directory is as it
// was made: empty, the daemon's, 0700. On a disk file system creating and
// removing a directory are journaled inode allocations and frees (≈350 µs
// together on the CI VM's ext4, a tenth of a short job's sandbox), a
// rename within the root is not.
type mountPoints struct {
	root  string
	spare *idlePool[string]
	seq   atomic.Uint64
}

// spareMountPrefix names the kept mount points in the work root: never a
// job id (those start with a letter or digit, see idRE), so WipeOrphans
// leaves them alone.
const spareMountPrefix = ".spare-mount-"

// maxSpareMounts bounds the mount points kept.
const maxSpareMounts = 64

// newMountPoints keeps spare mount points in root, removing those an
// earlier daemon left there.
func newMountPoints(root string) *mountPoints {
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), spareMountPrefix) {
				_ = os.Remove(filepath.Join(root, e.Name())) // only if empty
			}
		}
	}
	return &mountPoints{root: root, spare: newIdlePool(maxSpareMounts, func(dir string) { _ = os.Remove(dir) })}
}

// take renames a spare mount point to wd, which must not exist. It
// reports whether it did (false: none, or wd exists: the caller creates
// wd itself, and learns which).
func (p *mountPoints) take(wd string) bool {
	if p == nil {
		return false
	}
	spare, ok := p.spare.take()
	if !ok {
		return false
	}
	if err := renameNoReplace(spare, wd); err != nil {
		if errors.Is(err, os.ErrExist) {
			p.spare.put(spare) // wd's owner is another; the spare is still one
		} else {
			_ = os.Remove(spare)
		}
		return false
	}
	return true
}

// keep takes wd, a work dir whose quota tmpfs was just unmounted, as a
// spare mount point when it is one as made (a directory of the daemon's,
// 0700, empty) and there is room, and reports whether it did (false: the
// caller removes wd).
func (p *mountPoints) keep(wd string) bool {
	if p == nil || filepath.Dir(wd) != p.root {
		return false
	}
	fi, err := os.Lstat(wd)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return false
	}
	if !emptyDir(wd) || !p.spare.room() {
		return false
	}
	spare := filepath.Join(p.root, spareMountPrefix+strconv.FormatUint(p.seq.Add(1), 10))
	if err := renameNoReplace(wd, spare); err != nil {
		return false
	}
	p.spare.put(spare) // (removed, should the pool have filled meanwhile)
	return true
}

// close removes the spares and keeps none from now on.
func (p *mountPoints) close() {
	if p != nil {
		p.spare.close()
	}
}

// emptyDir reports whether dir has no entry.
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err == io.EOF
}
