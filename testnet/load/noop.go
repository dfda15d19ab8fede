package load

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/runtime"
)

// Executors a run can use (Config.Executor).
const (
	// ExecProcess is the daemon's sandboxed process executor: each job is a
	// `sleep` in its own namespaces, cgroup and work dir.
	ExecProcess = "process"
	// ExecNoop starts no process (noopExecutor): the market's own cost, as
	// Bacalhau's devstack measures with its no-op executor.
	ExecNoop = "noop"
)

// noopExecutor runs no process: a job "runs" for as long as its command,
// `sleep SECONDS` (the load's jobs), says, then exits 0. Everything around
// it is the daemon's own: the auction, the lease, heartbeats, the final
// report, outputs collected from dir (empty), the receipt and the ledger.
type noopExecutor struct{ dir string }

func (noopExecutor) Name() string { return ExecNoop }

func (e noopExecutor) Start(_ context.Context, spec runtime.Spec, _, _ io.Writer) (runtime.Handle, error) {
	d, err := sleepFor(spec.Command)
	if err != nil {
		return nil, err
	}
	h := &noopHandle{dir: e.dir, done: make(chan struct{}), res: runtime.Result{Started: time.Now()}}
	reason := runtime.ReasonExited
	if !spec.Deadline.IsZero() && time.Until(spec.Deadline) < d {
		d, reason = time.Until(spec.Deadline), runtime.ReasonDeadline
	}
	h.timer = time.AfterFunc(max(d, 0), func() { h.end(reason) })
	return h, nil
}

// sleepFor is the duration of `sleep SECONDS`.
func sleepFor(cmd []string) (time.Duration, error) {
	if len(cmd) != 2 || cmd[0] != "sleep" {
		return 0, fmt.Errorf("load: the noop executor runs only `sleep SECONDS`, not %q", cmd)
	}
	secs, err := strconv.ParseFloat(cmd[1], 64)
	if err != nil || secs < 0 {
		return 0, fmt.Errorf("load: sleep %q: not a duration in seconds", cmd[1])
	}
	return time.Duration(secs * float64(time.Second)), nil
}

type noopHandle struct {
	dir   string
	timer *time.Timer
	once  sync.Once
	done  chan struct{}
	res   runtime.Result
}

func (h *noopHandle) end(reason string) {
	h.once.Do(func() {
		h.res.Ended, h.res.Reason = time.Now(), reason
		if reason != runtime.ReasonExited {
			h.res.ExitCode = 143 // 128 + SIGTERM, as a stopped process reports
		}
		close(h.done)
	})
}

func (h *noopHandle) Wait() runtime.Result {
	<-h.done
	return h.res
}

func (h *noopHandle) Stop(time.Duration) error {
	h.timer.Stop()
	h.end(runtime.ReasonStopped)
	return nil
}

func (h *noopHandle) WorkDir() string { return h.dir }
func (h *noopHandle) Cleanup() error  { return nil }
