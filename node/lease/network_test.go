package lease

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/runtime"
)

// TestNetworkHook: the supervisor asks its Network hook, before a lease's
// job starts, what the lease adds to the job's spec (what it adds is what
// the executor runs), gives it the started job, and ends the membership
// once the job has ended; a hook's error fails the lease before its job
// starts.
func TestNetworkHook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	note := func(s string) { mu.Lock(); calls = append(calls, s); mu.Unlock() }
	ended := make(chan struct{})
	hook := func(l terms.Lease, job terms.Job, spec *runtime.Spec) (func(runtime.Handle), func(), error) {
		if job.Run.Env["REFUSE"] == "1" {
			return nil, nil, errors.New("no gang here")
		}
		note("join " + l.ID)
		spec.Env = map[string]string{"GANG_MEMBER": l.ID}
		return func(h runtime.Handle) {
				if h == nil {
					t.Error("started with no handle")
				}
				note("started")
			}, func() {
				note("end")
				close(ended)
			}, nil
	}
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1, network: hook})
	v := r.post(job(terms.Silver, 2, time.Minute, "run", "50", "0"))
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the membership did not end with the job")
	}
	s, ok := p.exec.specs.Load(v.Lease.ID)
	if !ok || s.(runtime.Spec).Env["GANG_MEMBER"] != v.Lease.ID {
		t.Fatalf("the executor ran %+v, not the spec the hook completed", s)
	}
	mu.Lock()
	got := append([]string(nil), calls...)
	mu.Unlock()
	if len(got) != 3 || got[0] != "join "+v.Lease.ID || got[1] != "started" || got[2] != "end" {
		t.Fatalf("hook calls %q", got)
	}
	r.waitJob(v.Job.ID, "settled", settled)

	j := job(terms.Silver, 2, time.Minute, "run", "50", "0")
	j.ID = "refused-net"
	j.Run.Env = map[string]string{"REFUSE": "1"}
	v = r.post(j)
	v = r.waitJob(v.Job.ID, "its first lease failed", func(v api.JobView) bool { return len(v.History) > 0 })
	if v.History[0].Run != terms.RunFailed {
		t.Fatalf("the refused lease ended %s", v.History[0].Run)
	}
	if _, ok := p.exec.specs.Load(v.History[0].Lease.ID); ok {
		t.Fatal("the executor started a job whose network the hook refused")
	}
}
