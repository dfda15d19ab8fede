//go:build linux

package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroups creates one cgroup per job under a parent the daemon owns.
type cgroups struct {
	version int    // 1 or 2
	parent  string // directory holding the job cgroups
	memory  bool   // memory limits can be set
	desc    string
}

// detectCgroups finds a writable cgroup hierarchy: cgroup v2 when
// /sys/fs/cgroup/cgroup.controllers exists, the v1 memory controller
// otherwise. It returns nil and the reason when neither is usable.
func detectCgroups(name string) (*cgroups, string) {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return detectV2(name)
	}
	return detectV1(name)
}

// selfCgroup returns this thread's path in the hierarchy whose
// /proc/<pid>/cgroup line matches controller ("" for v2's unified line).
func selfCgroup(file, controller string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return parts[2], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no %q cgroup in %s", controller, file)
}

func detectV1(name string) (*cgroups, string) {
	mount := filepath.Join(cgroupRoot, "memory")
	if _, err := os.Stat(filepath.Join(mount, "memory.limit_in_bytes")); err != nil {
		return nil, "no cgroup v2 and no cgroup v1 memory controller at " + mount
	}
	self, err := selfCgroup("/proc/self/cgroup", "memory")
	if err != nil {
		return nil, "cgroup v1: " + err.Error()
	}
	base := filepath.Join(mount, self)
	if _, err := os.Stat(base); err != nil {
		// In a cgroup namespace our path may not be visible as is.
		base = mount
	}
	parent := filepath.Join(base, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Sprintf("cgroup v1 memory controller not writable: %v", err)
	}
	sweepStale(parent)
	return &cgroups{version: 1, parent: parent, memory: true, desc: "cgroup v1 memory at " + parent}, ""
}

func detectV2(name string) (*cgroups, string) {
	self, err := selfCgroup("/proc/self/cgroup", "")
	if err != nil {
		return nil, "cgroup v2: " + err.Error()
	}
	base := filepath.Join(cgroupRoot, self)
	parent := filepath.Join(base, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Sprintf("cgroup v2 not writable: %v", err)
	}
	sweepStale(parent)
	cg := &cgroups{version: 2, parent: parent}
	// Job cgroups can only get the memory controller if every ancestor
	// delegates it; a cgroup with processes in it (ours, unless we are at
	// the root) cannot delegate, so this may fail.
	_ = os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+memory"), 0)
	err = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0)
	if err == nil {
		cg.memory = true
		cg.desc = "cgroup v2 memory at " + parent
	} else {
		cg.desc = fmt.Sprintf("cgroup v2 at %s for kill only (memory controller not delegated: %v)", parent, err)
	}
	return cg, ""
}

// jobCgroup is one job's cgroup.
type jobCgroup struct {
	cg  *cgroups
	dir string
}

func (c *cgroups) create(id string, memoryMB int) (*jobCgroup, error) {
	dir := filepath.Join(c.parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("runtime: create cgroup: %w", err)
	}
	j := &jobCgroup{cg: c, dir: dir}
	if memoryMB > 0 && c.memory {
		limit := []byte(strconv.FormatInt(int64(memoryMB)<<20, 10))
		var err error
		switch c.version {
		case 1:
			err = os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), limit, 0)
			if err == nil {
				// No swapping around the limit, where swap accounting exists.
				_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), limit, 0)
			}
		case 2:
			err = os.WriteFile(filepath.Join(dir, "memory.max"), limit, 0)
			if err == nil {
				_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
			}
		}
		if err != nil {
			_ = j.destroy()
			return nil, fmt.Errorf("runtime: set memory limit: %w", err)
		}
	}
	return j, nil
}

// enterThread moves the calling locked thread into the job's cgroup v1
// hierarchies, and returns the function that moves it back. On an error the
// thread may be left anywhere: the caller must discard it.
func (j *jobCgroup) enterThread() (func() error, error) {
	orig, err := selfCgroup("/proc/thread-self/cgroup", "memory")
	if err != nil {
		return nil, fmt.Errorf("runtime: read thread cgroup: %w", err)
	}
	origTasks := filepath.Join(cgroupRoot, "memory", orig, "tasks")
	if _, err := os.Stat(origTasks); err != nil {
		return nil, fmt.Errorf("runtime: thread cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(j.dir, "tasks"), []byte("0"), 0); err != nil {
		return nil, fmt.Errorf("runtime: enter job cgroup: %w", err)
	}
	return func() error { return os.WriteFile(origTasks, []byte("0"), 0) }, nil
}

func (j *jobCgroup) pids() []int {
	b, err := os.ReadFile(filepath.Join(j.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	self := os.Getpid()
	for _, f := range strings.Fields(string(b)) {
		// Never list the daemon itself (one of its threads is briefly
		// in the cgroup while it forks a job).
		if p, err := strconv.Atoi(f); err == nil && p != self {
			out = append(out, p)
		}
	}
	return out
}

// kill SIGKILLs every process in the cgroup; it reports whether any was
// left before this call.
func (j *jobCgroup) kill() bool {
	if j.cg.version == 2 {
		if err := os.WriteFile(filepath.Join(j.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return len(j.pids()) > 0
		}
	}
	ps := j.pids()
	for _, p := range ps {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return len(ps) > 0
}

// oomKilled reports whether the kernel killed a process of the job for
// exceeding its memory limit.
func (j *jobCgroup) oomKilled() bool {
	file := "memory.oom_control"
	if j.cg.version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(j.dir, file))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
			return true
		}
	}
	return false
}

// destroy kills what is left and removes the cgroup.
func (j *jobCgroup) destroy() error {
	var err error
	for i := 0; i < 100; i++ {
		j.kill()
		if err = os.Remove(j.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("runtime: remove cgroup %s: %w", j.dir, err)
}

func (c *cgroups) describe() string   { return c.desc }
func (c *cgroups) limitsMemory() bool { return c.memory }

// sweepStale removes job cgroups ("<id>-<pid>-<seq>") left by daemon
// processes that no longer exist, killing anything still inside.
func sweepStale(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	v := 1
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		v = 2
	}
	for _, e := range ents {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) < 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // its daemon is alive (or we cannot tell)
		}
		j := &jobCgroup{cg: &cgroups{version: v, parent: parent}, dir: filepath.Join(parent, e.Name())}
		_ = j.destroy()
	}
}
