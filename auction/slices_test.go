package auction

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// quarter is a booking of a quarter of one device over [start, start+d).
func quarter(id string, start time.Time, d time.Duration) Booking {
	return Booking{LeaseID: id, Start: start, End: start.Add(d), GPUs: 1, Fraction: 0.25}
}

// TestCalendarPacksSlices: a device cut into four takes four quarter
// bookings at once, each on its own slice, and refuses a fifth until one
// ends; a half takes two slices; a device is never cut finer than its
// slices (an eighth does not fit a device cut into four).
func TestCalendarPacksSlices(t *testing.T) {
	t.Parallel()
	c := NewCalendar(1)
	if err := c.SetSlices(map[int]int{0: 4}); err != nil {
		t.Fatal(err)
	}
	t0 := monday
	var held []int
	for _, id := range []string{"q1", "q2", "q3", "q4"} {
		if err := c.Reserve(quarter(id, t0, time.Hour)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		b, _ := c.Booking(id)
		if !slices.Equal(b.Devices, []int{0}) || len(b.Slices) != 1 || slices.Contains(held, b.Slices[0]) {
			t.Fatalf("%s booked devices %v slices %v; slices held before %v", id, b.Devices, b.Slices, held)
		}
		held = append(held, b.Slices[0])
	}
	if err := c.Reserve(quarter("q5", t0.Add(30*time.Minute), time.Hour)); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("a fifth quarter on a device cut into four: %v, want ErrOverbooked", err)
	}
	if !c.HasRoom(t0.Add(time.Hour), t0.Add(2*time.Hour), nil, 1, 0.25) || c.HasRoom(t0, t0.Add(time.Hour), nil, 1, 0.25) {
		t.Fatal("HasRoom disagrees with the bookings")
	}
	if got := c.Occupancy(t0); got != 1 {
		t.Fatalf("occupancy of four quarters = %v, want 1", got)
	}
	if got := c.Sharers("q1", t0); !slices.Equal(got, []string{"q2", "q3", "q4"}) {
		t.Fatalf("Sharers(q1) = %v, want the other three quarters", got)
	}
	// One quarter ends early: the fifth fits in its slice.
	c.Truncate("q2", t0.Add(10*time.Minute))
	if err := c.Reserve(quarter("q5", t0.Add(30*time.Minute), time.Hour)); err != nil {
		t.Fatalf("fifth quarter after one ended: %v", err)
	}
	if b, _ := c.Booking("q5"); !slices.Equal(b.Slices, held[1:2]) {
		t.Fatalf("fifth quarter took slices %v, the freed one is %d", b.Slices, held[1])
	}

	// Halves take two slices; an eighth does not fit quarter slices.
	h := NewCalendar(1)
	if err := h.SetSlices(map[int]int{0: 4}); err != nil {
		t.Fatal(err)
	}
	half := Booking{LeaseID: "h1", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Fraction: 0.5}
	if err := h.Reserve(half); err != nil {
		t.Fatal(err)
	}
	if b, _ := h.Booking("h1"); len(b.Slices) != 2 {
		t.Fatalf("a half of a device cut into four holds slices %v", b.Slices)
	}
	if err := h.Reserve(quarter("q1", t0, time.Hour)); err != nil {
		t.Fatal(err)
	}
	half.LeaseID = "h2"
	if err := h.Reserve(half); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("a half beside a half and a quarter: %v", err)
	}
	eighth := Booking{LeaseID: "e1", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Fraction: 0.125}
	if err := h.Reserve(eighth); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("an eighth on a device cut into quarters: %v", err)
	}
	for name, b := range map[string]Booking{
		"fraction 0.3":       {LeaseID: "x", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Fraction: 0.3},
		"fraction of 2 gpus": {LeaseID: "x", Start: t0, End: t0.Add(time.Hour), GPUs: 2, Fraction: 0.25},
	} {
		if err := h.Reserve(b); !errors.Is(err, ErrBadBooking) {
			t.Errorf("%s: %v, want ErrBadBooking", name, err)
		}
	}
	for name, m := range map[string]map[int]int{"device 1 of 1": {1: 4}, "3 slices": {0: 3}, "negative": {-1: 2}} {
		if err := h.SetSlices(m); !errors.Is(err, ErrBadBooking) {
			t.Errorf("SetSlices %s: %v, want ErrBadBooking", name, err)
		}
	}
}

