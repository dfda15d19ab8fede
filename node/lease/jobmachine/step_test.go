package jobmachine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

var (
	t0    = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	rules = Rules{QueueBackoff: time.Second, QueueBackoffMax: 8 * time.Second, MaxRefusals: 2}
)

func job() terms.Job {
	return terms.Job{ID: "job-1", Owner: "renter", Tier: terms.Silver, Duration: time.Hour, MaxAttempts: 3,
		Deadline: t0.Add(time.Hour)}
}

func lease(id string) terms.Lease {
	return terms.Lease{ID: id, JobID: "job-1", Provider: "prov-" + id, Start: t0, End: t0.Add(time.Hour), State: terms.RunPending}
}

// at is a record in phase p, as the machine leaves it there.
func at(p Phase) Record {
	l := lease("l1")
	r := Record{Job: job(), Phase: p, PostedAt: t0}
	switch p {
	case Awarding:
		r.Awarded = []string{"l1"}
	case Queued:
		r.Backoff, r.Due = time.Second, t0.Add(time.Second)
	case Leased:
		r.Lease, r.Run, r.Leases = &l, terms.RunRunning, 1
	case Requeued, Finished:
		l.State = terms.RunPreempted
		r.Lease, r.Run, r.Leases = &l, terms.RunPreempted, 1
	case Verifying:
		l.State = terms.RunSucceeded
		r.Lease, r.Run, r.Leases = &l, terms.RunSucceeded, 1
	}
	return r
}

func events() map[string]Event {
	return map[string]Event{
		"posted":         Posted{Job: job()},
		"awarded":        Awarded{LeaseID: "l2"},
		"confirmed":      Confirmed{Lease: lease("l2"), Job: job()},
		"no-lease":       NoLease{Reason: "no bids", Retry: true},
		"no-lease-raced": NoLease{Reason: "raced", Retry: true, Raced: true},
		"no-lease-lost":  NoLease{Reason: "lost", Retry: true, Lost: true},
		"unplaceable":    NoLease{Reason: "no provider fits"},
		"timer":          TimerDue{},
		"wake":           Wake{},
		"cancel":         Cancel{},
		"running":        Reported{LeaseID: "l1", Run: terms.RunRunning, Started: t0},
		"succeeded":      Reported{LeaseID: "l1", Run: terms.RunSucceeded, Started: t0, Ended: t0.Add(time.Minute)},
		"preempted":      Reported{LeaseID: "l1", Run: terms.RunPreempted, Started: t0, Ended: t0.Add(time.Minute)},
		"failed-job":     Reported{LeaseID: "l1", Run: terms.RunFailed, Fault: terms.FaultJob, Detail: "exit code 1"},
		"other-lease":    Reported{LeaseID: "lx", Run: terms.RunFailed, Fault: terms.FaultProvider},
		"moved":          Moved{Lease: lease("l1")},
		"lost":           Lost{LeaseID: "l1", Detail: "silent", At: t0.Add(time.Minute)},
		"evidence-ok":    Evidence{LeaseID: "l1", OK: true},
		"evidence-bad":   Evidence{LeaseID: "l1", Why: "log digest differs"},
		"receipt":        ReceiptRecorded{Receipt: attest.Receipt{LeaseID: "l1", Amount: 1}},
		"refused":        ReceiptRefused{Lease: lease("l1"), Why: "overbilled"},
		"unused":         Unused{Lease: lease("l3")},
		"rebooked":       Rebooked{Lease: lease("l4"), Job: job()},
		"late-report":    LateReport{LeaseID: "l0"},
		"disputed":       Disputed{LeaseID: "l1", Reason: "receipt refused 2 times: x"},
		"reauctioned":    Reauctioned{Job: job()},
		"closed":         Closed{As: Finished},
		"restarted":      Restarted{State: terms.JobLeased, Leases: 1},
	}
}

