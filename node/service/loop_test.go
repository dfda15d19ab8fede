package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

const testProvider = "12D3KooWCKK8AespZwyCZKwbMk6XHRYH4E2XKckcfw7CjZTYAJXt"

// fakeLeaser answers each Post with lease (nil: no lease), after gate
// is closed when set, and records posts and cancels.
type fakeLeaser struct {
	mu       sync.Mutex
	lease    bool
	gate     chan struct{}
	posts    []string
	regions  []string // each posted job's Region
	canceled []string
}

func (f *fakeLeaser) Post(job terms.Job) (api.JobView, error) {
	f.mu.Lock()
	f.posts = append(f.posts, job.ID)
	f.regions = append(f.regions, job.Region)
	gate, lease := f.gate, f.lease
	f.mu.Unlock()
	changes.Notify()
	if gate != nil {
		<-gate
	}
	v := api.JobView{JobStatus: terms.JobStatus{Job: job, State: terms.JobUnplaceable, Reasons: []string{"no bids"}}}
	if lease {
		v.State = terms.JobLeased
		v.Lease = &terms.Lease{ID: "lease-" + job.ID, JobID: job.ID, Provider: testProvider, End: time.Now().Add(time.Hour)}
	}
	return v, nil
}

func (f *fakeLeaser) View(id string) (api.JobView, error) {
	return api.JobView{}, errors.New("unknown")
}

func (f *fakeLeaser) Cancel(id string) (api.JobView, error) {
	defer changes.Notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.canceled = append(f.canceled, id)
	return api.JobView{}, nil
}

func (f *fakeLeaser) counts() (posts, canceled int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.posts), len(f.canceled)
}

func noStreams(context.Context, peer.ID) (network.Stream, error) {
	return nil, errors.New("no streams in this test")
}

func testSpec() api.ServiceSpec {
	return api.ServiceSpec{Job: terms.Job{Tier: terms.Gold, MaxPrice: 1, Run: terms.RunSpec{Command: []string{"srv"}, ServicePort: 8000}},
		Replicas: 1, ProbeInterval: 100 * time.Millisecond}
}

// changes is notified at each call to a test's leaser and at each line a
// manager logs (testLog: every event of a service is logged with the
// change it reports), which is what waitFor waits on.
var changes broadcast.Signal

// notifyLog is a log that keeps nothing and notifies changes at each line.
type notifyLog struct{}

func (notifyLog) Enabled(context.Context, slog.Level) bool { return true }

func (notifyLog) Handle(context.Context, slog.Record) error {
	changes.Notify()
	return nil
}

func (l notifyLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l notifyLog) WithGroup(string) slog.Handler      { return l }

// testLog is the managers' log in tests.
var testLog = slog.New(notifyLog{})

// waitFor checks cond at each of changes until it holds, failing the test
// after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		next := changes.Wait()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("%s not reached", what)
		}
	}
}

// tickOnce returns once the control loop of service id ran a whole tick
// that began after the call.
func tickOnce(m *Manager, id string) {
	m.mu.Lock()
	s := m.svcs[id]
	m.mu.Unlock()
	// kick holds one: the third send goes in only once the loop took the
	// second, that is after the tick the first one started.
	for range 3 {
		s.kick <- struct{}{}
	}
}

// TestStopDuringAuctionCancelsTheLease: a lease won by an auction that
// ends after its service stopped is cancelled, not left running.
func TestStopDuringAuctionCancelsTheLease(t *testing.T) {
	f := &fakeLeaser{lease: true, gate: make(chan struct{})}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Post(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first auction", func() bool { p, _ := f.counts(); return p == 1 })
	stopped := make(chan struct{})
	go func() { _, _ = m.Stop(v.ID); close(stopped) }()
	waitFor(t, "the service stopping", func() bool { v, _ := m.View(v.ID); return v.Stopped })
	close(f.gate)
	<-stopped
	// Once when the service stopped (the job in its auction), once more
	// for the lease the auction won after that.
	if _, c := f.counts(); c != 2 || f.canceled[0] != f.posts[0] || f.canceled[1] != f.posts[0] {
		t.Fatalf("posted %v, cancelled %v: want the job cancelled, and again for the won lease", f.posts, f.canceled)
	}
}

// TestAuctionFailuresBackOff: auctions that find no lease are retried
// after 2 s, then 4 s, ... by the service's clock.
func TestAuctionFailuresBackOff(t *testing.T) {
	f := &fakeLeaser{}
	var mu sync.Mutex
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Post(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(v.ID)
	posts := func() int { p, _ := f.counts(); return p }
	waitFor(t, "the first auction", func() bool { return posts() == 1 })
	steps := []struct {
		advance time.Duration
		want    int
	}{{time.Second, 1}, {time.Second, 2}, {3 * time.Second, 2}, {time.Second, 3}}
	for _, st := range steps {
		advance(st.advance)
		if st.want > posts() {
			waitFor(t, "the next auction", func() bool { return posts() == st.want })
		}
		// No further auction at a tick after the advance: none bidding
		// once its failed auctions are retired.
		tickOnce(m, v.ID)
		waitFor(t, "no replica bidding", func() bool {
			v, _ := m.View(v.ID)
			return !slices.ContainsFunc(v.Replicas, func(r api.ReplicaView) bool { return r.State == api.ReplicaBidding })
		})
		if got := posts(); got != st.want {
			t.Fatalf("after advancing to %s: %d auctions, want %d", clock().Format(time.TimeOnly), got, st.want)
		}
	}
	if v, _ := m.View(v.ID); len(v.Events) == 0 {
		t.Fatal("failed auctions left no event")
	}
}

// TestReplicaWithoutLeaseCancelsItsQueuedJob: an auction that found no
// lease leaves the job queued on the renter, which would lease it later;
// the service, which removes that replica, cancels its job so that no
// replica it does not route to ever holds a GPU.
func TestReplicaWithoutLeaseCancelsItsQueuedJob(t *testing.T) {
	f := &fakeLeaser{}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Post(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(v.ID)
	waitFor(t, "the replica's job cancelled", func() bool { _, c := f.counts(); return c >= 1 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.canceled[0] != f.posts[0] {
		t.Fatalf("posted %v, cancelled %v", f.posts, f.canceled)
	}
}
