//go:build linux

package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/runtime/internal/jobinit"
)

// sandbox is what a process job gets around it besides its uid and cgroup:
// its own network namespace (loopback only, unless network is allowed), IPC
// namespace, and mount namespace in which /tmp, /var/tmp, /dev/shm and
// /run/lock are fresh size-limited tmpfs mounts, so that no tenant sees
// another's (or a previous tenant's with the same uid) scratch files, and
// /proc is a fresh procfs with hidepid=2: a job sees its own processes only,
// not the daemon's command line nor another tenant's (each job has its own
// uid). Where the host allows, a job also gets its own PID namespace,
// whose first process is the job's init (package jobinit), and runs under the
// seccomp filter (see seccomp_linux.go).
type sandbox struct {
	network bool   // share the host's network namespace
	tmpMB   int    // size of each private tmpfs; <= 0: the kernel default (half of RAM)
	root    string // the work root: other jobs' work dirs under it are unmounted
	// pidns: each job has its own PID namespace and init; else pidWhy
	// says why not.
	pidns  bool
	pidWhy string
	// seccomp: jobs run under the seccomp filter; else seccompWhy says
	// why not.
	seccomp    bool
	seccompWhy string
	// nets keeps the network namespaces of ended jobs for the next ones
	// (nil: every job gets a fresh one).
	nets *netPool
}

// jobNet is a job's network namespace as spawn sets it up: join, when not
// nil, is one prepared for the job (a gang member's, see gangNS), which it
// enters; otherwise, unless the job shares the host's network, own is set
// to the job's own namespace, which goes back to the sandbox's netPool
// once nothing of the job is left (see netPool).
type jobNet struct {
	join *os.File
	own  *os.File
}

// netPool holds the network namespaces of ended jobs, for the next jobs
// to reuse: the kernel takes about half a millisecond to build a network
// namespace and as long again, in its workers, to tear one down, a third
// of what a short job's sandbox costs. A job has no capability in its
// namespace, so it cannot change what a fresh one has (lo up, no other
// interface, route, address, firewall rule or sysctl of its own); what it
// can leave are sockets, which outlive it only while something holds them
// (the daemon's own connection into the job) or as TCP's TIME_WAIT. A
// namespace goes back only once the job has no process left (put), and is
// taken only when it holds no socket and no TIME_WAIT entry (netEmpty):
// otherwise it is closed, and the kernel frees it.
type netPool = idlePool[*os.File]

// maxIdleNets bounds the namespaces a pool keeps.
const maxIdleNets = 64

func newNetPool() *netPool { return newIdlePool(maxIdleNets, func(f *os.File) { f.Close() }) }

// closeNets lets the kernel free the idle network namespaces.
func (s *sandbox) closeNets() {
	if s != nil {
		s.nets.close()
	}
}

// reuseNets makes the sandbox keep the network namespaces of ended jobs
// for the next ones (see netPool): only for jobs without capabilities.
func (s *sandbox) reuseNets() { s.nets = newNetPool() }

// keepNet hands f, the network namespace of a job none of whose processes
// is left, to the pool (or closes it where there is none).
func (s *sandbox) keepNet(f *os.File) {
	switch {
	case f == nil:
	case s == nil || s.nets == nil:
		f.Close()
	default:
		s.nets.put(f)
	}
}

// netEmpty reports whether the calling thread's network namespace holds
// no socket and no TIME_WAIT entry, by its own counters in sockstat (a
// kernel whose counters are not per namespace reports the host's, and its
// namespaces are never reused).
func netEmpty() bool {
	b, err := os.ReadFile("/proc/thread-self/net/sockstat")
	if err != nil {
		return false
	}
	var used, inuse, orphan, tw int = -1, -1, -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "sockets:"):
			_, err = fmt.Sscanf(line, "sockets: used %d", &used)
		case strings.HasPrefix(line, "TCP:"):
			_, err = fmt.Sscanf(line, "TCP: inuse %d orphan %d tw %d", &inuse, &orphan, &tw)
		}
		if err != nil {
			return false
		}
	}
	return used == 0 && inuse == 0 && tw == 0
}

