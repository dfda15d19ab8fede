//go:build !linux

package runtime

import "os/exec"

type sandbox struct {
	network bool
	tmpMB   int
}

func detectSandbox(sandbox) (*sandbox, string) { return nil, "job namespaces exist only on linux" }

func (*sandbox) describe() string { return "" }

func spawn(cmd *exec.Cmd, _ *jobCgroup, _ *sandbox, _ string) error { return cmd.Start() }
