//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const lockName = "gpumesh.lock"

// dirLock is an advisory exclusive lock on the data directory, held for the
// DB's lifetime. It is released by the kernel if the process dies.
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ledger: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &inUseError{dir: dir}
		}
		return nil, fmt.Errorf("ledger: lock data dir %s: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	// Closing the descriptor drops the flock, once no copy of it is left:
	// a process this one forked a moment ago holds a copy until it execs
	// (the descriptor is close-on-exec), and until then the directory is
	// still locked. Take the lock once more, waiting for those copies to
	// go, so that the directory is free when release returns and a DB
	// opened on it next, in this process too (a daemon restarted, a key
	// rotated after a stop), is not refused as in use.
	// Bounded: should another opener in this process have taken the
	// directory meanwhile, this gives up after releaseWait, and its
	// descriptor goes as soon as that one releases it.
	name := l.f.Name()
	l.f.Close()
	l.f = nil
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	freed := make(chan struct{})
	go func() {
		_ = syscall.Flock(fd, syscall.LOCK_EX)
		syscall.Close(fd)
		close(freed)
	}()
	t := time.NewTimer(releaseWait)
	defer t.Stop()
	select {
	case <-freed:
	case <-t.C:
	}
}

// releaseWait bounds how long release waits for copies of the lock's
// descriptor in processes just forked to go.
const releaseWait = 5 * time.Second
