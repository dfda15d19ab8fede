// Package runtime is the provider side of a lease: it detects the GPUs a node
// can sell and runs leased jobs in isolation.
//
// Detection reads devices through NVML when the NVIDIA driver is present and
// falls back to the devices declared in the provider's config otherwise
// (DetectGPUs, Sample).
//
// Execution has two backends behind the Executor interface. The process
// backend (NewProcessExecutor) works everywhere: each job gets a private work
// dir, its own process group, a scrubbed environment, a wall-clock limit,
// no_new_privs (setuid binaries grant nothing) and, where the host allows
// it, a cgroup with memory, pids and CPU limits (from ProcessOptions; a
// job's memory request may lower the memory limit, never raise it). When
// the daemon runs as root each job also gets a dedicated unprivileged uid
// and its own network (loopback only; a namespace that holds no socket once
// its job has ended serves the next job, see netPool), mount and IPC
// namespaces, with fresh
// size-limited tmpfs mounts on /tmp, /var/tmp, /dev/shm and /run/lock, a
// /proc that shows only its own processes (hidepid, Linux 5.8+) and a
// size-limited tmpfs as its work dir, and, where the kernel allows, its own
// PID namespace, whose init (the daemon's binary re-executed, package
// jobinit: C run before the Go runtime starts, in cgo builds) takes every process of the job down with it, and a seccomp filter
// refusing namespaces, mounts, keyrings, bpf, ptrace attach and the host's
// clocks and modules (seccomp_linux.go); without root it runs without them
// and Limits says so. Each job's
// stdout and stderr are capped together (CapWriter). The container backend
// (NewDockerExecutor) talks to the Docker Engine API over its unix socket and
// runs the job's image with no network, under the same memory cap as
// process jobs. Auto picks between them per job.
//
// Scratch hygiene: CollectOutputs copies a finished job's outputs out of its
// work dir with a size and file-count cap and checksums (skipping, with a
// note, every symlink: a job's tree is only read through WalkJobTree, which
// never follows one, see jobtree.go), Handle.Cleanup wipes the work
// dir, WipeOrphans removes work dirs left over by a previous daemon run, and
// Prune removes job logs and outputs past their retention.
package runtime