// TestEveryEventInEveryPhase steps every event in every phase: the phase
// it leads to, by a table; a final phase absorbs every event (a receipt
// is still recorded), and no step panics or moves a run state back.
func TestEveryEventInEveryPhase(t *testing.T) {
	now := t0.Add(2 * time.Second)
	// want[phase][event] is the next phase; an event not listed leaves
	// the phase as it is.
	want := map[Phase]map[string]Phase{
		Auctioning: {"awarded": Awarding, "confirmed": Leased, "no-lease": Queued, "no-lease-raced": Queued,
			"no-lease-lost": Queued, "unplaceable": Unplaceable, "cancel": Cancelled, "closed": Finished, "restarted": Queued},
		Awarding: {"confirmed": Leased, "no-lease": Queued, "no-lease-raced": Queued, "no-lease-lost": Queued,
			"unplaceable": Unplaceable, "cancel": Cancelled, "closed": Finished, "restarted": Queued},
		Queued: {"confirmed": Leased, "timer": Auctioning, "cancel": Cancelled, "closed": Finished},
		Leased: {"succeeded": Verifying, "preempted": Requeued, "failed-job": Finished, "lost": Requeued,
			"closed": Finished},
		Requeued:    {"reauctioned": Auctioning, "closed": Finished},
		Verifying:   {"evidence-ok": Finished, "evidence-bad": Requeued, "closed": Finished},
		Finished:    {},
		Unplaceable: {},
		Cancelled:   {},
		Failed:      {},
	}
	for _, p := range Phases() {
		if p != Leased {
			want[p]["gang-requeued"] = Auctioning // the one event a final phase takes
		}
	}
	evs := events()
	for _, p := range Phases() {
		for name, ev := range evs {
			t.Run(fmt.Sprintf("%s/%s", p, name), func(t *testing.T) {
				before := at(p)
				got, effs := rules.Step(before, ev, now)
				next, listed := want[p][name]
				if !listed {
					next = p
				}
				if got.Phase != next {
					t.Fatalf("%s in %s: phase %s, want %s (effects %#v)", name, p, got.Phase, next, effs)
				}
				if before.Run.Terminal() && got.Run != before.Run && got.Lease != nil && got.Lease.ID == before.Lease.ID && p != Verifying {
					t.Fatalf("%s in %s: run moved back from %s to %s", name, p, before.Run, got.Run)
				}
				if p.Final() && name != "gang-requeued" {
					if name == "receipt" && before.Lease != nil {
						if got.Receipt == nil || !reflect.DeepEqual(effs, []Effect{Persist{}}) {
							t.Fatalf("receipt of a final job not recorded: %+v %#v", got.Receipt, effs)
						}
						return
					}
					if name == "disputed" && before.Lease != nil {
						if got.Dispute == "" || !reflect.DeepEqual(effs, []Effect{Persist{}}) {
							t.Fatalf("dispute of a final job's last lease not shown: %+v %#v", got, effs)
						}
						return
					}
					if name == "disputed" { // an archived lease's: in the job's history
						if !reflect.DeepEqual(effs, []Effect{Persist{}}) || got.Dispute != "" {
							t.Fatalf("dispute of an archived lease: %+v %#v", got, effs)
						}
						return
					}
					if name == "refused" { // its last lease, or one archived before it settled
						if got.Refused["l1"] != 1 || len(effs) != 0 {
							t.Fatalf("refused receipt of a final job not counted: %+v %#v", got.Refused, effs)
						}
						return
					}
					if name == "unused" || name == "confirmed" || name == "rebooked" {
						l := lease("l2")
						switch name {
						case "unused":
							l = lease("l3")
						case "rebooked":
							l = lease("l4")
						}
						if !reflect.DeepEqual(effs, []Effect{Release{Lease: l}}) || len(got.Released) != 1 || got.Released[0].Lease != l.ID {
							t.Fatalf("%s: a lease the ended job cannot use is not released: %#v %+v", name, effs, got.Released)
						}
						return
					}
					if name == "confirmed" {
						if !reflect.DeepEqual(effs, []Effect{Release{Lease: lease("l2")}}) {
							t.Fatalf("a lease confirmed for an ended job is not released: %#v", effs)
						}
						return
					}
					if !reflect.DeepEqual(got, before) || len(effs) != 0 {
						t.Fatalf("%s moved a %s job: %+v -> %+v, effects %#v", name, p, before, got, effs)
					}
				}
			})
		}
	}
}