// TestCalendarSlicesExcludeWholeDevices: a whole-device booking never
// lands on a device with a slice booked in its span, and a slice never
// lands on a device a whole booking holds; FreeGPUs counts a device with
// a slice booked as taken, once however many slices.
func TestCalendarSlicesExcludeWholeDevices(t *testing.T) {
	t.Parallel()
	c := NewCalendar(2)
	if err := c.SetSlices(map[int]int{0: 4}); err != nil {
		t.Fatal(err)
	}
	t0 := monday
	for _, id := range []string{"q1", "q2"} {
		if err := c.Reserve(quarter(id, t0, time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.FreeGPUs(t0, t0.Add(time.Hour)); got != 1 {
		t.Fatalf("FreeGPUs with two quarters on device 0 = %d, want 1", got)
	}
	if got := c.FreeFraction(t0); got != 0.5 {
		t.Fatalf("FreeFraction = %v, want the two free quarters", got)
	}
	if err := c.Reserve(Booking{LeaseID: "w2", Start: t0.Add(30 * time.Minute), End: t0.Add(2 * time.Hour), GPUs: 2}); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("two whole gpus while device 0 holds slices: %v", err)
	}
	if err := c.Reserve(Booking{LeaseID: "w1", Start: t0.Add(30 * time.Minute), End: t0.Add(2 * time.Hour), GPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if b, _ := c.Booking("w1"); !slices.Equal(b.Devices, []int{1}) {
		t.Fatalf("whole gpu booked on %v, want device 1 (device 0 holds slices)", b.Devices)
	}
	if free := c.FreeDevices(t0, t0.Add(time.Minute), nil); len(free) != 1 || free[0] != 1 {
		t.Fatalf("FreeDevices = %v, want [1]", free)
	}
	// A whole booking of device 0 after the slices end; a slice over it
	// finds no room (device 1 is not cut into slices).
	if err := c.Reserve(Booking{LeaseID: "w0", Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour), GPUs: 1, Devices: []int{0}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reserve(quarter("q3", t0.Add(2*time.Hour), time.Hour)); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("a slice while device 0 is held whole: %v", err)
	}
	if err := c.Reserve(quarter("q3", t0.Add(3*time.Hour), time.Hour)); err != nil {
		t.Fatalf("a slice after the whole booking: %v", err)
	}
	// A slice lease moved earlier moves onto free slices only.
	if _, err := c.Move("q3", t0.Add(30*time.Minute), t0.Add(90*time.Minute), nil); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("moved into the whole booking's span: %v", err)
	}
	if b, err := c.Move("q3", t0, t0.Add(time.Hour), nil); err != nil || len(b.Slices) != 1 || b.Slices[0] < 2 {
		t.Fatalf("moved beside the two quarters: %+v, %v", b, err)
	}
}

// slicedState is a provider of one L4 (24 GB) cut into four slices,
// enforced as isolation says.
func slicedState(isolation string) ProviderState {
	ps := ProviderState{
		Cap: &terms.Capability{Peer: "prov", Region: "eu-west", GPUs: []terms.GPU{{Model: "L4", VRAMGB: 24, Isolation: isolation}},
			Policy: terms.Policy{PriceFloor: 2, AcceptPreemptible: true, Slices: []terms.SliceRule{{Devices: []int{0}, Count: 4}}}},
		Cal:         NewCalendar(1),
		Reliability: 0.9,
	}
	if err := ps.Cal.SetSlices(ps.Cap.Policy.SliceMap()); err != nil {
		panic(err)
	}
	return ps
}

func quarterJob() *terms.Job {
	return &terms.Job{ID: "q", Tier: terms.Silver, MaxPrice: 3, GPUCount: 1, GPUFraction: 0.25, Duration: time.Hour,
		Run: terms.RunSpec{Command: []string{"run"}}}
}

// TestEvaluateSlices: a fractional job is offered a slice only of a
// device sold in slices no larger than its fraction, with the memory it
// asks of the slice, enforced as it asks (--isolation); four quarters
// offered and booked one after the other share the device, and a fifth
// is offered the first slice to free up.
func TestEvaluateSlices(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	ineligible := func(ps ProviderState, j *terms.Job, kind, reason string) {
		t.Helper()
		_, err := Evaluate(ps, j, now)
		var in *Ineligible
		if !errors.As(err, &in) || in.Kind != kind || !strings.Contains(in.Reason, reason) {
			t.Errorf("%+v: %v, want ineligible %s %q", j, err, kind, reason)
		}
		if kind != KindBusy && (StaticFit(ps.Cap, j) == nil) {
			t.Errorf("StaticFit passes what Evaluate refuses as %s", kind)
		}
	}
	whole := slicedState(terms.IsolationNone)
	whole.Cap.Policy.Slices = nil
	ineligible(whole, quarterJob(), "slices", "no gpu sold in slices of 0.25 gpu or less")
	eighth := quarterJob()
	eighth.GPUFraction = 0.125
	ineligible(slicedState(terms.IsolationNone), eighth, "slices", "0.125")
	mps := quarterJob()
	mps.Isolation = terms.IsolationMPS
	ineligible(slicedState(terms.IsolationNone), mps, "isolation", "no gpu slice enforced by mps (here: none)")
	if _, err := Evaluate(slicedState(terms.IsolationMPS), mps, now); err != nil {
		t.Errorf("an mps slice for a job asking mps: %v", err)
	}
	mig := quarterJob()
	mig.Isolation = terms.IsolationMIG
	ineligible(slicedState(terms.IsolationMPS), mig, "isolation", "mig")
	big := quarterJob()
	big.MinVRAMGB = 7 // a quarter of 24 GB is 6
	ineligible(slicedState(terms.IsolationNone), big, "vram", "slice vram below required 7GB")
	big.MinVRAMGB = 6
	if _, err := Evaluate(slicedState(terms.IsolationNone), big, now); err != nil {
		t.Errorf("6 GB of a quarter of 24 GB: %v", err)
	}

	// Four quarters, offered and booked in turn, start at once on the one
	// device; a fifth is offered the first slice that frees.
	ps := slicedState(terms.IsolationNone)
	for i := 0; i < 4; i++ {
		o, err := Evaluate(ps, quarterJob(), now)
		if err != nil {
			t.Fatalf("quarter %d: %v", i, err)
		}
		if !o.Start.Equal(now) || !slices.Equal(o.Devices, []int{0}) || o.Price != 2 {
			t.Fatalf("quarter %d offered %+v", i, o)
		}
		b := Booking{LeaseID: "q" + string(rune('1'+i)), Start: o.Start, End: o.End, GPUs: 1, Fraction: 0.25, Devices: o.Devices}
		if err := ps.Cal.Reserve(b); err != nil {
			t.Fatalf("quarter %d: %v", i, err)
		}
	}
	o, err := Evaluate(ps, quarterJob(), now)
	if err != nil || !o.Start.Equal(now.Add(time.Hour)) {
		t.Fatalf("fifth quarter offered %+v, %v; want a start when the first slice frees", o, err)
	}
	// A whole-GPU job waits for the device to be free of slices.
	w := quarterJob()
	w.GPUFraction = 0
	if o, err := Evaluate(ps, w, now); err != nil || !o.Start.Equal(now.Add(time.Hour)) {
		t.Fatalf("whole gpu offered %+v, %v; want the slices' end", o, err)
	}
	ps.Cal.Truncate("q3", now.Add(20*time.Minute))
	if o, err := Evaluate(ps, quarterJob(), now); err != nil || !o.Start.Equal(now.Add(20*time.Minute)) {
		t.Fatalf("fifth quarter after one ended: %+v, %v", o, err)
	}
	if o, err := Evaluate(ps, w, now); err != nil || !o.Start.Equal(now.Add(time.Hour)) {
		t.Fatalf("whole gpu beside three slices: %+v, %v", o, err)
	}
}

// TestQuoteInterruptibleDiscount: the policy's interruptible discount
// takes its share off a preemptible job's quote and floor, and nothing
// off anyone else's; a preemptible job is eligible below the floor a
// job that may not be interrupted pays.
func TestQuoteInterruptibleDiscount(t *testing.T) {
	t.Parallel()
	p := terms.Policy{PriceFloor: 2, OccupancySurcharge: 0.5, InterruptibleDiscount: 0.3, AcceptPreemptible: true}
	now := at(0, "10:00")
	if got := Quote(p, now, time.Hour, 1, false); got != 3 {
		t.Fatalf("uninterruptible quote %v, want 3", got)
	}
	if got := Quote(p, now, time.Hour, 1, true); math.Abs(got-2.1) > 1e-12 {
		t.Fatalf("interruptible quote %v, want 3 less 30%% = 2.1", got)
	}
	p0 := p
	p0.InterruptibleDiscount = 0
	if Quote(p0, now, time.Hour, 1, true) != Quote(p0, now, time.Hour, 1, false) {
		t.Fatal("no discount: an interruptible job pays what any other pays")
	}
	ps := baseState()
	ps.Cap.Policy.InterruptibleDiscount = 0.3
	j := evalJob()
	j.MaxPrice = 0.8
	if err := StaticFit(ps.Cap, j); err == nil || !strings.Contains(err.Error(), "price floor 1.00 > max 0.80") {
		t.Fatalf("silver job below the floor: %v", err)
	}
	j.Tier, j.Preemptible = terms.Bronze, true
	o, err := Evaluate(ps, j, now)
	if err != nil || math.Abs(o.Price-0.7) > 1e-12 {
		t.Fatalf("bronze job offered %+v, %v; want the floor less 30%% (0.7)", o, err)
	}
	if got := FloorFor(ps.Cap.Policy, j); math.Abs(got-0.7) > 1e-12 {
		t.Fatalf("FloorFor bronze = %v", got)
	}
}

// TestSliceCostIsItsFraction: a slice lease costs its fraction of the
// device's price per GPU-hour, in the provider's earnings as in LeaseCost.
func TestSliceCostIsItsFraction(t *testing.T) {
	t.Parallel()
	if got := terms.LeaseCost(2, 1, 0.25, time.Hour); got != 0.5 {
		t.Fatalf("a quarter gpu-hour at $2 = %v", got)
	}
	if got := terms.LeaseCost(2, 3, 0, 30*time.Minute); got != 3 {
		t.Fatalf("3 gpus for half an hour at $2 = %v", got)
	}
	if got := (terms.Lease{GPUCount: 1, GPUFraction: 0.125}).BilledGPUs(); got != 0.125 {
		t.Fatalf("an eighth lease bills %v gpus", got)
	}
}

// TestSliceAuctionPacksFourQuarters: four quarter jobs posted to a
// provider of one GPU cut into four are leased at once on distinct slices
// of it, each earning the provider a quarter of the GPU-hour price; a
// fifth waits for a slice, and moves in when one ends early.
func TestSliceAuctionPacksFourQuarters(t *testing.T) {
	t.Parallel()
	p := pol(2)
	p.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}}
	m := newMarket(t, []provSpec{{"box", "eu-west", "L4", 24, 1, p, 0.9}})
	box := m.provs[0]
	moved := make(chan terms.Lease, 1)
	box.p.cfg.Runtime = runtimeHooks{move: func(l terms.Lease, _ terms.Job) bool { moved <- l; return true }}
	r, _ := m.renter(t, RenterConfig{})
	job := func() terms.Job {
		j := euJob(m.now())
		j.GPUCount, j.GPUFraction, j.MinVRAMGB, j.Deadline = 1, 0.25, 6, m.now().Add(3*time.Hour)
		return j
	}
	var leases []terms.Lease
	for i := 0; i < 4; i++ {
		j, err := r.Post(context.Background(), job())
		if err != nil {
			t.Fatal(err)
		}
		st, _ := r.Status(j.ID)
		if st.State != terms.JobLeased || st.Lease.GPUFraction != 0.25 {
			t.Fatalf("quarter %d: %+v", i, st)
		}
		leases = append(leases, *st.Lease)
	}
	for _, l := range leases[1:] {
		if l.Start.Sub(leases[0].Start) > time.Minute {
			t.Fatalf("quarters do not run at once: %v then %v", leases[0].Start, l.Start)
		}
	}
	checkCalendar(t, "box", box.cal)
	s := box.p.Stats()
	want := 0.0
	for _, l := range leases {
		want += l.Price * 0.25 * l.End.Sub(l.Start).Hours()
	}
	if math.Abs(s.EarningsUSD-want) > 1e-9 || want == 0 {
		t.Fatalf("earnings %v, want a quarter of each lease's gpu-hours %v", s.EarningsUSD, want)
	}
	fifth, err := r.Post(context.Background(), job())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(fifth.ID)
	if st.State != terms.JobLeased || st.Lease.Start.Before(leases[0].End) {
		t.Fatalf("fifth quarter should wait for a slice: %+v", st)
	}
	if err := box.p.LeaseEnded(leases[2].ID, m.now(), terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-moved:
		if l.ID != st.Lease.ID || l.Start.After(m.now()) {
			t.Fatalf("moved %+v, want the fifth quarter now", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fifth quarter did not move into the freed slice")
	}
	checkCalendar(t, "box", box.cal)
}

// TestCapacityNoticeNamesSliceJob: a quarter job turned away while every
// slice is booked is named in the capacity notice when a slice lease ends
// early, which says the room is a slice (FreeFraction), not a whole GPU.
func TestCapacityNoticeNamesSliceJob(t *testing.T) {
	t.Parallel()
	p := pol(2)
	p.Slices = []terms.SliceRule{{Devices: []int{0}, Count: 4}}
	m := newMarket(t, []provSpec{{"box", "eu-west", "L4", 24, 1, p, 0.9}})
	box := m.provs[0]
	notices := make(chan terms.CapacityNotice, 4)
	r, _ := m.renter(t, RenterConfig{Listener: hooks{capacity: func(n terms.CapacityNotice) { notices <- n }}})
	job := func() terms.Job {
		j := euJob(m.now())
		j.GPUCount, j.GPUFraction, j.MinVRAMGB, j.WantDeclines = 1, 0.25, 6, true
		j.Deadline = m.now().Add(10 * time.Minute) // it will not wait an hour
		return j
	}
	var first terms.Lease
	for i := 0; i < 4; i++ {
		j, err := r.Post(context.Background(), job())
		if err != nil {
			t.Fatal(err)
		}
		st, _ := r.Status(j.ID)
		if st.State != terms.JobLeased {
			t.Fatalf("quarter %d: %+v", i, st)
		}
		if i == 0 {
			first = *st.Lease
		}
	}
	fifth, _ := r.Post(context.Background(), job())
	if st, _ := r.Status(fifth.ID); st.State == terms.JobLeased {
		t.Fatalf("fifth quarter leased while every slice is booked: %+v", st)
	}
	if err := box.p.LeaseEnded(first.ID, m.now(), terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-notices:
		if !slices.Contains(n.Jobs, fifth.ID) || n.FreeGPUs != 0 || n.FreeFraction != 0.25 || n.Free() < fifth.BilledGPUs() {
			t.Fatalf("notice %+v, want the fifth job named with a quarter free", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no capacity notice when a slice freed")
	}
}

// TestSliceJobAndPolicyRules: a fraction is an eighth, a quarter or a
// half of one GPU, isolation is mig, mps or any and only for a fraction;
// a policy cuts devices into 2, 4 or 8 slices, each device in one rule,
// and its interruptible discount is in [0, 1).
func TestSliceJobAndPolicyRules(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		mut   func(*terms.Job)
		field string
	}{
		"fraction 0.3":        {func(j *terms.Job) { j.GPUFraction = 0.3 }, "gpu_fraction"},
		"fraction 1":          {func(j *terms.Job) { j.GPUFraction = 1 }, "gpu_fraction"},
		"fraction of 2 gpus":  {func(j *terms.Job) { j.GPUCount = 2 }, "gpu_fraction"},
		"unknown isolation":   {func(j *terms.Job) { j.Isolation = "vgpu" }, "isolation"},
		"mps for a whole gpu": {func(j *terms.Job) { j.GPUFraction, j.Isolation = 0, terms.IsolationMPS }, "isolation"},
	} {
		j := quarterJob()
		c.mut(j)
		fe := terms.FieldErrors(j.Validate())
		if len(fe) != 1 || fe[0].Field != c.field {
			t.Errorf("%s: %v, want one problem with %s", name, fe, c.field)
		}
	}
	for _, f := range terms.GPUFractions {
		j := quarterJob()
		j.GPUFraction, j.Isolation = f, terms.IsolationAny
		if err := j.Validate(); err != nil {
			t.Errorf("fraction %v: %v", f, err)
		}
	}
	for name, p := range map[string]terms.Policy{
		"3 slices":       {Slices: []terms.SliceRule{{Devices: []int{0}, Count: 3}}},
		"no devices":     {Slices: []terms.SliceRule{{Count: 4}}},
		"sliced twice":   {Slices: []terms.SliceRule{{Devices: []int{0}, Count: 4}, {Devices: []int{1, 0}, Count: 2}}},
		"discount 1":     {InterruptibleDiscount: 1},
		"discount -0.1":  {InterruptibleDiscount: -0.1},
		"discount NaN":   {InterruptibleDiscount: math.NaN()},
		"negative index": {Slices: []terms.SliceRule{{Devices: []int{-1}, Count: 2}}},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("policy %s accepted", name)
		}
	}
	ok := terms.Policy{InterruptibleDiscount: 0.3, Slices: []terms.SliceRule{{Devices: []int{0, 1}, Count: 4}, {Devices: []int{2}, Count: 8}}}
	if err := ok.Validate(); err != nil || ok.SliceCount(1) != 4 || ok.SliceCount(2) != 8 || ok.SliceCount(3) != 0 {
		t.Fatalf("policy %+v: %v", ok, err)
	}
}

// TestParseGPUs: --count and a task file's accelerator count take whole
// GPUs or a fraction of one, and refuse anything else in one line.
func TestParseGPUs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]struct {
		n int
		f float64
	}{"1": {1, 0}, " 8 ": {8, 0}, "2.0": {2, 0}, "0.5": {1, 0.5}, "0.25": {1, 0.25}, ".125": {1, 0.125}} {
		n, f, err := terms.ParseGPUs(in)
		if err != nil || n != want.n || f != want.f {
			t.Errorf("ParseGPUs(%q) = %d, %v, %v; want %d, %v", in, n, f, err, want.n, want.f)
		}
	}
	for _, in := range []string{"0", "-1", "0.3", "1.5", "0.75", "NaN", "Inf", "", "two", "1e9"} {
		if _, _, err := terms.ParseGPUs(in); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseGPUs(%q): %v, want a one-line error", in, err)
		}
	}
	if got := terms.GPUsText(1, 0.25); got != "0.25 GPU" {
		t.Errorf("GPUsText quarter = %q", got)
	}
	if got := terms.GPUsText(2, 0); got != "2 GPU(s)" {
		t.Errorf("GPUsText 2 = %q", got)
	}
}

