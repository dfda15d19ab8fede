//go:build linux && !amd64 && !arm64

package runtime

// No seccomp table for this architecture: process jobs run without the
// filter, and the executor's Limits says so.
const (
	seccompAuditArch = 0
	seccompX32Bit    = 0
)

var seccompArchDenied []uintptr
