package runtime

import "golang.org/x/sys/unix"

// The filter's ABI on arm64, which has no x32-like ABI nor port I/O calls.
const (
	seccompAuditArch = unix.AUDIT_ARCH_AARCH64
	seccompX32Bit    = 0
)

var seccompArchDenied []uintptr
