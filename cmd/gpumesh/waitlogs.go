package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// logDrainTimeout bounds how long `job post --wait` waits, once the job
// has ended, for the rest of its log (a variable so tests can shorten it).
var logDrainTimeout = 10 * time.Second

// logFollower streams a job's log while `job post --wait` waits for it:
// one follow stream for each lease the job gets (a requeued job's next
// attempt runs elsewhere), each ending when its run does. The log is
// printed as the job wrote it, control characters made visible (as `job
// logs`), whole lines above the status line.
type logFollower struct {
	cl     *api.Client
	id     string
	pr     *progress
	ctx    context.Context
	cancel context.CancelFunc
	lease  string // the lease last streamed
	wg     sync.WaitGroup
}

func newLogFollower(ctx context.Context, cl *api.Client, id string, pr *progress) *logFollower {
	ctx, cancel := context.WithCancel(ctx)
	return &logFollower{cl: cl, id: id, pr: pr, ctx: ctx, cancel: cancel}
}

// see starts streaming the log of v's lease when it is a new one.
func (f *logFollower) see(v *api.JobView) {
	if v.Lease == nil || v.Lease.ID == f.lease {
		return
	}
	f.lease = v.Lease.ID
	// This lease's log, even if the job moves on to another meanwhile.
	attempt := len(v.Leases())
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		rc, err := f.cl.Logs(f.ctx, f.id, api.LogsOptions{Follow: true, Attempt: attempt})
		if err != nil {
			if f.ctx.Err() == nil {
				_ = f.pr.above([]byte(fmt.Sprintf("  (log of job %s unavailable: %s)\n", f.id, oneLine(err.Error()))))
			}
			return
		}
		defer rc.Close()
		lw := &lineWriter{out: f.pr.above}
		tw := &termSafeWriter{w: lw}
		_, _ = io.Copy(tw, rc)
		_ = tw.Flush()
		_ = lw.Flush()
	}()
}

// finish waits, at most logDrainTimeout, for the streams to deliver the
// rest of the log once the job has ended, then stops them.
func (f *logFollower) finish() {
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(logDrainTimeout):
	}
	f.stop()
}

// stop ends the streams at once.
func (f *logFollower) stop() {
	f.cancel()
	f.wg.Wait()
}

// lineWriter passes whole lines to out, holding a partial last line until
// its newline (or Flush, or 64 KiB without one), so lines printed by
// others never land inside it.
type lineWriter struct {
	out func([]byte) error
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	i := bytes.LastIndexByte(l.buf, '\n')
	if i < 0 && len(l.buf) < 64<<10 {
		return len(p), nil
	}
	n := i + 1
	if i < 0 {
		n = len(l.buf)
	}
	err := l.out(l.buf[:n])
	l.buf = append(l.buf[:0], l.buf[n:]...)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush ends a partial last line.
func (l *lineWriter) Flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	err := l.out(append(l.buf, '\n'))
	l.buf = l.buf[:0]
	return err
}
