package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// gangLeaser places every replica job as the renter places a gang job: one
// job whose view lists its members (JobView.Gang), rank 0's lease its
// own. The n-th job's member r is on providers[n*Nodes+r], at price r+1.
// A member marked ended reads as the renter leaves a lost member: ended,
// with its fault, while the job's own run (rank 0's) still runs.
type gangLeaser struct {
	mu        sync.Mutex
	providers []string
	start     time.Time
	jobs      []terms.Job
	ended     map[string]api.GangMember // job id → its ended member
	canceled  []string
}

func (f *gangLeaser) Post(job terms.Job) (api.JobView, error) {
	defer changes.Notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, job)
	return f.viewLocked(len(f.jobs) - 1), nil
}

func (f *gangLeaser) viewLocked(n int) api.JobView {
	job := f.jobs[n]
	v := api.JobView{JobStatus: terms.JobStatus{Job: job, State: terms.JobLeased}, Run: terms.RunRunning}
	for r := range job.Nodes {
		m := api.GangMember{Rank: r, Provider: f.providers[n*job.Nodes+r], LeaseID: fmt.Sprintf("lease-%s-%d", job.ID, r),
			Price: float64(r + 1), Run: terms.RunRunning}
		if e, ok := f.ended[job.ID]; ok && e.Rank == r {
			m.Run, m.Fault, m.Detail = e.Run, e.Fault, e.Detail
		}
		v.Gang = append(v.Gang, m)
	}
	v.Lease = &terms.Lease{ID: v.Gang[0].LeaseID, JobID: job.ID, Provider: v.Gang[0].Provider, GPUCount: job.GPUCount,
		Price: v.Gang[0].Price, Start: f.start, End: f.start.Add(time.Hour)}
	return v
}

func (f *gangLeaser) View(id string) (api.JobView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, j := range f.jobs {
		if j.ID == id {
			return f.viewLocked(n), nil
		}
	}
	return api.JobView{}, notFound(id)
}

func (f *gangLeaser) Cancel(id string) (api.JobView, error) {
	defer changes.Notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.canceled = append(f.canceled, id)
	return api.JobView{}, nil
}

func (f *gangLeaser) posted() []terms.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.jobs)
}

// TestGangReplicaReplacedAsAWhole: a service of gang replicas (Job.Nodes
// 2) posts each replica as one gang job; its status shows the replica's
// members, its lease and provider are rank 0's (the gateway's target), its
// GPUs every member's at their mean price. When a member other than rank
// 0 ends through its provider's fault while rank 0 still runs, the whole
// replica is retired (its job cancelled) and a new gang is leased whose
// auction leaves that member's provider out, not rank 0's.
func TestGangReplicaReplacedAsAWhole(t *testing.T) {
	f := &gangLeaser{start: time.Now().Add(-time.Hour / 2), ended: map[string]api.GangMember{}}
	for range 4 {
		f.providers = append(f.providers, signtest.New(t).ID().String())
	}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Job.Nodes, spec.Job.GPUCount = 2, 2
	v, err := m.Post(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(v.ID)
	var rv api.ReplicaView
	waitFor(t, "the first gang leased", func() bool {
		v, _ := m.View(v.ID)
		if len(v.Replicas) != 1 || v.Replicas[0].State != api.ReplicaStarting {
			return false
		}
		rv = v.Replicas[0]
		return true
	})
	first := f.posted()[0]
	if first.Nodes != 2 || len(first.Exclude) != 0 {
		t.Fatalf("replica job: %d nodes, excludes %v", first.Nodes, first.Exclude)
	}
	if len(rv.Members) != 2 || rv.Members[0].Provider != f.providers[0] || rv.Members[1].Provider != f.providers[1] {
		t.Fatalf("replica members: %+v", rv.Members)
	}
	if rv.Provider != f.providers[0] || rv.LeaseID != rv.Members[0].LeaseID {
		t.Fatalf("replica's lease %s on %s, want rank 0's %s on %s", rv.LeaseID, rv.Provider, rv.Members[0].LeaseID, f.providers[0])
	}
	// 2 members × 2 GPUs for half an hour, at a mean of $1.5/GPU-h.
	if rv.GPUs != 4 || rv.PriceUSD != 1.5 || rv.CostUSD < 2.99 || rv.CostUSD > 3.01 {
		t.Fatalf("replica GPUs %d at $%v, cost $%v; want 4 at $1.5, $3", rv.GPUs, rv.PriceUSD, rv.CostUSD)
	}

	f.mu.Lock()
	f.ended[first.ID] = api.GangMember{Rank: 1, Run: terms.RunFailed, Fault: terms.FaultProvider, Detail: "provider lost"}
	f.mu.Unlock()
	waitFor(t, "a replacement gang", func() bool { return len(f.posted()) == 2 })
	second := f.posted()[1]
	if second.Nodes != 2 || !slices.Equal(second.Exclude, []string{f.providers[1]}) {
		t.Fatalf("replacement job: %d nodes, excludes %v; want the lost member's provider only", second.Nodes, second.Exclude)
	}
	waitFor(t, "the replacement in place of the lost gang", func() bool {
		v, _ := m.View(v.ID)
		return len(v.Replicas) == 1 && v.Replicas[0].JobID == second.ID && len(v.Replicas[0].Members) == 2 &&
			v.Replicas[0].Members[0].Provider == f.providers[2]
	})
	// The lost gang's job is cancelled in the background (cancelJob).
	waitFor(t, "the lost gang's job "+first.ID+" cancelled", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.canceled, first.ID)
	})
	sv, _ := m.View(v.ID)
	var said bool
	for _, e := range sv.Events {
		said = said || strings.Contains(e.What, "gang member 1 ended: failed provider lost")
	}
	if !said {
		t.Fatalf("events %+v do not say which member ended", sv.Events)
	}
}

