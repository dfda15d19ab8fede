package jobinit

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// These tests start this package's own test binary as a job's init (it
// links the init like the daemon does: the C one with cgo, the Go one
// without) and talk to it over the wire, as the runtime package does.

// startInit starts the test binary as the init with marker token (and
// the process attributes sys, if any) and writes wire to its socket; it
// returns the daemon's end of the socket.
func startInit(t *testing.T, token string, wire []byte, sys ...*syscall.SysProcAttr) (*exec.Cmd, *os.File, *bytes.Buffer) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, remote := os.NewFile(uintptr(fds[0]), "conn"), os.NewFile(uintptr(fds[1]), "remote")
	t.Cleanup(func() { conn.Close() })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := &exec.Cmd{Path: exe, Args: []string{Arg0}, Env: []string{Env + "=3:" + token},
		ExtraFiles: []*os.File{remote}, Stdout: &stderr, Stderr: &stderr}
	if len(sys) > 0 {
		cmd.SysProcAttr = sys[0]
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	remote.Close()
	if _, err := conn.Write(wire); err != nil && !errors.Is(err, syscall.EPIPE) {
		t.Fatal(err)
	}
	return cmd, conn, &stderr
}

func encode(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfigRoundTrip(t *testing.T) {
	c := Config{Token: "tok", PID1: true, UID: 1234, GID: -1, Path: "/bin/echo",
		Args: []string{"echo", "", "a b"}, Env: []string{"A=1"}, Dir: "/tmp",
		Filter: []unix.SockFilter{{Code: 6, Jt: 1, Jf: 2, K: 0x7fff0000}}}
	got, err := DecodeConfig(bytes.NewReader(encode(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, c) {
		t.Fatalf("decoded %+v, want %+v", *got, c)
	}
	ws := syscall.WaitStatus(0x0100)
	for _, m := range []Msg{{PID: 7}, {Status: &ws}, {Err: "exec /x: no such file", Errno: int(syscall.ENOENT)}} {
		got, err := ReadMsg(bytes.NewReader(m.Encode()))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("ReadMsg(%+v) = %+v, %v", m, got, err)
		}
	}
	if _, err := ReadMsg(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty answer: %v, want io.EOF", err)
	}
}

// A wrapper (not PID1) executes the command in its place: the socket
// closes on exec and the command's output is the process's.
func TestInitWrapperExecutesCommand(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	dir := t.TempDir()
	cmd, conn, out := startInit(t, "secret", encode(t, Config{Token: "secret", UID: -1, GID: -1, Path: sh,
		Args: []string{"sh", "-c", "echo ran in $(pwd) with $X"}, Env: []string{"X=env"}, Dir: dir}))
	if _, err := ReadMsg(conn); err != io.EOF {
		t.Fatalf("answer before exec: %v, want EOF (socket closed on exec)", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "ran in " + dir + " with env\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out, want)
	}
}

// A command that cannot be executed is reported with its errno.
func TestInitReportsExecFailure(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	cmd, conn, out := startInit(t, "secret", encode(t, Config{Token: "secret", UID: -1, GID: -1, Path: missing, Args: []string{"x"}}))
	m, err := ReadMsg(conn)
	if err != nil || m.Errno != int(syscall.ENOENT) || !strings.Contains(m.Err, missing) {
		t.Fatalf("answer %+v, %v; want ENOENT naming %s (stderr %q)", m, err, missing, out)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("init exit: %v, want 127", err)
	}
}

// As a PID namespace's first process, the init starts the command as its
// child (vfork, then exec in the child): one that cannot be executed is
// reported with its errno all the same, and no pid is.
func TestInitAsPID1ReportsExecFailure(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the init is the first process of a new PID namespace (and mounts its /proc in a mount namespace of its own)")
	}
	missing := filepath.Join(t.TempDir(), "missing")
	cmd, conn, out := startInit(t, "secret", encode(t, Config{Token: "secret", PID1: true, UID: -1, GID: -1, Path: missing, Args: []string{"x"}}),
		&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS})
	m, err := ReadMsg(conn)
	if err != nil || m.PID != 0 || m.Errno != int(syscall.ENOENT) || !strings.Contains(m.Err, missing) {
		t.Fatalf("answer %+v, %v; want ENOENT naming %s and no pid (stderr %q)", m, err, missing, out)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("init exit: %v, want 127", err)
	}
}

// Started by anyone but the daemon (the wrong token, or bytes that are
// not a config), the init runs nothing and says so.
func TestInitRefusesStrangers(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	good := Config{Token: "secret", UID: -1, GID: -1, Path: "/bin/sh", Args: []string{"sh", "-c", "touch " + marker}}
	wrong := good
	wrong.Token = "guess"
	valid := encode(t, good)
	huge := append([]byte(nil), valid...)
	huge[0], huge[1], huge[2], huge[3] = 0xff, 0xff, 0xff, 0x7f
	nul := good
	nul.Args = []string{"sh", "-c", "touch " + marker + "\x00x"}
	for name, wire := range map[string][]byte{
		"wrong token": encode(t, wrong),
		"truncated":   valid[:len(valid)-3],
		"garbage":     []byte("\x10\x00\x00\x00not a config at all"),
		"huge length": huge,
		"nul in arg":  encode(t, nul),
		"bad magic":   append(append([]byte(nil), valid[:4]...), append([]byte{0, 0, 0, 0}, valid[8:]...)...),
	} {
		t.Run(name, func(t *testing.T) {
			cmd, conn, out := startInit(t, "secret", wire)
			if name == "truncated" {
				// The daemon's end closes: the init sees the config end early.
				if err := unix.Shutdown(int(conn.Fd()), unix.SHUT_WR); err != nil {
					t.Fatal(err)
				}
			}
			var ee *exec.ExitError
			if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 127 {
				t.Fatalf("init exit: %v, want 127 (output %q)", err, out)
			}
			if !strings.Contains(out.String(), "not started by the daemon") && name != "nul in arg" {
				t.Fatalf("output %q, want a refusal", out)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Fatalf("the command ran for a stranger (%v)", err)
			}
		})
	}
	// The right token with a bad marker descriptor is refused too.
	cmd := exec.Command(os.Args[0])
	cmd.Args = []string{Arg0}
	cmd.Env = []string{Env + "=" + strconv.Itoa(1) + ":secret"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 || !strings.Contains(string(out), "bad "+Env) {
		t.Fatalf("fd 1 as the socket: %v %q, want refusal", err, out)
	}
}

func FuzzDecodeConfig(f *testing.F) {
	c := Config{Token: "t", Path: "/bin/true", Args: []string{"true"}, Env: []string{"A=b"},
		Filter: []unix.SockFilter{{Code: 6, K: 1}}}
	b, _ := c.Encode()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeConfig(bytes.NewReader(b))
		if err != nil {
			return
		}
		again, err := c.Encode()
		if err != nil {
			t.Fatalf("a decoded config does not encode: %v", err)
		}
		if c2, err := DecodeConfig(bytes.NewReader(again)); err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed %+v into %+v (%v)", c, c2, err)
		}
	})
}