// migState is a provider of one A100 80 GB in MIG mode with instances of
// the given memory, each a slice (as the provider's runtime sells it).
func migState(memoryMB ...int) ProviderState {
	g := terms.GPU{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, UUID: "GPU-a100", Isolation: terms.IsolationMIG, MIG: &terms.MIG{Enabled: true}}
	for i, m := range memoryMB {
		g.MIG.Instances = append(g.MIG.Instances, terms.MIGInstance{UUID: "MIG-" + string(rune('a'+i)), MemoryMB: m})
	}
	ps := ProviderState{
		Cap:         &terms.Capability{Peer: "prov", Region: "eu-west", GPUs: []terms.GPU{g}, Policy: terms.Policy{PriceFloor: 2, AcceptPreemptible: true}},
		Cal:         NewCalendar(1),
		Reliability: 0.9,
	}
	if n := len(memoryMB); n > 1 {
		ps.Cap.Policy.Slices = []terms.SliceRule{{Devices: []int{0}, Count: n}}
	}
	if err := ps.Cal.SetSlices(ps.Cap.Policy.SliceMap()); err != nil {
		panic(err)
	}
	return ps
}

// TestEvaluateMIGSlices: a device in MIG mode is sold as its instances: a
// job takes exactly one (a half of a device of two 3g.40gb, not a half of
// one of four), its memory is the instance's, --isolation mig finds it
// and not an MPS or unenforced slice; a whole-GPU job takes a device in
// MIG mode only when it has one instance, and none without instances.
func TestEvaluateMIGSlices(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	ineligible := func(ps ProviderState, j *terms.Job, kind, reason string) {
		t.Helper()
		_, err := Evaluate(ps, j, now)
		var in *Ineligible
		if !errors.As(err, &in) || in.Kind != kind || !strings.Contains(in.Reason, reason) {
			t.Errorf("%+v: %v, want ineligible %s %q", j, err, kind, reason)
		}
		if StaticFit(ps.Cap, j) == nil {
			t.Errorf("StaticFit passes what Evaluate refuses as %s", kind)
		}
	}
	half := quarterJob()
	half.GPUFraction, half.Isolation, half.MinVRAMGB = 0.5, terms.IsolationMIG, 39
	two := migState(40192, 40192)
	o, err := Evaluate(two, half, now)
	if err != nil || !slices.Equal(o.Devices, []int{0}) {
		t.Fatalf("a half of two 3g.40gb instances: %+v, %v", o, err)
	}
	half.MinVRAMGB = 40 // 40192 MiB is 39.25 GiB
	ineligible(two, half, "vram", "slice vram below required 40GB")
	half.MinVRAMGB = 0
	// Four instances: a half would hold two, and a process sees one.
	ineligible(migState(9984, 9984, 9984, 9984), half, "slices", "in MIG mode only in slices of exactly that")
	quarterMIG := quarterJob()
	quarterMIG.Isolation, quarterMIG.MinVRAMGB = terms.IsolationMIG, 10
	// A quarter of 80 GB would be 20 GB; a 1g.10gb instance has 9.75.
	ineligible(migState(9984, 9984, 9984, 9984), quarterMIG, "vram", "slice vram below required 10GB")
	quarterMIG.MinVRAMGB = 9
	if _, err := Evaluate(migState(9984, 9984, 9984, 9984), quarterMIG, now); err != nil {
		t.Fatalf("a quarter on one of four instances: %v", err)
	}
	ineligible(slicedState(terms.IsolationMPS), quarterMIG, "isolation", "no gpu slice enforced by mig (here: mps)")
	ineligible(slicedState(terms.IsolationNone), quarterMIG, "isolation", "no gpu slice enforced by mig (here: none)")
	anyQuarter := quarterJob()
	if _, err := Evaluate(migState(9984, 9984, 9984, 9984), anyQuarter, now); err != nil {
		t.Fatalf("an --isolation any quarter on a MIG slice: %v", err)
	}
	mps := quarterJob()
	mps.Isolation = terms.IsolationMPS
	ineligible(migState(9984, 9984, 9984, 9984), mps, "isolation", "no gpu slice enforced by mps (here: mig)")

	whole := quarterJob()
	whole.GPUFraction, whole.MinVRAMGB = 0, 0
	ineligible(migState(9984, 9984, 9984, 9984), whole, "slices", "no gpu sold whole")
	ineligible(migState(), whole, "slices", "no gpu sold whole")
	if _, err := Evaluate(migState(81152), whole, now); err != nil {
		t.Fatalf("a whole GPU on a device of one 7g.80gb instance: %v", err)
	}
	whole.MinVRAMGB = 80
	ineligible(migState(81152), whole, "vram", "vram below required 80GB")
	// MIG mode off: the device is sold as any other.
	off := migState()
	off.Cap.GPUs[0].MIG.Enabled = false
	if _, err := Evaluate(off, whole, now); err != nil {
		t.Fatalf("a whole GPU with MIG disabled: %v", err)
	}
}
