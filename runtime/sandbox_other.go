//go:build !linux

package runtime

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

type sandbox struct {
	network bool
	tmpMB   int
	root    string
}

func detectSandbox(sandbox) (*sandbox, string) { return nil, "job namespaces exist only on linux" }

func (*sandbox) describe() string { return "" }

// jobInit exists only on linux: spawn never returns one here.
type jobInit struct{}

func (*jobInit) exitStatus(ws syscall.WaitStatus) syscall.WaitStatus { return ws }

// jobNet exists only on linux: spawn never sets it up here.
type jobNet struct{ join, own *os.File }

func (*sandbox) reuseNets() {}

func (*sandbox) closeNets() {}

func (*sandbox) keepNet(f *os.File) {
	if f != nil {
		f.Close()
	}
}

func spawn(cmd *exec.Cmd, _ *jobCgroup, _ *sandbox, _, _ string, _ *jobNet) (*jobInit, error) {
	return nil, cmd.Start()
}

// renameNoReplace needs linux's renameat2: elsewhere no spare mount point
// is taken (there are no quota mounts either).
func renameNoReplace(string, string) error { return errors.ErrUnsupported }

func mountQuota(string, int, int) error { return errors.New("work dir quotas exist only on linux") }

func unmountQuota(string) {}

// MountScratch needs linux (see sandbox_linux.go).
func MountScratch(string, int) (func() error, error) {
	return nil, errors.New("runtime: scratch tmpfs mounts exist only on linux")
}

// CanSeal is false off linux: scratch tmpfs mounts need linux.
func CanSeal(string) bool { return false }
