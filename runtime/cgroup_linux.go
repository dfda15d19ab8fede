//go:build linux

package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroups creates one cgroup per job under a parent the daemon owns.
type cgroups struct {
	version int    // 1 or 2
	parent  string // directory holding the job cgroups (v1: memory's)
	memory  bool   // memory limits can be set
	pids    bool   // process count limits can be set
	cpu     bool   // CPU bandwidth limits can be set
	// v1Extra maps the other cgroup v1 controllers used ("pids", "cpu")
	// to the directory holding the job cgroups in their hierarchy.
	v1Extra map[string]string
	desc    string
}

// cpuPeriod is the CFS bandwidth period, in microseconds.
const cpuPeriod = 100000

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

// v1Parent creates the job cgroups' parent in the v1 hierarchy of
// controller, under this process's own cgroup there.
func v1Parent(controller, name string) (string, error) {
	mount := filepath.Join(cgroupRoot, controller)
	self, err := selfCgroup("/proc/self/cgroup", controller)
	if err != nil {
		return "", err
	}
	base := filepath.Join(mount, self)
	if _, err := os.Stat(base); err != nil {
		// In a cgroup namespace our path may not be visible as is.
		base = mount
	}
	parent := filepath.Join(base, name)
	if err := writableParent(parent); err != nil {
		return "", fmt.Errorf("cgroup v1 %s controller not writable: %w", controller, err)
	}
	sweepStale(parent)
	return parent, nil
}

// writableParent creates parent and checks that job cgroups can be created
// in it (it may exist already, made by another user).
func writableParent(parent string) error {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	probe := filepath.Join(parent, fmt.Sprintf("probe-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return err
	}
	return os.Remove(probe)
}

func detectV1(name string) (*cgroups, string) {
	mount := filepath.Join(cgroupRoot, "memory")
	if _, err := os.Stat(filepath.Join(mount, "memory.limit_in_bytes")); err != nil {
		return nil, "no cgroup v2 and no cgroup v1 memory controller at " + mount
	}
	parent, err := v1Parent("memory", name)
	if err != nil {
		return nil, "cgroup v1: " + err.Error()
	}
	cg := &cgroups{version: 1, parent: parent, memory: true, v1Extra: map[string]string{}}
	ctrls := []string{"memory"}
	var missing []string
	for _, c := range []struct {
		name, file string
		on         *bool
	}{{"pids", "pids.max", &cg.pids}, {"cpu", "cpu.cfs_quota_us", &cg.cpu}} {
		p, err := v1Parent(c.name, name)
		if err == nil {
			_, err = os.Stat(filepath.Join(p, c.file))
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", c.name, err))
			continue
		}
		cg.v1Extra[c.name] = p
		*c.on = true
		ctrls = append(ctrls, c.name)
	}
	cg.desc = "cgroup v1 " + strings.Join(ctrls, ", ") + " at " + parent
	if len(missing) > 0 {
		cg.desc += " (unavailable: " + strings.Join(missing, "; ") + ")"
	}
	return cg, ""
}

func detectV2(name string) (*cgroups, string) {
	self, err := selfCgroup("/proc/self/cgroup", "")
	if err != nil {
		return nil, "cgroup v2: " + err.Error()
	}
	base := filepath.Join(cgroupRoot, self)
	parent := filepath.Join(base, name)
	if err := writableParent(parent); err != nil {
		return nil, fmt.Sprintf("cgroup v2 not writable: %v", err)
	}
	sweepStale(parent)
	cg := &cgroups{version: 2, parent: parent}
	// Job cgroups can only get a controller if every ancestor delegates
	// it; a cgroup with processes in it (ours, unless we are at the root)
	// cannot delegate, so this may fail.
	var ctrls, missing []string
	for _, c := range []struct {
		name string
		on   *bool
	}{{"memory", &cg.memory}, {"pids", &cg.pids}, {"cpu", &cg.cpu}} {
		_ = os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+"+c.name), 0)
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+c.name), 0); err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", c.name, err))
			continue
		}
		*c.on = true
		ctrls = append(ctrls, c.name)
	}
	if len(ctrls) == 0 {
		cg.desc = fmt.Sprintf("cgroup v2 at %s for kill only (controllers not delegated: %s)", parent, strings.Join(missing, "; "))
		return cg, ""
	}
	cg.desc = "cgroup v2 " + strings.Join(ctrls, ", ") + " at " + parent
	if len(missing) > 0 {
		cg.desc += " (not delegated: " + strings.Join(missing, "; ") + ")"
	}
	return cg, ""
}

// jobCgroup is one job's cgroup.
type jobCgroup struct {
	cg  *cgroups
	dir string
	// v1Extra are the job's cgroups in the other v1 hierarchies, by
	// controller.
	v1Extra map[string]string
}

