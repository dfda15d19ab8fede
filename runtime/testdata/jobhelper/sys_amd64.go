package main

import "golang.org/x/sys/unix"

// archProbes are the calls only this architecture has.
func archProbes(raw func(nr uintptr, a ...uintptr) error) []struct {
	name string
	call func() error
} {
	return []struct {
		name string
		call func() error
	}{
		{"iopl", func() error { return raw(unix.SYS_IOPL, 0) }},
		{"ioperm", func() error { return raw(unix.SYS_IOPERM, 0, 0, 0) }},
	}
}
