// Command jobhelper is a test job for the runtime package: a static binary
// that runs in the process backend and in a FROM-scratch container image.
//
//	jobhelper echo ARGS...      print ARGS to stdout
//	jobhelper stderr ARGS...    print ARGS to stderr
//	jobhelper exit N            exit with status N
//	jobhelper env               print the environment, one per line
//	jobhelper cat FILE          print FILE or exit 3
//	jobhelper write FILE TEXT   write TEXT to FILE (parents created)
//	jobhelper alloc MB          allocate and touch MB MiB, then sleep
//	jobhelper trap FILE         on SIGTERM write FILE and exit 0
//	jobhelper ignore            ignore SIGTERM forever
//	jobhelper sleep DUR [MARK]  sleep (MARK only tags the process)
//	jobhelper daemonize MARK    double-fork a sleeper (no setsid), sleep
//	jobhelper escape MARK       start a setsid'd sleeper, sleep
//	jobhelper spawn MARK        start a sleeper and exit (no setsid)
//	jobhelper spin DUR N        keep N goroutines busy for DUR of wall
//	                            time, print the CPU seconds used
//	jobhelper dial ADDR         connect to tcp ADDR ("self": a listener of
//	                            its own on 127.0.0.1), print "connected"
//	                            or exit 3
//	jobhelper netns [timewait]  print its network namespace and its
//	                            sockstat "tw" count; with timewait, first
//	                            leave a connection in TIME_WAIT
//	jobhelper id                print "uid U gid G"
//	jobhelper copy              copy stdin to stdout, then print "eof"
//	jobhelper isatty            print "tty" if stdin is a terminal, else
//	                            "notty"
//	jobhelper syscalls          try the calls the seccomp filter is about,
//	                            print "name=ok" or "name=ERRNO" for each
//	jobhelper vhangup           vhangup(2), exit 0 or 100+errno
//	jobhelper sealmark FILE     find SEALMARK and 32 hex digits in FILE
//	                            (exit 3 without), write it and the hex
//	                            sha256 of it into $GPUMESH_OUTPUTS/result.txt
//	                            and $GPUMESH_CHECKPOINT_DIR/state, print
//	                            "wrote outputs and checkpoint", then sleep
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: jobhelper MODE ...")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(args, " "))
	case "stderr":
		fmt.Fprintln(os.Stderr, strings.Join(args, " "))
	case "exit":
		n, _ := strconv.Atoi(args[0])
		os.Exit(n)
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case "cat":
		b, err := os.ReadFile(args[0])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		os.Stdout.Write(b)
	case "write":
		if err := os.MkdirAll(filepath.Dir(args[0]), 0o755); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		if err := os.WriteFile(args[0], []byte(args[1]), 0o644); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
	case "alloc":
		mb, _ := strconv.Atoi(args[0])
		var keep [][]byte
		for i := 0; i < mb; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				if j%4096 == 0 {
					b[j] = 1
				}
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
		time.Sleep(time.Hour)
	case "trap":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		if err := os.WriteFile(args[0], []byte("checkpoint"), 0o644); err != nil {
			os.Exit(4)
		}
		os.Exit(0)
	case "ignore":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "sleep":
		d, _ := time.ParseDuration(args[0])
		time.Sleep(d)
	case "daemonize":
		// The child starts the grandchild and exits, so the grandchild
		// is reparented: a classic daemon, minus setsid.
		run(false, "spawn", args[0])
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "spawn":
		run(false, "sleep", "1h", args[0])
	case "escape":
		run(true, "sleep", "1h", args[0])
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "spin":
		d, _ := time.ParseDuration(args[0])
		n, _ := strconv.Atoi(args[1])
		end := time.Now().Add(d)
		done := make(chan int)
		for i := 0; i < n; i++ {
			go func() {
				x := 0
				for time.Now().Before(end) {
					x++
				}
				done <- x
			}()
		}
		for i := 0; i < n; i++ {
			<-done
		}
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		fmt.Printf("cpu %.3f\n", cpu.Seconds())
	case "serve":
		// serve PORT: accept connections on the job's loopback and greet
		// each with "hello from <pid>".
		l, err := net.Listen("tcp", "127.0.0.1:"+args[0])
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(3)
			}
			fmt.Fprintf(c, "hello from %d\n", os.Getpid())
			c.Close()
		}
	case "dial":
		addr := args[0]
		if addr == "self" {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				fmt.Println("error:", err)
				os.Exit(3)
			}
			defer l.Close()
			addr = l.Addr().String()
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		c.Close()
		fmt.Println("connected")
	case "netns":
		if len(args) > 0 && args[0] == "timewait" {
			if err := timeWait(); err != nil {
				fmt.Println("error:", err)
				os.Exit(3)
			}
		}
		ns, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Printf("%s tw %d\n", ns, sockstatTW())
	case "id":
		fmt.Printf("uid %d gid %d\n", os.Getuid(), os.Getgid())
	case "copy":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Println("eof")
	case "isatty":
		if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
			fmt.Println("tty")
		} else {
			fmt.Println("notty")
		}
	case "syscalls":
		syscalls()
	case "vhangup":
		vhangup()
	case "sealmark":
		sealmark(args[0])
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

// run starts this binary with args and waits for it if it is a spawner.
func run(setsid bool, args ...string) {
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		os.Exit(5)
	}
	if args[0] == "spawn" {
		_ = cmd.Wait()
	}
}

// sealmark is the sealed-job test's job (node, sealed_test.go) for images
// without a shell: it derives a second marker from its input's, so that
// no spec, log or record holds it, and writes both into its outputs and
// checkpoint dir, printing neither.
func sealmark(file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	m := regexp.MustCompile(`SEALMARK[0-9a-f]{32}`).Find(b)
	if m == nil {
		fmt.Println("no marker in the input")
		os.Exit(3)
	}
	sum := sha256.Sum256(m)
	line := []byte(string(m) + " " + hex.EncodeToString(sum[:]) + "\n")
	for _, p := range []string{filepath.Join(os.Getenv("GPUMESH_OUTPUTS"), "result.txt"), filepath.Join(os.Getenv("GPUMESH_CHECKPOINT_DIR"), "state")} {
		if err := os.WriteFile(p, line, 0o644); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
	}
	fmt.Println("wrote outputs and checkpoint")
	for {
		time.Sleep(time.Hour)
	}
}

// timeWait leaves a connection on the job's loopback in TIME_WAIT: the
// accepting side closes first, and the entry is there once sockstat counts
// it.
func timeWait() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return err
	}
	a, err := l.Accept()
	if err != nil {
		return err
	}
	a.Close()
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		return fmt.Errorf("read after the peer closed: %v", err)
	}
	c.Close()
	for deadline := time.Now().Add(5 * time.Second); sockstatTW() < 1; {
		if time.Now().After(deadline) {
			return errors.New("no TIME_WAIT entry after 5s")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// sockstatTW is the TIME_WAIT count in the job's network namespace's
// sockstat (-1: unreadable).
func sockstatTW() int {
	b, err := os.ReadFile("/proc/self/net/sockstat")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		var inuse, orphan, tw int
		if _, err := fmt.Sscanf(line, "TCP: inuse %d orphan %d tw %d", &inuse, &orphan, &tw); err == nil {
			return tw
		}
	}
	return -1
}
