//go:build !linux

package runtime

import (
	"errors"
	"os/exec"
)

type cgroups struct{}

type jobCgroup struct{}

func detectCgroups(string) (*cgroups, string) { return nil, "cgroups exist only on linux" }

func (*cgroups) create(string, int) (*jobCgroup, error) { return nil, errors.New("no cgroups") }
func (*jobCgroup) start(cmd *exec.Cmd) error            { return cmd.Start() }
func (*jobCgroup) kill() bool                           { return false }
func (*jobCgroup) oomKilled() bool                      { return false }
func (*jobCgroup) destroy() error                       { return nil }

func (*cgroups) describe() string   { return "" }
func (*cgroups) limitsMemory() bool { return false }
func (*jobCgroup) pids() []int      { return nil }