// TestQueueBacksOffUntilTheDeadline: a job without a lease waits a
// doubling backoff (none after a lost race) between offers, each a new
// attempt, and is given up once its start deadline passes.
func TestQueueBacksOffUntilTheDeadline(t *testing.T) {
	j := job()
	j.Deadline = t0.Add(10 * time.Second)
	st, effs := rules.Step(Record{}, Posted{Job: j}, t0)
	if st.Phase != Auctioning || !reflect.DeepEqual(effs, []Effect{Persist{}, StartAuction{Job: j}}) {
		t.Fatalf("posted: %s %#v", st.Phase, effs)
	}
	now := t0
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		raced := i == 2
		st, _ = rules.Step(st, Folded{Job: st.Job, Reasons: []string{"no bids"}}, now) // the auction's own reason
		st, effs = rules.Step(st, NoLease{Reason: "no bids", Retry: true, Raced: raced, Offers: i + 1}, now)
		if st.Phase == Unplaceable {
			break
		}
		if want := []string{fmt.Sprintf("queued: no bids (offered %d times)", i+1)}; !reflect.DeepEqual(st.Reasons, want) {
			t.Fatalf("reasons %q, want %q", st.Reasons, want)
		}
		arm := effs[len(effs)-1].(ArmTimer)
		waits = append(waits, st.Due.Sub(now))
		if early, e := rules.Step(st, TimerDue{}, arm.At.Add(-time.Millisecond)); early.Phase != Queued || len(e) != 1 {
			t.Fatalf("an early timer offered the job: %s %#v", early.Phase, e)
		}
		now = arm.At
		attempt := st.Job.Attempt
		st, effs = rules.Step(st, TimerDue{}, now)
		if st.Phase == Unplaceable {
			if !reflect.DeepEqual(effs, []Effect{Persist{}, GiveUp{Reason: DeadlineDetail}}) || now.Before(j.Deadline) {
				t.Fatalf("given up at %s (deadline %s): %#v", now, j.Deadline, effs)
			}
			break
		}
		if st.Phase != Auctioning || st.Job.Attempt != attempt+1 {
			t.Fatalf("offer %d: phase %s attempt %d", i, st.Phase, st.Job.Attempt)
		}
	}
	wantWaits := []time.Duration{time.Second, 2 * time.Second, 0, 4 * time.Second}
	if !reflect.DeepEqual(waits[:4], wantWaits) {
		t.Fatalf("waits %v, want %v", waits, wantWaits)
	}
	if st.Phase != Unplaceable {
		t.Fatalf("phase %s after the deadline, want unplaceable", st.Phase)
	}
}

// TestLostRaceOfferedAgainOnce: a job whose awards all lost races to
// other renters' awards is offered again at once, but only for one such
// loss in a row (the losses are its providers' word: a provider that keeps
// declining cannot keep the job in auction); the next waits QueueBackoff,
// doubling, and a lease starts the waits over.
func TestLostRaceOfferedAgainOnce(t *testing.T) {
	st, _ := rules.Step(Record{}, Posted{Job: job()}, t0)
	now := t0
	lose := func(lost bool) time.Duration {
		t.Helper()
		var effs []Effect
		st, effs = rules.Step(st, NoLease{Reason: "all 2 awards failed", Retry: true, Lost: lost, Offers: 1}, now)
		if st.Phase != Queued {
			t.Fatalf("phase %s, want queued", st.Phase)
		}
		wait := st.Due.Sub(now)
		if arm, ok := effs[len(effs)-1].(ArmTimer); !ok || !arm.At.Equal(st.Due) {
			t.Fatalf("effects %#v: no timer for %s", effs, st.Due)
		}
		now = st.Due
		if st, effs = rules.Step(st, TimerDue{}, now); st.Phase != Auctioning {
			t.Fatalf("timer: phase %s %#v", st.Phase, effs)
		}
		return wait
	}
	var waits []time.Duration
	for _, lost := range []bool{true, true, true, false} {
		waits = append(waits, lose(lost))
	}
	if want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second}; !reflect.DeepEqual(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	// A lease, then a requeue that loses a race: at once again.
	st, _ = rules.Step(st, Awarded{LeaseID: "l7"}, now)
	st, _ = rules.Step(st, Confirmed{Lease: lease("l7"), Job: st.Job}, now)
	if st.Phase != Leased || st.Backoff != 0 {
		t.Fatalf("leased: phase %s backoff %s", st.Phase, st.Backoff)
	}
	st.Phase, st.Lease = Auctioning, nil // its next attempt's auction
	if w := lose(true); w != 0 {
		t.Fatalf("a lost race after a lease waited %s", w)
	}
}