// privateDirs get a fresh tmpfs in each job's mount namespace. Not all of
// /run: it holds what jobs need to see (resolv.conf's target, the work
// root on some hosts), and /run/lock is its world-writable part.
var privateDirs = []string{"/tmp", "/var/tmp", "/dev/shm", "/run/lock"}

// procPerMount reports whether the kernel gives each procfs mount its own
// options (Linux 5.8): before that, mounting /proc with hidepid in a job's
// mount namespace would change the host's /proc too.
func procPerMount() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 5 || major == 5 && minor >= 8
}

// detectSandbox reports whether this process can give jobs their own
// namespaces (it needs root, i.e. CAP_SYS_ADMIN), by setting them up once on
// a throwaway thread. It returns nil and the reason when it cannot. A host
// that cannot give jobs a PID namespace or the seccomp filter still gets
// the other namespaces, without them (describe says why).
func detectSandbox(s sandbox) (*sandbox, string) {
	if os.Geteuid() != 0 {
		return nil, "job namespaces need root"
	}
	errc := make(chan error, 1)
	// Exits locked: the runtime discards the thread and its namespaces.
	onSpareThread(func() { errc <- s.enter("", "", nil) })
	if err := <-errc; err != nil {
		return nil, err.Error()
	}
	s.pidns, s.pidWhy = detectPIDNamespace()
	s.seccomp, s.seccompWhy = detectSeccomp()
	return &s, ""
}

// detectPIDNamespace reports whether jobs can have PID namespaces of their
// own: the kernel must have them, and the daemon's image must be there to
// run as their init.
func detectPIDNamespace() (bool, string) {
	if _, err := os.Stat(initPath); err != nil {
		return false, "the daemon cannot re-execute itself as a job's init: " + err.Error()
	}
	// Go checks, once, whether pidfds work by forking a child that exits
	// at once: done here, that child is not the first one of a thread
	// that unshared a job's PID namespace, where it would be PID 1 and
	// leave the namespace dead for the job's init.
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
	errc := make(chan error, 1)
	onSpareThread(func() { errc <- unix.Unshare(unix.CLONE_NEWPID) })
	if err := <-errc; err != nil {
		return false, "the kernel gives no PID namespace: " + err.Error()
	}
	return true, ""
}

// detectSeccomp reports whether jobs can run under the seccomp filter, by
// installing it on a throwaway thread.
func detectSeccomp() (bool, string) {
	errc := make(chan error, 1)
	onSpareThread(func() {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- err
			return
		}
		prog, err := seccompProgram()
		if err != nil {
			errc <- err
			return
		}
		errc <- jobinit.InstallFilter(prog, false)
	})
	if err := <-errc; err != nil {
		return false, err.Error()
	}
	return true, ""
}

// flags are the namespaces a job gets.
func (s *sandbox) flags() int {
	f := unix.CLONE_NEWNS | unix.CLONE_NEWIPC
	if !s.network {
		f |= unix.CLONE_NEWNET
	}
	if s.pidns {
		f |= unix.CLONE_NEWPID
	}
	return f
}

