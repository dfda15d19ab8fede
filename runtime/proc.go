package runtime

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procStat is the part of /proc/<pid>/stat the runtime reads.
type procStat struct {
	state      byte
	pgrp       int
	cpuSeconds float64
	// reapedSeconds is the CPU time (user+system) of the children the
	// process waited for.
	reapedSeconds float64
	rssPages      int64
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name is parenthesized and may contain spaces or ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return procStat{}, fmt.Errorf("runtime: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("runtime: short /proc/%d/stat", pid)
	}
	var st procStat
	st.state = f[0][0]
	var e1, e2, e3, e4, e5, e6 error
	st.pgrp, e1 = strconv.Atoi(f[2])
	ut, e2 := strconv.ParseUint(f[11], 10, 64)
	stime, e3 := strconv.ParseUint(f[12], 10, 64)
	cut, e4 := strconv.ParseUint(f[13], 10, 64)
	cst, e5 := strconv.ParseUint(f[14], 10, 64)
	st.rssPages, e6 = strconv.ParseInt(f[21], 10, 64)
	for _, e := range []error{e1, e2, e3, e4, e5, e6} {
		if e != nil {
			return procStat{}, fmt.Errorf("runtime: parse /proc/%d/stat: %w", pid, e)
		}
	}
	st.cpuSeconds = float64(ut+stime) / clockTicks
	st.reapedSeconds = float64(cut+cst) / clockTicks
	return st, nil
}

// ProcessCPU returns the CPU time (user+system) of one process, and that
// of the children it reaped (a daemon's job processes), read from /proc.
func ProcessCPU(pid int) (own, reaped time.Duration, err error) {
	if pid <= 0 {
		return 0, 0, fmt.Errorf("runtime: invalid pid %d", pid)
	}
	st, err := readProcStat(pid)
	if err != nil {
		return 0, 0, fmt.Errorf("runtime: process %d CPU: %w", pid, err)
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return sec(st.cpuSeconds), sec(st.reapedSeconds), nil
}

// SampleProcess returns the CPU time (user+system, in seconds) and resident
// memory (MiB) of one process, read from /proc.
func SampleProcess(pid int) (cpuSeconds float64, rssMB int, err error) {
	if pid <= 0 {
		return 0, 0, fmt.Errorf("runtime: invalid pid %d", pid)
	}
	st, err := readProcStat(pid)
	if err != nil {
		return 0, 0, fmt.Errorf("runtime: sample process %d: %w", pid, err)
	}
	return st.cpuSeconds, int(st.rssPages * int64(os.Getpagesize()) >> 20), nil
}

// SampleGroup sums SampleProcess over every live process of a process group.
// It fails only if the group has no live process. A group whose leader is
// a job's init is read from the init's descendants (nsProcesses), any other
// from a scan of /proc.
func SampleGroup(pgid int) (cpuSeconds float64, rssMB int, err error) {
	if pgid <= 0 {
		return 0, 0, fmt.Errorf("runtime: invalid process group %d", pgid)
	}
	if groupGone(pgid) {
		return 0, 0, fmt.Errorf("runtime: process group %d has no live process", pgid)
	}
	pids, ok := nsProcesses(pgid)
	if !ok {
		var err error
		if pids, err = listPids(); err != nil {
			return 0, 0, err
		}
	}
	var rss int64
	found := false
	for _, pid := range pids {
		st, err := readProcStat(pid)
		if err != nil || st.pgrp != pgid {
			continue
		}
		found = true
		cpuSeconds += st.cpuSeconds
		rss += st.rssPages
	}
	if !found {
		return 0, 0, fmt.Errorf("runtime: process group %d has no live process", pgid)
	}
	return cpuSeconds, int(rss * int64(os.Getpagesize()) >> 20), nil
}

// maxNSWalk bounds the processes nsProcesses lists (a job's pids limit
// is 1024 by default); past it, the caller scans /proc.
const maxNSWalk = 4096

// nsProcesses lists pid and its descendants when pid is the first process
// of a PID namespace of its own (a process job's init: NSpid in its status
// ends in 1), and so every process of that namespace is among them: read
// from each one's children (/proc/PID/task/TID/children), a job's own
// processes instead of every process on the host. ok is false where pid is
// no such init, or the kernel lists no children (CONFIG_PROC_CHILDREN).
func nsProcesses(pid int) (pids []int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, false
	}
	first := false
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "NSpid:" {
			first = f[len(f)-1] == "1"
			break
		}
	}
	if !first {
		return nil, false
	}
	pids = []int{pid}
	for i := 0; i < len(pids); i++ {
		dir := "/proc/" + strconv.Itoa(pids[i]) + "/task"
		tasks, err := os.ReadDir(dir)
		if err != nil {
			if i == 0 {
				return nil, false
			}
			continue // ended meanwhile
		}
		for _, t := range tasks {
			b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
			if err != nil {
				if i == 0 && errors.Is(err, os.ErrNotExist) {
					return nil, false // no children files on this kernel
				}
				continue
			}
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					pids = append(pids, n)
				}
			}
		}
		if len(pids) > maxNSWalk {
			return nil, false
		}
	}
	return pids, true
}

// groupGone reports whether no process (not even a zombie) is left in
// process group pgid: one signal-0 probe instead of a scan of /proc. A
// group id reused by another group reads as not gone (the caller scans).
func groupGone(pgid int) bool {
	return pgid > 0 && errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// listPids lists the numeric entries of /proc.
func listPids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("runtime: list /proc: %w", err)
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
