package jobmachine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestRandomWalksKeepTheRules steps random sequences of events (for the
// current lease, an awarded one, or another) through the machine and
// checks its invariants after each step: a final phase is left only for
// a gang's requeue; a lease's run state only moves forward (a succeeded
// run not accepted for want of evidence aside); the leases counted never
// go down; a change of phase is persisted (but the award's, which a
// restart takes back to the queue anyway, and the restart's own); a
// receipt refused MaxRefusals times is a dispute, shown only once
// recorded, and persisted;
// a lease released is remembered; a lease lost is archived, lost, until
// it settles, and a report taken stays taken.
func TestRandomWalksKeepTheRules(t *testing.T) {
	runs := []terms.RunState{terms.RunPending, terms.RunRunning, terms.RunSucceeded, terms.RunFailed,
		terms.RunPreempted, terms.RunExpired, terms.RunCancelled}
	faults := []terms.Fault{terms.FaultNone, terms.FaultJob, terms.FaultProvider}
	for seed := uint64(0); seed < 500; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 1))
		now := t0
		st := Record{}
		var trace []string
		next := 0
		leaseID := func() string {
			switch {
			case st.Lease != nil && rnd.IntN(3) > 0:
				return st.Lease.ID
			case len(st.Awarded) > 0 && rnd.IntN(2) == 0:
				return st.Awarded[rnd.IntN(len(st.Awarded))]
			}
			next++
			return fmt.Sprintf("l%d", next)
		}
		for i := 0; i < 60; i++ {
			now = now.Add(time.Duration(rnd.IntN(4000)) * time.Millisecond)
			var ev Event
			switch rnd.IntN(22) {
			case 0:
				ev = Posted{Job: job()}
			case 1:
				ev = Awarded{LeaseID: leaseID()}
			case 2:
				ev = Confirmed{Lease: lease(leaseID()), Job: st.Job}
			case 3:
				ev = NoLease{Reason: "no bids", Retry: rnd.IntN(3) > 0, Raced: rnd.IntN(4) == 0, Lost: rnd.IntN(4) == 0, Offers: i}
			case 4, 5:
				ev = TimerDue{}
			case 6:
				ev = Wake{}
			case 7:
				ev = Cancel{}
			case 8, 9:
				ev = Reported{LeaseID: leaseID(), Run: runs[rnd.IntN(len(runs))], Fault: faults[rnd.IntN(len(faults))]}
			case 10:
				ev = Lost{LeaseID: leaseID(), Detail: "silent", At: now}
			case 11:
				ev = Evidence{LeaseID: leaseID(), OK: rnd.IntN(2) == 0, Why: "no log"}
			case 12:
				ev = ReceiptRecorded{Receipt: attest.Receipt{LeaseID: leaseID(), Amount: 1}}
			case 13:
				ev = Reauctioned{Job: st.Job}
			case 14:
				ev = Folded{Job: st.Job, Reasons: []string{"r"}}
			case 15:
				ev = Restarted{State: terms.JobLeased, Leases: 1}
			case 17:
				ev = ReceiptRefused{Lease: lease(leaseID()), Why: "refused"}
			case 18:
				ev = Unused{Lease: lease(leaseID())}
			case 19:
				ev = Disputed{LeaseID: leaseID(), Reason: "receipt refused"}
			case 20:
				ev = LateReport{LeaseID: leaseID()}
			case 21:
				l := lease(leaseID())
				l.Start = t0.Add(time.Duration(rnd.IntN(4000)-3000) * time.Millisecond) // mostly sooner than lease()
				j := st.Job
				j.Attempt++
				ev = Rebooked{Lease: l, Job: j}
			case 16:
				if rnd.IntN(4) == 0 {
					ev = GangRequeued{Job: st.Job}
				} else {
					ev = Closed{As: Phases()[rnd.IntN(len(Phases()))]}
				}
			}
			before := st
			var effs []Effect
			st, effs = rules.Step(st, ev, now)
			trace = append(trace, fmt.Sprintf("%T -> %s", ev, st.Phase))
			fail := func(format string, args ...any) {
				t.Fatalf("seed %d: "+format+"\n%v", append(append([]any{seed}, args...), trace)...)
			}
			if _, gang := ev.(GangRequeued); before.Phase.Final() && st.Phase != before.Phase && !gang {
				fail("left final phase %s for %s", before.Phase, st.Phase)
			}
			if st.Leases < before.Leases {
				fail("leases went down: %d -> %d", before.Leases, st.Leases)
			}
			if before.Lease != nil && st.Lease != nil && before.Lease.ID == st.Lease.ID && st.Run != before.Run &&
				!st.Run.Follows(before.Run) {
				if _, evidence := ev.(Evidence); !(evidence && before.Run == terms.RunSucceeded && st.Run == terms.RunFailed) {
					fail("run moved back: %s -> %s", before.Run, st.Run)
				}
			}
			_, award := ev.(Awarded)
			_, restart := ev.(Restarted) // takes up a stored record: it needs no write
			if st.Phase != before.Phase && before.Phase != "" && !award && !restart {
				if _, ok := has[Persist](effs); !ok {
					fail("phase %s -> %s not persisted: %#v", before.Phase, st.Phase, effs)
				}
			}
			if _, rb := ev.(Rebooked); rb && st.Lease != nil && before.Lease != nil && st.Lease.ID != before.Lease.ID {
				if before.Run != terms.RunPending || !st.Lease.Start.Before(before.Lease.Start) || st.Leases != before.Leases ||
					!slices.ContainsFunc(st.Released, func(r Released) bool { return r.Lease == before.Lease.ID }) {
					fail("rebooked %s (%s, start %s) onto %s (start %s), leases %d -> %d, released %+v", before.Lease.ID, before.Run,
						before.Lease.Start, st.Lease.ID, st.Lease.Start, before.Leases, st.Leases, st.Released)
				}
			}
			if st.Phase == Queued && st.Due.IsZero() {
				fail("queued without a due offer")
			}
			if rel, ok := has[Release](effs); ok && !slices.ContainsFunc(st.Released, func(r Released) bool { return r.Lease == rel.Lease.ID }) {
				fail("lease %s released, not remembered: %+v", rel.Lease.ID, st.Released)
			}
			for _, a := range st.Archived {
				if st.Lease != nil && st.Lease.ID == a.Lease && st.Receipt != nil {
					fail("settled lease %s still archived", a.Lease)
				}
				if b, ok := before.ArchivedLease(a.Lease); ok && b.Reported && !a.Reported {
					fail("archived lease %s un-reported", a.Lease)
				}
			}
			if _, lost := ev.(Lost); lost && before.Lease != nil && before.Receipt == nil && st.Run == terms.RunFailed && before.Run != st.Run {
				if a, ok := st.ArchivedLease(before.Lease.ID); !ok || !a.Lost {
					fail("lost lease %s not archived as lost: %+v", before.Lease.ID, st.Archived)
				}
			}
			for id, n := range st.Refused {
				if n <= 0 || n >= rules.MaxRefusals {
					fail("lease %s: %d refusals counted (disputed at %d)", id, n, rules.MaxRefusals)
				}
			}
			if _, ok := has[RecordDispute](effs); ok && st.Dispute != before.Dispute {
				fail("dispute %q shown before it is recorded", st.Dispute)
			}
			if st.Dispute != before.Dispute && st.Dispute != "" {
				if _, ok := ev.(Disputed); !ok {
					fail("dispute %q shown, not recorded", st.Dispute)
				}
				if _, ok := has[Persist](effs); !ok {
					fail("dispute %q not persisted", st.Dispute)
				}
			}
		}
	}
}

func has[E Effect](effs []Effect) (E, bool) {
	for _, e := range effs {
		if e, ok := e.(E); ok {
			return e, true
		}
	}
	var zero E
	return zero, false
}
