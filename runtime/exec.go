package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Spec is one leased job, as the executor runs it.
type Spec struct {
	// ID names the job's work dir; letters, digits, '.', '_' and '-' only.
	// It names one run of the job (the node runs each lease under its
	// lease id).
	ID string
	// JobID is the job's own id, the same for all its runs, which the job
	// sees as GPUMESH_JOB_ID (its renter knows the job by it); empty
	// means ID.
	JobID   string
	Command []string
	// Image is a container image; only the Docker backend runs images.
	Image string
	Env   map[string]string
	// GPUs are the leased device indices, exported as CUDA_VISIBLE_DEVICES.
	GPUs []int
	// UUIDs are the same devices' UUIDs where known (one per GPUs entry, or
	// none): CUDA_VISIBLE_DEVICES then names the UUIDs, which, unlike
	// indices, do not depend on the enumeration order.
	UUIDs []string
	// Deadline is the wall-clock limit (the lease end); zero means none. At
	// the deadline the job gets SIGTERM, then SIGKILL after the grace period.
	Deadline time.Time
	// MemoryMB caps the job's memory where the backend can enforce it.
	MemoryMB int
	// NoSwap keeps the job's memory from ever being swapped to the host's
	// disk (a no-persist job's): a backend that cannot promise it on a
	// host with swap refuses to start the job.
	NoSwap bool
	// Outputs is the directory, relative to the work dir, whose files are
	// returned to the renter; empty means "outputs". It is created before
	// the job starts and exported as GPUMESH_OUTPUTS.
	Outputs string
	// Inputs is an absolute host directory whose entries are the job's
	// input artifacts by name, prepared read-only by the caller; empty
	// means none. Processes find it in GPUMESH_INPUTS; containers see it
	// bind-mounted read-only at /inputs (so /inputs/NAME).
	Inputs string
	// Restore is a host directory whose contents are copied into the
	// job's checkpoint dir (CheckpointDir in the work dir, exported as
	// GPUMESH_CHECKPOINT_DIR) before it starts; empty means the job
	// starts with an empty checkpoint dir.
	Restore string
	// MPS, when set, confines the job to a slice of its one device as a
	// CUDA MPS client (SliceMPS); nil for a job on whole devices.
	MPS *MPSLimits
	// Gang, when set, makes the job a member of a gang with a private
	// network (GangNet) and its environment (MASTER_ADDR, RANK, ...);
	// process jobs in a sandbox only.
	Gang *GangNet
	// Sealed says the job's plaintext must never reach the host's disk
	// (a sealed job's: terms.Job.Sealed): its work dir, where it writes
	// its outputs and checkpoints, is a tmpfs on every backend (of the
	// backend's work dir size, DefaultWorkDirMB where it has none), and a
	// backend that cannot mount one refuses to start the job.
	Sealed bool
}

// MPSLimits are what confine a CUDA MPS client to a slice of its device:
// its pinned device memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, for
// the one device it sees) and its share of the device's threads
// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
type MPSLimits struct {
	MemoryMB      int
	ThreadPercent int
}

// SliceIsolation is how this runtime enforces a slice of device g
// (terms.GPU.Isolation) when the provider sells it in slices: by MIG on
// a device in MIG mode, whose slices are its MIG instances (SliceRules),
// each job seeing only its own (LeaseUUIDs); else CUDA MPS on a device
// read from the driver while an MPS control daemon serves this host
// (MPSRunning), whose jobs get SliceMPS's limits in their environment;
// nothing (IsolationNone, accounting only) otherwise: on a declared
// device, which has no driver to enforce it, and without an MPS daemon,
// whose absence makes CUDA ignore the limits (the runtime does not start
// one: it is the owner's to run, `nvidia-cuda-mps-control -d`).
func SliceIsolation(g terms.GPU) string {
	switch {
	case g.MIG.Partitioned():
		return terms.IsolationMIG
	case g.Detected && MPSRunning():
		return terms.IsolationMPS
	}
	return terms.IsolationNone
}

// MPSRunning reports whether a CUDA MPS control daemon serves this host:
// its control pipe exists in CUDA_MPS_PIPE_DIRECTORY (default
// /tmp/nvidia-mps), where CUDA clients look for it.
func MPSRunning() bool {
	dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = "/tmp/nvidia-mps"
	}
	fi, err := os.Stat(filepath.Join(dir, "control"))
	return err == nil && fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) != 0
}

