package lease

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/runtime"
)

// nvmlHost is a host's devices as NVML lists them: model names and UUIDs.
func nvmlHost(models ...string) []terms.GPU {
	out := make([]terms.GPU, len(models))
	for i, m := range models {
		out[i] = terms.GPU{Model: m, VRAMGB: 24, UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-%012d", i+1, i), Detected: true}
	}
	return out
}

// realProcessExec is the sandboxed process executor on a work root the
// jobs' uids can traverse.
func realProcessExec(t *testing.T) runtime.Executor {
	t.Helper()
	root, err := os.MkdirTemp("", "gpumesh-devices-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	e, err := runtime.NewProcessExecutor(filepath.Join(root, "jobs"), runtime.ProcessOptions{Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("process executor: %v", err)
	}
	return e
}

// jobDevices waits for a lease's job to print its CUDA_VISIBLE_DEVICES.
func (n *node) jobDevices(leaseID string) string {
	n.h.t.Helper()
	return n.jobPrints(leaseID, "dev=", "lease "+leaseID+" job prints its devices")
}

// jobPrints waits for a line of a lease's job log that starts with prefix,
// and returns the rest of it: read again at each write to the log
// (Supervisor.LogGrew).
func (n *node) jobPrints(leaseID, prefix, what string) string {
	n.h.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		grew := n.sup.LogGrew(leaseID)
		b, _ := os.ReadFile(filepath.Join(n.jobsDir, "logs", leaseID+".log"))
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return v
			}
		}
		select {
		case <-grew:
		case <-deadline.C:
			n.h.t.Fatalf("%s: not within 10s", what)
		}
	}
}

// On an 8-GPU host, 8 concurrent one-GPU jobs run by the real process
// executor each see a different device (by UUID, as NVML names it), and a
// ninth job gets no bid while all eight are leased.
func TestEightJobsEightDevices(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	models := make([]string, 8)
	for i := range models {
		models[i] = "NVIDIA H100 80GB HBM3"
	}
	host := nvmlHost(models...)
	p := h.provider(provSpec{model: "H100", price: 1, gpus: host, exec: realProcessExec(t)})
	r := h.renter()
	mk := func() terms.Job {
		j := job(terms.Silver, 5, time.Minute, "/bin/sh", "-c", `echo "dev=$CUDA_VISIBLE_DEVICES"; sleep 60`)
		j.GPUModels = []string{"H100"}
		return j
	}
	views := make([]string, 8)
	var wg sync.WaitGroup
	for i := range views {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			v, err := r.tracker.Post(mk())
			if err != nil || v.Lease == nil {
				t.Errorf("job %d: %v, %s %v", i, err, v.State, v.Reasons)
				return
			}
			views[i] = v.Lease.ID + " " + v.Job.ID
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	uuids := map[string]bool{}
	for _, g := range host {
		uuids[g.UUID] = true
	}
	seen := map[string]string{}
	for _, lv := range views {
		leaseID, jobID, _ := strings.Cut(lv, " ")
		dev := p.jobDevices(leaseID)
		if !uuids[dev] {
			t.Fatalf("job %s sees CUDA_VISIBLE_DEVICES=%q, not one device of the host", jobID, dev)
		}
		if other, dup := seen[dev]; dup {
			t.Fatalf("jobs %s and %s both see device %s", other, jobID, dev)
		}
		seen[dev] = jobID
		pl, ok := p.lease(leaseID)
		if !ok || len(pl.Lease.Devices) != 1 || host[pl.Lease.Devices[0]].UUID != dev {
			t.Fatalf("provider's lease %s holds devices %v, the job saw %s", leaseID, pl.Lease.Devices, dev)
		}
	}
	// All eight devices are leased for the next minute: a ninth job that
	// must start within seconds gets no bid.
	ninth := mk()
	ninth.Deadline = time.Now().Add(5 * time.Second)
	v, err := r.tracker.Post(ninth)
	if err != nil {
		t.Fatal(err)
	}
	if v.Lease != nil {
		t.Fatalf("ninth job leased %+v on a host with all 8 devices leased", v.Lease)
	}
	for _, lv := range views {
		_, jobID, _ := strings.Cut(lv, " ")
		if _, err := r.tracker.Cancel(jobID); err != nil {
			t.Fatal(err)
		}
	}
}

// A mixed host (2x RTX 4090 + 1x RTX 3060) leases each job the model it
// asked for; "RTX 4090" and "RTX4090" name the same devices.
func TestMixedHostLeasesTheRightModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	host := nvmlHost("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060")
	p := h.provider(provSpec{model: "RTX 4090", price: 1, gpus: host})
	r := h.renter()
	post := func(model string) []int {
		t.Helper()
		j := job(terms.Silver, 5, time.Minute, "gate", "mixed", "0")
		j.GPUModels = []string{model}
		v := r.post(j)
		var pl api.ProviderLease
		h.waitFor(3*time.Second, "provider records lease "+v.Lease.ID, func() bool {
			var ok bool
			pl, ok = p.lease(v.Lease.ID)
			return ok
		})
		// The provider's signed confirm told the renter the devices.
		if !reflect.DeepEqual(v.Lease.Devices, pl.Lease.Devices) {
			t.Fatalf("renter's lease holds devices %v, provider's %v", v.Lease.Devices, pl.Lease.Devices)
		}
		return pl.Lease.Devices
	}
	if d := post("RTX 3060"); !reflect.DeepEqual(d, []int{2}) {
		t.Fatalf("RTX 3060 job holds devices %v, want [2]", d)
	}
	a, b := post("RTX 4090"), post("RTX4090")
	if len(a) != 1 || len(b) != 1 || a[0] == b[0] || a[0] > 1 || b[0] > 1 {
		t.Fatalf("RTX 4090 jobs hold %v and %v, want devices 0 and 1", a, b)
	}
	p.exec.open("mixed")
}

