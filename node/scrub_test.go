package node

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/runtime"
)

// recordingScrubber records each scrub and whether the scrubbed devices
// were still booked on the provider's calendar when it ran.
type recordingScrubber struct {
	mu      sync.Mutex
	cal     func() *auction.Calendar
	calls   [][]string
	blocked []bool // each device still held by a booking when scrubbed
}

func (r *recordingScrubber) Scrub(_ context.Context, devices []string) runtime.ScrubReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, devices)
	now := time.Now()
	for _, d := range devices {
		idx := int(d[0] - '0')
		r.blocked = append(r.blocked, len(r.cal().FreeDevices(now, now.Add(time.Second), []int{idx})) == 0)
	}
	rep := runtime.ScrubReport{Method: "cuda"}
	for _, d := range devices {
		rep.Devices = append(rep.Devices, runtime.DeviceScrub{Device: d, Zeroed: 1 << 30, Total: 1 << 30})
	}
	return rep
}

// TestLeaseGPUsScrubbedBeforeFreed: when a lease ends, its provider
// scrubs the GPU memory of exactly the lease's devices, before the
// calendar frees them for the next lease, and counts it.
func TestLeaseGPUsScrubbedBeforeFreed(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	rec := &recordingScrubber{}
	prov := startWith(t, filepath.Join(root, "prov"),
		fastConfig(providerConfig("eu-west", 0.5, terms.GPU{Model: "A100", VRAMGB: 80}, terms.GPU{Model: "A100", VRAMGB: 80})),
		renter.Daemon, Options{Scrubber: rec})
	rec.cal = func() *auction.Calendar { return prov.market.cal }
	waitAdvertised(t, renter, prov)
	v := post(t, renter, shJob(terms.Silver, 2, "echo done"))
	v = waitJob(t, renter, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("job %s: %s", v.Run, v.Detail)
	}
	waitChange(t, 10*time.Second, "the lease's GPUs scrubbed", func() bool {
		return prov.market.counters.Snapshot()["provider.gpu_scrubbed"] != 0
	}, prov.market.counters.Changed)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 || len(rec.calls[0]) != 1 {
		t.Fatalf("scrub calls %v, want one for the lease's one device", rec.calls)
	}
	if !rec.blocked[0] {
		t.Fatal("the device was already free on the calendar when it was scrubbed")
	}
	now := time.Now()
	if free := prov.market.cal.FreeDevices(now, now.Add(time.Minute), nil); len(free) != 2 {
		t.Fatalf("after the scrub %d devices are free, want 2", len(free))
	}
}

// scriptedScrubber answers each scrub with the next of its reports.
type scriptedScrubber struct {
	mu      sync.Mutex
	reports []runtime.ScrubReport
}

func (s *scriptedScrubber) Scrub(_ context.Context, devices []string) runtime.ScrubReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := s.reports[0]
	s.reports = s.reports[1:]
	return rep
}

// TestScrubRecordedInReceipt (issue 27, item 3): what the provider did to
// a lease's GPU memory is in the receipt both parties signed, as the
// renter sees it: zeroed, a failure with its reason, and for declared
// GPUs that there was no device memory to clear.
func TestScrubRecordedInReceipt(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	scrubs := &scriptedScrubber{reports: []runtime.ScrubReport{
		{Method: "cuda", Devices: []runtime.DeviceScrub{{Device: "0", Zeroed: 1 << 30, Total: 1 << 30}}},
		{Method: "cuda", Err: "gpu-scrub: exit status 2"},
	}}
	a100 := startWith(t, filepath.Join(root, "a100"), fastConfig(providerConfig("eu-west", 0.5, terms.GPU{Model: "A100", VRAMGB: 80})),
		renter.Daemon, Options{Scrubber: scrubs})
	declared := startWith(t, filepath.Join(root, "h100"), fastConfig(providerConfig("eu-west", 0.5, h100)), renter.Daemon, Options{})
	waitAdvertised(t, renter, a100, declared)
	for _, c := range []struct{ model, want string }{
		{"A100", attest.ScrubZeroed},
		{"A100", "failed: gpu-scrub: exit status 2"},
		{"H100", attest.ScrubNoneDeclared},
	} {
		j := shJob(terms.Silver, 2, "echo done")
		j.GPUModels = []string{c.model}
		v := post(t, renter, j)
		v = waitJob(t, renter, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
		if v.Receipt.Scrub != c.want {
			t.Fatalf("%s lease's receipt says scrub %q, want %q", c.model, v.Receipt.Scrub, c.want)
		}
	}
}
