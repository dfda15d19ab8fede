//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// killAndWait SIGKILLs each of pids through a pidfd (so a pid the kernel
// has since given to another process is never signalled) and waits, on
// the pidfds, until every one has exited or deadline passes; it reports
// whether they all exited. A pid that is already gone counts as exited.
func killAndWait(pids []int, deadline time.Time) bool {
	fds := make([]unix.PollFd, 0, len(pids))
	defer func() {
		for _, f := range fds {
			_ = unix.Close(int(f.Fd))
		}
	}()
	for _, p := range pids {
		fd, err := unix.PidfdOpen(p, 0)
		if err != nil {
			// ESRCH: gone already. Another error (a kernel before 5.3):
			// signal it by pid, and the caller's next listing sees it.
			if !errors.Is(err, unix.ESRCH) {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			continue
		}
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	live := fds
	for len(live) > 0 {
		ms := time.Until(deadline).Milliseconds()
		if ms <= 0 {
			return false
		}
		n, err := unix.Poll(live, int(min(ms, 1<<30)))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false
		case n == 0:
			return false
		}
		// A pidfd is readable once its process has exited; the rest wait
		// on (the closed ones stay in fds, to be closed at return).
		rest := make([]unix.PollFd, 0, len(live))
		for _, f := range live {
			if f.Revents == 0 {
				f.Revents = 0
				rest = append(rest, f)
			}
		}
		live = rest
	}
	return true
}

// waitUnpopulated waits until the cgroup v2 at dir holds no process
// (cgroup.events says "populated 0"), woken by inotify at each change of
// that file, or until deadline.
func waitUnpopulated(dir string, deadline time.Time) error {
	events := filepath.Join(dir, "cgroup.events")
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("runtime: watch %s: %w", events, err)
	}
	defer unix.Close(in)
	// Watched before the first read, so that no change after it is missed.
	if _, err := unix.InotifyAddWatch(in, events, unix.IN_MODIFY); err != nil {
		return fmt.Errorf("runtime: watch %s: %w", events, err)
	}
	buf := make([]byte, 4096)
	for {
		populated, err := cgroupPopulated(events)
		if err != nil || !populated {
			return err
		}
		ms := time.Until(deadline).Milliseconds()
		if ms <= 0 {
			return fmt.Errorf("runtime: cgroup %s still holds processes", dir)
		}
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(min(ms, 1<<30))); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("runtime: watch %s: %w", events, err)
		}
		// Drain the events; what they say is read from the file again.
		for {
			if n, err := unix.Read(in, buf); n <= 0 || err != nil {
				break
			}
		}
	}
}

// cgroupPopulated reads a cgroup v2 cgroup.events file's "populated" key.
func cgroupPopulated(events string) (bool, error) {
	b, err := os.ReadFile(events)
	if err != nil {
		return false, fmt.Errorf("runtime: read %s: %w", events, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return false, fmt.Errorf("runtime: %s has no populated key", events)
}
