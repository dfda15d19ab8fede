package runtime

import (
	"context"
	"os/exec"
	"strconv"
	"sync"
	"testing"
)

// firstByte signals when the first byte is written.
type firstByte struct {
	once sync.Once
	ch   chan struct{}
}

func (f *firstByte) Write(p []byte) (int, error) {
	if len(p) > 0 {
		f.once.Do(func() { close(f.ch) })
	}
	return len(p), nil
}

// BenchmarkProcessStart measures spec → running job latency: the time from
// Start until the job's first stdout byte reaches the daemon.
func BenchmarkProcessStart(b *testing.B) {
	e := newTestExecutor(b, ProcessOptions{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := &firstByte{ch: make(chan struct{})}
		h, err := e.Start(context.Background(), Spec{ID: "bs-" + strconv.Itoa(i), Command: []string{"echo", "x"}}, w, nil)
		if err != nil {
			b.Fatal(err)
		}
		<-w.ch
		b.StopTimer()
		h.Wait()
		if err := h.Cleanup(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkProcessJobOverhead compares running /bin/true through the
// executor (work dir, uid, cgroup, kill sweep, cleanup) with exec'ing it
// directly.
func BenchmarkProcessJobOverhead(b *testing.B) {
	// trueJobs runs b.N jobs of /bin/true through e, one at a time.
	trueJobs := func(b *testing.B, e *ProcessExecutor, prefix string) {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			h, err := e.Start(context.Background(), Spec{ID: prefix + strconv.Itoa(i), Command: []string{"/bin/true"}}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			if res := h.Wait(); res.ExitCode != 0 {
				b.Fatalf("%+v", res)
			}
			if err := h.Cleanup(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("executor", func(b *testing.B) { trueJobs(b, newTestExecutor(b, ProcessOptions{}), "bo-") })
	b.Run("executor-nocgroup", func(b *testing.B) { trueJobs(b, newTestExecutor(b, ProcessOptions{NoCgroups: true}), "bn-") })
	// The executor without what it reuses from an ended job: its network
	// namespace (netPool) and its work dir's mount point (mountPoints).
	b.Run("executor-fresh", func(b *testing.B) {
		e := newTestExecutor(b, ProcessOptions{})
		if e.sb != nil {
			e.sb.nets = nil
		}
		e.points = nil
		trueJobs(b, e, "bf-")
	})
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