// TestRequeueWithinTheBudget: a lease that ends early through no fault of
// the job's requeues it until the attempt budget is spent; then the job
// is finished, saying why.
func TestRequeueWithinTheBudget(t *testing.T) {
	st, _ := rules.Step(Record{}, Posted{Job: job()}, t0)
	for n := 1; n <= 3; n++ {
		id := fmt.Sprintf("l%d", n)
		var effs []Effect
		if st, effs = rules.Step(st, Awarded{LeaseID: id}, t0); !st.Knows(id) || st.Phase != Awarding || len(effs) != 0 {
			t.Fatalf("award %s not known: %+v", id, st)
		}
		leased := st.Job
		leased.Attempt = n - 1
		leased.Restore = []terms.Checkpoint{{LeaseID: fmt.Sprintf("l%d", n-1), Seq: n}}
		st, _ = rules.Step(st, Confirmed{Lease: lease(id), Job: leased}, t0)
		if st.Leases != n || st.Phase != Leased || len(st.Awarded) != 0 || !reflect.DeepEqual(st.Job, leased) {
			t.Fatalf("confirm %d: %+v", n, st)
		}
		st, effs = rules.Step(st, Reported{LeaseID: id, Run: terms.RunFailed, Fault: terms.FaultProvider, Detail: "gpu fell off"}, t0)
		if n < 3 {
			want := Requeue{Lease: *st.Lease, Run: terms.RunFailed, Fault: terms.FaultProvider, Detail: "gpu fell off"}
			if st.Phase != Requeued || !reflect.DeepEqual(effs, []Effect{Persist{}, want}) {
				t.Fatalf("attempt %d: %s %#v", n, st.Phase, effs)
			}
			st, _ = rules.Step(st, Reauctioned{Job: st.Job}, t0)
			if st.Lease != nil || st.Run != "" || st.Phase != Auctioning {
				t.Fatalf("reauctioned: %+v", st)
			}
			continue
		}
		if st.Phase != Finished || st.Detail != "gpu fell off; attempt budget spent (3 of 3 attempts used): the job is not run again" {
			t.Fatalf("last attempt: %s %q", st.Phase, st.Detail)
		}
	}
}

// TestServiceReplicaIsNotRequeued: a service replaces its replicas itself.
func TestServiceReplicaIsNotRequeued(t *testing.T) {
	st := at(Leased)
	st.Job.Run.ServicePort = 8080
	st, _ = rules.Step(st, Lost{LeaseID: "l1", Detail: "silent"}, t0)
	if st.Phase != Finished || st.Run != terms.RunFailed || st.Fault != terms.FaultProvider {
		t.Fatalf("%+v", st)
	}
}

// TestCancelALeasedJobAsksItsProvider: a running lease is stopped by its
// provider, which reports how it ended; the job stays leased till then.
func TestCancelALeasedJobAsksItsProvider(t *testing.T) {
	st, effs := rules.Step(at(Leased), Cancel{}, t0)
	if st.Phase != Leased || !reflect.DeepEqual(effs, []Effect{StopLease{Lease: *at(Leased).Lease}}) {
		t.Fatalf("%s %#v", st.Phase, effs)
	}
	st, _ = rules.Step(st, Reported{LeaseID: "l1", Run: terms.RunCancelled}, t0)
	if st.Phase != Finished {
		t.Fatalf("cancelled lease: %s", st.Phase)
	}
}

