package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/urfave/cli/v2"
)

func TestLoadTrace(t *testing.T) {
	in := "job_id,submission_time,duration,num_gpu\na,10,100,2\nb,5,50.4,1\nc,6,7,0.25\nd,8,9,32\ne,8,9,12\n"
	jobs, skipped, err := ReadTrace(strings.NewReader(in))
	if err != nil || skipped != 0 {
		t.Fatal(err, skipped)
	}
	// 32 GPUs without num_nodes span 4 machines of MachineGPUs; 12 is not
	// a multiple of it and stays on one.
	want := []TraceJob{
		{ID: "a", Submit: 10, Duration: 100, GPUs: 2, Nodes: 1},
		{ID: "b", Submit: 5, Duration: 50, GPUs: 1, Nodes: 1},
		{ID: "c", Submit: 6, Duration: 7, GPUs: 1, Fraction: 0.25, Nodes: 1},
		{ID: "d", Submit: 8, Duration: 9, GPUs: 8, Nodes: 4},
		{ID: "e", Submit: 8, Duration: 9, GPUs: 12, Nodes: 1},
	}
	if !slices.Equal(jobs, want) {
		t.Fatalf("got %+v, want %+v", jobs, want)
	}
}

func TestLoadTraceErrors(t *testing.T) {
	head := "job_id,submission_time,duration,num_gpu\n"
	cases := []struct{ in, want string }{
		{"", "empty input"},
		{"id,t,d,n\n", "line 1: column 1"},
		{head, "no GPU jobs"},
		{head + "a,1,2,1\nb,1,2\n", "line 3: 3 fields"},
		{head + "a,1,2,1\nb,x,2,1\n", "line 3: submission_time"},
		{head + "a,-1,2,1\n", "line 2: submission_time"},
		{head + "a,1,0,1\n", "line 2: duration: must be positive"},
		{head + "a,1,2,0\n", "line 2: num_gpu: 0 out of range"},
		{head + "a,1,2,1.5\n", "line 2: num_gpu"},
		{head + "a,1,2,1\n\nc,1,2,1\na,3,4,1\n", "line 5: duplicate job id \"a\" (first on line 2)"},
		{head + ",1,2,1\n", "line 2: empty job id"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, _, err := ReadTrace(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("LoadTrace(%q) = %v, want error containing %q", c.in, err, c.want)
			}
		})
	}
}

func TestParseMix(t *testing.T) {
	m, err := ParseMix("gold=1, silver=3", tierNames...)
	if err != nil || m["gold"] != 1 || m["silver"] != 3 || m.String() != "gold=1,silver=3" {
		t.Fatalf("ParseMix = %v, %v", m, err)
	}
	for _, bad := range []string{"gold", "platinum=1", "gold=-1", "gold=0", "gold=x"} {
		t.Run(bad, func(t *testing.T) {
			if _, err := ParseMix(bad, tierNames...); err == nil {
				t.Errorf("ParseMix(%q) accepted", bad)
			}
		})
	}
}

// alwaysOn is a provider selling gpus GPUs at all times at a $1 floor.
func alwaysOn(id string, gpus int, avail ...terms.Window) Provider {
	p := Provider{Kind: KindAlways}
	p.Capability.Peer = id
	p.Capability.Region = "eu-west"
	p.Capability.Policy = terms.Policy{PriceFloor: 1, AcceptPreemptible: true, AllowPreemption: true, Availability: avail}
	for i := 0; i < gpus; i++ {
		p.Capability.GPUs = append(p.Capability.GPUs, terms.GPU{Model: "A100", VRAMGB: 80})
	}
	return p
}

func job(id string, at time.Duration, gpus int, d time.Duration, tier terms.Tier) terms.Job {
	return terms.Job{
		ID: id, Owner: "r", Tier: tier, MaxPrice: 5, GPUCount: gpus, Duration: d,
		Preemptible: tier == terms.Bronze, Run: terms.RunSpec{Command: []string{"x"}},
		CreatedAt: Epoch.Add(at),
	}
}

