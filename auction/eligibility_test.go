package auction

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

func gpus(model string, vram, n int) []terms.GPU {
	out := make([]terms.GPU, n)
	for i := range out {
		out[i] = terms.GPU{Model: model, VRAMGB: vram}
	}
	return out
}

func baseState() ProviderState {
	return ProviderState{
		Cap: &terms.Capability{Peer: "prov", Region: "eu-west", GPUs: gpus("A100", 80, 4), Datasets: []string{"imagenet", "c4"},
			Policy: terms.Policy{PriceFloor: 1, AcceptPreemptible: true}},
		Cal:         NewCalendar(4),
		TempC:       60,
		PowerW:      300,
		Reliability: 0.9,
	}
}

func evalJob() *terms.Job {
	return &terms.Job{ID: "j1", Tier: terms.Silver, MaxPrice: 2, GPUCount: 2, Duration: time.Hour, Region: "eu",
		Datasets: []string{"c4", "laion"}, Run: terms.RunSpec{Command: []string{"run"}}}
}

func TestEvaluateIneligible(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	cases := []struct {
		want string
		mut  func(*ProviderState, *terms.Job)
	}{
		{"region us-east does not satisfy eu", func(ps *ProviderState, j *terms.Job) { ps.Cap.Region = "us-east" }},
		{"region europe-x does not satisfy eu", func(ps *ProviderState, j *terms.Job) { ps.Cap.Region = "europe-x" }},
		{"gpu model A100 not in h100", func(ps *ProviderState, j *terms.Job) { j.GPUModels = []string{"h100"} }},
		{"vram below required 96GB", func(ps *ProviderState, j *terms.Job) { j.MinVRAMGB = 96 }},
		{"4 qualifying gpus < 8 required", func(ps *ProviderState, j *terms.Job) { j.GPUCount = 8 }},
		{"workload training not accepted", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.AllowedWorkloads = []string{"inference"}
			j.Workload = "training"
		}},
		{"preemptible work not accepted", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.AcceptPreemptible = false
			j.Tier, j.Preemptible = terms.Bronze, true
		}},
		{"gpu temperature 90C above limit 85C", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.MaxTempC = 85; ps.TempC = 90 }},
		{"power draw 300W above limit 250W", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.MaxPowerW = 250 }},
		{"reliability 0.90 below required 0.95", func(ps *ProviderState, j *terms.Job) { j.MinReliability = 0.95 }},
		{"price floor 2.10 > max 2.00", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.PriceFloor = 2.1 }},
		{"quote 3.00 > max 2.00", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.PeakWindows = []terms.Window{{From: "08:00", To: "18:00"}}
			ps.Cap.Policy.PriceFloor = 1.5
			ps.Cap.Policy.PeakMultiplier = 2
			j.Deadline = now.Add(2 * time.Hour) // no off-peak start in time
		}},
		{"duration 1h0m0s exceeds max lease 30m0s", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.MaxLease = 30 * time.Minute }},
		{"not available before", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.Availability = []terms.Window{{From: "22:00", To: "06:00"}}
			j.Deadline = now.Add(2 * time.Hour)
		}},
		{"no free window of 1h0m0s", func(ps *ProviderState, j *terms.Job) {
			// 40-minute gaps only.
			ps.Cap.Policy.Reserved = []terms.Interval{{Start: now.Add(40 * time.Minute), End: now.Add(3 * time.Hour)}}
			j.Deadline = now.Add(2 * time.Hour)
		}},
		{"no 2 free gpus", func(ps *ProviderState, j *terms.Job) {
			_ = ps.Cal.Reserve(Booking{LeaseID: "x", Start: now, End: now.Add(5 * time.Hour), GPUs: 3})
			j.Deadline = now.Add(4 * time.Hour)
		}},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			ps, j := baseState(), evalJob()
			c.mut(&ps, j)
			_, err := Evaluate(ps, j, now)
			reason, ok := IneligibleReason(err)
			if !ok || !strings.Contains(reason, c.want) {
				t.Errorf("want ineligible %q, got %v", c.want, err)
			}
		})
	}
}

