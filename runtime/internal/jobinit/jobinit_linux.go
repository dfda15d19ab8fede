package jobinit

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Started as root in the job's other namespaces and cgroup, the init mounts
// the namespace's /proc, drops to the job's uid, installs the seccomp
// filter and starts the job's command as its child; it forwards the usual
// termination signals to it, reaps the orphans reparented to it, and
// reports the command's wait status to the daemon before exiting. When it
// exits the kernel kills whatever is left in the namespace. Without PID1 it
// is a wrapper instead (commands run in a running job): it drops to the
// job's uid, installs the filter and executes the command in its place.
//
// The daemon and the init talk over a socket passed as a spare descriptor,
// which Env names with a token only the daemon's process knows (so that
// the daemon's binary started under the init's name by anyone else is not
// taken for one): the daemon sends the Config, the init answers with Msgs.

const (
	// Arg0 is the init's argv[0] (its whole command line).
	Arg0 = "gpumesh-job-init"
	// Env is "FD:TOKEN": the socket's descriptor and Config.Token.
	Env = "GPUMESH_JOB_INIT"
)

// Config is what the daemon tells a job's init.
type Config struct {
	Token string
	// PID1: be the init of a fresh PID namespace (mount its /proc, start
	// the command as a child, reap, report its status); else execute the
	// command in place.
	PID1 bool
	// UID and GID to drop to, with no supplementary groups (-1: stay).
	UID, GID int
	// Filter is the seccomp program to install (none: no filter).
	Filter []unix.SockFilter
	Path   string
	Args   []string
	Env    []string
	Dir    string
}

// Msg is what a job's init tells the daemon: the command's pid in the
// namespace once it runs, its wait status once it ended, or why it could
// not be started (Errno set when executing the command failed).
type Msg struct {
	PID    int                 `json:",omitempty"`
	Status *syscall.WaitStatus `json:",omitempty"`
	Err    string              `json:",omitempty"`
	Errno  int                 `json:",omitempty"`
}

func init() {
	if len(os.Args) == 1 && os.Args[0] == Arg0 {
		if v, ok := os.LookupEnv(Env); ok {
			run(v)
		}
	}
}

// InstallFilter installs a seccomp program on the calling thread, or with
// tsync on every thread of the process; no_new_privs must be set (or the
// caller hold CAP_SYS_ADMIN).
func InstallFilter(prog []unix.SockFilter, tsync bool) error {
	if len(prog) == 0 {
		return errors.New("install seccomp filter: empty program")
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var flags uintptr
	if tsync {
		flags = unix.SECCOMP_FILTER_FLAG_TSYNC
	}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	return nil
}

// run is the init (or wrapper); marker is Env's value. It never returns.
func run(marker string) {
	fdText, token, _ := strings.Cut(marker, ":")
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "%s: bad %s\n", Arg0, Env)
		os.Exit(127)
	}
	unix.CloseOnExec(fd)
	conn := os.NewFile(uintptr(fd), "job-init")
	var cfg Config
	if err := json.NewDecoder(conn).Decode(&cfg); err != nil || token == "" ||
		subtle.ConstantTimeCompare([]byte(cfg.Token), []byte(token)) != 1 {
		fmt.Fprintf(os.Stderr, "%s: not started by the daemon\n", Arg0)
		os.Exit(127)
	}
	enc := json.NewEncoder(conn)
	// fail reports why the command does not run; errno, when set, is
	// what executing it returned.
	fail := func(err error, errno syscall.Errno) {
		if enc.Encode(Msg{Err: err.Error(), Errno: int(errno)}) != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", Arg0, err)
		}
		os.Exit(127)
	}
	if err := cfg.enter(); err != nil {
		fail(err, 0)
	}
	if !cfg.PID1 {
		if cfg.Dir != "" {
			if err := os.Chdir(cfg.Dir); err != nil {
				fail(err, errnoOf(err))
			}
		}
		err := syscall.Exec(cfg.Path, cfg.Args, cfg.Env)
		fail(fmt.Errorf("exec %s: %w", cfg.Path, err), errnoOf(err))
	}
	// Set before the command exists, so that none is lost: a signal an
	// init has no handler for is discarded.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2, unix.SIGQUIT)
	pid, err := syscall.ForkExec(cfg.Path, cfg.Args, &syscall.ProcAttr{Dir: cfg.Dir, Env: cfg.Env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		fail(fmt.Errorf("exec %s: %w", cfg.Path, err), errnoOf(err))
	}
	if err := enc.Encode(Msg{PID: pid}); err != nil {
		os.Exit(127) // the daemon is gone: so is the job
	}
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fail(fmt.Errorf("wait: %w", err), 0)
		}
		if got != pid {
			continue // an orphan, reaped
		}
		_ = enc.Encode(Msg{Status: &ws})
		if ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(ws.ExitStatus())
	}
}

// errnoOf is err's errno (ENOEXEC when it has none, so that the daemon
// still reports a command that could not be executed).
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	return syscall.ENOEXEC
}

// enter makes the calling process what the job's command may start from:
// as PID 1, with the namespace's /proc mounted; not dumpable (the job's
// processes, of the same uid, can neither trace it nor read its memory,
// and hidepid hides it from them); with the job's uid; under the seccomp
// filter (installed last, since it refuses mount).
func (cfg *Config) enter() error {
	if cfg.PID1 {
		if os.Getpid() != 1 {
			return fmt.Errorf("not the first process of a PID namespace (pid %d)", os.Getpid())
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=2"); err != nil {
			return fmt.Errorf("mount /proc: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set not dumpable: %w", err)
	}
	if cfg.UID >= 0 {
		if err := syscall.Setgroups([]int{}); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(cfg.GID); err != nil {
			return fmt.Errorf("setgid %d: %w", cfg.GID, err)
		}
		if err := syscall.Setuid(cfg.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", cfg.UID, err)
		}
	}
	if len(cfg.Filter) > 0 {
		return InstallFilter(cfg.Filter, true)
	}
	return nil
}
