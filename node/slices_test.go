package node

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/runtime"
)

// TestSliceQuartersShareOneGPU is issue 25's acceptance: four
// `--count 0.25` jobs run at the same time on the one GPU of one provider
// (declared, cut into four slices), each billed a quarter of the
// GPU-seconds it ran; a fifth waits, queued, until one ends, then runs.
func TestSliceQuartersShareOneGPU(t *testing.T) {
	cfg := fastConfig(providerConfig("eu-west", 1, l4))
	cfg.Provider.Policy.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}}
	boot, ns := startNet(t, cfg)
	prov := ns[0]
	waitAdvertised(t, boot, prov)
	if c := prov.Advertised(); c == nil || c.GPUs[0].Isolation != terms.IsolationNone || c.Policy.SliceCount(0) != 4 {
		t.Fatalf("the record should advertise device 0 in 4 slices, enforced by none (declared): %+v", c)
	}

	quarter := func() terms.Job {
		j := shJob(terms.Silver, 2, "echo started; sleep 120")
		j.GPUFraction, j.MinVRAMGB = 0.25, 6 // a quarter of the L4's 24 GB
		return j
	}
	running := func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.Heartbeats != nil && v.Heartbeats.Count > 0
	}
	var ids []string
	for i := 0; i < 4; i++ {
		v := post(t, boot, quarter())
		if !leased(v) || v.Lease.GPUFraction != 0.25 || v.Winner != prov.ID().String() {
			t.Fatalf("quarter %d not leased as a quarter: %s %v %+v", i, v.State, v.Reasons, v.Lease)
		}
		ids = append(ids, v.Job.ID)
	}
	for _, id := range ids {
		waitJob(t, boot, id, 30*time.Second, "running with heartbeats", running)
	}
	// All four at once: every one still running, on distinct slices of
	// device 0 in the provider's book.
	for _, id := range ids {
		if v, _ := boot.market.tracker.View(id); !running(v) {
			t.Fatalf("job %s no longer running beside the others: %s (%s)", id, v.Run, v.Detail)
		}
	}
	var taken []int
	for _, b := range prov.market.cal.Bookings() {
		if !slices.Equal(b.Devices, []int{0}) || len(b.Slices) != 1 || slices.Contains(taken, b.Slices[0]) {
			t.Fatalf("booking %s holds devices %v slices %v (taken: %v)", b.LeaseID, b.Devices, b.Slices, taken)
		}
		taken = append(taken, b.Slices[0])
	}
	if len(taken) != 4 {
		t.Fatalf("%d slice bookings, want 4", len(taken))
	}

	// A fifth that must start within minutes finds every slice taken for
	// the next ten: it waits on the renter, queued.
	fifth := quarter()
	fifth.Deadline = time.Now().Add(3 * time.Minute)
	fv := post(t, boot, fifth)
	if fv.State != terms.JobQueued {
		t.Fatalf("fifth quarter: %s %v, want queued", fv.State, fv.Reasons)
	}

	// One ends: its slice frees and the fifth runs in it, at once (the
	// provider's capacity notice), not at its queue's next try.
	cl := api.NewClient(boot.dir)
	ctx := context.Background()
	if _, err := cl.CancelJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	first := waitJob(t, boot, ids[0], 30*time.Second, "first quarter settled", func(v api.JobView) bool { return v.Receipt != nil })
	fv = waitJob(t, boot, fv.Job.ID, 30*time.Second, "fifth quarter running", running)
	if fv.Lease == nil || fv.Lease.GPUFraction != 0.25 || fv.Started.Before(first.Ended) {
		t.Fatalf("fifth quarter ran %s on %+v; the first ended %s", fv.Started, fv.Lease, first.Ended)
	}
	if n := boot.market.counters.Snapshot()["renter.capacity_notice"]; n == 0 {
		t.Fatal("the fifth was not woken by the provider's capacity notice")
	}

	// Each receipt bills a quarter of its run's GPU-seconds.
	for _, id := range append(ids[1:], fv.Job.ID) {
		if _, err := cl.CancelJob(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range append(ids, fv.Job.ID) {
		v := waitJob(t, boot, id, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
		r := v.Receipt
		span := r.End.Sub(r.Start).Seconds()
		want := attest.BillableSeconds(*v.Lease, r.Start, r.End, r.End, r.Heartbeats) / 4
		if r.GPUFraction != 0.25 || r.GPUCount != 1 || math.Abs(r.GPUSeconds-want) > 1e-6 || r.GPUSeconds > span/4+1e-6 || r.GPUSeconds <= 0 {
			t.Fatalf("job %s receipt: fraction %v, %v GPU-seconds over a %vs span; want a quarter (%v)", id, r.GPUFraction, r.GPUSeconds, span, want)
		}
		if math.Abs(r.Amount-r.GPUSeconds/3600*v.Lease.Price) > 1e-12 || math.Abs(v.CostUSD-r.Amount) > 1e-12 {
			t.Fatalf("job %s: amount %v, cost %v for %v GPU-seconds at $%v", id, r.Amount, v.CostUSD, r.GPUSeconds, v.Lease.Price)
		}
	}
}

// TestSliceScrubbedOnlyWhenAlone: a slice lease that ends while other
// slices of its device still run does not clear the device's memory from
// under them (its receipt says nothing was cleared: declared GPUs here);
// the last slice lease to end on the device does.
func TestSliceScrubbedOnlyWhenAlone(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	rec := &recordingScrubber{}
	cfg := fastConfig(providerConfig("eu-west", 1, l4))
	cfg.Provider.Policy.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}}
	prov := startWith(t, filepath.Join(root, "prov"), cfg, renter.Daemon, Options{Scrubber: rec})
	rec.cal = func() *auction.Calendar { return prov.market.cal }
	waitAdvertised(t, renter, prov)
	var ids []string
	for i := 0; i < 2; i++ {
		j := shJob(terms.Silver, 2, "sleep 120")
		j.GPUFraction = 0.25
		v := post(t, renter, j)
		if !leased(v) {
			t.Fatalf("quarter %d: %s %v", i, v.State, v.Reasons)
		}
		ids = append(ids, v.Job.ID)
		waitJob(t, renter, v.Job.ID, 30*time.Second, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	}
	cl := api.NewClient(renter.dir)
	ctx := context.Background()
	if _, err := cl.CancelJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	v := waitJob(t, renter, ids[0], 30*time.Second, "first settled", func(v api.JobView) bool { return v.Receipt != nil })
	rec.mu.Lock()
	calls := len(rec.calls)
	rec.mu.Unlock()
	if calls != 0 || v.Receipt.Scrub != attest.ScrubNoneDeclared {
		t.Fatalf("a slice ending beside another running one: %d scrubs, receipt scrub %q", calls, v.Receipt.Scrub)
	}
	if _, err := cl.CancelJob(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	v = waitJob(t, renter, ids[1], 30*time.Second, "second settled", func(v api.JobView) bool { return v.Receipt != nil })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 || v.Receipt.Scrub != attest.ScrubZeroed {
		t.Fatalf("the last slice on the device: scrubs %v, receipt scrub %q", rec.calls, v.Receipt.Scrub)
	}
}

// TestSliceConfig: provider.policy.slices and interruptible_discount load
// from a config file; a bad rule, a key in the wrong place and a sliced
// device the provider does not have are refused in one line.
func TestSliceConfig(t *testing.T) {
	good := "provider:\n  enabled: true\n  policy:\n    price_floor: 1\n    slices: [{devices: [0, 1], count: 4}]\n    interruptible_discount: 0.3\n"
	cfg, err := config.LoadConfig(writeTestConfig(t, good), true)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Provider.Policy; p.SliceCount(1) != 4 || p.InterruptibleDiscount != 0.3 {
		t.Fatalf("policy %+v", p)
	}
	for body, want := range map[string]string{
		"provider:\n  enabled: true\n  policy:\n    slices: [{devices: [0], count: 3}]\n": "slices[0]: count must be 2, 4 or 8, got 3",
		"provider:\n  enabled: true\n  policy:\n    interruptible_discount: 1\n":          "interruptible_discount must be in [0, 1)",
		"provider:\n  slices: [{devices: [0], count: 4}]\n":                               "did you mean 'provider.policy.slices'?",
	} {
		if _, err := config.LoadConfig(writeTestConfig(t, body), true); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", body, err, want)
		}
	}
	bad := providerConfig("eu-west", 1, l4)
	bad.Provider.Policy.Slices = []terms.SliceRule{{Devices: []int{1}, Count: 4}}
	_, err = Start(context.Background(), Options{DataDir: t.TempDir(), Config: bad, Log: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "provider.policy.slices") || !strings.Contains(err.Error(), "sliced device 1 is not one of the 1 gpus") {
		t.Fatalf("a provider slicing a device it does not have: %v", err)
	}
}

// TestSliceOnNVMLRunsUnderMPS: a provider whose (simulated) NVML device is
// sold in slices advertises them as MPS-enforced, so a job asking
// --isolation mps gets one, and the job runs with its slice's memory
// limit and thread share in its environment. A declared provider's slice
// (none) is not offered to it.
func TestSliceOnNVMLRunsUnderMPS(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	// An MPS control daemon serves the host (its control FIFO): without
	// one the provider sells the slices as accounting only.
	pipes := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", pipes)
	if err := syscall.Mkfifo(filepath.Join(pipes, "control"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(providerConfig("eu-west", 1))
	cfg.Provider.GPUSource = "nvml"
	cfg.Provider.Policy.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}}
	sim := runtime.NewSimulatedGPUs("550.54.15", runtime.SimulatedGPU{Name: "NVIDIA L4", UUID: "GPU-33333333-0000-4000-8000-000000000003",
		MemTotalMB: 24576, TempC: 40, PowerW: 30})
	rec := &recordingScrubber{} // no CUDA here to clear the simulated device with
	prov := startWith(t, filepath.Join(root, "nvml"), cfg, renter.Daemon, Options{GPUDriver: sim, Scrubber: rec})
	rec.cal = func() *auction.Calendar { return prov.market.cal }
	declared := fastConfig(providerConfig("eu-west", 0.5, l4)) // cheaper, but its slices are not enforced
	declared.Provider.Policy.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}}
	other := startWith(t, filepath.Join(root, "declared"), declared, renter.Daemon, Options{})
	waitAdvertised(t, renter, prov, other)
	c := prov.Advertised()
	if c == nil || !c.GPUs[0].Detected || c.GPUs[0].Isolation != terms.IsolationMPS {
		t.Fatalf("the NVML provider advertises %+v, want its device's slices enforced by mps", c)
	}
	j := shJob(terms.Silver, 2, `echo "mps=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT/$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"`)
	j.GPUFraction, j.Isolation = 0.25, terms.IsolationMPS
	v := post(t, renter, j)
	if !leased(v) || v.Winner != prov.ID().String() {
		t.Fatalf("an mps slice job: %s %v, winner %s; want the NVML provider %s", v.State, v.Reasons, v.Winner, prov.ID())
	}
	want := fmt.Sprintf("mps=0=%dM/25", c.GPUs[0].VRAMGB*1024/4)
	waitLog(t, prov, v.Lease.ID, regexp.MustCompile(regexp.QuoteMeta(want)+"\n"), 30*time.Second)
}