// enter moves the calling thread, which must be locked and must never run
// daemon code again, into fresh namespaces set up for a job whose work dir
// is wd and whose input artifacts are in inputs ("": none). A work dir or
// inputs dir under one of the private dirs is bound back into place (only
// those: not their neighbours), the inputs read-only. With a PID namespace,
// the thread's next child is its first process, the job's init, which
// mounts the namespace's /proc. A job whose network namespace was prepared
// for it (net.join: a gang job's, see gangNS) joins that one; any other
// that does not share the host's network gets an idle one from the
// sandbox's netPool, or a fresh one, and net.own is set to it.
func (s *sandbox) enter(wd, inputs string, net *jobNet) error {
	flags := s.flags()
	fresh := !s.network
	switch {
	case net != nil && net.join != nil:
		if err := unix.Setns(int(net.join.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("runtime: enter the job's network namespace: %w", err)
		}
		flags &^= unix.CLONE_NEWNET
		fresh = false
	case net != nil && !s.network:
		if f, ok := s.nets.take(); ok {
			// A namespace found holding a socket is left for the kernel
			// to free; the unshare below replaces it with a fresh one.
			if unix.Setns(int(f.Fd()), unix.CLONE_NEWNET) == nil && netEmpty() {
				flags &^= unix.CLONE_NEWNET
				net.own, fresh = f, false
			} else {
				f.Close()
			}
		}
	}
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("runtime: unshare job namespaces: %w", err)
	}
	if net != nil && net.own == nil && fresh && s.nets != nil {
		// Kept by the handle, for the pool once the job has ended.
		if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
			net.own = f
		}
	}
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("runtime: job mounts: make / private: %w", err)
	}
	// Other jobs' quota mounts must not live on in this namespace after
	// their jobs end (their memory would stay in use); the scratch tmpfs
	// holding this job's inputs (a sealed job's, MountScratch) stays.
	if s.root != "" {
		for _, mp := range mountsUnder(s.root) {
			if mp != wd && (inputs == "" || !within(mp, inputs)) {
				_ = unix.Unmount(mp, unix.MNT_DETACH)
			}
		}
	}
	// Opened in this namespace, so that they can be bound back in place
	// once a tmpfs covers them.
	type kept struct {
		path string
		fd   int
		ro   bool
	}
	var keep []kept
	for _, k := range []kept{{path: wd}, {path: inputs, ro: true}} {
		if k.path == "" || !slices.ContainsFunc(privateDirs, func(dir string) bool { return within(dir, k.path) }) {
			continue
		}
		fd, err := unix.Open(k.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("runtime: job mounts: open %s: %w", k.path, err)
		}
		defer unix.Close(fd)
		k.fd = fd
		keep = append(keep, k)
	}
	opts := "mode=1777"
	if s.tmpMB > 0 {
		opts += ",size=" + strconv.Itoa(s.tmpMB) + "m"
	}
	for _, dir := range privateDirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue // nothing there to share
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("runtime: job mounts: tmpfs on %s: %w", dir, err)
		}
	}
	for _, k := range keep {
		if err := mkdirTraversable(k.path); err != nil {
			return fmt.Errorf("runtime: job mounts: %w", err)
		}
		src := "/proc/thread-self/fd/" + strconv.Itoa(k.fd)
		if err := unix.Mount(src, k.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("runtime: job mounts: bind %s: %w", k.path, err)
		}
		if k.ro {
			if err := unix.Mount("", k.path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("runtime: job mounts: %s read-only: %w", k.path, err)
			}
		}
	}
	if !s.pidns && procPerMount() {
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=2"); err != nil {
			return fmt.Errorf("runtime: job mounts: /proc with hidepid: %w", err)
		}
	}
	if fresh {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	return nil
}