// StaticFit fails exactly on the time-independent rules, with Evaluate's
// reason, and passes providers that only the moment rules out.
func TestStaticFit(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	cases := []struct {
		name, want string // want "" means StaticFit passes
		mut        func(*ProviderState, *terms.Job)
	}{
		{"region", "region us-east does not satisfy eu", func(ps *ProviderState, j *terms.Job) { ps.Cap.Region = "us-east" }},
		{"region case", "", func(ps *ProviderState, j *terms.Job) { ps.Cap.Region, j.Region = "EU-West", "Eu" }},
		{"workload", "workload training not accepted", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.AllowedWorkloads = []string{"inference"}
			j.Workload = "training"
		}},
		{"preemptible", "preemptible work not accepted", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.AcceptPreemptible = false
			j.Tier, j.Preemptible = terms.Bronze, true
		}},
		{"model", "gpu model A100 not in h100", func(ps *ProviderState, j *terms.Job) { j.GPUModels = []string{"h100"} }},
		{"gpu count of one model", "2 qualifying gpus < 3 required", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.GPUs = append(gpus("A100", 80, 2), gpus("H100", 80, 2)...)
			j.GPUCount = 3
		}},
		{"price floor", "price floor 2.10 > max 2.00", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.PriceFloor = 2.1 }},
		{"excluded", "lost an earlier attempt", func(ps *ProviderState, j *terms.Job) { j.Exclude = []string{"other", "prov"} }},
		{"another excluded", "", func(ps *ProviderState, j *terms.Job) { j.Exclude = []string{"other"} }},
		{"sealed job where it cannot be kept off disk", "sealed jobs not taken", func(ps *ProviderState, j *terms.Job) { j.Sealed = true }},
		{"sealed job where it can", "", func(ps *ProviderState, j *terms.Job) { j.Sealed, ps.Cap.Policy.Sealed = true, true }},
		{"no-persist not offered", "no-persist jobs not offered", func(ps *ProviderState, j *terms.Job) { j.NoPersist = true }},
		{"no-persist offered", "", func(ps *ProviderState, j *terms.Job) {
			j.NoPersist, ps.Cap.Policy.NoPersist = true, terms.NoPersistOffer
		}},
		{"no-persist required", "", func(ps *ProviderState, j *terms.Job) {
			j.NoPersist, ps.Cap.Policy.NoPersist = true, terms.NoPersistRequire
		}},
		{"persisting job on a no-persist-only provider", "only no-persist jobs taken", func(ps *ProviderState, j *terms.Job) {
			ps.Cap.Policy.NoPersist = terms.NoPersistRequire
		}},
		{"persisting job where no-persist is offered", "", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.NoPersist = terms.NoPersistOffer }},
		{"thermal", "", func(ps *ProviderState, j *terms.Job) { ps.Cap.Policy.MaxTempC = 85; ps.TempC = 90 }},
		{"busy", "", func(ps *ProviderState, j *terms.Job) {
			_ = ps.Cal.Reserve(Booking{LeaseID: "x", Start: now, End: now.Add(5 * time.Hour), GPUs: 3})
			j.Deadline = now.Add(4 * time.Hour)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps, j := baseState(), evalJob()
			c.mut(&ps, j)
			err := StaticFit(ps.Cap, j)
			if c.want == "" {
				if err != nil {
					t.Fatalf("StaticFit = %v, want nil", err)
				}
				return
			}
			reason, ok := IneligibleReason(err)
			if !ok || !strings.Contains(reason, c.want) {
				t.Fatalf("StaticFit = %v, want ineligible %q", err, c.want)
			}
			if _, eerr := Evaluate(ps, j, now); eerr == nil || eerr.Error() != err.Error() {
				t.Fatalf("Evaluate = %v, want StaticFit's %v", eerr, err)
			}
		})
	}
	if err := StaticFit(nil, evalJob()); err == nil {
		t.Fatal("StaticFit(nil capability) accepted")
	}
}

