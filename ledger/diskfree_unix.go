//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package ledger

import "syscall"

// freeSpace is the space, in bytes, an unprivileged writer may still use on
// the file system holding dir.
func freeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