// mkdirTraversable creates path and any missing parents as 0711, whatever
// the daemon's umask (a service unit's UMask=0077 would otherwise leave them
// 0700, and the job's uid could not reach its own work dir).
func mkdirTraversable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil
	}
	if parent := filepath.Dir(path); parent != path {
		if err := mkdirTraversable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Chmod(path, 0o711)
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("runtime: job network: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("runtime: job network: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("runtime: job network: get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("runtime: job network: bring up lo: %w", err)
	}
	return nil
}

func (s *sandbox) describe() string {
	tmp := "private tmpfs /tmp, /var/tmp, /dev/shm, /run/lock"
	if s.tmpMB > 0 {
		tmp += fmt.Sprintf(" (%d MiB each)", s.tmpMB)
	}
	net := "network: none (own namespace, loopback only)"
	if s.nets != nil {
		net = "network: none (own namespace, loopback only; an ended job's goes to the next once it holds no socket)"
	}
	if s.network {
		net = "network: host"
	}
	var procs string
	switch {
	case s.pidns:
		procs = "own PID namespace: the job sees its own processes only, and none outlives its init"
	case procPerMount():
		procs = "PID namespace: none (" + s.pidWhy + "): /proc shows the job's own processes only"
	default:
		procs = "PID namespace: none (" + s.pidWhy + "): other uids' processes visible in /proc (kernel before 5.8)"
	}
	sec := seccompSummary
	if !s.seccomp {
		sec = "seccomp: none (" + s.seccompWhy + ")"
	}
	return net + "; " + tmp + "; own IPC namespace; " + procs + "; " + sec
}

// spawn starts cmd inside the job's cgroup and sandbox (either may be nil),
// with no_new_privs set (setuid and file capabilities grant nothing: a
// setuid-root binary runs as the job's uid), so that not even the first
// instruction of the job runs outside them. cgroup v1 membership,
// namespaces and no_new_privs are per thread and inherited on fork: spawn
// forks from a fresh locked thread that it moves into them. The goroutine
// exits still locked, and the Go runtime discards the thread rather than
// letting daemon code run inside the job's cgroup, namespaces or
// no_new_privs. With a PID namespace or the seccomp filter, cmd starts
// through the job's init (startViaInit): cmd.Process is the init's, and the
// returned jobInit reads the command's exit status. net, when not nil,
// is the job's network namespace, as sandbox.enter sets it up.
func spawn(cmd *exec.Cmd, cg *jobCgroup, sb *sandbox, wd, inputs string, net *jobNet) (*jobInit, error) {
	start := func() error {
		return spawnIn(cmd, cg, func() error {
			if sb != nil {
				return sb.enter(wd, inputs, net)
			}
			return nil
		})
	}
	if sb == nil || !sb.pidns && !sb.seccomp {
		return nil, start()
	}
	return startViaInit(cmd, sb.pidns, sb.seccomp, start)
}

// spawnIn starts cmd as spawn does, with enter moving the spare thread into
// the job's namespaces (after its cgroup, before no_new_privs).
func spawnIn(cmd *exec.Cmd, cg *jobCgroup, enter func() error) error {
	if cg != nil && cg.cg.version == 2 {
		fd, err := unix.Open(cg.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("runtime: open cgroup: %w", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}
	v1 := cg != nil && cg.cg.version == 1
	errc := make(chan error, 1)
	onSpareThread(func() {
		if v1 {
			if err := cg.enterThread(); err != nil {
				errc <- err
				return
			}
		}
		if err := enter(); err != nil {
			errc <- err
			return
		}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("runtime: set no_new_privs: %w", err)
			return
		}
		errc <- cmd.Start()
	})
	return <-errc
}

// onSpareThread runs f in a new goroutine locked to a thread other than the
// main one. If f returns without unlocking it, the Go runtime terminates the
// thread; the main thread would instead be wedged, for the rest of the
// daemon's life, in whatever f moved it into (a job's cgroup, namespaces),
// so it is held while another thread runs f.
func onSpareThread(f func()) {
	go func() {
		goruntime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f()
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			goruntime.LockOSThread()
			f()
		}()
		<-done
		goruntime.UnlockOSThread()
	}()
}

// mountsUnder lists the mount points strictly below dir in the calling
// thread's mount namespace.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp != dir && within(dir, mp) {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// renameNoReplace renames from to to, failing with os.ErrExist where to
// exists.
func renameNoReplace(from, to string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// mountQuota mounts a tmpfs of sizeMB, owned by uid, on dir.
func mountQuota(dir string, uid, sizeMB int) error {
	opts := fmt.Sprintf("mode=0700,uid=%d,gid=%d,size=%dm", uid, uid, sizeMB)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("quota tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmountQuota detaches whatever is mounted on dir (nothing, usually).
func unmountQuota(dir string) { _ = unix.Unmount(dir, unix.MNT_DETACH) }

// MountScratch mounts a fresh tmpfs of sizeMB on dir (created, 0711 and
// owned by the caller, so a job's uid can reach a dir inside it that it
// is let read) and returns what unmounts and removes it: where a sealed
// job's plaintext (its inputs, restored checkpoint, staged checkpoints
// and collected outputs) lives, never reaching a disk. It needs the
// privilege to mount (root).
func MountScratch(dir string, sizeMB int) (release func() error, err error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("runtime: scratch tmpfs: %w", err)
	}
	opts := fmt.Sprintf("mode=0711,uid=%d,gid=%d,size=%dm", os.Getuid(), os.Getgid(), max(sizeMB, 1))
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("runtime: scratch tmpfs on %s: %w", dir, err)
	}
	return func() error { return removeWorkDir(dir) }, nil
}

// CanSeal reports whether this host can run sealed jobs: a scratch tmpfs
// (MountScratch) mounts under root, the provider's work root.
func CanSeal(root string) bool {
	dir, err := os.MkdirTemp(root, ".seal-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(dir)
	release, err := MountScratch(dir, 1)
	if err != nil {
		return false
	}
	return release() == nil
}
