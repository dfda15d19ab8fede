package auction

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// The calendar books devices: concurrent leases get distinct devices, a
// lease asks for devices of a pool, and eviction frees exactly the evicted
// lease's devices.
func TestCalendarBooksDevices(t *testing.T) {
	t.Parallel()
	t0 := monday
	c := NewCalendar(8)
	seen := map[int]string{}
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("l%d", i)
		if err := c.Reserve(Booking{LeaseID: id, Start: t0, End: t0.Add(time.Hour), GPUs: 1, Preemptible: i%2 == 1}); err != nil {
			t.Fatal(err)
		}
		b, _ := c.Booking(id)
		if len(b.Devices) != 1 {
			t.Fatalf("%s holds %v", id, b.Devices)
		}
		if other, dup := seen[b.Devices[0]]; dup {
			t.Fatalf("device %d booked by %s and %s", b.Devices[0], other, id)
		}
		seen[b.Devices[0]] = id
	}
	if err := c.Reserve(Booking{LeaseID: "ninth", Start: t0.Add(30 * time.Minute), End: t0.Add(2 * time.Hour), GPUs: 1}); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("ninth lease on a full 8-device host: %v, want ErrOverbooked", err)
	}
	// A gold lease evicting l3 gets exactly l3's device.
	l3, _ := c.Booking("l3")
	ev, err := c.ReserveThenEvict(Booking{LeaseID: "gold", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Tier: terms.Gold}, []string{"l3"})
	if err != nil || len(ev) != 1 || ev[0].LeaseID != "l3" {
		t.Fatalf("evict l3: %v, %v", ev, err)
	}
	g, _ := c.Booking("gold")
	if !reflect.DeepEqual(g.Devices, l3.Devices) {
		t.Fatalf("gold holds %v, the evicted lease held %v", g.Devices, l3.Devices)
	}
	// A pool restricts the devices; taken devices of the pool are skipped.
	c2 := NewCalendar(3)
	if err := c2.Reserve(Booking{LeaseID: "a", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Devices: []int{1, 0}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := c2.Booking("a"); !reflect.DeepEqual(b.Devices, []int{1}) {
		t.Fatalf("a holds %v, want [1] (first of its pool)", b.Devices)
	}
	if err := c2.Reserve(Booking{LeaseID: "b", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Devices: []int{1, 0}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := c2.Booking("b"); !reflect.DeepEqual(b.Devices, []int{0}) {
		t.Fatalf("b holds %v, want [0]", b.Devices)
	}
	if err := c2.Reserve(Booking{LeaseID: "c", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Devices: []int{0, 1}}); !errors.Is(err, ErrOverbooked) {
		t.Fatalf("pool fully booked: %v, want ErrOverbooked (device 2 is outside the pool)", err)
	}
	for _, tc := range []struct {
		name string
		devs []int
	}{{"out of range", []int{3}}, {"negative", []int{-1}}, {"repeated", []int{2, 2}}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c2.Reserve(Booking{LeaseID: "bad", Start: t0, End: t0.Add(time.Hour), GPUs: 1, Devices: tc.devs}); !errors.Is(err, ErrBadBooking) {
				t.Fatalf("devices %v: %v, want ErrBadBooking", tc.devs, err)
			}
		})
	}
	if free := c2.FreeDevices(t0, t0.Add(time.Hour), nil); !reflect.DeepEqual(free, []int{2}) {
		t.Fatalf("free devices %v, want [2]", free)
	}
}

// A mixed host sells each device as what it is: an RTX 3060 job gets the
// 3060, RTX 4090 jobs get the 4090s, and a third 4090 job finds none free.
func TestEvaluateMixedHostDevices(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	ps := baseState()
	ps.Cap.GPUs = append(gpus("NVIDIA GeForce RTX 4090", 24, 2), gpus("NVIDIA GeForce RTX 3060", 12, 1)...)
	ps.Cal = NewCalendar(3)
	job := func(model string) *terms.Job {
		j := evalJob()
		j.GPUCount, j.GPUModels, j.Datasets = 1, []string{model}, nil
		return j
	}
	book := func(id string, j *terms.Job) []int {
		t.Helper()
		o, err := Evaluate(ps, j, now)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if err := ps.Cal.Reserve(Booking{LeaseID: id, Start: o.Start, End: o.End, GPUs: j.GPUCount, Devices: o.Devices}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		b, _ := ps.Cal.Booking(id)
		return b.Devices
	}
	if d := book("3060", job("RTX 3060")); !reflect.DeepEqual(d, []int{2}) {
		t.Fatalf("RTX 3060 job holds %v, want [2]", d)
	}
	a, b := book("4090a", job("RTX4090")), book("4090b", job("RTX 4090"))
	if len(a) != 1 || len(b) != 1 || a[0] == b[0] || a[0] > 1 || b[0] > 1 {
		t.Fatalf("RTX 4090 jobs hold %v and %v, want devices 0 and 1", a, b)
	}
	o, err := Evaluate(ps, job("RTX 4090"), now)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Start.Equal(now.Add(time.Hour)) {
		t.Fatalf("third RTX 4090 job offered %s, want when a 4090 frees (%s), not the busy 3060", o.Start, now.Add(time.Hour))
	}
}
