package service

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// lossLeaser leases every replica on testProvider; a job marked lost then
// reads as the renter leaves a lost replica's job: ended failed through
// its provider's fault, the same lease, never requeued.
type lossLeaser struct {
	mu       sync.Mutex
	jobs     []terms.Job
	lost     map[string]bool
	canceled []string
	provider string // testProvider when empty
}

func (f *lossLeaser) Post(job terms.Job) (api.JobView, error) {
	defer changes.Notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, job)
	return f.viewLocked(job), nil
}

func (f *lossLeaser) viewLocked(job terms.Job) api.JobView {
	v := api.JobView{JobStatus: terms.JobStatus{Job: job, State: terms.JobLeased}, Run: terms.RunRunning}
	prov := f.provider
	if prov == "" {
		prov = testProvider
	}
	v.Lease = &terms.Lease{ID: "lease-" + job.ID, JobID: job.ID, Provider: prov, End: time.Now().Add(time.Hour)}
	if f.lost[job.ID] {
		v.State, v.Run, v.Fault, v.Detail = terms.JobFinished, terms.RunFailed, terms.FaultProvider, "provider lost: no heartbeat for 35s"
	}
	return v
}

func (f *lossLeaser) View(id string) (api.JobView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range f.jobs {
		if j.ID == id {
			return f.viewLocked(j), nil
		}
	}
	return api.JobView{}, notFound(id)
}

func (f *lossLeaser) Cancel(id string) (api.JobView, error) {
	defer changes.Notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.canceled = append(f.canceled, id)
	return api.JobView{}, nil
}

func (f *lossLeaser) posted() []terms.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.jobs)
}

// TestLostReplicaReplacedByTheService: the service owns a lost replica's
// replacement: when the renter reports the replica's job ended through its
// provider's fault (it does not requeue it), the service retires the
// replica and leases a new one whose auction leaves that provider out, and
// keeps leaving it out after a restart. A replica job with an attempt
// budget of its own is refused.
func TestLostReplicaReplacedByTheService(t *testing.T) {
	f := &lossLeaser{lost: map[string]bool{}}
	store := &memStore{m: map[string][]byte{}}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	bad := testSpec()
	bad.Job.MaxAttempts = 3
	if _, err := m.Post(bad); err == nil || !strings.Contains(err.Error(), "takes no max_attempts") {
		t.Fatalf("replica job with max_attempts: %v", err)
	}
	v, err := m.Post(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first replica leased", func() bool {
		v, _ := m.View(v.ID)
		return len(v.Replicas) == 1 && v.Replicas[0].State == api.ReplicaStarting
	})
	first := f.posted()[0]
	if len(first.Exclude) != 0 {
		t.Fatalf("first replica excludes %v", first.Exclude)
	}
	f.mu.Lock()
	f.lost[first.ID] = true
	f.mu.Unlock()
	waitFor(t, "a replacement auction", func() bool { return len(f.posted()) == 2 })
	second := f.posted()[1]
	if !slices.Equal(second.Exclude, []string{testProvider}) || second.ID == first.ID {
		t.Fatalf("replacement job %s excludes %v, want the lost provider", second.ID, second.Exclude)
	}
	sv, _ := m.View(v.ID)
	if len(sv.Replicas) != 1 || sv.Replicas[0].JobID != second.ID {
		t.Fatalf("replicas after the loss: %+v", sv.Replicas)
	}
	var said bool
	for _, e := range sv.Events {
		said = said || strings.Contains(e.What, "lost a replica through its own fault")
	}
	if !said {
		t.Fatalf("events %+v do not say the provider is left out", sv.Events)
	}
	m.Close()

	// A restarted daemon keeps the provider out.
	m2, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Restore(); err != nil {
		t.Fatal(err)
	}
	defer m2.Stop(v.ID)
	f.mu.Lock()
	f.lost[second.ID] = true
	f.mu.Unlock()
	waitFor(t, "a replacement after the restart", func() bool { return len(f.posted()) == 3 })
	if third := f.posted()[2]; !slices.Equal(third.Exclude, []string{testProvider}) {
		t.Fatalf("replacement after a restart excludes %v", third.Exclude)
	}
}

// memStore is a Store in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) Put(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = b
	return nil
}

func (s *memStore) List(fn func(string, []byte) error) error {
	s.mu.Lock()
	m := maps.Clone(s.m)
	s.mu.Unlock()
	for k, b := range m {
		if err := fn(k, b); err != nil {
			return err
		}
	}
	return nil
}