// SliceMPS is the MPS limits of a job holding fraction of device g: the
// fraction of its memory and of its threads (rounded down: a slice never
// gets more than it pays for). Nil unless g's slices are enforced by MPS
// (g.Isolation) and fraction is a share of it.
func SliceMPS(g terms.GPU, fraction float64) *MPSLimits {
	if g.Isolation != terms.IsolationMPS || fraction <= 0 || fraction >= 1 {
		return nil
	}
	return &MPSLimits{MemoryMB: int(float64(g.VRAMGB) * 1024 * fraction), ThreadPercent: max(1, int(fraction*100))}
}

// mpsEnv is the environment that applies s.MPS (none when nil): the
// memory limit names device 0, the only one a slice's job sees.
func (s *Spec) mpsEnv() map[string]string {
	if s.MPS == nil {
		return nil
	}
	return map[string]string{
		EnvMPSMemLimit: fmt.Sprintf("0=%dM", s.MPS.MemoryMB),
		EnvMPSThreads:  strconv.Itoa(s.MPS.ThreadPercent),
	}
}

// CheckpointDir is the job's checkpoint dir, relative to its work dir: it
// is created (writable by the job) before every job starts, filled from
// Spec.Restore, and exported as GPUMESH_CHECKPOINT_DIR. Containers see it
// at /work/checkpoint.
const CheckpointDir = "checkpoint"

// Executor runs jobs.
type Executor interface {
	// Name identifies the backend ("process", "docker", "auto").
	Name() string
	// Start launches the job and returns once it is running. ctx bounds
	// the start only; end a running job with Handle.Stop or Spec.Deadline.
	// stdout and stderr may be nil.
	Start(ctx context.Context, spec Spec, stdout, stderr io.Writer) (Handle, error)
}

// ContainersOf is what an executor can do with image jobs: the process
// backend (and any executor that does not say) runs none.
func ContainersOf(e Executor) terms.ContainerSupport {
	if c, ok := e.(interface {
		Containers() terms.ContainerSupport
	}); ok {
		return c.Containers()
	}
	return terms.ContainersNone
}

// Handle is a started job.
type Handle interface {
	// Wait blocks until the job and every process it started are gone and
	// its output is drained, and returns the result. It may be called any
	// number of times.
	Wait() Result
	// Stop sends SIGTERM to the whole job, waits up to grace, then SIGKILLs
	// whatever is left, and returns once the job is gone. Stopping a
	// finished job is a no-op.
	Stop(grace time.Duration) error
	// WorkDir is the job's private work dir on the host.
	WorkDir() string
	// Cleanup wipes the work dir and releases the job's resources (uid,
	// container). Call it after Wait and after collecting outputs.
	Cleanup() error
}

// Reasons a job ended, in Result.Reason.
const (
	ReasonExited   = "exited"   // the job exited on its own
	ReasonSignaled = "signaled" // killed by a signal the executor did not send
	ReasonDeadline = "deadline" // stopped at Spec.Deadline
	ReasonStopped  = "stopped"  // stopped by Handle.Stop
	ReasonOOM      = "oom"      // killed for exceeding its memory limit
	ReasonFailed   = "failed"   // the executor lost track of the job (Err set)
)

// Result is how a job ended.
type Result struct {
	// ExitCode is the job's exit status, or 128+signal if a signal
	// killed it, or -1 if unknown.
	ExitCode int
	// Err is set when the executor failed, not when the job exited non-zero.
	Err            error
	Started, Ended time.Time
	// Killed is true when the job had to be SIGKILLed (grace expired, or
	// the kernel's OOM killer).
	Killed bool
	Reason string
}

// DefaultGrace is the SIGTERM→SIGKILL grace period at a job's deadline.
const DefaultGrace = 10 * time.Second

// Environment variables the executor sets for every job (a spec may not
// set them: terms.CheckEnvVar).
const (
	EnvJobID   = terms.EnvJobID
	EnvOutputs = terms.EnvOutputs
	EnvInputs  = terms.EnvInputs
	// EnvCheckpoint names the job's checkpoint dir (CheckpointDir).
	EnvCheckpoint = terms.EnvCheckpoint
	EnvCUDA       = terms.EnvCUDA
	// EnvMPSMemLimit and EnvMPSThreads are set for a job on an MPS slice
	// (Spec.MPS).
	EnvMPSMemLimit = terms.EnvMPSMemLimit
	EnvMPSThreads  = terms.EnvMPSThreads
)

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ErrInvalidSpec wraps every spec validation error.
var ErrInvalidSpec = errors.New("runtime: invalid job spec")

