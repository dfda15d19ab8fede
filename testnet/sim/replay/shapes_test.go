package replay

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// The bundled format's num_nodes column and fractions, and Alibaba's
// cluster-trace-gpu-v2023 pod lists.
func TestReadTraceShapes(t *testing.T) {
	in := "job_id,submission_time,duration,num_gpu,num_nodes\na,0,60,4,2\nb,5,60,0.5,1\nc,6,60,16,1\n"
	jobs, _, err := ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceJob{
		{ID: "a", Submit: 0, Duration: 60, GPUs: 4, Nodes: 2},
		{ID: "b", Submit: 5, Duration: 60, GPUs: 1, Fraction: 0.5, Nodes: 1},
		// num_nodes given: 16 GPUs on one machine, as the row says.
		{ID: "c", Submit: 6, Duration: 60, GPUs: 16, Nodes: 1},
	}
	if !slices.Equal(jobs, want) {
		t.Fatalf("got %+v, want %+v", jobs, want)
	}

	ali := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"p0,12000,16384,1,1000,,LS,Running,0,100,10\n" + // whole GPU, runs 10-100
		"p1,6000,12288,1,460,,LS,Running,20,80,20\n" + // 0.46 of a GPU
		"p2,20000,65536,0,0,,LS,Running,30,90,30\n" + // no GPU: left out
		"p3,8000,30517,1,320,,BE,Pending,40,70,\n" + // never scheduled: wanted 40-70
		"p4,88000,327680,8,1000,,Burstable,Succeeded,50,95,50\n" +
		"p5,3152,5600,1,1000,,BE,Failed,60,60,60\n" // no time on a GPU: left out
	jobs, skipped, err := ReadTrace(strings.NewReader(ali))
	if err != nil {
		t.Fatal(err)
	}
	want = []TraceJob{
		{ID: "p0", Submit: 0, Duration: 90, GPUs: 1, Nodes: 1},
		{ID: "p1", Submit: 20, Duration: 60, GPUs: 1, Fraction: 0.46, Nodes: 1},
		{ID: "p3", Submit: 40, Duration: 30, GPUs: 1, Fraction: 0.32, Nodes: 1},
		{ID: "p4", Submit: 50, Duration: 45, GPUs: 8, Nodes: 1},
	}
	if skipped != 2 || !slices.Equal(jobs, want) {
		t.Fatalf("got %+v (%d skipped), want %+v (2 skipped)", jobs, skipped, want)
	}
}

// Hostile rows in both formats: each is an error naming its line.
func TestReadTraceShapeErrors(t *testing.T) {
	nodes := "job_id,submission_time,duration,num_gpu,num_nodes\n"
	ali := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	cases := []struct{ in, want string }{
		{"job_id,submission_time,duration,num_gpu,nodes\n", "line 1: column 5 is \"nodes\""},
		{nodes + "a,0,60,1,1\nb,0,60,0.5,2\n", "line 3: num_nodes: 2 machines with a fraction"},
		{nodes + "a,0,60,1,0\n", "line 2: num_nodes: \"0\""},
		{nodes + "a,0,60,1,x\n", "line 2: num_nodes: \"x\""},
		{nodes + "a,0,60,4096,2\n", "line 2: num_nodes × num_gpu: 8192 GPUs"},
		{nodes + "a,0,60,0.0,1\n", "line 2: num_gpu: \"0.0\""},
		{nodes + "a,0,60,-0.5,1\n", "line 2: num_gpu"},
		{nodes + "a,0,60,NaN,1\n", "line 2: num_gpu"},
		{nodes + "a,0,60,1e400,1\n", "line 2: num_gpu"},
		{ali + "p,1,1,1,1001,,LS,Running,0,10,0\n", "line 2: gpu_milli: \"1001\""},
		{ali + "p,1,1,1,0,,LS,Running,0,10,0\n", "line 2: gpu_milli: 0 with num_gpu 1"},
		{ali + "p,1,1,-1,1000,,LS,Running,0,10,0\n", "line 2: num_gpu: \"-1\""},
		{ali + "p,1,1,1,500,,LS,Running,10,20,5\n", "line 2: scheduled_time: 5 before creation_time 10"},
		{ali + "p,1,1,1,500,,LS,Running,0,20,30\n", "line 2: deletion_time: 20 before the pod started (30)"},
		{ali + "p,1,1,1,500,,LS,Running,x,20,0\n", "line 2: creation_time"},
		{ali + "p,1,1,0,0,,LS,Running,0,20,0\n", "no GPU jobs"},
		{ali + "p,1,1,1,500,,LS,Running,0,20,0\np,1,1,1,500,,LS,Running,0,20,0\n", "line 3: duplicate job id \"p\""},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, _, err := ReadTrace(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReadTrace(%q) = %v, want error containing %q", c.in, err, c.want)
			}
		})
	}
}

