//go:build !cgo

package jobinit

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Without cgo the init is this Go code, run from the package's init (see
// proto_linux.go for what it does; init_linux.c is the same for cgo builds).

func init() {
	if len(os.Args) == 1 && os.Args[0] == Arg0 {
		if v, ok := os.LookupEnv(Env); ok {
			run(v)
		}
	}
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
	cfg, err := DecodeConfig(conn)
	if err != nil || token == "" || subtle.ConstantTimeCompare([]byte(cfg.Token), []byte(token)) != 1 {
		fmt.Fprintf(os.Stderr, "%s: not started by the daemon\n", Arg0)
		os.Exit(127)
	}
	// fail reports why the command does not run; errno, when set, is
	// what executing it returned.
	fail := func(err error, errno syscall.Errno) {
		if _, werr := conn.Write(Msg{Err: err.Error(), Errno: int(errno)}.Encode()); werr != nil {
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
	if _, err := conn.Write(Msg{PID: pid}.Encode()); err != nil {
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
		_, _ = conn.Write(Msg{Status: &ws}.Encode())
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

// enter makes the calling process what the job's command may start from.
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