// TestStepDoesNotAliasItsInput: the state given to Step is not changed.
func TestStepDoesNotAliasItsInput(t *testing.T) {
	before := at(Awarding)
	before.Reasons = []string{"a"}
	keep, _ := json.Marshal(before)
	rules.Step(before, Awarded{LeaseID: "l9"}, t0)
	rules.Step(before, Cancel{}, t0)
	after, _ := json.Marshal(before)
	if string(keep) != string(after) {
		t.Fatalf("input changed: %s -> %s", keep, after)
	}
}

// TestOldRecordsReadAsMachineState: a job record stored as the API's job
// view, before the machine's state was, reads as a Record and takes up a
// phase from its stored state on restart.
func TestOldRecordsReadAsMachineState(t *testing.T) {
	l := lease("l1")
	for _, c := range []struct {
		state terms.JobState
		run   terms.RunState
		want  Phase
	}{
		{terms.JobBidding, "", Queued},
		{terms.JobAwarding, "", Queued},
		{terms.JobQueued, "", Queued},
		{terms.JobLeased, terms.RunRunning, Leased},
		{terms.JobLeased, terms.RunSucceeded, Finished},
		{terms.JobLeased, terms.RunPreempted, Requeued},
		{terms.JobFinished, terms.RunSucceeded, Finished},
		{terms.JobUnplaceable, "", Unplaceable},
		{terms.JobCancelled, "", Cancelled},
		{terms.JobFailed, "", Failed},
	} {
		old := map[string]any{"job": job(), "state": c.state, "posted_at": t0, "reasons": []string{"x"}, "cost_usd": 1.5}
		if c.run != "" {
			old["lease"], old["run"] = l, c.run
		}
		raw, _ := json.Marshal(old)
		var rec Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Job.ID != "job-1" || !rec.PostedAt.Equal(t0) || rec.Run != c.run || len(rec.Reasons) != 1 {
			t.Fatalf("%s: old record read as %+v", c.state, rec)
		}
		st, effs := rules.Step(rec, Restarted{State: c.state, Leases: 1}, t0)
		if st.Phase != c.want {
			t.Fatalf("%s/%s: restarted as %s, want %s", c.state, c.run, st.Phase, c.want)
		}
		switch c.want {
		case Queued:
			if len(effs) != 1 || st.Due.IsZero() {
				t.Fatalf("%s: queued again without a timer: %#v", c.state, effs)
			}
		case Leased:
			if !reflect.DeepEqual(effs, []Effect{Watch{Lease: l, Since: t0}}) {
				t.Fatalf("running lease not watched again: %#v", effs)
			}
		}
	}
}

// TestRestartedRequeuedWaitsAgain: a job requeued when its daemon stopped
// (its driver waiting for the lease to settle before the job goes back to
// auction) asks for that wait again as it restarts; without it, it stayed
// requeued for ever (the deterministic simulator's seed 135: its renter
// crashed during the wait).
func TestRestartedRequeuedWaitsAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		rec   Record
		state terms.JobState
	}{
		{"preempted", at(Requeued), terms.JobLeased},
		{"no evidence", func() Record {
			r := at(Requeued)
			r.Run, r.Fault, r.Detail = terms.RunFailed, terms.FaultProvider, "no evidence of work: log differs"
			return r
		}(), terms.JobLeased},
		{"stored before phases", func() Record { r := at(Requeued); r.Phase = ""; return r }(), terms.JobLeased},
	} {
		st, effs := rules.Step(c.rec, Restarted{State: c.state, Leases: 1}, t0)
		l := *c.rec.Lease
		want := []Effect{Requeue{Lease: l, Run: c.rec.Run, Fault: c.rec.Fault, Detail: c.rec.Detail}}
		if st.Phase != Requeued || !reflect.DeepEqual(effs, want) {
			t.Fatalf("%s: restarted as %s with %#v, want requeued with %#v", c.name, st.Phase, effs, want)
		}
		if st, _ = rules.Step(st, Reauctioned{Job: job()}, t0); st.Phase != Auctioning {
			t.Fatalf("%s: reauctioned as %s", c.name, st.Phase)
		}
	}
}