// TestSliceOnMIGRunsOnItsInstance: a provider whose (simulated) NVML
// device is in MIG mode with two 3g.40gb instances sells it in two slices,
// one instance each, whatever its config says, and advertises them as
// MIG-enforced with the instances in its signed record; a job asking
// --isolation mig for half a GPU runs seeing only its instance's UUID,
// never the device's; a whole-GPU job is not offered the device.
func TestSliceOnMIGRunsOnItsInstance(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	const (
		parent = "GPU-44444444-0000-4000-8000-000000000004"
		migA   = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
		migB   = "MIG-0d5b7b8e-4f1a-5c2e-9b3d-1a2b3c4d5e6f"
	)
	cfg := fastConfig(providerConfig("eu-west", 1))
	cfg.Provider.GPUSource = "nvml"
	cfg.Provider.Policy.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}} // the instances win
	sim := runtime.NewSimulatedGPUs("550.54.15", runtime.SimulatedGPU{Name: "NVIDIA A100-SXM4-80GB", UUID: parent,
		MemTotalMB: 81920, TempC: 40, PowerW: 60, MIG: []runtime.SimulatedMIG{
			{UUID: migA, Slices: 3, MemTotalMB: 40192}, {UUID: migB, Slices: 3, MemTotalMB: 40192}}})
	rec := &recordingScrubber{}
	prov := startWith(t, filepath.Join(root, "mig"), cfg, renter.Daemon, Options{GPUDriver: sim, Scrubber: rec})
	rec.cal = func() *auction.Calendar { return prov.market.cal }
	waitAdvertised(t, renter, prov)
	c := prov.Advertised()
	if c == nil || c.GPUs[0].Isolation != terms.IsolationMIG || c.Policy.SliceCount(0) != 2 || !c.GPUs[0].MIG.Partitioned() ||
		len(c.GPUs[0].MIG.Instances) != 2 || c.GPUs[0].MIG.Instances[1] != (terms.MIGInstance{UUID: migB, Profile: "3g.40gb", MemoryMB: 40192}) {
		t.Fatalf("the MIG provider advertises %+v, want device 0 in 2 MIG-enforced slices, its instances listed", c)
	}
	if s := prov.market.cal.Slices(0); s != 2 {
		t.Fatalf("the calendar cuts the device into %d slices, want its 2 instances", s)
	}
	_, err := api.NewClient(renter.dir).PostJobRequest(context.Background(), api.PostJobRequest{Job: shJob(terms.Silver, 2, "true")})
	if err == nil || !strings.Contains(err.Error(), "no gpu sold whole (a gpu in MIG mode is sold as its MIG instances)") {
		t.Fatalf("a whole-GPU job posted to a device in MIG mode with two instances: %v", err)
	}
	j := shJob(terms.Silver, 2, `echo "cuda=$CUDA_VISIBLE_DEVICES"`)
	j.GPUFraction, j.Isolation, j.MinVRAMGB = 0.5, terms.IsolationMIG, 39
	v := post(t, renter, j)
	if !leased(v) || v.Winner != prov.ID().String() {
		t.Fatalf("a mig slice job: %s %v, winner %s; want the MIG provider %s", v.State, v.Reasons, v.Winner, prov.ID())
	}
	b, ok := prov.market.cal.Booking(v.Lease.ID)
	if !ok || len(b.Slices) != 1 {
		t.Fatalf("booking %+v %v, want one slice", b, ok)
	}
	want := []string{migA, migB}[b.Slices[0]]
	waitLog(t, prov, v.Lease.ID, regexp.MustCompile("cuda="+want+"\n"), 30*time.Second)
}

func writeTestConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