func (c *cgroups) create(id string, lim jobLimits) (*jobCgroup, error) {
	dir := filepath.Join(c.parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("runtime: create cgroup: %w", err)
	}
	j := &jobCgroup{cg: c, dir: dir, v1Extra: map[string]string{}}
	fail := func(what string, err error) (*jobCgroup, error) {
		_ = j.destroy()
		return nil, fmt.Errorf("runtime: set %s limit: %w", what, err)
	}
	// in returns the job's directory for controller, creating it in its
	// v1 hierarchy.
	in := func(controller string) (string, error) {
		if c.version == 2 || controller == "memory" {
			return dir, nil
		}
		d := filepath.Join(c.v1Extra[controller], id)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		j.v1Extra[controller] = d
		return d, nil
	}
	write := func(d, file, v string) error { return os.WriteFile(filepath.Join(d, file), []byte(v), 0) }
	if lim.memoryMB > 0 && c.memory {
		limit := strconv.FormatInt(int64(lim.memoryMB)<<20, 10)
		var err error
		swapFile, swapLimit := "memory.swap.max", "0"
		switch c.version {
		case 1:
			err = write(dir, "memory.limit_in_bytes", limit)
			swapFile, swapLimit = "memory.memsw.limit_in_bytes", limit
		case 2:
			err = write(dir, "memory.max", limit)
		}
		if err != nil {
			return fail("memory", err)
		}
		// No swapping around the limit, where swap accounting exists; a
		// no-swap job on a host that swaps needs it.
		if err := write(dir, swapFile, swapLimit); err != nil && lim.noSwap && hostSwaps() {
			return fail("swap", err)
		}
	} else if lim.noSwap && hostSwaps() {
		return fail("swap", errors.New("no memory limit to hold swap to"))
	}
	if lim.pids > 0 && c.pids {
		d, err := in("pids")
		if err == nil {
			err = write(d, "pids.max", strconv.Itoa(lim.pids))
		}
		if err != nil {
			return fail("pids", err)
		}
	}
	if lim.cpus > 0 && c.cpu {
		quota := strconv.FormatInt(int64(lim.cpus*cpuPeriod), 10)
		d, err := in("cpu")
		if err == nil {
			if c.version == 2 {
				err = write(d, "cpu.max", quota+" "+strconv.Itoa(cpuPeriod))
			} else if err = write(d, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err == nil {
				err = write(d, "cpu.cfs_quota_us", quota)
			}
		}
		if err != nil {
			return fail("cpu", err)
		}
	}
	return j, nil
}

// enterThread moves the calling locked thread into the job's cgroup v1
// hierarchies. There is no way back: the thread (spawnIn's spare one)
// must be discarded after, and on an error it may be left anywhere.
func (j *jobCgroup) enterThread() error {
	dirs := []string{j.dir}
	for _, d := range j.v1Extra {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "tasks"), []byte("0"), 0); err != nil {
			return fmt.Errorf("runtime: enter job cgroup: %w", err)
		}
	}
	return nil
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

// destroy kills what is left and removes the cgroup once it is empty: on
// cgroup v2 when cgroup.events says so (waitUnpopulated), on v1 once every
// process it lists has exited (killAndWait). It fails when the cgroup is
// still busy after a second.
func (j *jobCgroup) destroy() error {
	deadline := time.Now().Add(time.Second)
	var busy error
	if j.cg.version == 2 {
		j.kill()
		busy = waitUnpopulated(j.dir, deadline)
	} else {
		// Each round waits for the exits of what it lists; the next lists
		// what those forked meanwhile. A list that did not change over an
		// exit (processes that exited but are still listed) ends it.
		var last []int
		for ps := j.pids(); len(ps) > 0 && !slices.Equal(ps, last); last, ps = ps, j.pids() {
			if !killAndWait(ps, deadline) {
				busy = fmt.Errorf("processes %v survived SIGKILL", ps)
				break
			}
		}
	}
	var err error
	for c, d := range j.v1Extra {
		if e := os.Remove(d); e != nil && !errors.Is(e, os.ErrNotExist) {
			err = errors.Join(err, e)
		} else {
			delete(j.v1Extra, c)
		}
	}
	if e := os.Remove(j.dir); e != nil && !errors.Is(e, os.ErrNotExist) {
		err = errors.Join(err, e)
	}
	if err != nil {
		return fmt.Errorf("runtime: remove cgroup %s: %w", j.dir, errors.Join(busy, err))
	}
	return nil
}

func (c *cgroups) describe() string   { return c.desc }
func (c *cgroups) limitsMemory() bool { return c.memory }
func (c *cgroups) limitsPids() bool   { return c.pids }
func (c *cgroups) limitsCPU() bool    { return c.cpu }

// hostSwaps reports whether the host has swap space (a variable: tests
// stand in a host that swaps).
var hostSwaps = func() bool {
	var si unix.Sysinfo_t
	return unix.Sysinfo(&si) == nil && si.Totalswap > 0
}

// hostMemoryMB is the host's physical memory.
func hostMemoryMB() int {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
}

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