// TestRefusedReceiptsBecomeADispute: a lease's receipt refused
// MaxRefusals times gives its settlement up as a dispute, shown in the
// record if the lease is the current one and recorded either way; a
// receipt that settles a lease ends its count.
func TestRefusedReceiptsBecomeADispute(t *testing.T) {
	for _, p := range []Phase{Leased, Finished, Auctioning} {
		st := at(p)
		l := lease("l1")
		if p == Auctioning {
			l = lease("l0") // archived before it settled
		}
		var effs []Effect
		st, effs = rules.Step(st, ReceiptRefused{Lease: l, Why: "overbilled"}, t0)
		if st.Refused[l.ID] != 1 || st.Dispute != "" || len(effs) != 0 {
			t.Fatalf("%s: first refusal: %+v %#v", p, st, effs)
		}
		st, effs = rules.Step(st, ReceiptRefused{Lease: l, Why: "overbilled"}, t0)
		want := "receipt refused 2 times: overbilled"
		if !reflect.DeepEqual(effs, []Effect{RecordDispute{Lease: l, Reason: want}}) || st.Refused != nil || st.Phase != p || st.Dispute != "" {
			t.Fatalf("%s: second refusal: %+v %#v", p, st, effs)
		}
		// Shown once recorded (the ledger first).
		st, effs = rules.Step(st, Disputed{LeaseID: l.ID, Reason: want}, t0)
		if !reflect.DeepEqual(effs, []Effect{Persist{}}) || st.Phase != p {
			t.Fatalf("%s: disputed: %+v %#v", p, st, effs)
		}
		if current := st.Lease != nil && st.Lease.ID == l.ID; (st.Dispute == want) != current {
			t.Fatalf("%s: dispute %q shown for lease %s (current %v)", p, st.Dispute, l.ID, current)
		}
	}
	st, _ := rules.Step(at(Leased), ReceiptRefused{Lease: lease("l1"), Why: "early"}, t0)
	st, _ = rules.Step(st, ReceiptRecorded{Receipt: attest.Receipt{LeaseID: "l1"}}, t0)
	if st.Refused != nil || st.Receipt == nil {
		t.Fatalf("settled: %+v", st)
	}
	if st, effs := rules.Step(st, ReceiptRefused{Lease: lease("l1"), Why: "again"}, t0); st.Refused != nil || len(effs) != 0 {
		t.Fatalf("a settled lease's refusal counted: %+v %#v", st, effs)
	}
	// A new lease's settlement starts without the last one's dispute.
	st = at(Leased)
	st.Dispute = "receipt refused 2 times: x"
	st, _ = rules.Step(st, Reported{LeaseID: "l1", Run: terms.RunPreempted}, t0)
	if st, _ = rules.Step(st, Reauctioned{Job: st.Job}, t0); st.Dispute != "" {
		t.Fatalf("dispute kept past the lease: %q", st.Dispute)
	}
}

// TestReleasedBounded: a job's record remembers the leases it released
// (a lease it could not use, one lost, a hedged award its auction gave
// back) so that their providers' reports are answered, within their
// settlement window and MaxReleased, the oldest going first; a restart
// forgets those whose window passed.
func TestReleasedBounded(t *testing.T) {
	r := Rules{SettleWindow: time.Hour, MaxReleased: 3}
	l := func(i int, end time.Time) terms.Lease {
		return terms.Lease{ID: fmt.Sprintf("u%d", i), JobID: "job-1", Provider: "p", End: end}
	}
	st := at(Auctioning)
	st, effs := r.Step(st, Unused{Lease: l(0, t0.Add(-time.Hour-time.Second))}, t0) // over already
	if len(st.Released) != 0 || !reflect.DeepEqual(effs, []Effect{Release{Lease: l(0, t0.Add(-time.Hour-time.Second))}}) {
		t.Fatalf("a lease past its window: %+v %#v", st.Released, effs)
	}
	for i := 1; i <= 5; i++ {
		st, _ = r.Step(st, Unused{Lease: l(i, t0.Add(time.Duration(i)*time.Minute))}, t0)
	}
	var kept []string
	for _, x := range st.Released {
		kept = append(kept, x.Lease)
	}
	if !reflect.DeepEqual(kept, []string{"u3", "u4", "u5"}) {
		t.Fatalf("kept %v, want the newest 3", kept)
	}
	// A lease given up as lost, and one confirmed for a job that ended,
	// are remembered too.
	lost, _ := r.Step(at(Leased), Lost{LeaseID: "l1", Detail: "silent"}, t0)
	if len(lost.Released) != 1 || lost.Released[0].Lease != "l1" {
		t.Fatalf("lost lease not remembered: %+v", lost.Released)
	}
	ended, _ := r.Step(at(Cancelled), Confirmed{Lease: lease("l2"), Job: job()}, t0)
	if len(ended.Released) != 1 || ended.Released[0].Lease != "l2" {
		t.Fatalf("lease confirmed after the end not remembered: %+v", ended.Released)
	}
	// Restarted after u3 and u4's windows passed.
	st, _ = r.Step(st, Restarted{}, t0.Add(time.Hour+4*time.Minute+time.Second))
	if len(st.Released) != 1 || st.Released[0].Lease != "u5" {
		t.Fatalf("after the restart: %+v", st.Released)
	}
}

