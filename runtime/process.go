package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProcessOptions configures NewProcessExecutor. The zero value is usable.
type ProcessOptions struct {
	// UIDBase and UIDCount define the pool of unprivileged uids (each
	// with the equal gid) that jobs run as when the daemon runs as root:
	// each concurrent job gets its own, so jobs can read neither the
	// daemon's files nor each other's. Defaults: 200000 and 1000.
	UIDBase, UIDCount int
	// Grace is the SIGTERM→SIGKILL period at a job's deadline
	// (default DefaultGrace).
	Grace time.Duration
	// Path is the jobs' PATH (default "/usr/local/bin:/usr/bin:/bin").
	Path string
	// NoCgroups disables cgroups: no memory, pids or CPU limits, kill by
	// process group and uid only.
	NoCgroups bool
	// MemoryMB is each job's memory limit (private tmpfs files count
	// against it): a job's Spec.MemoryMB may lower it, never raise it (a
	// larger request is clamped to it, with a note in the job's stderr).
	// Default: half the host's RAM; < 0: none.
	MemoryMB int
	// Pids caps the number of processes and threads of each job.
	// Default DefaultPids; < 0: none.
	Pids int
	// CPUs caps each job's CPU time, in cores. Default: all of the host's
	// cores but one, at least one; < 0: none.
	CPUs float64
	// AllowNetwork lets jobs use the host's network. By default each job
	// gets its own network namespace with only a loopback interface: it
	// reaches neither the internet nor any port on the host.
	AllowNetwork bool
	// TmpMB is the size of each job's private /tmp, /var/tmp and /dev/shm
	// (fresh tmpfs mounts in its own mount namespace, counted against its
	// memory). Default DefaultTmpMB; < 0: the kernel's default size.
	TmpMB int
	// WorkDirMB is the size of each job's work dir, a tmpfs of its own
	// (counted against its memory) when the job namespaces are available:
	// past it writes fail with ENOSPC and the host's disk is untouched.
	// Default DefaultWorkDirMB; < 0: no quota (the work root's disk).
	WorkDirMB int
	// MaxLogBytes caps what a job writes to stdout and stderr together;
	// past it the output is dropped with a note (see CapWriter). Default
	// DefaultMaxLogBytes; < 0: no cap.
	MaxLogBytes int64
	// NoNamespaces disables the per-job namespaces (network, mount, IPC,
	// PID) and with them the job's init and seccomp filter. They need
	// root; without it the executor runs jobs without them and says so in
	// Limits and the log.
	NoNamespaces bool
	// Log receives lifecycle events (default: discarded).
	Log *slog.Logger
}

// DefaultPids is the default cap on a job's processes and threads.
const DefaultPids = 1024

// jobLimits are the limits one job's cgroup enforces (<= 0: none).
type jobLimits struct {
	memoryMB int
	pids     int
	cpus     float64
	// noSwap makes the cgroup's swap limit (none beside the memory
	// limit) a condition of the job's start, where the host swaps.
	noSwap bool
}

// defaultLimits fills in ProcessOptions' limit defaults.
func defaultLimits(opts ProcessOptions) jobLimits {
	l := jobLimits{memoryMB: memoryCapMB(opts.MemoryMB), pids: opts.Pids, cpus: opts.CPUs}
	if l.pids == 0 {
		l.pids = DefaultPids
	}
	if l.cpus == 0 {
		l.cpus = float64(max(1, goruntime.NumCPU()-1))
	}
	return l
}

// memoryCapMB is an executor's per-job memory cap from its option (0: the
// default, half the host's RAM; < 0: none).
func memoryCapMB(opt int) int {
	if opt == 0 {
		return hostMemoryMB() / 2
	}
	return opt
}

// jobMemoryMB is the memory limit of a job that asks for requested MiB (0:
// none) on an executor whose cap is capMB (<= 0: none): the smaller.
func jobMemoryMB(requested, capMB int) int {
	switch {
	case requested <= 0:
		return capMB
	case capMB <= 0:
		return requested
	}
	return min(requested, capMB)
}

