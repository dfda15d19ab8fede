//go:build cgo

package jobinit

// With cgo the init is init_linux.c, run by the C runtime from an ELF
// constructor before the Go runtime starts (see proto_linux.go for what it
// does). Nothing on the Go side: this file only makes the package a cgo
// one, so that the C file is built and linked into every binary that
// imports the package.

import "C"
