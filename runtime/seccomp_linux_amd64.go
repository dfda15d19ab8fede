package runtime

import "golang.org/x/sys/unix"

// The filter's ABI on x86-64, the x32 ABI's flag in a call's number, and
// the calls only x86-64 has (port I/O).
const (
	seccompAuditArch = unix.AUDIT_ARCH_X86_64
	seccompX32Bit    = 0x40000000
)

var seccompArchDenied = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM}