// clampMemoryMB is jobMemoryMB, with a note in the job's log (nil: none)
// when the cap lowered its request.
func clampMemoryMB(requested, capMB int, log io.Writer) int {
	mb := jobMemoryMB(requested, capMB)
	if requested > 0 && mb < requested && log != nil {
		fmt.Fprintf(log, "gpumesh: memory_mb %d is over this provider's cap of %d MiB per job; the job is limited to %d MiB\n",
			requested, capMB, mb)
	}
	return mb
}

// DefaultWorkDirMB is the default size of a job's work dir.
const DefaultWorkDirMB = 4096

// DefaultTmpMB is the default size of a job's private /tmp, /var/tmp and
// /dev/shm.
const DefaultTmpMB = 512

// cgroupSeq makes job cgroup names unique across executors and processes.
var cgroupSeq atomic.Uint64

// ProcessExecutor runs jobs as host processes. See NewProcessExecutor.
type ProcessExecutor struct {
	root  string
	grace time.Duration
	path  string
	uids  *uidPool // nil: jobs run as the daemon's user
	cg    *cgroups // nil: no cgroups
	cgWhy string
	lim   jobLimits // defaults for every job
	sb    *sandbox  // nil: jobs share the daemon's namespaces
	sbWhy string
	// quotaMB is the size of each job's tmpfs work dir (<= 0: none);
	// points keeps their emptied mount points for the next jobs.
	quotaMB int
	points  *mountPoints
	maxLog  int64
	log     *slog.Logger
	mu      sync.Mutex
	jobs    map[string]bool
}

