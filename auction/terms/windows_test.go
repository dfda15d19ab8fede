package terms

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// 2026-12-07 is a Monday.
var monday = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

func at(day int, hhmm string) time.Time {
	m, err := parseClock(hhmm, true)
	if err != nil {
		panic(err)
	}
	return monday.AddDate(0, 0, day).Add(time.Duration(m) * time.Minute)
}

func TestAvailableWindows(t *testing.T) {
	nights := Policy{Availability: []Window{{From: "22:00", To: "06:00"}}}
	weekends := Policy{Availability: []Window{{Days: []string{"sat", "Sunday"}, From: "00:00", To: "24:00"}}}
	friNight := Policy{Availability: []Window{{Days: []string{"fri"}, From: "20:00", To: "02:00"}}}
	berlin := Policy{Timezone: "Europe/Berlin", Availability: []Window{{From: "09:00", To: "17:00"}}}
	reserved := Policy{Reserved: []Interval{{at(0, "12:00"), at(0, "13:00")}}}
	cases := []struct {
		name string
		p    Policy
		at   time.Time
		want bool
	}{
		{"no windows means always", Policy{}, at(2, "03:17"), true},
		{"night before midnight", nights, at(0, "23:30"), true},
		{"night after midnight wraps", nights, at(1, "05:59"), true},
		{"night end is exclusive", nights, at(1, "06:00"), false},
		{"night start is inclusive", nights, at(1, "22:00"), true},
		{"daytime outside nights", nights, at(1, "12:00"), false},
		{"saturday", weekends, at(5, "10:00"), true},
		{"sunday late", weekends, at(6, "23:59"), true},
		{"monday not weekend", weekends, at(7, "00:00"), false},
		{"friday window spills into saturday", friNight, at(5, "01:30"), true},
		{"friday window closed saturday 02:00", friNight, at(5, "02:00"), false},
		{"thursday night no window", friNight, at(3, "21:00"), false},
		// Berlin is UTC+1 in December: 09:00 local is 08:00 UTC.
		{"timezone before open", berlin, at(0, "07:59"), false},
		{"timezone open", berlin, at(0, "08:00"), true},
		{"timezone closes 16:00 UTC", berlin, at(0, "16:00"), false},
		{"reserved span blocks", reserved, at(0, "12:30"), false},
		{"reserved end exclusive", reserved, at(0, "13:00"), true},
	}
	for _, c := range cases {
		if got := c.p.Available(c.at); got != c.want {
			t.Errorf("%s: Available(%s) = %v, want %v", c.name, c.at, got, c.want)
		}
	}
}

func TestFreeSpansBackfill(t *testing.T) {
	p := Policy{
		Availability: []Window{{From: "08:00", To: "18:00"}},
		Reserved: []Interval{
			{at(0, "10:00"), at(0, "12:00")},
			{at(0, "12:40"), at(0, "14:00")},
		},
	}
	got := p.FreeSpans(at(0, "09:00"), at(1, "09:00"))
	want := []Interval{
		{at(0, "09:00"), at(0, "10:00")},
		{at(0, "12:00"), at(0, "12:40")},
		{at(0, "14:00"), at(0, "18:00")},
		{at(1, "08:00"), at(1, "09:00")},
	}
	if !equalSpans(got, want) {
		t.Fatalf("FreeSpans = %v, want %v", got, want)
	}
	// Touching windows merge into one span.
	p2 := Policy{Availability: []Window{{From: "00:00", To: "12:00"}, {From: "12:00", To: "24:00"}}}
	got = p2.FreeSpans(at(0, "06:00"), at(2, "06:00"))
	if len(got) != 1 || !got[0].Start.Equal(at(0, "06:00")) || !got[0].End.Equal(at(2, "06:00")) {
		t.Fatalf("touching windows not merged: %v", got)
	}
	if s := p.FreeSpans(at(1, "00:00"), at(0, "00:00")); s != nil {
		t.Fatalf("inverted range: %v", s)
	}
}

func equalSpans(a, b []Interval) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Start.Equal(b[i].Start) || !a[i].End.Equal(b[i].End) {
			return false
		}
	}
	return true
}

func TestPolicyValidate(t *testing.T) {
	good := Policy{PriceFloor: 1, PeakMultiplier: 2, Timezone: "America/New_York",
		Availability: []Window{{Days: []string{"mon", "Tue"}, From: "22:00", To: "06:00"}}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid policy rejected: %v", err)
	}
	cases := map[string]Policy{
		"HH:MM":               {Availability: []Window{{From: "9:00", To: "10:00"}}},
		"out of range":        {PeakWindows: []Window{{From: "25:00", To: "10:00"}}},
		"unknown day":         {Availability: []Window{{Days: []string{"funday"}, From: "09:00", To: "10:00"}}},
		"peak_multiplier":     {PeakMultiplier: 0.5},
		"price_floor":         {PriceFloor: math.NaN()},
		"occupancy_surcharge": {OccupancySurcharge: -1},
		"timezone":            {Timezone: "Mars/Olympus"},
		"reserved[0]":         {Reserved: []Interval{{at(0, "10:00"), at(0, "09:00")}}},
		"negative":            {MaxLease: -time.Second},
		"no_persist":          {NoPersist: "always"},
	}
	for want, p := range cases {
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%s) = %v, want error mentioning %q", want, err, want)
		}
	}
}