// onlySilver is a demand with every job silver, anywhere, so that a test's
// trace rows become predictable jobs (the price cap, $1.4-2.6, is above
// the test providers' $1 floor; memory is drawn, at most 80 GB).
var onlySilver = Demand{Tiers: Mix{"silver": 1}, Regions: Mix{"any": 1}, PriceScale: 1}

// sliced is alwaysOn with each device cut into n slices.
func sliced(id string, gpus, n int) Provider {
	p := alwaysOn(id, gpus)
	rule := terms.SliceRule{Count: n}
	for d := range p.Capability.GPUs {
		rule.Devices = append(rule.Devices, d)
		p.Capability.GPUs[d].Isolation = terms.IsolationMPS
	}
	p.Capability.Policy.Slices = []terms.SliceRule{rule}
	return p
}

// Five jobs of a quarter GPU each, at once, on one GPU cut into four: with
// shapes four run together on slices, each billed a quarter, and the fifth
// waits for one to end; flat, each takes the whole GPU in turn and pays
// for four times what it asked.
func TestSlicesPackOnOneGPU(t *testing.T) {
	var trace []TraceJob
	for i := 0; i < 5; i++ {
		trace = append(trace, TraceJob{ID: "q" + itoa(i), Duration: 3600, GPUs: 1, Fraction: 0.25})
	}
	run := func(flat bool) *Report {
		r, err := Run(Config{Trace: trace, Demand: onlySilver, Providers: []Provider{sliced("p0", 1, 4)}, Drain: 10 * time.Hour, Flat: flat})
		if err != nil {
			t.Fatal(err)
		}
		if r.FractionalJobs != 5 || r.Unplaceable != 0 {
			t.Fatalf("flat %v: %d fractional jobs, %d unplaceable; want 5, 0", flat, r.FractionalJobs, r.Unplaceable)
		}
		return r
	}
	r := run(false)
	if r.Bound.Fluid != 1.25 {
		t.Errorf("bound %v GPU-h, want 1.25 (five quarters for an hour)", r.Bound.Fluid)
	}
	for _, p := range r.Policies {
		all := p.Tiers[len(p.Tiers)-1]
		if p.Completed != 5 || p.FilledGPUHours != 1.25 || p.IdleBilledGPUHours != 0 || all.WaitP50 != 0 || all.WaitP99 != 1 {
			t.Errorf("%s with slices: done %d filled %v idle billed %v wait p50 %v max %v; want 5, 1.25, 0, 0, 1 h",
				p.Policy, p.Completed, p.FilledGPUHours, p.IdleBilledGPUHours, all.WaitP50, all.WaitP99)
		}
		if p.CostPerGPUHour != 1 || p.Earnings.Total != 1.25 {
			t.Errorf("%s with slices: $%v per GPU-hour asked, provider earned $%v; want $1 (the floor) and $1.25", p.Policy, p.CostPerGPUHour, p.Earnings.Total)
		}
	}
	r = run(true)
	if r.Bound.Fluid != 5 {
		t.Errorf("flat bound %v GPU-h, want 5 (five whole GPU-hours)", r.Bound.Fluid)
	}
	for _, p := range r.Policies {
		all := p.Tiers[len(p.Tiers)-1]
		if p.Completed != 5 || p.FilledGPUHours != 5 || p.IdleBilledGPUHours != 3.75 || all.WaitP99 != 4 {
			t.Errorf("%s flat: done %d filled %v idle billed %v wait max %v; want 5, 5, 3.75, 4 h",
				p.Policy, p.Completed, p.FilledGPUHours, p.IdleBilledGPUHours, all.WaitP99)
		}
		if p.CostPerGPUHour != 4 {
			t.Errorf("%s flat: $%v per GPU-hour asked, want $4 (a whole GPU for a quarter)", p.Policy, p.CostPerGPUHour)
		}
	}
}

