//go:build !linux

package runtime

import (
	"syscall"
	"time"
)

// killAndWait SIGKILLs each of pids; off linux there is no pidfd to wait
// on, so it reports at once whether they are gone (the caller lists them
// again until its deadline).
func killAndWait(pids []int, deadline time.Time) bool {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	time.Sleep(min(5*time.Millisecond, max(time.Until(deadline), 0)))
	for _, p := range pids {
		if syscall.Kill(p, 0) == nil {
			return false
		}
	}
	return true
}