// ErrJobSpec marks a start that failed because of the job's own spec, not
// the host: its environment breaks the runtime's rule, its command is not
// in the image or on the host, or cannot be executed. Every provider would
// fail it the same way, so it is the job's fault (see JobFault).
var ErrJobSpec = errors.New("runtime: the job's own spec cannot run")

// jobSpecError is an error caused by the job's spec: its message is the
// wrapped error's, and errors.Is finds ErrJobSpec in it.
type jobSpecError struct{ err error }

func (e *jobSpecError) Error() string        { return e.err.Error() }
func (e *jobSpecError) Unwrap() error        { return e.err }
func (e *jobSpecError) Is(target error) bool { return target == ErrJobSpec }

// jobsFault marks err as the job's fault (nil stays nil).
func jobsFault(err error) error {
	if err == nil {
		return nil
	}
	return &jobSpecError{err: err}
}

// JobFault reports whether an executor's error says the job's own spec
// could not run (ErrJobSpec), rather than that the host failed it.
func JobFault(err error) bool { return errors.Is(err, ErrJobSpec) }

func (s *Spec) validate(now time.Time) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	// badJob is a problem of what the renter asked for (command,
	// environment, outputs dir, memory), not of what the provider filled in
	// (id, devices, deadline, inputs and restore dirs).
	badJob := func(format string, a ...any) error { return jobsFault(bad(format, a...)) }
	if !idRE.MatchString(s.ID) {
		return bad("id %q must be 1-128 letters, digits, '.', '_' or '-', not starting with a symbol", s.ID)
	}
	if s.JobID != "" && !idRE.MatchString(s.JobID) {
		return bad("job id %q must be 1-128 letters, digits, '.', '_' or '-', not starting with a symbol", s.JobID)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return badJob("job %s: empty command", s.ID)
	}
	for _, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return badJob("job %s: command contains a NUL byte", s.ID)
		}
	}
	for k, v := range s.Env {
		if err := terms.CheckEnvVar(k, v); err != nil {
			return badJob("job %s: %v", s.ID, err)
		}
	}
	for _, g := range s.GPUs {
		if g < 0 {
			return bad("job %s: negative gpu index %d", s.ID, g)
		}
	}
	if len(s.UUIDs) > 0 && len(s.UUIDs) != len(s.GPUs) {
		return bad("job %s: %d gpu uuids for %d gpus", s.ID, len(s.UUIDs), len(s.GPUs))
	}
	for _, u := range s.UUIDs {
		if !uuidRE.MatchString(u) {
			return bad("job %s: gpu uuid %q is not a device uuid", s.ID, u)
		}
	}
	if s.MemoryMB < 0 {
		return badJob("job %s: negative memory limit %d", s.ID, s.MemoryMB)
	}
	if s.Gang != nil {
		if err := s.Gang.check(s.ID); err != nil {
			return err
		}
	}
	if !s.Deadline.IsZero() && !s.Deadline.After(now) {
		return bad("job %s: deadline %s already passed", s.ID, s.Deadline.Format(time.RFC3339))
	}
	if _, err := s.outputsRel(); err != nil {
		return badJob("job %s: %v", s.ID, err)
	}
	if s.Inputs != "" && (!filepath.IsAbs(s.Inputs) || strings.ContainsAny(s.Inputs, ":,\x00")) {
		return bad("job %s: inputs dir %q must be an absolute path without ':' or ','", s.ID, s.Inputs)
	}
	if s.Restore != "" && !filepath.IsAbs(s.Restore) {
		return bad("job %s: restore dir %q must be an absolute path", s.ID, s.Restore)
	}
	return nil
}

// outputsRel is the cleaned, relative outputs dir.
func (s *Spec) outputsRel() (string, error) {
	o := s.Outputs
	if o == "" {
		o = "outputs"
	}
	c := filepath.Clean(o)
	if filepath.IsAbs(c) || c == "." || c == ".." || strings.HasPrefix(c, "../") || c == "tmp" || c == CheckpointDir {
		return "", fmt.Errorf("outputs %q must be a sub-directory of the work dir", s.Outputs)
	}
	return c, nil
}