// NewProcessExecutor returns an executor that runs each job in root/<id>
// (mode 0700) in its own process group with a scrubbed environment (PATH,
// HOME and TMPDIR in the work dir, LANG, the spec's Env, CUDA_VISIBLE_DEVICES,
// GPUMESH_JOB_ID and GPUMESH_OUTPUTS). When the daemon runs as root each job
// runs under its own unprivileged uid and in its own network (loopback only,
// unless AllowNetwork), mount, IPC and PID namespaces (its init ends the
// whole job tree with it), under a seccomp filter, with fresh private /tmp,
// /var/tmp and /dev/shm, and a size-limited tmpfs as its work dir; where a
// cgroup hierarchy is writable each job gets a cgroup with its memory, pids
// and CPU limits (the options' defaults unless the spec sets its memory).
// stdout and stderr are capped together at MaxLogBytes. Limits reports what
// is enforced on this host.
func NewProcessExecutor(root string, opts ProcessOptions) (*ProcessExecutor, error) {
	e := &ProcessExecutor{
		grace:  opts.Grace,
		path:   opts.Path,
		log:    opts.Log,
		jobs:   make(map[string]bool),
		lim:    defaultLimits(opts),
		maxLog: opts.MaxLogBytes,
	}
	if e.grace <= 0 {
		e.grace = DefaultGrace
	}
	if opts.CPUs > 0 && opts.CPUs < 0.01 {
		return nil, fmt.Errorf("runtime: cpu limit %g is below the kernel's minimum of 0.01 cores", opts.CPUs)
	}
	if e.path == "" {
		e.path = "/usr/local/bin:/usr/bin:/bin"
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() == 0 {
		base, count := opts.UIDBase, opts.UIDCount
		if base == 0 {
			base = 200000
		}
		if count <= 0 {
			count = 1000
		}
		if base < 1000 || base+count > 1<<31 {
			return nil, fmt.Errorf("runtime: job uid range %d+%d must be within [1000, 2^31)", base, count)
		}
		pool, err := newUIDPool(base, count)
		if err != nil {
			return nil, err
		}
		e.uids = pool
	}
	abs, err := prepareRoot(root, e.uids != nil)
	if err != nil {
		return nil, err
	}
	e.root = abs
	if opts.NoCgroups {
		e.cgWhy = "cgroups disabled"
	} else {
		e.cg, e.cgWhy = detectCgroups("gpumesh")
	}
	if opts.NoNamespaces {
		e.sbWhy = "namespaces disabled"
	} else {
		tmp := opts.TmpMB
		if tmp == 0 {
			tmp = DefaultTmpMB
		}
		e.sb, e.sbWhy = detectSandbox(sandbox{network: opts.AllowNetwork, tmpMB: tmp, root: e.root})
	}
	if e.sb != nil && e.uids != nil && !opts.AllowNetwork {
		// Jobs run without capabilities: their network namespaces can be
		// reused.
		e.sb.reuseNets()
	}
	if e.sb != nil {
		e.quotaMB = opts.WorkDirMB
		if e.quotaMB == 0 {
			e.quotaMB = DefaultWorkDirMB
		}
		if e.quotaMB > 0 {
			e.points = newMountPoints(e.root)
		}
	} else {
		e.log.Warn("process jobs run without their own namespaces or a work dir quota: they share the host's network, /tmp and /dev/shm", "why", e.sbWhy)
	}
	e.log.Info("process executor ready", "root", e.root, "limits", e.Limits())
	return e, nil
}

// Name returns "process".
func (e *ProcessExecutor) Name() string { return "process" }

// Root is the directory holding the jobs' work dirs.
func (e *ProcessExecutor) Root() string { return e.root }

// Limits describes what the executor enforces on this host, with the
// default per-job limits.
func (e *ProcessExecutor) Limits() string {
	var b strings.Builder
	if e.cg != nil && e.cg.limitsMemory() {
		b.WriteString("memory limit: " + e.cg.describe())
		if e.lim.memoryMB > 0 {
			fmt.Fprintf(&b, ", default %d MiB per job", e.lim.memoryMB)
		} else {
			b.WriteString(", none by default")
		}
	} else {
		why := e.cgWhy
		if e.cg != nil {
			why = e.cg.describe()
		}
		b.WriteString("memory limit: not enforced (" + why + ")")
	}
	switch {
	case e.cg == nil || !e.cg.limitsPids():
		b.WriteString("; pids limit: not enforced")
	case e.lim.pids > 0:
		fmt.Fprintf(&b, "; pids limit: %d per job", e.lim.pids)
	default:
		b.WriteString("; pids limit: none")
	}
	switch {
	case e.cg == nil || !e.cg.limitsCPU():
		b.WriteString("; cpu limit: not enforced")
	case e.lim.cpus > 0:
		fmt.Fprintf(&b, "; cpu limit: %g cores per job", e.lim.cpus)
	default:
		b.WriteString("; cpu limit: none")
	}
	b.WriteString("; kill: process group")
	if e.cg != nil {
		b.WriteString(", cgroup")
	}
	if e.uids != nil {
		fmt.Fprintf(&b, ", job uid; isolation: one uid per job from %d-%d", e.uids.base, e.uids.base+e.uids.count-1)
	} else {
		b.WriteString("; isolation: jobs run as the daemon's user (not root)")
	}
	if e.sb != nil {
		b.WriteString("; " + e.sb.describe())
		if e.quotaMB > 0 {
			fmt.Fprintf(&b, "; work dir: tmpfs of %d MiB per job", e.quotaMB)
		} else {
			b.WriteString("; work dir: no quota")
		}
	} else {
		b.WriteString("; namespaces: none (" + e.sbWhy + "): jobs share the host's network, /tmp and /dev/shm; work dir: no quota")
	}
	return b.String()
}

// MemoryLimited reports whether Spec.MemoryMB is enforced.
func (e *ProcessExecutor) MemoryLimited() bool { return e.cg != nil && e.cg.limitsMemory() }

// Start starts the job's Command (Spec.Image is ignored). It fails if the spec is invalid, a job with the
// same ID still has a work dir, or a memory limit is asked for and cannot be
// set up.
func (e *ProcessExecutor) Start(ctx context.Context, spec Spec, stdout, stderr io.Writer) (Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runtime: start job %s: %w", spec.ID, err)
	}
	if err := spec.validate(time.Now()); err != nil {
		return nil, err
	}
	spec.Env = cloneEnv(spec.Env)
	spec.Command = append([]string(nil), spec.Command...)
	e.mu.Lock()
	if e.jobs[spec.ID] {
		e.mu.Unlock()
		return nil, fmt.Errorf("runtime: job %s is already running", spec.ID)
	}
	e.jobs[spec.ID] = true
	e.mu.Unlock()

	var undo []func()
	fail := func(err error) (Handle, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, err
	}
	undo = append(undo, func() { e.mu.Lock(); delete(e.jobs, spec.ID); e.mu.Unlock() })

	uid, err := e.uids.get()
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { e.uids.put(uid) })
	wd, outDir, err := makeWorkDir(e.root, &spec, uid, e.quotaMB, e.points)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { _ = e.removeWorkDir(wd) })
	argv0, err := lookPath(spec.Command[0], e.path)
	if err != nil {
		return fail(fmt.Errorf("runtime: job %s: %w", spec.ID, err))
	}
	var cg *jobCgroup
	if e.cg != nil {
		lim := e.lim
		lim.memoryMB = clampMemoryMB(spec.MemoryMB, e.lim.memoryMB, stderr)
		lim.noSwap = spec.NoSwap
		cg, err = e.cg.create(fmt.Sprintf("%s-%d-%d", spec.ID, os.Getpid(), cgroupSeq.Add(1)), lim)
		if err != nil {
			if spec.MemoryMB > 0 || (spec.NoSwap && hostSwaps()) {
				return fail(fmt.Errorf("runtime: job %s: %w", spec.ID, err))
			}
			e.log.Warn("job runs without a cgroup", "job", spec.ID, "err", err)
			cg = nil
		} else {
			undo = append(undo, func() { _ = cg.destroy() })
		}
	}
	if spec.NoSwap && (cg == nil || !e.cg.limitsMemory()) && hostSwaps() {
		return fail(fmt.Errorf("runtime: job %s: its memory cannot be kept from swap on this host (swap is on and %s)", spec.ID, e.Limits()))
	}
	if spec.MemoryMB > 0 && (cg == nil || !e.cg.limitsMemory()) {
		e.log.Warn("memory limit not enforced", "job", spec.ID, "memory_mb", spec.MemoryMB, "limits", e.Limits())
	}

	var gang *gangNS
	net := &jobNet{}
	if spec.Gang != nil {
		if err := e.gangNetworks(); err != nil {
			return fail(fmt.Errorf("runtime: job %s: %s", spec.ID, strings.TrimPrefix(err.Error(), "runtime: ")))
		}
		if gang, err = newGangNS(spec.ID, spec.Gang); err != nil {
			return fail(err)
		}
		undo = append(undo, gang.close)
		net.join = gang.nsFile()
	}

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return fail(fmt.Errorf("runtime: open %s: %w", os.DevNull, err))
	}
	defer devNull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("runtime: pipe: %w", err))
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fail(fmt.Errorf("runtime: pipe: %w", err))
	}
	cmd := &exec.Cmd{
		Path:        argv0,
		Args:        spec.Command,
		Env:         jobEnv(&spec, e.path, wd, outDir),
		Dir:         wd,
		Stdin:       devNull,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if e.uids != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	}
	ji, err := spawn(cmd, cg, e.sb, wd, spec.Inputs, net)
	outW.Close()
	errW.Close()
	if err != nil {
		if net.own != nil {
			net.own.Close()
		}
		outR.Close()
		errR.Close()
		err = fmt.Errorf("runtime: job %s: start %s: %w", spec.ID, spec.Command[0], err)
		if notExecutable(err) {
			err = jobsFault(err)
		}
		return fail(err)
	}
	h := &processHandle{
		handleState: newHandleState(wd),
		e:           e,
		spec:        spec,
		uid:         uid,
		cg:          cg,
		init:        ji,
		gang:        gang,
		net:         net.own,
		proc:        cmd.Process,
		pgid:        cmd.Process.Pid,
		started:     time.Now(),
		pipes:       []*os.File{outR, errR},
		exited:      make(chan struct{}),
	}
	stdout, stderr = capLogs(stdout, stderr, e.maxLog)
	for i, w := range []io.Writer{stdout, stderr} {
		h.copying.Add(1)
		go func(r *os.File, w io.Writer) {
			defer h.copying.Done()
			_, _ = io.Copy(w, r)
		}(h.pipes[i], w)
	}
	if !spec.Deadline.IsZero() {
		h.timer = time.AfterFunc(time.Until(spec.Deadline), func() { _ = h.stop(ReasonDeadline, e.grace) })
	}
	e.log.Info("job started", "job", spec.ID, "pid", h.pgid, "uid", uid, "workdir", wd)
	go h.wait()
	return h, nil
}

