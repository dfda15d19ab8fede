package runtime

import (
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

	"golang.org/x/sys/unix"
)

// A job owns its work dir: while the provider reads it (a checkpoint taken
// while the job runs, the outputs after it ended) the job, or a process it
// left behind, may swap any file or directory for a symlink. The provider
// reads such trees only through WalkJobTree, which never follows a symlink:
// every step is an openat relative to a directory it already holds open,
// with O_NOFOLLOW, so a name swapped for a symlink between the listing and
// the open fails to open instead of leading out of the tree.

// ErrNotRegular is returned by TreeEntry.Open when the entry is no longer a
// regular file (the job replaced it), and ErrSymlink when it is a symlink.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrSymlink    = errors.New("symlink (not followed)")
	// ErrForeignLink is returned by TreeEntry.Open for a hard link to a
	// file the tree's owner does not own: a job that links a provider file
	// into its tree does not get it back.
	ErrForeignLink = errors.New("hard link to a file the job does not own")
)

// TreeEntry is an entry of a job-controlled tree, as WalkJobTree saw it
// (lstat: a symlink is a symlink).
type TreeEntry struct {
	// Path is slash-separated and relative to the tree's top.
	Path    string
	Mode    fs.FileMode // type bits only
	Size    int64
	ModTime time.Time

	dir      *os.File // the open parent directory
	name     string
	ownerUID uint32 // the tree top's owner
}

// Open opens a regular entry for reading. It never follows a symlink and
// checks on the open file that it still is a regular file (the job may have
// swapped it since it was listed), so it never blocks on a fifo either.
func (e TreeEntry) Open() (*os.File, error) {
	fd, err := unix.Openat(int(e.dir.Fd()), e.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			err = ErrSymlink
		}
		return nil, &fs.PathError{Op: "open", Path: e.Path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: e.Path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: e.Path, Err: ErrNotRegular}
	}
	if st.Nlink > 1 && st.Uid != e.ownerUID {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: e.Path, Err: ErrForeignLink}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: e.Path, Err: err}
	}
	return os.NewFile(uintptr(fd), e.Path), nil
}

// WalkFunc is called by WalkJobTree for each entry, parents before their
// children, in lexical order. err is non-nil when the entry could not be
// read (a directory that could not be opened or listed, a name that
// vanished is not reported). Returning fs.SkipDir for a directory skips it;
// any other non-nil error stops the walk and is returned.
type WalkFunc func(e TreeEntry, err error) error

// jobTreeHook, when set (tests), is called with each entry's path after the
// entry was listed and before it is opened or descended into: where a job
// racing the provider would swap it.
var jobTreeHook func(rel string)

// WalkJobTree walks the tree at workDir/rel (rel may be "" or "."),
// calling fn for every entry below it; the top itself is not passed to fn.
// workDir is the provider's and is opened as given; no component of rel nor
// anything below it is ever followed when it is a symlink. A top that is
// missing yields an error wrapping fs.ErrNotExist; one that is a symlink or
// not a directory is refused.
func WalkJobTree(workDir, rel string, fn WalkFunc) error {
	top, err := openJobDir(workDir, rel)
	if err != nil {
		return err
	}
	defer top.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(top.Fd()), &st); err != nil {
		return err
	}
	err = walkDirFD(top, "", st.Uid, fn)
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

// openJobDir opens workDir/rel, refusing a symlink at any step of rel.
func openJobDir(workDir, rel string) (*os.File, error) {
	d, err := os.OpenFile(workDir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	rel = filepath.ToSlash(filepath.Clean(rel))
	if rel == "." {
		return d, nil
	}
	if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
		d.Close()
		return nil, fmt.Errorf("%s: must be a sub-directory of %s", rel, workDir)
	}
	done := ""
	for _, c := range strings.Split(rel, "/") {
		done = path.Join(done, c)
		nd, err := openDirAt(d, c, done)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = nd
	}
	return d, nil
}

// openDirAt opens the directory name in parent without following a
// symlink; p names it in errors.
func openDirAt(parent *os.File, name, p string) (*os.File, error) {
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			// Say which of the two it is, if it still is.
			var st unix.Stat_t
			if unix.Fstatat(int(parent.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = ErrSymlink
			} else {
				err = unix.ENOTDIR
			}
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(parent.Name(), name)), nil
}

func walkDirFD(dir *os.File, prefix string, owner uint32, fn WalkFunc) error {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	return walkNames(dir, prefix, names, owner, fn)
}

func walkNames(dir *os.File, prefix string, names []string, owner uint32, fn WalkFunc) error {
	sort.Strings(names)
	for _, name := range names {
		p := path.Join(prefix, name)
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue // renamed away meanwhile
			}
			if r := fn(TreeEntry{Path: p}, &fs.PathError{Op: "lstat", Path: p, Err: err}); r != nil && r != fs.SkipDir {
				return r
			}
			continue
		}
		e := TreeEntry{Path: p, Mode: modeType(uint32(st.Mode)), Size: st.Size,
			ModTime: time.Unix(st.Mtim.Unix()), dir: dir, name: name, ownerUID: owner}
		if hook := jobTreeHook; hook != nil {
			hook(p)
		}
		err := fn(e, nil)
		if err == fs.SkipDir {
			continue
		}
		if err != nil {
			return err
		}
		if !e.Mode.IsDir() {
			continue
		}
		sub, err := openDirAt(dir, name, p)
		var subNames []string
		if err == nil {
			if subNames, err = sub.Readdirnames(-1); err != nil {
				sub.Close()
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // renamed away meanwhile
			}
			if r := fn(e, err); r != nil && r != fs.SkipDir {
				return r
			}
			continue
		}
		err = walkNames(sub, p, subNames, owner, fn)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func modeType(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}

// CopyJobTree copies the regular files and directories of the
// job-controlled tree workDir/rel into dst (created, 0700), never
// following a symlink (see WalkJobTree). Entries that are not regular
// files or directories, and those that changed type or vanished while it
// copied, are left out and named in skipped. A file longer than maxFile
// bytes (> 0) stops the copy with an error. A missing top copies nothing
// and returns an error wrapping fs.ErrNotExist.
func CopyJobTree(workDir, rel, dst string, maxFile int64) (skipped []string, err error) {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, err
	}
	skip := func(p, why string) { skipped = append(skipped, p+": "+why) }
	err = WalkJobTree(workDir, rel, func(e TreeEntry, err error) error {
		if err != nil {
			skip(e.Path, errText(err))
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(e.Path))
		switch {
		case e.Mode.IsDir():
			return os.Mkdir(target, 0o700)
		case e.Mode&fs.ModeSymlink != 0:
			skip(e.Path, ErrSymlink.Error())
			return nil
		case !e.Mode.IsRegular():
			skip(e.Path, ErrNotRegular.Error())
			return nil
		}
		in, err := e.Open()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // renamed away: the new name holds the complete file
		}
		if err != nil {
			skip(e.Path, errText(err))
			return nil
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		var r io.Reader = in
		if maxFile > 0 {
			r = io.LimitReader(in, maxFile+1)
		}
		n, err := io.Copy(out, r)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil && maxFile > 0 && n > maxFile {
			err = fmt.Errorf("%s: over %d bytes", e.Path, maxFile)
		}
		return err
	})
	return skipped, err
}

// errText is err's innermost text (a PathError's Err), the path being said
// by the caller.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
