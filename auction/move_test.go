package auction

import (
	"errors"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// movedLease is what a provider's OnMove was told.
type movedLease struct {
	l   terms.Lease
	job terms.Job
}

// twoBookedLeases books, on a provider with two GPUs, a running lease
// holding both for an hour and, behind it, a lease of one GPU for an hour
// that starts when the first ends; OnMove reports each move on the
// returned channel and answers accept.
func twoBookedLeases(t *testing.T, accept bool) (*testProv, terms.Lease, terms.Lease, chan movedLease, time.Time) {
	t.Helper()
	m := newMarket(t, []provSpec{{"only", "eu-west", "A100", 80, 2, pol(1.0), 0.9}})
	prov := m.provs[0]
	moves := make(chan movedLease, 4)
	prov.p.cfg.Runtime = runtimeHooks{move: func(l terms.Lease, j terms.Job) bool {
		moves <- movedLease{l, j}
		return accept
	}}
	now := m.now()
	renter := signtest.New(t).ID().String()
	me := prov.s.ID().String()
	first := terms.Lease{ID: "lease-first", JobID: "job-first", Renter: renter, Provider: me, Price: 1,
		Start: now.Add(-time.Minute), End: now.Add(59 * time.Minute), GPUCount: 2, Tier: terms.Silver, State: terms.RunPending}
	job := euJob(now)
	job.ID, job.GPUCount, job.Deadline = "job-behind", 1, now.Add(2*time.Hour)
	behind := terms.Lease{ID: "lease-behind", JobID: job.ID, Renter: renter, Provider: me, Price: 1,
		Start: first.End, End: first.End.Add(time.Hour), GPUCount: 1, Tier: terms.Silver, State: terms.RunPending}
	if err := prov.p.Rebook(first, euJob(now)); err != nil {
		t.Fatal(err)
	}
	if err := prov.p.Rebook(behind, job); err != nil {
		t.Fatal(err)
	}
	return prov, first, behind, moves, now
}

// TestEarlyEndMovesLeaseEarlier: a lease that ends 59 minutes before its
// booked end frees its GPUs at once, and the lease booked behind it moves
// to start now, keeping its length and price; the runtime is told.
func TestEarlyEndMovesLeaseEarlier(t *testing.T) {
	t.Parallel()
	prov, first, behind, moves, now := twoBookedLeases(t, true)
	if err := prov.p.LeaseEnded(first.ID, now, terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	var mv movedLease
	select {
	case mv = <-moves:
	case <-time.After(10 * time.Second):
		t.Fatal("the lease behind the early end was not moved")
	}
	l := mv.l
	if l.ID != behind.ID || mv.job.ID != behind.JobID {
		t.Fatalf("moved %s (job %s), want %s", l.ID, mv.job.ID, behind.ID)
	}
	if !l.Start.Before(behind.Start.Add(-50*time.Minute)) || l.End.Sub(l.Start) != time.Hour || l.Price != behind.Price || len(l.Devices) != 1 {
		t.Fatalf("moved lease %s → %s on %v, want to start about now (%s), an hour long", l.Start, l.End, l.Devices, now)
	}
	b, _ := prov.cal.Booking(behind.ID)
	if !b.Start.Equal(l.Start) || !b.End.Equal(l.End) || len(b.Devices) != 1 || b.Devices[0] != l.Devices[0] {
		t.Fatalf("booking %+v does not match the moved lease %+v", b, l)
	}
	st := prov.p.Stats()
	if st.Moved != 1 {
		t.Fatalf("stats moved %d", st.Moved)
	}
	for _, sl := range st.Leases {
		if sl.ID == behind.ID && !sl.Start.Equal(l.Start) {
			t.Fatalf("the provider's lease still starts %s", sl.Start)
		}
	}
}

// TestMoveRespectsHoldsAndRuntime: a move never takes GPUs a bid holds
// (it comes once the hold is dropped), and a move the runtime refuses
// (the lease already began there) is undone.
func TestMoveRespectsHoldsAndRuntime(t *testing.T) {
	t.Parallel()
	prov, first, behind, moves, now := twoBookedLeases(t, true)
	// Bids hold both GPUs over the next two hours.
	prov.cal.Hold("bid-a", "someone", Booking{Start: now, End: now.Add(2 * time.Hour), GPUs: 2, Devices: []int{0, 1}}, now.Add(time.Hour))
	if err := prov.p.LeaseEnded(first.ID, now, terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	// moveEarlier runs in the background: once more here, in line, so
	// the check below does not race it.
	prov.p.moveEarlier()
	select {
	case mv := <-moves:
		t.Fatalf("moved into held GPUs: %+v", mv.l)
	default:
	}
	if b, _ := prov.cal.Booking(behind.ID); !b.Start.Equal(behind.Start) {
		t.Fatalf("booking moved to %s under a hold", b.Start)
	}
	if !prov.cal.DropHold("bid-a") {
		t.Fatal("no hold")
	}
	prov.p.retryParked() // what a dropped hold triggers
	select {
	case mv := <-moves:
		if !mv.l.Start.Before(behind.Start) {
			t.Fatalf("moved to %s", mv.l.Start)
		}
	default:
		t.Fatal("not moved once the hold was dropped")
	}

	prov2, first2, behind2, moves2, now2 := twoBookedLeases(t, false)
	if err := prov2.p.LeaseEnded(first2.ID, now2, terms.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	prov2.p.moveEarlier()
	// Both tries (the one LeaseEnded started and ours) asked the runtime;
	// each undoes its move under the provider's lock before it lets go.
	<-moves2
	<-moves2
	prov2.p.mu.Lock()
	prov2.p.mu.Unlock() //nolint:staticcheck // a barrier: the undo is done
	if b, _ := prov2.cal.Booking(behind2.ID); !b.Start.Equal(behind2.Start) || !b.End.Equal(behind2.End) {
		t.Fatalf("a move the runtime refused stayed: booking %+v", b)
	}
	if st := prov2.p.Stats(); st.Moved != 0 {
		t.Fatalf("stats moved %d", st.Moved)
	}
}

// TestLeaseMovedRule: the one rule both sides check a move by.
func TestLeaseMovedRule(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := terms.Lease{ID: "l", Start: now.Add(time.Hour), End: now.Add(2 * time.Hour), GPUCount: 2, State: terms.RunPending}
	m, err := l.Moved(now, []int{1, 0}, now)
	if err != nil || !m.Start.Equal(now) || !m.End.Equal(now.Add(time.Hour)) || len(m.Devices) != 2 {
		t.Fatalf("moved %+v %v", m, err)
	}
	running := l
	running.State = terms.RunRunning
	for name, c := range map[string]struct {
		l     terms.Lease
		start time.Time
		devs  []int
	}{
		"later":          {l, l.Start.Add(time.Minute), nil},
		"same start":     {l, l.Start, nil},
		"running":        {running, now, nil},
		"wrong devices":  {l, now, []int{0}},
		"zero start":     {l, time.Time{}, nil},
		"3h in the past": {l, now.Add(-3 * time.Hour), nil},
		"past the skew":  {l, now.Add(-terms.MoveSkew - time.Second), nil},
	} {
		if _, err := c.l.Moved(c.start, c.devs, now); !errors.Is(err, terms.ErrBadMove) {
			t.Errorf("%s: %v, want ErrBadMove", name, err)
		}
	}
}
