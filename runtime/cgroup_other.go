//go:build !linux

package runtime

import "errors"

type cgroups struct{}

type jobCgroup struct{}

func detectCgroups(string) (*cgroups, string) { return nil, "cgroups exist only on linux" }

func (*cgroups) create(string, jobLimits) (*jobCgroup, error) { return nil, errors.New("no cgroups") }
func (*jobCgroup) pids() []int                                { return nil }
func (*jobCgroup) kill() bool                                 { return false }
func (*jobCgroup) oomKilled() bool                            { return false }
func (*jobCgroup) destroy() error                             { return nil }

func (*cgroups) describe() string   { return "" }
func (*cgroups) limitsMemory() bool { return false }
func (*cgroups) limitsPids() bool   { return false }
func (*cgroups) limitsCPU() bool    { return false }

func hostMemoryMB() int { return 0 }

// hostSwaps is unknown off linux: assume the host swaps.
var hostSwaps = func() bool { return true }