func TestParseTier(t *testing.T) {
	for in, want := range map[string]Tier{"gold": Gold, " Silver ": Silver, "BRONZE": Bronze} {
		if got, err := ParseTier(in); err != nil || got != want {
			t.Errorf("ParseTier(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseTier("platinum"); err == nil {
		t.Error("ParseTier(platinum) succeeded")
	}
}

func TestJobValidate(t *testing.T) {
	j := validJob()
	if err := j.Validate(); err != nil {
		t.Fatalf("valid job rejected: %v", err)
	}
	if j.BidWindow != DefaultBidWindow {
		t.Fatalf("BidWindow default = %v", j.BidWindow)
	}
	cases := []struct {
		name, field string
		mut         func(*Job)
	}{
		{"tier", "tier", func(j *Job) { j.Tier = "platinum" }},
		{"max_price", "max_price", func(j *Job) { j.MaxPrice = math.NaN() }},
		{"gpu_count", "gpu_count", func(j *Job) { j.GPUCount = 0 }},
		{"duration", "duration", func(j *Job) { j.Duration = -time.Minute }},
		{"min_vram_gb", "min_vram_gb", func(j *Job) { j.MinVRAMGB = -1 }},
		{"min_reliability", "min_reliability", func(j *Job) { j.MinReliability = 1.5 }},
		{"run.command", "run.command", func(j *Job) { j.Run.Command = nil }},
		{"run.memory_mb", "run.memory_mb", func(j *Job) { j.Run.MemoryMB = -1 }},
		{"deadline", "deadline", func(j *Job) { j.CreatedAt = monday; j.Deadline = monday.Add(-time.Second) }},
		{"bid_window", "bid_window", func(j *Job) { j.BidWindow = 10 * time.Millisecond }},
		{"gold job", "preemptible", func(j *Job) { j.Tier = Gold; j.Preemptible = true }},
		{"attempt", "attempt", func(j *Job) { j.Attempt = -1 }},
		{"gpu_models", "gpu_models[1]", func(j *Job) { j.GPUModels = []string{"H100", " "} }},
		{"datasets", "datasets[0]", func(j *Job) { j.Datasets = []string{""} }},
		{"run.inputs", "run.inputs", func(j *Job) { j.Run.Inputs = map[string]string{"data": "not-an-id"} }},
		{"retain", "retain", func(j *Job) { j.Retain = -time.Hour }},
		{"retain", "retain", func(j *Job) { j.Retain = time.Second }},
		{"retain", "retain", func(j *Job) { j.Retain = MaxRetain + time.Hour }},
		{"retain", "retain", func(j *Job) { j.Retain, j.NoPersist = time.Hour, true }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := validJob()
			c.mut(&j)
			err := j.Validate()
			if err == nil || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("Validate with bad %s = %v", c.name, err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("Validate with bad %s: field error %+v, want field %q", c.name, fe, c.field)
			}
		})
	}
	t.Run("every problem", func(t *testing.T) {
		j := validJob()
		j.MaxPrice, j.GPUCount, j.Run.Command = -1, 0, nil
		var fields []string
		for _, fe := range FieldErrors(j.Validate()) {
			fields = append(fields, fe.Field)
		}
		if want := []string{"max_price", "gpu_count", "run.command"}; !slices.Equal(fields, want) {
			t.Fatalf("FieldErrors = %q, want %q", fields, want)
		}
	})
	for _, ok := range []func(*Job){
		func(j *Job) { j.Retain = time.Hour },
		func(j *Job) { j.Retain = MinRetain },
		func(j *Job) { j.NoPersist = true },
	} {
		j := validJob()
		ok(&j)
		if err := j.Validate(); err != nil {
			t.Errorf("valid retention rejected: %v", err)
		}
	}
	var nilJob *Job
	if nilJob.Validate() == nil {
		t.Error("nil job validated")
	}
}

func TestJobInputsValidate(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, c := range []struct {
		name   string
		inputs map[string]string
		ok     bool
	}{
		{"valid", map[string]string{"data": id, "model.v2": id}, true},
		{"path in name", map[string]string{"../x": id}, false},
		{"slash in name", map[string]string{"a/b": id}, false},
		{"upper-case id", map[string]string{"data": strings.ToUpper(id)}, false},
		{"short id", map[string]string{"data": id[:10]}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := validJob()
			j.Run.Inputs = c.inputs
			if err := j.Validate(); (err == nil) != c.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID("job"), NewID("job")
	if a == b || !strings.HasPrefix(a, "job-") || len(a) != len("job-")+24 {
		t.Fatalf("NewID: %q %q", a, b)
	}
	if strings.ContainsAny(NewID(""), "-/+=") {
		t.Fatal("NewID without prefix is not bare hex")
	}
}

func validJob() Job {
	return Job{Tier: Silver, MaxPrice: 2, GPUCount: 1, Duration: time.Hour, Run: RunSpec{Command: []string{"python", "train.py"}}}
}
