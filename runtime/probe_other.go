//go:build !linux

package runtime

import "errors"

// CgroupStatus describes the host's cgroup hierarchy.
type CgroupStatus struct {
	Version     int
	Controllers []string
	Usable      bool
	Detail      string
}

// ProbeCgroups: cgroups exist only on linux.
func ProbeCgroups() CgroupStatus { return CgroupStatus{Detail: "cgroups exist only on linux"} }

// Namespace kinds ProbeNamespace knows.
const (
	NamespaceNet   = "net"
	NamespaceMount = "mount"
	NamespaceUser  = "user"
)

// ProbeNamespace: namespaces exist only on linux.
func ProbeNamespace(string) error { return errors.New("namespaces exist only on linux") }