// Close gives back what the executor keeps for its next jobs: its spare
// work dir mount points are removed and its idle network namespaces
// freed, and it keeps none from now on. Jobs still running are not
// touched. It always returns nil.
func (e *ProcessExecutor) Close() error {
	e.points.close()
	e.sb.closeNets()
	return nil
}

// removeWorkDir removes a job's work dir, or keeps its emptied mount
// point for the next job (see mountPoints).
func (e *ProcessExecutor) removeWorkDir(wd string) error {
	if e.points == nil {
		return removeWorkDir(wd)
	}
	unmountQuota(wd)
	if e.points.keep(wd) {
		return nil
	}
	return wipeWorkDir(wd)
}

func cloneEnv(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// notExecutable reports whether starting a job's process failed because
// its command is missing or cannot be executed (ENOENT, ENOTDIR, EACCES,
// ENOEXEC from exec): the job named a program the host does not have. The
// work dir exists (it was just made, owned by the job's uid), so these come
// from the program, its interpreter or its path.
func notExecutable(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" {
		return false
	}
	return errors.Is(pe.Err, syscall.ENOENT) || errors.Is(pe.Err, syscall.ENOTDIR) ||
		errors.Is(pe.Err, syscall.EACCES) || errors.Is(pe.Err, syscall.ENOEXEC)
}

