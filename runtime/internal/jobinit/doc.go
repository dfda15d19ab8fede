// Package jobinit is a process job's init: the first process of the job's
// PID namespace (Linux only), started by re-executing the daemon's own
// binary under the name Arg0 with Env set.
//
// Every binary that links this package (the daemon, through the runtime
// package, and its test binaries) becomes the init when started so, before
// its main; otherwise the package does nothing. With cgo (every Linux
// build the project ships with NVML) the init is C code run from an ELF
// constructor, before the Go runtime starts, so that a job's start does not
// wait for (or pay) a Go runtime's start-up and the package initialisation
// of the daemon's dependencies: that was most of a short job's CPU. Without
// cgo (cross builds) the same init, speaking the same protocol, is Go code
// run from this package's init function, which depends on the standard
// library and golang.org/x/sys/unix only.
//
// The daemon and the init talk over a socket passed as a spare descriptor,
// which Env names with a token only the daemon's process knows (so that the
// daemon's binary started under the init's name by anyone else is not taken
// for one): the daemon sends the Config (Config.Encode), the init answers
// with Msgs (ReadMsg). The encoding is plain length-prefixed binary, so that
// the C init decodes it without a JSON parser.
package jobinit