// TestArchivedLeasesUntilTheySettle: a lease the job gives up unsettled
// (lost, or left behind when the job goes back to auction) is kept as
// archived, lost or reported as it was, until its receipt comes or its
// settlement window passes; its provider's late report is taken once.
func TestArchivedLeasesUntilTheySettle(t *testing.T) {
	r := rules
	r.SettleWindow = time.Hour
	st, _ := r.Step(at(Leased), Lost{LeaseID: "l1", Detail: "silent", At: t0}, t0)
	if a, ok := st.ArchivedLease("l1"); !ok || !a.Lost || a.Reported || st.Phase != Requeued {
		t.Fatalf("lost lease: %+v", st)
	}
	st, effs := r.Step(st, LateReport{LeaseID: "l1"}, t0)
	if a, _ := st.ArchivedLease("l1"); !a.Reported || !reflect.DeepEqual(effs, []Effect{Persist{}}) {
		t.Fatalf("late report: %+v %#v", st.Archived, effs)
	}
	if again, effs := r.Step(st, LateReport{LeaseID: "l1"}, t0); len(effs) != 0 || !reflect.DeepEqual(again.Archived, st.Archived) {
		t.Fatalf("second late report taken: %#v", effs)
	}
	// Back to auction: the lost lease stays as it was (lost first).
	st, _ = r.Step(st, Reauctioned{Job: st.Job}, t0)
	if a, _ := st.ArchivedLease("l1"); len(st.Archived) != 1 || !a.Lost || st.Lease != nil {
		t.Fatalf("reauctioned: %+v", st)
	}
	// A preempted lease archived on its way back to auction has reported.
	pre, _ := r.Step(at(Leased), Reported{LeaseID: "l1", Run: terms.RunPreempted}, t0)
	pre, _ = r.Step(pre, Reauctioned{Job: pre.Job}, t0)
	if a, ok := pre.ArchivedLease("l1"); !ok || a.Lost || !a.Reported {
		t.Fatalf("preempted and archived: %+v", pre.Archived)
	}
	// Settled: no longer archived.
	if st, _ = r.Step(st, ReceiptRecorded{Receipt: attest.Receipt{LeaseID: "l1"}}, t0); st.Archived != nil {
		t.Fatalf("settled, still archived: %+v", st.Archived)
	}
	// A settled lease is never archived; past its window it is forgotten
	// (a restart forgets it too).
	settled := at(Requeued)
	settled.Receipt = &attest.Receipt{LeaseID: "l1"}
	if settled, _ = r.Step(settled, Reauctioned{Job: settled.Job}, t0); settled.Archived != nil {
		t.Fatalf("a settled lease archived: %+v", settled.Archived)
	}
	st, _ = r.Step(at(Leased), Lost{LeaseID: "l1", Detail: "silent"}, t0)
	if late, _ := r.Step(st, Restarted{}, lease("l1").End.Add(time.Hour+time.Second)); late.Archived != nil {
		t.Fatalf("archived past its window after a restart: %+v", late.Archived)
	}
	// A record stored before the machine kept them takes its archived
	// leases from the restart.
	old := []Archived{{Lease: "l0", End: t0.Add(time.Hour), Lost: true}}
	if st, _ = r.Step(at(Auctioning), Restarted{State: terms.JobBidding, Archived: old}, t0); !reflect.DeepEqual(st.Archived, old) {
		t.Fatalf("old archived leases not taken: %+v", st.Archived)
	}
}

