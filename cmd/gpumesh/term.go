//go:build linux || darwin

package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is this process's terminal in raw mode (`job exec -it`): keys
// go to the job's terminal as typed, which echoes and edits.
type terminal struct {
	f   *os.File
	old unix.Termios
}

// makeRaw puts terminal f into raw mode; restore puts it back.
func makeRaw(f *os.File) (*terminal, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, errors.New("the input is not a terminal (drop -t, or run from a terminal)")
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &t); err != nil {
		return nil, err
	}
	return &terminal{f: f, old: *old}, nil
}

func (t *terminal) restore() { _ = unix.IoctlSetTermios(int(t.f.Fd()), ioctlSetTermios, &t.old) }

// termSize is terminal f's size (0, 0 when f is not a terminal).
func termSize(f *os.File) (rows, cols uint16) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return ws.Row, ws.Col
}

// watchResize calls resize with the terminal's size each time it changes,
// until done is closed.
func (t *terminal) watchResize(done <-chan struct{}, resize func(rows, cols uint16)) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-done:
			return
		case <-ch:
			if rows, cols := termSize(t.f); rows > 0 {
				resize(rows, cols)
			}
		}
	}
}