// StaticMisfits names every static rule a provider fails, StaticFit's
// first, and nothing for one that fits.
func TestStaticMisfits(t *testing.T) {
	t.Parallel()
	ps, j := baseState(), evalJob()
	if m := StaticMisfits(ps.Cap, j); m != nil {
		t.Fatalf("fitting provider: misfits %v", m)
	}
	ps.Cap.Region = "us-east"
	ps.Cap.Policy.PriceFloor = 2.1
	ps.Cap.Policy.AcceptPreemptible = false
	j.GPUModels = []string{"h100"}
	j.Tier, j.Preemptible = terms.Bronze, true
	var kinds []string
	for _, in := range StaticMisfits(ps.Cap, j) {
		kinds = append(kinds, in.Kind)
	}
	if want := []string{"region", "preemptible", "gpu_model", "price"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("misfit kinds %v, want %v", kinds, want)
	}
	if first := StaticMisfits(ps.Cap, j)[0]; StaticFit(ps.Cap, j).Error() != first.Error() {
		t.Fatalf("first misfit %v, StaticFit %v", first, StaticFit(ps.Cap, j))
	}
	if StaticMisfits(nil, j) != nil {
		t.Fatal("nil capability has misfits")
	}
}

func TestEvaluateOffer(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	ps, j := baseState(), evalJob()
	ps.Cap.GPUs = append(gpus("rtx4090", 24, 4), gpus("a100", 40, 2)...)
	ps.Cal = NewCalendar(len(ps.Cap.GPUs)) // the calendar books each device
	j.GPUModels = []string{"RTX4090", "A100"}
	o, err := Evaluate(ps, j, now)
	if err != nil {
		t.Fatal(err)
	}
	// The A100s have more VRAM; datasets are the intersection in job order.
	if o.GPUModel != "a100" || o.VRAMGB != 40 || !o.Start.Equal(now) || !o.End.Equal(now.Add(time.Hour)) ||
		o.Price != 1 || !reflect.DeepEqual(o.Datasets, []string{"c4"}) || len(o.Preempts) != 0 ||
		!reflect.DeepEqual(o.Devices, []int{4, 5}) {
		t.Fatalf("offer = %+v", o)
	}
	// Occupancy surcharge applies at the start (3 of the 6 devices: the
	// RTX 4090s, so the A100s stay free).
	ps.Cap.Policy.OccupancySurcharge = 1
	if err := ps.Cal.Reserve(Booking{LeaseID: "x", Start: now, End: now.Add(3 * time.Hour), GPUs: 3, Devices: []int{0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	if o, err = Evaluate(ps, j, now); err != nil || math.Abs(o.Price-1.5) > 1e-9 {
		t.Fatalf("surcharged offer %+v, %v", o, err)
	}
	// Bad input is an error, not an ineligibility.
	if _, err := Evaluate(ProviderState{}, j, now); err == nil {
		t.Fatal("nil capability accepted")
	}
	// An invalid job never reaches Evaluate: a provider's jobs are
	// validated where they enter it, in their call's decoding
	// (TestHandleCallRefusesInvalidJob).
}

func TestEvaluateWaitsForOffPeak(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	ps, j := baseState(), evalJob()
	ps.Cap.Policy.PeakWindows = []terms.Window{{From: "08:00", To: "18:00"}}
	ps.Cap.Policy.PriceFloor, ps.Cap.Policy.PeakMultiplier = 1.5, 2
	// Peak price 3.00 > max 2.00 now: without a deadline the provider
	// offers the end of the peak window instead of not bidding.
	j.MaxPrice = 2
	o, err := Evaluate(ps, j, now)
	if err != nil || !o.Start.Equal(at(0, "18:00")) || o.Price != 1.5 {
		t.Fatalf("off-peak offer %+v, %v", o, err)
	}
}

func TestEvaluateBackfill(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	reserved := []terms.Interval{{Start: now.Add(40 * time.Minute), End: now.Add(2 * time.Hour)}}

	// A 30-minute job fits the 40-minute gap before the reservation.
	ps, j := baseState(), evalJob()
	ps.Cap.Policy.Reserved = reserved
	j.Duration = 30 * time.Minute
	o, err := Evaluate(ps, j, now)
	if err != nil || !o.Start.Equal(now) {
		t.Fatalf("short job: %+v %v", o, err)
	}
	// A 1-hour silver job waits until the reservation is over.
	j.Duration = time.Hour
	o, err = Evaluate(ps, j, now)
	if err != nil || !o.Start.Equal(now.Add(2*time.Hour)) || !o.End.Equal(now.Add(3*time.Hour)) {
		t.Fatalf("long job: %+v %v", o, err)
	}
	// A bronze job takes the gap and is preempted at its end.
	j.Tier, j.Preemptible = terms.Bronze, true
	o, err = Evaluate(ps, j, now)
	if err != nil || !o.Start.Equal(now) || !o.End.Equal(now.Add(40*time.Minute)) {
		t.Fatalf("bronze backfill: %+v %v", o, err)
	}
	// Bronze also stops where the calendar fills up.
	ps.Cap.Policy.Reserved = nil
	_ = ps.Cal.Reserve(Booking{LeaseID: "g", Start: now.Add(20 * time.Minute), End: now.Add(3 * time.Hour), GPUs: 3})
	o, err = Evaluate(ps, j, now)
	if err != nil || !o.End.Equal(now.Add(20*time.Minute)) {
		t.Fatalf("bronze calendar gap: %+v %v", o, err)
	}
	// And the max lease caps a bronze slice.
	ps.Cal = NewCalendar(4)
	ps.Cap.Policy.MaxLease = 15 * time.Minute
	o, err = Evaluate(ps, j, now)
	if err != nil || o.End.Sub(o.Start) != 15*time.Minute {
		t.Fatalf("bronze max lease: %+v %v", o, err)
	}
	// A silver job starts when capacity frees up.
	ps, j = baseState(), evalJob()
	_ = ps.Cal.Reserve(Booking{LeaseID: "a", Start: now.Add(-time.Hour), End: now.Add(25 * time.Minute), GPUs: 3})
	o, err = Evaluate(ps, j, now)
	if err != nil || !o.Start.Equal(now.Add(25*time.Minute)) {
		t.Fatalf("waits for capacity: %+v %v", o, err)
	}
	// Outside its nightly window, a provider offers tonight's start, and
	// none if the deadline comes first.
	ps, j = baseState(), evalJob()
	ps.Cap.Policy.Availability = []terms.Window{{From: "22:00", To: "06:00"}}
	if o, err = Evaluate(ps, j, now); err != nil || !o.Start.Equal(at(0, "22:00")) {
		t.Fatalf("night window: %+v %v", o, err)
	}
	j.Deadline = at(0, "21:59")
	if _, err = Evaluate(ps, j, now); err == nil {
		t.Fatal("offered a start after the deadline")
	}
}

func TestEvaluateGoldPreempts(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	ps, j := baseState(), evalJob()
	ps.Cap.Policy.AllowPreemption = true
	j.Tier = terms.Gold
	cal := ps.Cal
	_ = cal.Reserve(Booking{LeaseID: "silver", Start: now.Add(-time.Hour), End: now.Add(5 * time.Hour), GPUs: 1, Tier: terms.Silver})
	_ = cal.Reserve(Booking{LeaseID: "b-old", Start: now.Add(-2 * time.Hour), End: now.Add(5 * time.Hour), GPUs: 1, Tier: terms.Bronze, Preemptible: true})
	_ = cal.Reserve(Booking{LeaseID: "b-new", Start: now.Add(-time.Minute), End: now.Add(5 * time.Hour), GPUs: 1, Tier: terms.Bronze, Preemptible: true})
	_ = cal.Reserve(Booking{LeaseID: "b-big", Start: now.Add(-time.Hour), End: now.Add(5 * time.Hour), GPUs: 1, Tier: terms.Bronze, Preemptible: true})
	// 2 of 4 GPUs needed, 1 held by silver: two of the three bronze must go;
	// all are one GPU, so the two latest-started.
	o, err := Evaluate(ps, j, now)
	if err != nil || !o.Start.Equal(now) || !reflect.DeepEqual(o.Preempts, []string{"b-big", "b-new"}) {
		t.Fatalf("gold preempt: %+v %v", o, err)
	}
	// The preemption plan actually makes room.
	if _, err := cal.ReserveEvicting(Booking{LeaseID: "gold", Start: o.Start, End: o.End, GPUs: 2, Tier: terms.Gold}, o.Preempts); err != nil {
		t.Fatal(err)
	}
	// Without AllowPreemption the gold job waits.
	ps2, j2 := baseState(), evalJob()
	j2.Tier, j2.GPUCount = terms.Gold, 3
	_ = ps2.Cal.Reserve(Booking{LeaseID: "b", Start: now, End: now.Add(2 * time.Hour), GPUs: 2, Preemptible: true})
	if o, err = Evaluate(ps2, j2, now); err != nil || !o.Start.Equal(now.Add(2*time.Hour)) || len(o.Preempts) != 0 {
		t.Fatalf("gold without preemption: %+v %v", o, err)
	}
}

func TestRank(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	j := &terms.Job{ID: "j", Attempt: 1, Tier: terms.Silver, MaxPrice: 3, GPUCount: 1, Duration: time.Hour, Region: "eu",
		MinReliability: 0.3, Datasets: []string{"d1", "d2"}, Run: terms.RunSpec{Command: []string{"x"}}, Exclude: []string{"lost"}}
	bid := func(p string, price float64) terms.Bid {
		return terms.Bid{JobID: "j", Attempt: 1, Provider: p, Region: "eu-west", Price: price, Start: now, End: now.Add(time.Hour), ExpiresAt: now.Add(time.Minute)}
	}
	c := func(b terms.Bid, rel float64) terms.Candidate { return terms.Candidate{Bid: b, Reliability: rel} }
	withDS := bid("cached", 1.005)
	withDS.Datasets = []string{"d1"}
	later := bid("later", 1.0)
	later.Start, later.End = now.Add(time.Minute), now.Add(61*time.Minute)
	expired := bid("expired", 0.1)
	expired.ExpiresAt = now
	other := bid("other", 0.1)
	other.Attempt = 0
	us := bid("us", 0.1)
	us.Region = "us-east"
	short := bid("short", 0.1)
	short.End = now.Add(30 * time.Minute)
	cands := []terms.Candidate{
		c(bid("reliable", 1.8), 0.9), // score 2.0
		c(bid("cheap", 1.0), 0.5),    // score 2.0, tied
		c(withDS, 0.5),               // 2.01, tied, caches a dataset
		c(later, 0.5),                // 2.0, tied, starts later
		c(bid("pricey", 3.5), 1),     // over max
		c(bid("flaky", 0.2), 0.2),    // below min reliability
		c(bid("cheap", 0.5), 0.9),    // duplicate: first kept
		c(expired, 1), c(other, 1), c(us, 1), c(short, 1),
		c(bid("bad", math.NaN()), 1),
		c(bid("lost", 0.1), 1),   // lost an earlier attempt
		c(bid("best", 1.0), 0.8), // 1.25
	}
	r := RankAt(j, cands, now)
	var order []string
	for _, x := range r {
		if x.Rejected == "" {
			order = append(order, x.Bid.Provider)
		}
	}
	want := []string{"best", "cached", "cheap", "reliable", "later"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
	reasons := map[string]string{}
	for _, x := range r[len(want):] {
		reasons[x.Bid.Provider] = x.Rejected
	}
	for p, w := range map[string]string{"pricey": "price 3.50 > max 3.00", "flaky": "reliability 0.20 < min 0.30",
		"cheap": "duplicate", "expired": "expired", "other": "attempt 0", "us": "region us-east",
		"short": "shorter than job", "bad": "invalid price", "lost": "excluded"} {
		if !strings.Contains(reasons[p], w) {
			t.Errorf("%s rejected for %q, want %q", p, reasons[p], w)
		}
	}
	if len(r) != len(cands) {
		t.Fatalf("Rank dropped candidates: %d of %d", len(r), len(cands))
	}
	ex := Explain(r, "best", nil)
	if ex.Winner != "best" || ex.Rank != 1 || ex.Rule != terms.RuleBestScore || ex.RunnerUp != "cached" || ex.Score != 1.25 {
		t.Fatalf("Explain: %+v", ex)
	}
	// Tied winner: the explanation names the tiebreak.
	ex = Explain(RankAt(j, cands[:4], now), "cached", nil)
	if ex.Winner != "cached" || ex.Rule != terms.RuleTieBreak || !strings.Contains(ex.TieBreak, "datasets cached (1 vs 0)") {
		t.Fatalf("Explain tie: %+v", ex)
	}
	// Unknown reliability floors at MinScoreReliability rather than dividing by zero.
	if s := Score(1, 0); s != 1/MinScoreReliability {
		t.Fatalf("Score(1, 0) = %v", s)
	}
	if ex := Explain(nil, "", nil); ex.Rule != terms.RuleNoBids {
		t.Fatalf("Explain(nil): %+v", ex)
	}
}

func benchCands(n int) (*terms.Job, []terms.Candidate) {
	now := at(0, "10:00")
	j := &terms.Job{ID: "j", Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, Duration: time.Hour, Datasets: []string{"a", "b"}, Run: terms.RunSpec{Command: []string{"x"}}}
	cands := make([]terms.Candidate, n)
	for i := range cands {
		b := terms.Bid{JobID: "j", Provider: fmt.Sprintf("p%06d", i), Price: 0.5 + float64(i%97)/20, Start: now.Add(time.Duration(i%13) * time.Minute),
			ExpiresAt: now.Add(time.Hour)}
		b.End = b.Start.Add(time.Hour)
		if i%3 == 0 {
			b.Datasets = []string{"a"}
		}
		cands[i] = terms.Candidate{Bid: b, Reliability: float64(i%10+1) / 10, RTT: time.Duration(i%50) * time.Millisecond}
	}
	return j, cands
}

func benchRank(b *testing.B, n int) {
	j, cands := benchCands(n)
	now := at(0, "10:00")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		RankAt(j, cands, now)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "bids/s")
}

func BenchmarkRank1000(b *testing.B)  { benchRank(b, 1000) }
func BenchmarkRank10000(b *testing.B) { benchRank(b, 10000) }

func BenchmarkEvaluate(b *testing.B) {
	now := at(0, "10:00")
	ps, j := baseState(), evalJob()
	ps.Cap.Policy.PeakWindows = []terms.Window{{From: "09:00", To: "17:00"}}
	ps.Cap.Policy.Availability = []terms.Window{{From: "06:00", To: "23:00"}}
	ps.Cap.Policy.Reserved = []terms.Interval{{Start: now.Add(30 * time.Minute), End: now.Add(time.Hour)}}
	for i := 0; i < 20; i++ {
		s := now.Add(time.Duration(i) * 20 * time.Minute)
		_ = ps.Cal.Reserve(Booking{LeaseID: fmt.Sprint(i), Start: s, End: s.Add(30 * time.Minute), GPUs: 1})
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Evaluate(ps, j, now); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRankChargesEvictions: a gold job prefers an idle provider a little
// dearer over a cheaper one that would have to preempt bronze work, but not
// one far dearer.
func TestRankChargesEvictions(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	j := &terms.Job{ID: "g", Tier: terms.Gold, MaxPrice: 5, GPUCount: 1, Duration: time.Hour, Run: terms.RunSpec{Command: []string{"x"}}}
	bid := func(p string, price float64, evicts int) terms.Candidate {
		return terms.Candidate{Reliability: 0.5, Bid: terms.Bid{JobID: "g", Provider: p, Region: "eu-west", Price: price, Start: now,
			End: now.Add(time.Hour), ExpiresAt: now.Add(time.Minute), Evicts: evicts}}
	}
	r := RankAt(j, []terms.Candidate{bid("evicting", 1.00, 1), bid("idle", 1.05, 0)}, now)
	if r[0].Bid.Provider != "idle" {
		t.Fatalf("winner %s, want the idle provider 5%% dearer", r[0].Bid.Provider)
	}
	r = RankAt(j, []terms.Candidate{bid("evicting", 1.00, 1), bid("idle", 1.20, 0)}, now)
	if r[0].Bid.Provider != "evicting" {
		t.Fatalf("winner %s, want the evicting provider when the idle one is 20%% dearer", r[0].Bid.Provider)
	}
	if got, want := r[0].Score, Score(1.00, 0.5)*(1+EvictionPenalty); got != want {
		t.Fatalf("evicting score %v, want %v", got, want)
	}
}

func TestMinSliceAndHorizon(t *testing.T) {
	t.Parallel()
	h := time.Hour
	cases := []struct {
		name        string
		maxLease    time.Duration
		preemptible bool
		want        time.Duration
	}{
		{"whole job", 0, false, 2 * h},
		{"capped at max lease (Evaluate then refuses a non-preemptible job)", h, false, h},
		{"preemptible backfill", 0, true, MinBackfill},
		{"preemptible under a max lease shorter than the backfill", 2 * time.Minute, true, 2 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := &terms.Job{Duration: 2 * h, Preemptible: c.preemptible}
			if got := MinSlice(terms.Policy{MaxLease: c.maxLease}, j); got != c.want {
				t.Fatalf("MinSlice = %v, want %v", got, c.want)
			}
		})
	}
	now := at(0, "10:00")
	if got := Horizon(&terms.Job{}, now); !got.Equal(now.Add(DefaultPatience)) {
		t.Fatalf("Horizon without deadline = %v", got)
	}
	if got := Horizon(&terms.Job{Deadline: now.Add(h)}, now); !got.Equal(now.Add(h)) {
		t.Fatalf("Horizon with deadline = %v", got)
	}
}

// TestRankChargesWait: a bid queued behind its provider's bookings is
// charged for the wait against the job's length (WaitFactor): a short job
// takes the slightly dearer bid that starts now over a cheaper one thirty
// seconds out, and an hours-long job keeps the cheaper one.
func TestRankChargesWait(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	bid := func(p string, price float64, wait, d time.Duration) terms.Candidate {
		return terms.Candidate{Reliability: 0.5, Bid: terms.Bid{JobID: "w", Provider: p, Region: "eu-west", Price: price, Start: now.Add(wait),
			End: now.Add(wait + d), ExpiresAt: now.Add(time.Minute)}}
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{3 * time.Second, "now"}, {4 * time.Hour, "queued"}} {
		j := &terms.Job{ID: "w", Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, Duration: tc.d, Run: terms.RunSpec{Command: []string{"x"}}}
		r := RankAt(j, []terms.Candidate{bid("queued", 1.00, 30*time.Second, tc.d), bid("now", 1.20, 0, tc.d)}, now)
		if r[0].Bid.Provider != tc.want {
			t.Fatalf("a %v job ranks %s first, want %s (scores %v, %v)", tc.d, r[0].Bid.Provider, tc.want, r[0].Score, r[1].Score)
		}
	}
	if f := WaitFactor(&terms.Job{Duration: time.Minute}, now.Add(-time.Second), now); f != 1 {
		t.Fatalf("a bid that started already: factor %v, want 1", f)
	}
}

// TestRankCountsWaitFromTheSoonestStart: when no bid starts now (every
// provider is booked), the wait a bid adds over the soonest one is what
// it is charged for: a 3 s job takes the bid 14 s out from a provider
// with the prior's reliability over one 17 s out from a provider with a
// slightly better record (counted from now, 17 s against 14 s was a
// difference of 18% and the better record won, so a burst queued ever
// deeper on the first providers to have run a few jobs).
func TestRankCountsWaitFromTheSoonestStart(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	d := 3 * time.Second
	bid := func(p string, rel float64, wait time.Duration) terms.Candidate {
		return terms.Candidate{Reliability: rel, Bid: terms.Bid{JobID: "w", Provider: p, Region: "eu-west", Price: 1.32, Start: now.Add(wait),
			End: now.Add(wait + d), ExpiresAt: now.Add(time.Minute)}}
	}
	j := &terms.Job{ID: "w", Tier: terms.Silver, MaxPrice: 5, GPUCount: 1, Duration: d, Run: terms.RunSpec{Command: []string{"x"}}}
	r := RankAt(j, []terms.Candidate{bid("deep", 0.65, 17*time.Second), bid("shallow", 0.5, 14*time.Second)}, now)
	if r[0].Bid.Provider != "shallow" {
		t.Fatalf("ranked %s first (scores %v, %v), want the bid 3 s sooner", r[0].Bid.Provider, r[0].Score, r[1].Score)
	}
	// The soonest start is the shallow bid's: it pays no wait at all.
	if want := Score(1.32, 0.5); r[0].Score != want {
		t.Fatalf("soonest bid scored %v, want %v (no wait charged)", r[0].Score, want)
	}
	// A rejected bid's start is not the soonest on offer.
	expired := bid("expired", 0.5, 0)
	expired.Bid.ExpiresAt = now
	r = RankAt(j, []terms.Candidate{bid("deep", 0.65, 17*time.Second), expired}, now)
	if r[0].Bid.Provider != "deep" || r[0].Score != Score(1.32, 0.65) {
		t.Fatalf("ranked %s first at %v: want deep, charged no wait (the expired bid offers nothing)", r[0].Bid.Provider, r[0].Score)
	}
}
