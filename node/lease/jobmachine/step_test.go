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
	rules = Rules{QueueBackoff: time.Second, QueueBackoffMax: 8 * time.Second}
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
			"unplaceable": Unplaceable, "cancel": Cancelled, "closed": Finished, "restarted": Queued},
		Awarding: {"confirmed": Leased, "no-lease": Queued, "no-lease-raced": Queued, "unplaceable": Unplaceable,
			"cancel": Cancelled, "closed": Finished, "restarted": Queued},
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
			if !reflect.DeepEqual(effs, []Effect{Watch{Lease: l}}) {
				t.Fatalf("running lease not watched again: %#v", effs)
			}
		}
	}
}
