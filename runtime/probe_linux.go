package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// CgroupStatus describes the host's cgroup hierarchy.
type CgroupStatus struct {
	// Version is 1 or 2 (0: no cgroup file system found).
	Version int
	// Controllers are the controllers available (v2: the root's
	// cgroup.controllers; v1: the mounted hierarchies), sorted.
	Controllers []string
	// Usable is whether the process sandbox can create job cgroups here,
	// and Detail says how (or why not), as the sandbox itself would.
	Usable bool
	Detail string
}

// ProbeCgroups reads which cgroup version and controllers the host has, and
// whether the process sandbox could use them (the same detection it runs).
func ProbeCgroups() CgroupStatus {
	return probeCgroups(cgroupRoot, func() (*cgroups, string) { return detectCgroups("gpumesh-doctor") })
}

func probeCgroups(root string, detect func() (*cgroups, string)) CgroupStatus {
	var st CgroupStatus
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		st.Version = 2
		st.Controllers = strings.Fields(string(b))
	} else if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(root, e.Name(), "tasks")); err == nil {
				st.Version = 1
				st.Controllers = append(st.Controllers, strings.Split(e.Name(), ",")...)
			}
		}
	}
	sort.Strings(st.Controllers)
	st.Controllers = dedup(st.Controllers)
	if st.Version == 0 {
		st.Detail = "no cgroup file system at " + root
		return st
	}
	cg, why := detect()
	if cg == nil {
		st.Detail = why
		return st
	}
	st.Usable, st.Detail = true, cg.describe()
	_ = os.Remove(cg.parent)
	return st
}

func dedup(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Namespace kinds ProbeNamespace knows.
const (
	NamespaceNet   = "net"
	NamespaceMount = "mount"
	NamespaceUser  = "user"
)

// ProbeNamespace reports whether this process can create a namespace of the
// given kind, by starting /bin/true (or this binary, where there is no
// /bin/true) in a new one.
func ProbeNamespace(kind string) error {
	var flag uintptr
	switch kind {
	case NamespaceNet:
		flag = syscall.CLONE_NEWNET
	case NamespaceMount:
		flag = syscall.CLONE_NEWNS
	case NamespaceUser:
		flag = syscall.CLONE_NEWUSER
	default:
		return &os.PathError{Op: "namespace", Path: kind, Err: syscall.EINVAL}
	}
	bin := "/bin/true"
	args := []string{}
	if _, err := os.Stat(bin); err != nil {
		// The binary itself, asked for its version, exits at once.
		if bin, err = os.Executable(); err != nil {
			return err
		}
		args = []string{"--version"}
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flag}
	return cmd.Run()
}
