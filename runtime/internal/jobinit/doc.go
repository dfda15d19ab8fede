// Package jobinit is a process job's init: the daemon's own binary,
// re-executed as the first process of the job's PID namespace (Linux only).
//
// Every binary that links it (the daemon, through the runtime package, and
// its test binaries) becomes the init, before its main, when started under
// the name Arg0 with Env set; otherwise it does nothing. It depends on the
// standard library and golang.org/x/sys/unix only, so that it runs before
// the daemon's heavier packages initialize: that is the time a job's start
// waits for.
package jobinit
