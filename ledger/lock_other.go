//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package ledger

// dirLock is a no-op where flock is unavailable; Badger's own directory lock
// still refuses a second open, and Open maps its error to ErrInUse.
type dirLock struct{}

func lockDir(string) (*dirLock, error) { return &dirLock{}, nil }

func (*dirLock) release() {}