// TestGangReplicasInRegions: each replica of a gang service in regions
// is one gang job residing in its replica's region, so that every member
// bids from there.
func TestGangReplicasInRegions(t *testing.T) {
	f := &gangLeaser{start: time.Now(), ended: map[string]api.GangMember{}}
	for range 4 {
		f.providers = append(f.providers, signtest.New(t).ID().String())
	}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Job.Nodes, spec.Replicas, spec.Regions = 2, 0, []string{"eu", "us"}
	v, err := m.Post(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(v.ID)
	waitFor(t, "both gangs leased", func() bool { return len(f.posted()) == 2 })
	var regions []string
	for _, j := range f.posted() {
		if j.Nodes != 2 {
			t.Fatalf("replica job of %d nodes", j.Nodes)
		}
		regions = append(regions, j.Region)
	}
	slices.Sort(regions)
	if !slices.Equal(regions, []string{"eu", "us"}) {
		t.Fatalf("gang replicas in regions %v, want one in eu and one in us", regions)
	}
}

// TestNormalizeGang: a gang service's replica job is checked as the
// auction checks a gang job; bad sizes and a gang of GPU fractions are
// refused with one line, and a gang may scale to zero.
func TestNormalizeGang(t *testing.T) {
	now := time.Now()
	with := func(f func(*api.ServiceSpec)) api.ServiceSpec { s := testSpec(); s.Job.Nodes = 2; f(&s); return s }
	for _, tc := range []struct {
		name string
		spec api.ServiceSpec
		want string
	}{
		{"negative", with(func(s *api.ServiceSpec) { s.Job.Nodes = -1 }), "nodes must be in [1, 64], got -1"},
		{"too many", with(func(s *api.ServiceSpec) { s.Job.Nodes = 65 }), "nodes must be in [1, 64], got 65"},
		{"fraction", with(func(s *api.ServiceSpec) { s.Job.GPUFraction = 0.5 }), "a gang's members take whole GPUs"},
		{"too many GPUs", with(func(s *api.ServiceSpec) { s.Job.Nodes, s.Job.GPUCount = 64, 32 }), "64 nodes × 32 GPUs"},
	} {
		err := normalize(&tc.spec, now)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line saying %q", tc.name, err, tc.want)
		}
	}
	ok := with(func(s *api.ServiceSpec) { s.ScaleToZero, s.Regions, s.Replicas = true, []string{"eu", "us"}, 2 })
	if err := normalize(&ok, now); err != nil || ok.Job.Nodes != 2 {
		t.Fatalf("a gang service in two regions, scaling to zero: %v", err)
	}
}
