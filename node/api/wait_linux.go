//go:build linux

package api

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// pathWatch wakes at each change of a directory's entries: the socket's
// directory, or while that does not exist yet, its nearest existing
// parent (the data dir may be made by the daemon being waited for).
type pathWatch struct {
	f    *os.File // the inotify instance, non-blocking, in Go's poller
	path string
}

func newPathWatch(path string) (*pathWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	w := &pathWatch{f: os.NewFile(uintptr(fd), "inotify"), path: path}
	if err := w.arm(); err != nil {
		w.f.Close()
		return nil, err
	}
	return w, nil
}

// arm watches the deepest existing directory on the way to the socket;
// call it before each look at the socket, so that no change after the
// look goes unseen.
func (w *pathWatch) arm() error {
	const mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	var err error
	sc, cerr := w.f.SyscallConn()
	if cerr != nil {
		return cerr
	}
	for dir := filepath.Dir(w.path); ; dir = filepath.Dir(dir) {
		if cerr := sc.Control(func(fd uintptr) { _, err = unix.InotifyAddWatch(int(fd), dir, mask) }); cerr != nil {
			return cerr
		}
		if err == nil || !errors.Is(err, unix.ENOENT) || dir == filepath.Dir(dir) {
			return err
		}
	}
}

// wait returns at the next change of the watched directories, or with
// ctx's error at its end.
func (w *pathWatch) wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [4096]byte
	_, err := w.f.Read(buf[:])
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (w *pathWatch) close() { w.f.Close() }