// lookPath resolves a command name against the job's PATH (not the
// daemon's).
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", jobsFault(fmt.Errorf("command %q not found in PATH %s", name, path))
}

// processHandle is a running process job.
type processHandle struct {
	e    *ProcessExecutor
	spec Spec
	uid  int
	cg   *jobCgroup
	// init, when the job has one, reports its command's exit status;
	// proc is then the init.
	init *jobInit
	// gang is a gang member's network (nil for other jobs), closed once
	// the job's main process has ended.
	gang *gangNS
	// net is the job's own network namespace, when the executor reuses
	// them: it goes back to the pool once no process of the job is left.
	net     *os.File
	proc    *os.Process
	pgid    int
	started time.Time
	timer   *time.Timer
	pipes   []*os.File
	copying sync.WaitGroup
	// exited is closed (under mu) once the job's main process has ended:
	// commands run in the job (Exec) are killed, and no new one starts.
	// execs counts the commands running (Add under mu, before exited).
	exited chan struct{}
	execs  sync.WaitGroup

	handleState
}

// Pid is the job's main process id (its init's, when it has one), which
// is also its process group id.
func (h *processHandle) Pid() int { return h.pgid }

func (h *processHandle) Stop(grace time.Duration) error { return h.stop(ReasonStopped, grace) }

func (h *processHandle) stop(reason string, grace time.Duration) error {
	if !h.beginStop(reason) {
		return nil
	}
	h.e.log.Info("stopping job", "job", h.spec.ID, "reason", reason, "grace", grace)
	h.signalAll(syscall.SIGTERM)
	if h.awaitGrace(grace) {
		return nil
	}
	h.killAll()
	<-h.done
	return nil
}

// members lists the job's live (non-zombie) processes: its process group,
// and everything running under its dedicated uid. With both a dedicated
// uid and a cgroup, that is the cgroup's processes: moving a process out
// of a cgroup takes write access to another one, which only root has, so
// nothing of the job leaves it (and no scan of every process is needed).
func (h *processHandle) members() []int {
	if h.cg != nil && h.e.uids != nil {
		var out []int
		for _, pid := range h.cg.pids() {
			if st, err := readProcStat(pid); err == nil && st.state != 'Z' && st.state != 'X' {
				out = append(out, pid)
			}
		}
		return out
	}
	// Once the group is empty, only the job's own uid (when it has one)
	// can still hold processes that left the group: a stat of each /proc
	// entry finds them, without reading every process's stat.
	gone := groupGone(h.pgid)
	if gone && h.e.uids == nil {
		return nil
	}
	pids, err := listPids()
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		if gone && procUID(pid) != h.uid {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.state == 'Z' || st.state == 'X' {
			continue
		}
		if st.pgrp == h.pgid || (h.e.uids != nil && procUID(pid) == h.uid) {
			out = append(out, pid)
		}
	}
	return out
}

