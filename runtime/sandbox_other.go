//go:build !linux

package runtime

import (
	"errors"
	"os/exec"
)

type sandbox struct {
	network bool
	tmpMB   int
	root    string
}

func detectSandbox(sandbox) (*sandbox, string) { return nil, "job namespaces exist only on linux" }

func (*sandbox) describe() string { return "" }

func spawn(cmd *exec.Cmd, _ *jobCgroup, _ *sandbox, _, _ string) error { return cmd.Start() }

func mountQuota(string, int, int) error { return errors.New("work dir quotas exist only on linux") }

func unmountQuota(string) {}