// jobID is GPUMESH_JOB_ID: the job's id, else the run's.
func (s *Spec) jobID() string {
	if s.JobID != "" {
		return s.JobID
	}
	return s.ID
}

// uuidRE is what a device UUID may look like ("GPU-8f6c...", "MIG-...").
var uuidRE = regexp.MustCompile(`^[A-Za-z]+-[0-9A-Za-z-]+$`)

// cudaDevices is CUDA_VISIBLE_DEVICES: the UUIDs when known, else indices.
func (s *Spec) cudaDevices() string {
	if len(s.UUIDs) == len(s.GPUs) && len(s.UUIDs) > 0 {
		return strings.Join(s.UUIDs, ",")
	}
	parts := make([]string, len(s.GPUs))
	for i, g := range s.GPUs {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}

// jobEnv is the scrubbed environment: base variables, then the spec's, then
// the runtime's own, sorted for determinism.
func jobEnv(s *Spec, path, home, outputs string) []string {
	env := map[string]string{"PATH": path, "LANG": "C.UTF-8"}
	if l := os.Getenv("LANG"); l != "" {
		env["LANG"] = l
	}
	for k, v := range s.Env {
		env[k] = v
	}
	env["HOME"] = home
	env["TMPDIR"] = filepath.Join(home, "tmp")
	env[EnvJobID] = s.jobID()
	env[EnvOutputs] = outputs
	env[EnvCheckpoint] = filepath.Join(home, CheckpointDir)
	if s.Inputs != "" {
		env[EnvInputs] = s.Inputs
	}
	env[EnvCUDA] = s.cudaDevices()
	for k, v := range s.mpsEnv() {
		env[k] = v
	}
	if s.Gang != nil {
		for k, v := range s.Gang.env(len(s.GPUs)) {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// uidPool hands out one unprivileged uid per job, so that jobs cannot read
// each other's files. A uid is held with an flock on a lock file, so that
// executors in the same or other processes on the host never share one (and
// never kill each other's processes by uid); the lock dies with the process.
// A nil pool means "run as the daemon's own user".
type uidPool struct {
	base, count int
	dir         string
	mu          sync.Mutex
	held        map[int]*os.File
}

func newUIDPool(base, count int) (*uidPool, error) {
	dir := "/run/gpumesh/uid-locks"
	if fi, err := os.Stat("/run"); err != nil || !fi.IsDir() {
		dir = filepath.Join(os.TempDir(), "gpumesh-uid-locks")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("runtime: uid lock dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("runtime: uid lock dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("runtime: uid lock dir %s must be a directory owned by uid %d and not group/world writable", dir, os.Geteuid())
	}
	return &uidPool{base: base, count: count, dir: dir, held: make(map[int]*os.File)}, nil
}

func (p *uidPool) get() (int, error) {
	if p == nil {
		return os.Getuid(), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < p.count; i++ {
		uid := p.base + i
		if p.held[uid] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(p.dir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return -1, fmt.Errorf("runtime: uid lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		p.held[uid] = f
		return uid, nil
	}
	return -1, fmt.Errorf("runtime: all %d job uids from %d are in use", p.count, p.base)
}

func (p *uidPool) put(uid int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.held[uid]; f != nil {
		f.Close() // releases the flock
		delete(p.held, uid)
	}
}

// prepareRoot creates root (0711: traversable, not listable) and checks that
// a job running as another uid can reach its work dir under it.
func prepareRoot(root string, otherUID bool) (string, error) {
	if root == "" {
		return "", errors.New("runtime: empty work root")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("runtime: work root: %w", err)
	}
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return "", fmt.Errorf("runtime: create work root: %w", err)
	}
	if !otherUID {
		return abs, nil
	}
	if err := os.Chmod(abs, 0o711); err != nil {
		return "", fmt.Errorf("runtime: chmod work root: %w", err)
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return "", fmt.Errorf("runtime: work root parent: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return "", fmt.Errorf("runtime: work root %s: parent %s is not traversable by job uids (mode %v); put the work root outside private dirs or chmod o+x the parent", abs, d, fi.Mode().Perm())
		}
		if d == "/" || d == filepath.Dir(d) {
			return abs, nil
		}
	}
}

// makeWorkDir creates root/<id> (0700) with tmp, outputs and checkpoint
// sub-dirs (the checkpoint dir filled from s.Restore), all owned by uid,
// and returns the work dir and the outputs dir. With quotaMB >
// 0 the work dir is a tmpfs of that size, so a job fills neither the host's
// disk nor more than its quota; its mount point is one of points' spares
// where there is one (points may be nil).
func makeWorkDir(root string, s *Spec, uid int, quotaMB int, points *mountPoints) (string, string, error) {
	wd := filepath.Join(root, s.ID)
	if quotaMB <= 0 || !points.take(wd) {
		if err := os.Mkdir(wd, 0o700); err != nil {
			if errors.Is(err, os.ErrExist) {
				return "", "", fmt.Errorf("runtime: job %s: work dir %s already exists", s.ID, wd)
			}
			return "", "", fmt.Errorf("runtime: job %s: create work dir: %w", s.ID, err)
		}
	}
	rel, _ := s.outputsRel()
	out := filepath.Join(wd, rel)
	fail := func(err error) (string, string, error) {
		_ = removeWorkDir(wd)
		return "", "", fmt.Errorf("runtime: job %s: prepare work dir: %w", s.ID, err)
	}
	if s.Sealed && quotaMB <= 0 {
		quotaMB = DefaultWorkDirMB
	}
	if quotaMB > 0 {
		if err := mountQuota(wd, uid, quotaMB); err != nil {
			return fail(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(wd, "tmp"), 0o700); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Join(wd, CheckpointDir), 0o700); err != nil {
		return fail(err)
	}
	if s.Restore != "" {
		if err := copyTree(s.Restore, filepath.Join(wd, CheckpointDir)); err != nil {
			return fail(fmt.Errorf("restore checkpoint: %w", err))
		}
	}
	if uid != os.Getuid() {
		err := filepath.WalkDir(wd, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, uid)
		})
		if err != nil {
			return fail(err)
		}
	}
	return wd, out, nil
}

// copyTree copies the regular files and directories under src into dst
// (which exists), owner-writable; symlinks and special files are skipped.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(target, 0o700)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm()|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// removeWorkDir removes a work dir, and its quota mount, even if the job
// made parts of it read-only.
func removeWorkDir(wd string) error {
	unmountQuota(wd)
	return wipeWorkDir(wd)
}

// wipeWorkDir removes the work dir wd, its quota mount already gone.
func wipeWorkDir(wd string) error {
	if err := removeTree(wd); err != nil {
		return fmt.Errorf("runtime: wipe work dir: %w", err)
	}
	return nil
}

// removeTree removes a tree even if parts of it are read-only.
func removeTree(wd string) error {
	if err := os.RemoveAll(wd); err == nil {
		return nil
	}
	_ = filepath.WalkDir(wd, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(wd)
}

// handleState is the lifecycle state both backends' handles share: the
// work dir, the first stop reason, the final result and the cleanup.
type handleState struct {
	wd string

	mu     sync.Mutex
	reason string // set by the first stop
	killed bool

	done chan struct{}
	res  Result

	cleanOnce sync.Once
	cleanErr  error
}

func newHandleState(wd string) handleState {
	return handleState{wd: wd, done: make(chan struct{})}
}

// WorkDir is the job's private work dir on the host.
func (h *handleState) WorkDir() string { return h.wd }

// Wait blocks until the job has ended and returns its result.
func (h *handleState) Wait() Result {
	<-h.done
	return h.res
}

// beginStop records reason as the stop reason unless one is set already,
// and reports false when the job has already ended.
func (h *handleState) beginStop(reason string) bool {
	select {
	case <-h.done:
		return false
	default:
	}
	h.mu.Lock()
	if h.reason == "" {
		h.reason = reason
	}
	h.mu.Unlock()
	return true
}

// awaitGrace waits up to grace for the job to end after SIGTERM. It reports
// true if it did; otherwise it marks the job killed, for the caller to
// SIGKILL.
func (h *handleState) awaitGrace(grace time.Duration) bool {
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-h.done:
			return true
		case <-t.C:
		}
	}
	h.mu.Lock()
	h.killed = true
	h.mu.Unlock()
	return false
}