// TestConfirmWatchesFromItsRecord: a confirmed lease is watched for its
// provider's silence from when the renter recorded the confirm, not from
// the lease's start: a confirm taken late (a busy renter) followed
// heartbeats the renter refused until then, which are not the provider's
// silence.
func TestConfirmWatchesFromItsRecord(t *testing.T) {
	l := lease("l2")
	l.Start = t0.Add(-time.Minute)
	recorded := t0.Add(3 * time.Second)
	_, effs := rules.Step(at(Awarding), Confirmed{Lease: l, Job: job()}, recorded)
	var w *Watch
	for _, e := range effs {
		if e, ok := e.(Watch); ok {
			w = &e
		}
	}
	if w == nil || w.Lease.ID != "l2" || !w.Since.Equal(recorded) {
		t.Fatalf("effects %+v: want a Watch of l2 from %v", effs, recorded)
	}
}

// TestRebookedReplacesAPendingLease: a lease a later auction of the leased
// job found (late binding) replaces the current lease only while that is
// pending and starts later; the replaced one is released, no attempt of
// the budget is spent, and the job keeps its own deadline and exclusions.
// Any other rebooked lease is released.
func TestRebookedReplacesAPendingLease(t *testing.T) {
	now := t0.Add(time.Second)
	pending := func() Record {
		r := at(Leased)
		l := lease("l1")
		l.Start, l.End = t0.Add(10*time.Minute), t0.Add(70*time.Minute)
		r.Lease, r.Run = &l, terms.RunPending
		return r
	}
	sooner := lease("l4")
	sooner.Start, sooner.End = t0.Add(2*time.Second), t0.Add(time.Hour+2*time.Second)
	next := job()
	next.Attempt, next.Deadline, next.Exclude = 1, sooner.Start, []string{"prov-l1"}

	before := pending()
	got, effs := rules.Step(before, Rebooked{Lease: sooner, Job: next}, now)
	if got.Lease == nil || got.Lease.ID != "l4" || got.Run != terms.RunPending || got.Phase != Leased || got.Leases != before.Leases {
		t.Fatalf("rebooked: lease %+v run %s phase %s leases %d", got.Lease, got.Run, got.Phase, got.Leases)
	}
	if got.Job.Attempt != 1 || !got.Job.Deadline.Equal(before.Job.Deadline) || len(got.Job.Exclude) != 0 {
		t.Fatalf("job after the rebook: attempt %d deadline %s exclude %v", got.Job.Attempt, got.Job.Deadline, got.Job.Exclude)
	}
	want := []Effect{Release{Lease: *before.Lease}, Persist{}, Watch{Lease: *got.Lease, Since: now}}
	if !reflect.DeepEqual(effs, want) || len(got.Released) != 1 || got.Released[0].Lease != "l1" {
		t.Fatalf("effects %#v released %+v", effs, got.Released)
	}
	if again, effs := rules.Step(got, Rebooked{Lease: sooner, Job: next}, now); !reflect.DeepEqual(again, got) || len(effs) != 0 {
		t.Fatalf("a duplicate rebook changed the record: %#v", effs)
	}

	// Running already, or not sooner: the rebooked lease is released.
	running := pending()
	running.Run = terms.RunRunning
	later := sooner
	later.Start = running.Lease.Start.Add(time.Second)
	for name, c := range map[string]struct {
		st Record
		l  terms.Lease
	}{"running": {running, sooner}, "not sooner": {pending(), later}} {
		got, effs := rules.Step(c.st, Rebooked{Lease: c.l, Job: next}, now)
		if got.Lease.ID != "l1" || got.Job.Attempt != 0 || !reflect.DeepEqual(effs, []Effect{Release{Lease: c.l}}) {
			t.Fatalf("%s: lease %s attempt %d effects %#v", name, got.Lease.ID, got.Job.Attempt, effs)
		}
	}
}