func policy(t *testing.T, r *Report, name string) PolicyReport {
	t.Helper()
	for _, p := range r.Policies {
		if p.Policy == name {
			return p
		}
	}
	t.Fatalf("no policy %s in report", name)
	return PolicyReport{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// Worked by hand. One provider with 2 GPUs. At 0, j1 wants 1 GPU for 2 h
// and j2 both GPUs for 1 h; at 1.5 h j3 wants 1 GPU for 1 h.
// FIFO first-fit: j1 runs 0-2 h, j2 does not fit, j3 takes the free GPU
// 1.5-2.5 h, so j2 only runs 2.5-3.5 h: waits 0, 2.5, 0 h.
// Auction: the provider offers j2 its earliest span, 2-3 h, and the renter
// books it; j3 then gets 3-4 h: waits 0, 2, 1.5 h (the wide job is not
// starved by narrow ones). Both lease 5 GPU-hours out of 2 GPUs x 11.5 h.
func TestHandBuiltFIFOAndAuction(t *testing.T) {
	h := time.Hour
	cfg := Config{
		Jobs: []terms.Job{
			job("j1", 0, 1, 2*h, terms.Silver),
			job("j2", 0, 2, 1*h, terms.Silver),
			job("j3", 3*h/2, 1, 1*h, terms.Silver),
		},
		Providers: []Provider{alwaysOn("p0", 2)},
		Drain:     10 * h,
	}
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.OfferedGPUHours != 23 || r.Bound.Fluid != 5 || r.Bound.Simple != 5 {
		t.Fatalf("offered %v fluid %v simple %v, want 23, 5, 5", r.OfferedGPUHours, r.Bound.Fluid, r.Bound.Simple)
	}
	fifo := policy(t, r, PolicyFIFO)
	auc := policy(t, r, PolicyAuction)
	for _, p := range []PolicyReport{fifo, auc} {
		if p.FilledGPUHours != 5 || !near(p.FillRate, 0.2174) || p.Completed != 3 {
			t.Errorf("%s: filled %v fill %v done %d, want 5, 5/23, 3", p.Policy, p.FilledGPUHours, p.FillRate, p.Completed)
		}
		if p.CostPerGPUHour < 1 || p.CostPerGPUHour > 1.1 {
			t.Errorf("%s: cost %v, want the $1 floor plus at most the 10%% occupancy surcharge", p.Policy, p.CostPerGPUHour)
		}
	}
	if s := fifo.Tiers[0]; s.WaitP50 != 0 || s.WaitP99 != 2.5 || s.SLAViolations != 1 {
		t.Errorf("fifo waits p50 %v p99 %v viol %d, want 0, 2.5, 1", s.WaitP50, s.WaitP99, s.SLAViolations)
	}
	if s := auc.Tiers[0]; s.WaitP50 != 1.5 || s.WaitP99 != 2 || s.SLAViolations != 0 {
		t.Errorf("auction waits p50 %v p99 %v viol %d, want 1.5, 2, 0", s.WaitP50, s.WaitP99, s.SLAViolations)
	}
}

// The fluid bound on hand-computed cases.
func TestBoundByHand(t *testing.T) {
	h := time.Hour
	// One always-on GPU, replay ends 1 h after the last submission (6 h).
	// j1 (1 h of work at 0) fits; j2 arrives at 5 h with 3 h of work, of
	// which only 1 h can run before the end; j3 wants 2 GPUs and fits
	// nobody. Fluid: 1 + 1 = 2. Simple: min(offered 6, placeable 1+3) = 4.
	r, err := Run(Config{
		Jobs: []terms.Job{
			job("j1", 0, 1, h, terms.Silver),
			job("j2", 5*h, 1, 3*h, terms.Silver),
			job("j3", 0, 2, h, terms.Silver),
		},
		Providers: []Provider{alwaysOn("p0", 1)},
		Drain:     h,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Unplaceable != 1 || r.UnplaceableGPUHours != 2 {
		t.Errorf("unplaceable %d (%v GPU-h), want 1 (2)", r.Unplaceable, r.UnplaceableGPUHours)
	}
	if r.OfferedGPUHours != 6 || r.Bound.Fluid != 2 || r.Bound.Simple != 4 {
		t.Errorf("offered %v fluid %v simple %v, want 6, 2, 4", r.OfferedGPUHours, r.Bound.Fluid, r.Bound.Simple)
	}
	for _, p := range r.Policies {
		if p.FilledGPUHours != 2 {
			t.Errorf("%s filled %v, want 2 (both policies reach the bound here)", p.Policy, p.FilledGPUHours)
		}
	}

	// A window: the GPU is for sale only Monday 01:00-02:00 UTC (the epoch
	// is Monday 00:00). A 1 h job submitted at 0 can only run 01:00-02:00:
	// fluid bound 1, offered 1, FIFO and auction both start it after 1 h.
	r, err = Run(Config{
		Jobs:      []terms.Job{job("j", 0, 1, h, terms.Gold)},
		Providers: []Provider{alwaysOn("p0", 1, terms.Window{Days: []string{"mon"}, From: "01:00", To: "02:00"})},
		Drain:     5 * h,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.OfferedGPUHours != 1 || r.Bound.Fluid != 1 {
		t.Errorf("offered %v fluid %v, want 1, 1", r.OfferedGPUHours, r.Bound.Fluid)
	}
	for _, p := range r.Policies {
		if p.FilledGPUHours != 1 || p.FillRate != 1 || p.Tiers[0].WaitP50 != 1 || p.SLAViolations != 1 {
			t.Errorf("%s: filled %v fill %v wait %v viol %d, want 1, 1, 1 h, 1", p.Policy, p.FilledGPUHours, p.FillRate, p.Tiers[0].WaitP50, p.SLAViolations)
		}
	}
}

// Gold preempts bronze under the auction (and never under FIFO), and the
// evicted bronze job resumes with the work it had done.
func TestGoldPreemptsBronze(t *testing.T) {
	h := time.Hour
	r, err := Run(Config{
		Jobs: []terms.Job{
			job("b", 0, 1, 4*h, terms.Bronze),
			job("g", h, 1, h, terms.Gold),
		},
		Providers: []Provider{alwaysOn("p0", 1)},
		Drain:     10 * h,
	})
	if err != nil {
		t.Fatal(err)
	}
	auc, fifo := policy(t, r, PolicyAuction), policy(t, r, PolicyFIFO)
	if auc.PreemptGold != 1 || fifo.PreemptGold != 0 {
		t.Fatalf("gold preemptions auction %d fifo %d, want 1, 0", auc.PreemptGold, fifo.PreemptGold)
	}
	// Auction: b 0-1 h, g 1-2 h, b resumes 2-5 h: 5 GPU-h, gold waits 0.
	// FIFO: b 0-4 h, g 4-5 h: 5 GPU-h, gold waits 3 h.
	for _, p := range []PolicyReport{auc, fifo} {
		if p.FilledGPUHours != 5 || p.Completed != 2 {
			t.Errorf("%s: filled %v done %d, want 5, 2", p.Policy, p.FilledGPUHours, p.Completed)
		}
	}
	if auc.Tiers[0].WaitP50 != 0 || fifo.Tiers[0].WaitP50 != 3 {
		t.Errorf("gold wait auction %v fifo %v, want 0, 3", auc.Tiers[0].WaitP50, fifo.Tiers[0].WaitP50)
	}
}

func smallTrace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("job_id,submission_time,duration,num_gpu\n")
	for i := 0; i < 300; i++ {
		// Whole GPUs, fractions of one, and 16-GPU jobs (two machines).
		g := []string{"1", "0.25", "1", "2", "4", "8", "16", "0.5"}[i%8]
		b.WriteString(strings.Join([]string{"job" + itoa(i), itoa(i * 1800), itoa(600 + (i*7919)%40000), g}, ","))
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestDeterministicAndBounded(t *testing.T) {
	for _, flat := range []bool{false, true} {
		t.Run("flat="+strconv.FormatBool(flat), func(t *testing.T) { deterministicAndBounded(t, flat) })
	}
}

func deterministicAndBounded(t *testing.T, flat bool) {
	path := smallTrace(t)
	run := func(seed uint64) (*Report, []byte) {
		r, err := Run(Config{TracePath: path, Seed: seed, Supply: Supply{Count: 120}, Flat: flat})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := r.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		return r, buf.Bytes()
	}
	r1, a := run(7)
	_, b := run(7)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed gave different JSON reports")
	}
	_, c := run(8)
	if bytes.Equal(a, c) {
		t.Fatal("different seeds gave identical reports")
	}
	for _, p := range r1.Policies {
		// 0.05 GPU-h of slack for the two-decimal rounding of the report.
		if p.FilledGPUHours > r1.Bound.Fluid+0.05 || r1.Bound.Fluid > r1.Bound.Simple+0.05 {
			t.Errorf("%s filled %v above fluid bound %v (simple %v)", p.Policy, p.FilledGPUHours, r1.Bound.Fluid, r1.Bound.Simple)
		}
		if p.Completed == 0 || p.FilledGPUHours <= 0 {
			t.Errorf("%s placed nothing", p.Policy)
		}
	}
}

func TestCommand(t *testing.T) {
	path := smallTrace(t)
	var out, errOut bytes.Buffer
	app := &cli.App{Name: "gpumesh", Commands: []*cli.Command{Command(nil)}, Writer: &out, ErrWriter: &errOut}
	args := []string{"gpumesh", "sim", "--trace", path, "--providers", "80", "--seed", "3", "--json", "--tier-mix", "gold=1,bronze=1"}
	if err := app.Run(args); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if rep.Providers != 80 || rep.Seed != 3 || rep.Jobs != 300 || len(rep.Policies) != 2 {
		t.Fatalf("report providers %d seed %d jobs %d policies %d", rep.Providers, rep.Seed, rep.Jobs, len(rep.Policies))
	}
	for _, tr := range rep.Policies[0].Tiers {
		if tr.Tier == terms.Silver {
			t.Errorf("--tier-mix without silver still produced %d silver jobs", tr.Jobs)
		}
	}
	out.Reset()
	if err := app.Run([]string{"gpumesh", "sim", "--trace", path, "--providers", "40"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"auction", "fifo", "bound", "wait p95 h"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := app.Run([]string{"gpumesh", "sim", "--trace", path, "--providers", "40", "--flat"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "flat: fractions rounded up to whole GPUs") || !strings.Contains(out.String(), "(75 fractional, 37 multi-machine jobs") {
		t.Errorf("--flat table does not say so:\n%s", out.String())
	}
	if err := app.Run([]string{"gpumesh", "sim", "--trace", path, "--tier-mix", "platinum=1"}); err == nil {
		t.Error("bad --tier-mix accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("job_id,submission_time,duration,num_gpu\na,1,2,1\nb,3,x,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := app.Run([]string{"gpumesh", "sim", "--trace", bad})
	if err == nil || !strings.Contains(err.Error(), "bad.csv: trace: line 3: duration") {
		t.Errorf("malformed trace: got %v, want the file and line 3 named", err)
	}
}

// Renters learn reliability from outcomes only. p0 fails every lease (a
// hidden rate the renter never sees), p1 none; both sell one GPU at the same
// floor. The auction starts both at 0.5, sees p0 fail and moves to p1, so it
// finishes every job with at most a couple of failures; FIFO first-fit keeps
// choosing p0 first whenever it is free.
func TestReliabilityLearnedFromOutcomes(t *testing.T) {
	h := time.Hour
	flaky, good := alwaysOn("p0", 1), alwaysOn("p1", 1)
	flaky.FailRate = 1
	var jobs []terms.Job
	for i := 0; i < 20; i++ {
		jobs = append(jobs, job("j"+itoa(i), time.Duration(i)*2*h, 1, h, terms.Silver))
	}
	r, err := Run(Config{Jobs: jobs, Providers: []Provider{flaky, good}, Drain: 4 * h})
	if err != nil {
		t.Fatal(err)
	}
	auc, fifo := policy(t, r, PolicyAuction), policy(t, r, PolicyFIFO)
	if auc.Completed != 20 || auc.Failures > 2 {
		t.Errorf("auction completed %d with %d failures, want 20 with at most 2", auc.Completed, auc.Failures)
	}
	if fifo.Failures < 20 {
		t.Errorf("fifo failures %d, want at least one per job (it never learns)", fifo.Failures)
	}
	if auc.LostGPUHours >= fifo.LostGPUHours {
		t.Errorf("auction lost %v GPU-h, fifo %v: the auction should lose less", auc.LostGPUHours, fifo.LostGPUHours)
	}
}

// The replay's eligibility is auction's: a job's residency matches a
// provider's region case-insensitively ("EU" on "eu-west"), and a job
// restricted to a GPU model the only provider lacks is unplaceable.
func TestEligibilityIsAuctions(t *testing.T) {
	h := time.Hour
	eu := job("eu", 0, 1, h, terms.Silver)
	eu.Region = "EU"
	h100 := job("h100", 0, 1, h, terms.Silver)
	h100.GPUModels = []string{"H100"}
	r, err := Run(Config{Jobs: []terms.Job{eu, h100}, Providers: []Provider{alwaysOn("p0", 2)}, Drain: 4 * h})
	if err != nil {
		t.Fatal(err)
	}
	if r.Unplaceable != 1 {
		t.Errorf("unplaceable %d, want 1 (the H100 job)", r.Unplaceable)
	}
	for _, name := range []string{PolicyAuction, PolicyFIFO} {
		if p := policy(t, r, name); p.Completed != 1 {
			t.Errorf("%s completed %d, want 1 (the EU job on eu-west)", name, p.Completed)
		}
	}
}
