// Package runtime is the provider side of a lease: it detects the GPUs a node
// can sell and runs leased jobs in isolation.
//
// Detection reads devices through NVML when the NVIDIA driver is present and
// falls back to the devices declared in the provider's config otherwise
// (DetectGPUs, Sample).
//
// Execution has two backends behind the Executor interface. The process
// backend (NewProcessExecutor) works everywhere: each job gets a private work
// dir, its own process group, a scrubbed environment, a dedicated
// unprivileged uid when the daemon runs as root, a wall-clock limit and, where
// the host allows it, a memory cgroup. The container backend
// (NewDockerExecutor) talks to the Docker Engine API over its unix socket and
// runs the job's image with no network. Auto picks between them per job.
//
// Scratch hygiene: CollectOutputs copies a finished job's outputs out of its
// work dir with a size cap and checksums, Handle.Cleanup wipes the work dir,
// and WipeOrphans removes work dirs left over by a previous daemon run.
package runtime
