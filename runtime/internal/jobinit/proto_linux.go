package jobinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What the init does, started as root in the job's other namespaces and
// cgroup: mount the namespace's /proc (hidepid=2), become not dumpable (the
// job's processes, of the same uid, can neither trace it nor read its
// memory), drop to the job's uid and gid with no supplementary groups,
// install the seccomp filter (last, since it refuses mount), and start the
// job's command as its child; forward SIGTERM, SIGINT, SIGHUP, SIGUSR1,
// SIGUSR2 and SIGQUIT to it, reap the orphans reparented to it, and report
// the command's wait status before exiting with it. When it exits the
// kernel kills whatever is left in the namespace. Without PID1 it is a
// wrapper instead (commands run in a running job): it drops to the job's
// uid, installs the filter and executes the command in its place.

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
	PID    int
	Status *syscall.WaitStatus
	Err    string
	Errno  int
}

// The wire: a Config is u32 length, then magic, flags, uid, gid and the
// counts of filter instructions, args and env entries (u32 each, native
// byte order: both ends run on one machine), then token, path and dir, the
// filter (8 bytes an instruction, struct sock_filter), the args and the env
// (each string u32 length and bytes). A Msg is kind, value, errno and
// length of the error text (u32 each), then the text. The C init
// (init_linux.c) reads and writes the same layout; maxConfig bounds what
// either end accepts.
const (
	configMagic = 0x314a4d47 // "GMJ1"
	flagPID1    = 1
	maxConfig   = 16 << 20
	maxErr      = 4096

	msgPID    = 1
	msgStatus = 2
	msgErr    = 3
)

// Encode is c on the wire.
func (c *Config) Encode() ([]byte, error) {
	var flags uint32
	if c.PID1 {
		flags |= flagPID1
	}
	b := make([]byte, 4, 256)
	put := func(v uint32) { b = binary.NativeEndian.AppendUint32(b, v) }
	str := func(s string) { put(uint32(len(s))); b = append(b, s...) }
	put(configMagic)
	put(flags)
	put(uint32(int32(c.UID)))
	put(uint32(int32(c.GID)))
	put(uint32(len(c.Filter)))
	put(uint32(len(c.Args)))
	put(uint32(len(c.Env)))
	str(c.Token)
	str(c.Path)
	str(c.Dir)
	for _, f := range c.Filter {
		b = binary.NativeEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		put(f.K)
	}
	for _, s := range c.Args {
		str(s)
	}
	for _, s := range c.Env {
		str(s)
	}
	if len(b)-4 > maxConfig {
		return nil, fmt.Errorf("job init: config of %d bytes (command line and environment) over the %d limit", len(b)-4, maxConfig)
	}
	binary.NativeEndian.PutUint32(b, uint32(len(b)-4))
	return b, nil
}

// DecodeConfig reads a Config from r.
func DecodeConfig(r io.Reader) (*Config, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.NativeEndian.Uint32(hdr[:])
	if n > maxConfig {
		return nil, fmt.Errorf("config of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	bad := errors.New("malformed config")
	u32 := func() (uint32, error) {
		if len(b) < 4 {
			return 0, bad
		}
		v := binary.NativeEndian.Uint32(b)
		b = b[4:]
		return v, nil
	}
	str := func() (string, error) {
		n, err := u32()
		if err != nil || uint64(n) > uint64(len(b)) {
			return "", bad
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	var h [7]uint32
	for i := range h {
		v, err := u32()
		if err != nil {
			return nil, err
		}
		h[i] = v
	}
	if h[0] != configMagic {
		return nil, bad
	}
	c := &Config{PID1: h[1]&flagPID1 != 0, UID: int(int32(h[2])), GID: int(int32(h[3]))}
	var err error
	if c.Token, err = str(); err != nil {
		return nil, err
	}
	if c.Path, err = str(); err != nil {
		return nil, err
	}
	if c.Dir, err = str(); err != nil {
		return nil, err
	}
	if uint64(h[4])*8 > uint64(len(b)) {
		return nil, bad
	}
	for range h[4] {
		c.Filter = append(c.Filter, unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])})
		b = b[8:]
	}
	for _, list := range []struct {
		n   uint32
		out *[]string
	}{{h[5], &c.Args}, {h[6], &c.Env}} {
		if uint64(list.n)*4 > uint64(len(b)) {
			return nil, bad
		}
		for range list.n {
			s, err := str()
			if err != nil {
				return nil, err
			}
			*list.out = append(*list.out, s)
		}
	}
	if len(b) != 0 {
		return nil, bad
	}
	return c, nil
}

// Encode is m on the wire.
func (m Msg) Encode() []byte {
	kind, value := uint32(msgErr), uint32(0)
	switch {
	case m.Err != "":
	case m.Status != nil:
		kind, value = msgStatus, uint32(*m.Status)
	default:
		kind, value = msgPID, uint32(m.PID)
	}
	text := m.Err
	if len(text) > maxErr {
		text = text[:maxErr]
	}
	b := make([]byte, 0, 16+len(text))
	for _, v := range []uint32{kind, value, uint32(m.Errno), uint32(len(text))} {
		b = binary.NativeEndian.AppendUint32(b, v)
	}
	return append(b, text...)
}

// ReadMsg reads the init's next Msg from r (io.EOF: the socket closed
// before one, as it does when a wrapper's exec succeeds).
func ReadMsg(r io.Reader) (Msg, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("job init: truncated answer: %w", err)
		}
		return Msg{}, err
	}
	kind := binary.NativeEndian.Uint32(hdr[0:])
	value := binary.NativeEndian.Uint32(hdr[4:])
	m := Msg{Errno: int(int32(binary.NativeEndian.Uint32(hdr[8:])))}
	n := binary.NativeEndian.Uint32(hdr[12:])
	if n > maxErr {
		return Msg{}, fmt.Errorf("job init: answer with %d bytes of error text", n)
	}
	if n > 0 {
		text := make([]byte, n)
		if _, err := io.ReadFull(r, text); err != nil {
			return Msg{}, fmt.Errorf("job init: truncated answer: %w", err)
		}
		m.Err = string(text)
	}
	switch kind {
	case msgPID:
		m.PID = int(int32(value))
	case msgStatus:
		ws := syscall.WaitStatus(value)
		m.Status = &ws
	case msgErr:
		if m.Err == "" {
			m.Err = "job init failed"
		}
	default:
		return Msg{}, fmt.Errorf("job init: answer of unknown kind %d", kind)
	}
	return m, nil
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