func procUID(pid int) int {
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

func (h *processHandle) signalAll(sig syscall.Signal) {
	_ = syscall.Kill(-h.pgid, sig)
	if h.cg != nil {
		for _, p := range h.cg.pids() {
			_ = syscall.Kill(p, sig)
		}
	}
	if h.e.uids != nil && h.cg == nil {
		for _, p := range h.members() {
			_ = syscall.Kill(p, sig)
		}
	}
}

// killAll SIGKILLs the job's processes until none is left (bounded): each
// round kills what it lists and waits for those processes' exits
// (killAndWait), so a new round lists only what they forked meanwhile. It
// reports whether none is left.
func (h *processHandle) killAll() bool {
	deadline := time.Now().Add(5 * time.Second)
	for {
		_ = syscall.Kill(-h.pgid, syscall.SIGKILL)
		if h.cg != nil {
			h.cg.kill()
		}
		left := h.members()
		if len(left) == 0 {
			return true
		}
		if !time.Now().Before(deadline) {
			h.e.log.Error("job processes survived SIGKILL", "job", h.spec.ID, "pids", left)
			return false
		}
		killAndWait(left, deadline)
	}
}

func (h *processHandle) wait() {
	state, werr := h.proc.Wait()
	ended := time.Now()
	var ws syscall.WaitStatus
	if state != nil {
		ws, _ = state.Sys().(syscall.WaitStatus)
	}
	ws = h.init.exitStatus(ws)
	if h.timer != nil {
		h.timer.Stop()
	}
	// The main process is gone: nothing of the job may outlive it, not
	// even a command its renter runs in it (Exec), which ends once it sees
	// exited closed; one that left its process group is the job's uid's
	// and in its cgroup, and the second sweep gets it.
	h.mu.Lock()
	close(h.exited)
	h.mu.Unlock()
	if h.gang != nil {
		h.gang.close()
	}
	h.killAll()
	h.execs.Wait()
	if h.killAll() {
		h.e.sb.keepNet(h.net)
	} else if h.net != nil {
		h.net.Close()
	}
	drained := make(chan struct{})
	go func() { h.copying.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// A writer escaped the kill (only possible without cgroups and
		// uids): stop reading rather than hang.
		for _, p := range h.pipes {
			p.Close()
		}
		<-drained
	}
	for _, p := range h.pipes {
		p.Close()
	}
	oom := false
	if h.cg != nil {
		oom = h.cg.oomKilled()
		if err := h.cg.destroy(); err != nil {
			h.e.log.Warn("cgroup cleanup", "job", h.spec.ID, "err", err)
		}
	}

	h.mu.Lock()
	res := Result{ExitCode: -1, Started: h.started, Ended: ended, Killed: h.killed || oom, Reason: h.reason}
	h.mu.Unlock()
	signaled := false
	if werr != nil {
		res.Err = fmt.Errorf("runtime: job %s: wait: %w", h.spec.ID, werr)
		if res.Reason == "" {
			res.Reason = ReasonFailed
		}
	} else if ws.Signaled() {
		signaled = true
		res.ExitCode = 128 + int(ws.Signal())
	} else {
		res.ExitCode = ws.ExitStatus()
	}
	switch {
	case res.Reason != "":
	case oom:
		res.Reason = ReasonOOM
	case signaled:
		res.Reason = ReasonSignaled
	default:
		res.Reason = ReasonExited
	}
	h.res = res
	h.e.log.Info("job ended", "job", h.spec.ID, "reason", res.Reason, "exit", res.ExitCode, "killed", res.Killed)
	close(h.done)
}

// errStillRunning is returned by Cleanup before the job has ended.
var errStillRunning = errors.New("runtime: job still running")

func (h *processHandle) Cleanup() error {
	select {
	case <-h.done:
	default:
		return fmt.Errorf("%w: %s", errStillRunning, h.spec.ID)
	}
	h.cleanOnce.Do(func() {
		h.cleanErr = h.e.removeWorkDir(h.wd)
		if h.cleanErr != nil {
			// Keep the uid reserved: its files are still on disk.
			return
		}
		h.e.uids.put(h.uid)
		h.e.mu.Lock()
		delete(h.e.jobs, h.spec.ID)
		h.e.mu.Unlock()
	})
	return h.cleanErr
}