// A gang of two machines × 2 GPUs on three providers × 2 GPUs, while two
// whole-provider jobs (1 h and 3 h) hold two of them: only one provider is
// free at first, so the gang starts no member until a second frees (1 h),
// then runs both members at once, one per provider. Flat, it asks one
// provider for 4 GPUs, which none has.
func TestGangAllOrNothing(t *testing.T) {
	trace := []TraceJob{
		{ID: "a1", Duration: 3600, GPUs: 2},
		{ID: "a2", Duration: 3 * 3600, GPUs: 2},
		{ID: "g", Duration: 2 * 3600, GPUs: 2, Nodes: 2},
	}
	provs := []Provider{alwaysOn("p0", 2), alwaysOn("p1", 2), alwaysOn("p2", 2)}
	r, err := Run(Config{Trace: trace, Demand: onlySilver, Providers: provs, Drain: 10 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r.GangJobs != 1 || r.Unplaceable != 0 || r.Bound.Fluid != 16 {
		t.Fatalf("gang jobs %d unplaceable %d bound %v; want 1, 0, 16 GPU-h", r.GangJobs, r.Unplaceable, r.Bound.Fluid)
	}
	for _, p := range r.Policies {
		all := p.Tiers[len(p.Tiers)-1]
		// Waits 0, 0 and 1 h: the gang's is the largest.
		if p.Completed != 3 || p.FilledGPUHours != 16 || all.WaitP99 != 1 {
			t.Errorf("%s: done %d filled %v gang wait %v; want 3, 16 GPU-h, 1 h", p.Policy, p.Completed, p.FilledGPUHours, all.WaitP99)
		}
	}
	r, err = Run(Config{Trace: trace, Demand: onlySilver, Providers: provs, Drain: 10 * time.Hour, Flat: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Unplaceable != 1 || r.UnplaceableGPUHours != 8 {
		t.Errorf("flat: unplaceable %d (%v GPU-h), want the gang (8 GPU-h)", r.Unplaceable, r.UnplaceableGPUHours)
	}
}

// A gang lives and dies together: p0 fails every lease (hidden from the
// renter). FIFO first-fit keeps putting a member on p0, so every attempt
// is lost, the healthy member's work too, and the job never finishes; the
// auction learns p0's failures and moves the gang to p1 and p2. Were the
// healthy member's work kept, FIFO would have delivered as much as half
// its lost GPU-hours; it delivers only the attempt still running at the
// end of the replay (not yet failed there).
func TestGangDiesTogether(t *testing.T) {
	flaky := alwaysOn("p0", 2)
	flaky.FailRate = 1
	provs := []Provider{flaky, alwaysOn("p1", 2), alwaysOn("p2", 2)}
	trace := []TraceJob{{ID: "g", Duration: 2 * 3600, GPUs: 2, Nodes: 2}}
	r, err := Run(Config{Trace: trace, Demand: onlySilver, Providers: provs, Drain: 20 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	auc, fifo := policy(t, r, PolicyAuction), policy(t, r, PolicyFIFO)
	if fifo.Completed != 0 || fifo.FilledGPUHours >= 4 || fifo.FilledGPUHours >= fifo.LostGPUHours/4 || fifo.Failures < 2 {
		t.Errorf("fifo: done %d filled %v failures %d lost %v; want 0, under one attempt and a quarter of the lost work, >= 2",
			fifo.Completed, fifo.FilledGPUHours, fifo.Failures, fifo.LostGPUHours)
	}
	if auc.Completed != 1 || auc.FilledGPUHours != 8 || auc.Failures < 1 || auc.Failures > 2 {
		t.Errorf("auction: done %d filled %v failures %d; want 1, 8 GPU-h, 1-2", auc.Completed, auc.FilledGPUHours, auc.Failures)
	}
}

// The bound accounts for both shapes. A gang of 2 × 1 GPU for 1 h has p0
// (always on) and p1 (Monday 01:00-01:30 only): its members can only run
// together for half an hour, so the bound counts 2 GPUs × 0.5 h = 1 GPU-h
// (a bound that let its work run on any GPU would count 2: p0 alone from
// 0 to 1 h, both from 1 to 1.5 h), and no policy can run it at all. A
// quarter GPU for 2 h on a sliced provider counts 0.5 GPU-h.
func TestBoundShapes(t *testing.T) {
	half := alwaysOn("p1", 1, terms.Window{Days: []string{"mon"}, From: "01:00", To: "01:30"})
	cases := []struct {
		name   string
		trace  []TraceJob
		provs  []Provider
		bound  float64
		filled float64
	}{
		{"gang", []TraceJob{{ID: "g", Duration: 3600, GPUs: 1, Nodes: 2}}, []Provider{alwaysOn("p0", 1), half}, 1, 0},
		{"quarter", []TraceJob{{ID: "q", Duration: 2 * 3600, GPUs: 1, Fraction: 0.25}}, []Provider{sliced("p2", 1, 4)}, 0.5, 0.5},
	}
	for _, c := range cases {
		r, err := Run(Config{Trace: c.trace, Demand: onlySilver, Providers: c.provs, Drain: 3 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if r.Unplaceable != 0 || r.Bound.Fluid != c.bound {
			t.Errorf("%s: unplaceable %d, bound %v GPU-h; want 0 and %v", c.name, r.Unplaceable, r.Bound.Fluid, c.bound)
		}
		for _, p := range r.Policies {
			if p.FilledGPUHours != c.filled {
				t.Errorf("%s: %s filled %v GPU-h, want %v", c.name, p.Policy, p.FilledGPUHours, c.filled)
			}
		}
	}
}

// A gang member evicted by gold stops its whole gang, which keeps its work
// (a checkpoint) and resumes once both providers are free again. A bronze
// gang of 2 × 1 GPU for 4 h holds p0 and p1 (1 GPU each) from 0; a gold
// job of 1 GPU for 1 h arrives at 1 h. Auction: gold evicts one member at
// 1 h, so the gang has done 1 h; gold runs 1-2 h; the gang runs its last
// 3 h from 2 h. FIFO never preempts: gold waits for the gang to end at 4 h.
// Either way 2 × 4 + 1 = 9 GPU-hours are delivered.
func TestGangEvictedTogether(t *testing.T) {
	trace := []TraceJob{
		{ID: "g", Duration: 4 * 3600, GPUs: 1, Nodes: 2},
		{ID: "x", Submit: 3600, Duration: 3600, GPUs: 1},
	}
	demand := Demand{Tiers: Mix{"gold": 1, "bronze": 1}, Regions: Mix{"any": 1}, PriceScale: 3}
	// The tiers are drawn: take the first seed that makes the gang bronze
	// and the single job gold.
	var seed uint64
	for s := uint64(1); s < 100 && seed == 0; s++ {
		jobs, _ := buildJobs(trace, demand, s, false)
		if jobs[0].Tier == terms.Bronze && jobs[1].Tier == terms.Gold {
			seed = s
		}
	}
	if seed == 0 {
		t.Fatal("no seed under 100 draws a bronze gang and a gold job")
	}
	r, err := Run(Config{Trace: trace, Demand: demand, Seed: seed, Providers: []Provider{alwaysOn("p0", 1), alwaysOn("p1", 1)}, Drain: 10 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	auc, fifo := policy(t, r, PolicyAuction), policy(t, r, PolicyFIFO)
	wait := func(p PolicyReport, tier terms.Tier) float64 {
		for _, x := range p.Tiers {
			if x.Tier == tier {
				return x.WaitP50
			}
		}
		t.Fatalf("%s: no %s tier", p.Policy, tier)
		return 0
	}
	if auc.PreemptGold != 1 || auc.Completed != 2 || auc.FilledGPUHours != 9 || auc.LostGPUHours != 0 || wait(auc, terms.Gold) != 0 {
		t.Errorf("auction: preemptions %d done %d filled %v lost %v gold wait %v; want 1, 2, 9, 0, 0",
			auc.PreemptGold, auc.Completed, auc.FilledGPUHours, auc.LostGPUHours, wait(auc, terms.Gold))
	}
	if fifo.PreemptGold != 0 || fifo.Completed != 2 || fifo.FilledGPUHours != 9 || wait(fifo, terms.Gold) != 3 {
		t.Errorf("fifo: preemptions %d done %d filled %v gold wait %v; want 0, 2, 9, 3 h",
			fifo.PreemptGold, fifo.Completed, fifo.FilledGPUHours, wait(fifo, terms.Gold))
	}
}