// A heartbeat naming a device outside the provider's signed fingerprint is
// rejected, counted as fraud, and slashes the provider (its reputation
// drops), with the heartbeat and the fingerprint as evidence.
func TestHeartbeatWithForeignDeviceIsFraud(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	host := nvmlHost("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
	foreign := false
	var mu sync.Mutex
	p := h.provider(provSpec{model: "H100", price: 1, gpus: host,
		telemetry: func(_ int, devices []int) runtime.Telemetry {
			tel := runtime.Telemetry{Source: runtime.SourceNVML, GPUUtil: 50, TempC: 60, PowerW: 300}
			mu.Lock()
			defer mu.Unlock()
			for _, d := range devices {
				u := host[d].UUID
				if foreign {
					u = "GPU-deadbeef-0000-4000-8000-000000000099"
				}
				tel.Devices = append(tel.Devices, attest.DeviceSample{Index: d, UUID: u, Util: 50, TempC: 60, PowerW: 300})
			}
			return tel
		}})
	r := h.renter()
	v := r.post(job(terms.Silver, 5, time.Minute, "gate", "fraud", "0"))
	// Honest heartbeats (the lease's own device) are accepted.
	r.waitJob(v.Job.ID, "honest telemetry", func(v api.JobView) bool {
		lt := v.LastTelemetry
		return lt != nil && len(lt.Devices) == 1 && (lt.Devices[0].UUID == host[0].UUID || lt.Devices[0].UUID == host[1].UUID)
	})
	before := r.book.Stats(p.id())
	if c := r.counters.Snapshot(); c["renter.heartbeat_fraud"] != 0 || c["renter.heartbeat_rejected"] != 0 {
		t.Fatalf("honest heartbeats counted as bad: %v", c)
	}
	mu.Lock()
	foreign = true
	mu.Unlock()
	h.waitFor(3*time.Second, "foreign-device heartbeat counted as fraud", func() bool {
		return r.counters.Snapshot()["renter.heartbeat_fraud"] > 0
	})
	after := r.book.Stats(p.id())
	if after.Slashes != before.Slashes+1 || !(after.Score < before.Score) {
		t.Fatalf("reputation before %+v, after %+v: want one more slash and a lower score", before, after)
	}
	jv, err := r.tracker.View(v.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := jv.LastTelemetry; got == nil || got.Devices[0].UUID != host[0].UUID && got.Devices[0].UUID != host[1].UUID {
		t.Fatalf("the foreign-device heartbeat was recorded as the job's telemetry: %+v", got)
	}
	p.exec.open("fraud")
}

// A provider whose GPUs run over its temperature limit stops bidding
// within a heartbeat interval and preempts its bronze (preemptible) work;
// its silver lease keeps running. Stats show the breach.
func TestOverTemperatureStopsBiddingAndPreemptsBronze(t *testing.T) {
	// Not parallel: it bounds how long this takes in wall time, which
	// the package's parallel tests would stretch.
	h := newHarness(t)
	var mu sync.Mutex
	temp := 60
	p := h.provider(provSpec{model: "H100", price: 1, gpus: nvmlHost("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"), maxTempC: 85,
		sensors: func() (int, int) {
			mu.Lock()
			defer mu.Unlock()
			return temp, 400
		}})
	r := h.renter()
	bronze := r.post(job(terms.Bronze, 5, time.Minute, "gate", "hot", "0"))
	silver := r.post(job(terms.Silver, 5, time.Minute, "gate", "hot", "0"))
	for _, v := range []string{bronze.Lease.ID, silver.Lease.ID} {
		h.waitFor(3*time.Second, "lease "+v+" running", func() bool {
			pl, ok := p.lease(v)
			return ok && pl.Run == terms.RunRunning
		})
	}
	mu.Lock()
	temp = 95
	mu.Unlock()
	hot := time.Now()
	var st api.ProviderStatsView
	h.waitFor(3*time.Second, "provider sees its temperature over the limit", func() bool {
		st = api.ProviderStatsView{}
		p.sup.FillStats(&st)
		return st.Limits.Over == "thermal"
	})
	// The supervisor samples every heartbeat interval: allow one, plus
	// scheduling slack on a loaded machine.
	if took := time.Since(hot); took > hbEvery+time.Second {
		t.Fatalf("over-temperature noticed after %s, heartbeat interval %s", took, hbEvery)
	}
	h.waitFor(3*time.Second, "bronze lease preempted", func() bool {
		pl, ok := p.lease(bronze.Lease.ID)
		return ok && pl.Run == terms.RunPreempted && strings.Contains(pl.Detail, "temperature 95C above limit 85C")
	})
	if pl, _ := p.lease(silver.Lease.ID); pl.Run != terms.RunRunning {
		t.Fatalf("silver lease %s is %s, want still running", silver.Lease.ID, pl.Run)
	}
	// No bid while hot.
	j := job(terms.Silver, 5, time.Minute, "gate", "hot", "0")
	j.Deadline = time.Now().Add(5 * time.Second)
	v, err := r.tracker.Post(j)
	if err != nil {
		t.Fatal(err)
	}
	if v.Lease != nil {
		t.Fatalf("an over-temperature provider won job %s", v.Job.ID)
	}
	if n := p.provider.Stats().Ineligible["thermal"]; n == 0 {
		t.Fatalf("provider's ineligible counts %v: no thermal refusal", p.provider.Stats().Ineligible)
	}
	st = api.ProviderStatsView{}
	p.sup.FillStats(&st)
	if st.Limits.Preempted != 1 || st.Limits.Breaches == 0 || st.Limits.TempC != 95 || st.Limits.MaxTempC != 85 {
		t.Fatalf("limits view %+v: want 1 preempted lease and the 95C reading against 85C", st.Limits)
	}
	if c := p.counters.Snapshot(); c["provider.limit_thermal"] == 0 || c["provider.limit_preempted"] != 1 {
		t.Fatalf("counters %v", c)
	}
	p.exec.open("hot")
}

// TestJobSeesItsJobID: GPUMESH_JOB_ID holds the renter's job id, which
// the job can look up (gpumesh job status), not the id of the lease it
// runs under (it held the lease id, a new one at each attempt).
func TestJobSeesItsJobID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := h.provider(provSpec{model: "A100", price: 1, exec: realProcessExec(t)})
	v := h.renter().post(job(terms.Silver, 5, time.Minute, "/bin/sh", "-c", `echo "id=$GPUMESH_JOB_ID"`))
	got := p.jobPrints(v.Lease.ID, "id=", "the job prints its GPUMESH_JOB_ID")
	if got != v.Job.ID {
		t.Fatalf("GPUMESH_JOB_ID=%q, want the job id %q (lease %s)", got, v.Job.ID, v.Lease.ID)
	}
}
