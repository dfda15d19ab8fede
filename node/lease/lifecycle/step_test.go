package lifecycle

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

var (
	t0    = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rules = Rules{Grace: 10 * time.Second, SettleRetry: 5 * time.Second, SettleRetryMax: 40 * time.Second,
		SettleWindow: time.Hour, MaxRefusals: 3, RecoverDelay: 2 * time.Second}
)

func testLease() terms.Lease {
	return terms.Lease{ID: "l1", JobID: "j1", Renter: "r", Provider: "p", Start: t0.Add(time.Minute), End: t0.Add(11 * time.Minute), GPUCount: 1}
}

// run feeds events at their times to a fresh machine and returns the state
// and every effect asked for.
func run(t *testing.T, r Rules, steps ...timed) (Lease, []Effect) {
	t.Helper()
	var st Lease
	var all []Effect
	for _, s := range steps {
		var effs []Effect
		st, effs = r.Step(st, s.ev, s.at)
		all = append(all, effs...)
	}
	return st, all
}

type timed struct {
	at time.Time
	ev Event
}

func at(d time.Duration, ev Event) timed { return timed{t0.Add(d), ev} }

func has(effs []Effect, want Effect) bool {
	for _, e := range effs {
		if reflect.DeepEqual(e, want) {
			return true
		}
	}
	return false
}

func counted(effs []Effect, name string) int {
	n := 0
	for _, e := range effs {
		if c, ok := e.(Count); ok && c.Name == name {
			n++
		}
	}
	return n
}

func confirmed() timed {
	return at(0, Confirmed{Lease: testLease(), Job: terms.Job{ID: "j1", Duration: 10 * time.Minute}})
}

// ran is a lease that started at +1m and is running.
func ran() []timed {
	return []timed{confirmed(), at(time.Minute, TimerDue{}), at(time.Minute, Prepared{}), at(61*time.Second, ExecStarted{Backend: "process"})}
}

func TestStepHappyPath(t *testing.T) {
	steps := append(ran(),
		at(5*time.Minute, Exited{Exit{Started: t0.Add(61 * time.Second), Ended: t0.Add(5 * time.Minute), Code: 0, How: HowExited, Reason: "exited"}}),
		at(5*time.Minute, OutputsCollected{}),
		at(5*time.Minute, ReportDelivered{}))
	st, effs := run(t, rules, steps...)
	if st.Phase != Receipting || st.Run != terms.RunSucceeded || st.Fault != terms.FaultNone || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("state %+v", st)
	}
	if !st.Started.Equal(t0.Add(61*time.Second)) || !st.Ended.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("span %v..%v", st.Started, st.Ended)
	}
	if !has(effs, SendReceipt{Start: t0.Add(61 * time.Second), End: t0.Add(5 * time.Minute)}) {
		t.Fatalf("no receipt for the run's span: %#v", effs)
	}
	if has(effs, Snapshot{}) {
		t.Fatal("a job that succeeded is not snapshotted after its exit")
	}
	st, effs = rules.Step(st, ReceiptCountersigned{}, t0.Add(5*time.Minute))
	if st.Phase != Settled || !has(effs, Persist{}) || has(effs, Purge{}) {
		t.Fatalf("settle: %v %#v", st.Phase, effs)
	}
	// Nothing after settled.
	for _, ev := range []Event{ReceiptCountersigned{}, ReportFailed{Err: "x"}, StopRequested{As: terms.RunCancelled}, TimerDue{}, Restarted{}} {
		if st2, effs := rules.Step(st, ev, t0.Add(6*time.Minute)); !reflect.DeepEqual(st2, st) || len(effs) != 0 {
			t.Fatalf("%T after settled: %v %#v", ev, st2.Phase, effs)
		}
	}
}

func TestStepStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		at      time.Duration
		phase   Phase
		run     terms.RunState
		counted string
	}{
		{"early timer is armed again", 30 * time.Second, Waiting, terms.RunPending, ""},
		{"at its start it prepares", time.Minute, Preparing, terms.RunPending, ""},
		{"within the lease it prepares", 10 * time.Minute, Preparing, terms.RunPending, ""},
		{"at its end it is not run", 11 * time.Minute, Reporting, terms.RunFailed, "provider.lease_begun_late"},
		{"after its end it is not run", time.Hour, Reporting, terms.RunFailed, "provider.lease_begun_late"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, effs := run(t, rules, confirmed(), at(tc.at, TimerDue{}))
			if st.Phase != tc.phase || st.Run != tc.run {
				t.Fatalf("phase %s run %s", st.Phase, st.Run)
			}
			if tc.counted != "" && counted(effs, tc.counted) != 1 {
				t.Fatalf("%s not counted: %#v", tc.counted, effs)
			}
			if tc.phase == Reporting {
				if st.Fault != terms.FaultProvider || !strings.Contains(st.Detail, "before the provider started it") {
					t.Fatalf("late lease: %s %q", st.Fault, st.Detail)
				}
				if !st.Started.Equal(st.Ended) || has(effs, Prepare{}) {
					t.Fatalf("late lease ran: %v..%v %#v", st.Started, st.Ended, effs)
				}
			}
			if tc.phase == Waiting && !has(effs, ArmTimer{At: t0.Add(time.Minute)}) {
				t.Fatalf("early timer not armed again: %#v", effs)
			}
		})
	}
}

// TestStepExecStartedLate: the run is billed from when the executor's
// start returned (ExecStarted.At), not from when its event was stepped:
// on a busy host the step comes later, and a short job may have exited
// by then (a 200 ms job billed 0.6 ms, nothing). An At after the step's
// time (a clock that moved back) is not taken.
func TestStepExecStartedLate(t *testing.T) {
	began := t0.Add(61 * time.Second)
	st, effs := run(t, rules, confirmed(), at(time.Minute, TimerDue{}), at(time.Minute, Prepared{}),
		at(61*time.Second+600*time.Millisecond, ExecStarted{Backend: "process", At: began}),
		at(62*time.Second, Exited{Exit{Started: began, Ended: began.Add(200 * time.Millisecond), How: HowExited, Reason: "exited"}}),
		at(62*time.Second, OutputsCollected{}), at(62*time.Second, ReportDelivered{}))
	if !st.Started.Equal(began) || !has(effs, SendReceipt{Start: began, End: began.Add(200 * time.Millisecond)}) {
		t.Fatalf("started %v: %#v", st.Started, effs)
	}
	st, _ = run(t, rules, confirmed(), at(time.Minute, TimerDue{}), at(time.Minute, Prepared{}),
		at(61*time.Second, ExecStarted{Backend: "process", At: t0.Add(70 * time.Second)}))
	if !st.Started.Equal(began) {
		t.Fatalf("started %v, stepped at %v", st.Started, began)
	}
}

// TestStepStartsLate: a job whose preparing, or whose executor's start,
// ran past its lease's end (a slow host) had none of its lease: it is the
// provider's lateness (the renter requeues the job), never the job's
// expiry; so is one the executor started more than LateStartSlack into
// its lease and that was stopped at its end (it lost what the provider
// took). A job started within the slack and stopped there expired.
func TestStepStartsLate(t *testing.T) {
	took := at(time.Minute, TimerDue{})
	deadline := func(started time.Duration) timed {
		return at(started, Exited{Exit{Started: t0.Add(started), Ended: t0.Add(started), How: HowDeadline, Reason: "deadline"}})
	}
	for _, tc := range []struct {
		name  string
		steps []timed
		run   terms.RunState
		fault terms.Fault
		late  bool // counted as provider.lease_begun_late, the executor never asked to start
	}{
		{"prepared at its end", []timed{took, at(11*time.Minute, Prepared{})}, terms.RunFailed, terms.FaultProvider, true},
		{"prepared after its end", []timed{took, at(time.Hour, Prepared{})}, terms.RunFailed, terms.FaultProvider, true},
		{"executor started at its end", []timed{took, at(time.Minute, Prepared{}), at(11*time.Minute, ExecStarted{}),
			deadline(11 * time.Minute), at(11*time.Minute, OutputsCollected{})}, terms.RunFailed, terms.FaultProvider, false},
		{"executor started late, before its end", []timed{took, at(time.Minute, Prepared{}), at(11*time.Minute-time.Millisecond, ExecStarted{}),
			deadline(11 * time.Minute), at(11*time.Minute, OutputsCollected{})}, terms.RunFailed, terms.FaultProvider, false},
		{"executor started within the slack", []timed{took, at(time.Minute, Prepared{}), at(time.Minute+LateStartSlack, ExecStarted{}),
			deadline(11 * time.Minute), at(11*time.Minute, OutputsCollected{})}, terms.RunExpired, terms.FaultJob, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, effs := run(t, rules, append([]timed{confirmed()}, tc.steps...)...)
			if st.Phase != Reporting || st.Run != tc.run || st.Fault != tc.fault {
				t.Fatalf("phase %s run %s fault %q: %q", st.Phase, st.Run, st.Fault, st.Detail)
			}
			if tc.fault == terms.FaultProvider && !strings.Contains(st.Detail, "lease was over") && !strings.Contains(st.Detail, "slow start") {
				t.Fatalf("detail %q", st.Detail)
			}
			if late := counted(effs, "provider.lease_begun_late") == 1; late != tc.late || late == has(effs, StartExecutor{}) {
				t.Fatalf("counted late %v, executor asked to start %v", late, has(effs, StartExecutor{}))
			}
			if !has(effs, Free{}) || !has(effs, SendReport{}) {
				t.Fatalf("devices not freed or not reported: %#v", effs)
			}
		})
	}
}

func TestStepStops(t *testing.T) {
	cancel := StopRequested{As: terms.RunCancelled, Detail: "cancelled by the renter"}
	preempt := StopRequested{As: terms.RunPreempted, Detail: "preempted"}
	shutdown := StopRequested{As: terms.RunFailed, Detail: ShutdownDetail}
	t.Run("waiting: ended ahead, settled with no receipt", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(), at(10*time.Second, cancel), at(10*time.Second, ReportDelivered{}))
		if st.Phase != Settled || st.Run != terms.RunCancelled || !st.Started.IsZero() || has(effs, SendReceipt{}) {
			t.Fatalf("%+v %#v", st, effs)
		}
		if !st.Ended.Equal(t0.Add(10 * time.Second)) {
			t.Fatalf("ended %v", st.Ended)
		}
	})
	t.Run("preparing: cancelled, then fails as stopped", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(), at(time.Minute, TimerDue{}), at(70*time.Second, cancel))
		if st.Phase != Preparing || !has(effs, CancelPrepare{}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
		st, _ = rules.Step(st, Failed{Exit{Code: -1, Started: t0.Add(71 * time.Second), Ended: t0.Add(71 * time.Second), Err: "inputs: context canceled"}}, t0.Add(71*time.Second))
		if st.Run != terms.RunCancelled || st.Fault != terms.FaultNone || st.Detail != "cancelled by the renter" {
			t.Fatalf("%s %s %q", st.Run, st.Fault, st.Detail)
		}
	})
	t.Run("starting: stopped once it started", func(t *testing.T) {
		st, _ := run(t, rules, confirmed(), at(time.Minute, TimerDue{}), at(time.Minute, Prepared{}), at(61*time.Second, preempt))
		st, effs := rules.Step(st, ExecStarted{}, t0.Add(62*time.Second))
		if st.Phase != Stopping || !has(effs, StopExecutor{Grace: rules.Grace}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
	})
	t.Run("running: preempted, snapshotted, first stop wins", func(t *testing.T) {
		st, effs := run(t, rules, append(ran(), at(2*time.Minute, preempt), at(2*time.Minute, cancel))...)
		if st.Phase != Stopping || st.Stop.As != terms.RunPreempted {
			t.Fatalf("%s %+v", st.Phase, st.Stop)
		}
		n := 0
		for _, e := range effs {
			if _, ok := e.(StopExecutor); ok {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("stopped %d times", n)
		}
		st, effs = rules.Step(st, Exited{Exit{Started: t0.Add(61 * time.Second), Ended: t0.Add(2 * time.Minute), Code: 143, How: HowOther, Reason: "stopped"}}, t0.Add(2*time.Minute))
		if !has(effs, Snapshot{}) || !has(effs, CollectOutputs{}) || st.Run != terms.RunRunning {
			t.Fatalf("%s %#v", st.Run, effs)
		}
		st, _ = rules.Step(st, OutputsCollected{}, t0.Add(2*time.Minute))
		if st.Run != terms.RunPreempted || st.Fault != terms.FaultNone {
			t.Fatalf("%s %s", st.Run, st.Fault)
		}
	})
	t.Run("shutdown is the provider's fault", func(t *testing.T) {
		st, _ := run(t, rules, append(ran(), at(2*time.Minute, shutdown),
			at(2*time.Minute, Exited{Exit{Started: t0.Add(61 * time.Second), Ended: t0.Add(2 * time.Minute), Code: -1, How: HowOther, Reason: "stopped"}}),
			at(2*time.Minute, OutputsCollected{}))...)
		if st.Run != terms.RunFailed || st.Fault != terms.FaultProvider || st.Detail != ShutdownDetail {
			t.Fatalf("%s %s %q", st.Run, st.Fault, st.Detail)
		}
	})
	t.Run("a stop that is not a terminal state is ignored", func(t *testing.T) {
		st, effs := run(t, rules, append(ran(), at(2*time.Minute, StopRequested{As: terms.RunRunning}), at(2*time.Minute, StopRequested{As: "bogus"}))...)
		if st.Stop != nil || has(effs, StopExecutor{Grace: rules.Grace}) {
			t.Fatalf("%+v", st.Stop)
		}
	})
	t.Run("parked on keep, then deaf", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(), at(10*time.Second, Keep{}), at(10*time.Second, shutdown), at(time.Minute, TimerDue{}))
		if st.Phase != Parked || !has(effs, Park{}) || st.Stop != nil || st.Run != terms.RunPending {
			t.Fatalf("%s %+v", st.Phase, st.Stop)
		}
	})
	t.Run("keep after the start is refused", func(t *testing.T) {
		st, effs := run(t, rules, append(ran(), at(2*time.Minute, Keep{}))...)
		if st.Phase != Running || has(effs, Park{}) {
			t.Fatalf("%s", st.Phase)
		}
	})
}

func TestStepMove(t *testing.T) {
	moved := testLease()
	moved.Start, moved.End = t0.Add(20*time.Second), t0.Add(10*time.Minute+20*time.Second)
	t.Run("told", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(), at(10*time.Second, Moved{Lease: moved}))
		if !has(effs, AnnounceMove{Lease: st.Lease}) || st.Told == nil || !st.Told.Start.Equal(t0.Add(time.Minute)) {
			t.Fatalf("%+v %#v", st.Told, effs)
		}
		if st2, effs := rules.Step(st, TimerDue{}, t0.Add(30*time.Second)); st2.Phase != Waiting || len(effs) != 0 {
			t.Fatalf("began before its move was told: %s", st2.Phase)
		}
		st, effs = rules.Step(st, MoveTold{Lease: st.Lease}, t0.Add(11*time.Second))
		if st.Told != nil || !has(effs, ArmTimer{At: moved.Start}) {
			t.Fatalf("%+v %#v", st.Told, effs)
		}
		st, _ = rules.Step(st, TimerDue{}, moved.Start)
		if st.Phase != Preparing {
			t.Fatalf("%s", st.Phase)
		}
		if _, effs := rules.Step(st, Moved{Lease: moved}, moved.Start); len(effs) != 0 {
			t.Fatal("a begun lease moved")
		}
	})
	t.Run("untold", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(), at(10*time.Second, Moved{Lease: moved}), at(11*time.Second, MoveUntold{Err: "unreachable"}),
			at(11*time.Second, ReportDelivered{}))
		if st.Phase != Settled || st.Run != terms.RunFailed || !st.Lease.Start.Equal(t0.Add(time.Minute)) || counted(effs, "provider.move_untold") != 1 {
			t.Fatalf("%s %s %v", st.Phase, st.Run, st.Lease.Start)
		}
		if !strings.Contains(st.Detail, "renter not told") || !st.EndedAhead() {
			t.Fatalf("%q", st.Detail)
		}
	})
	t.Run("another lease id is refused", func(t *testing.T) {
		other := moved
		other.ID = "l2"
		st, effs := run(t, rules, confirmed(), at(10*time.Second, Moved{Lease: other}))
		if len(effs) != 2 || st.Told != nil { // Confirmed's only
			t.Fatalf("%#v", effs)
		}
	})
}

func TestStepSettlement(t *testing.T) {
	ended := append(ran(), at(5*time.Minute, Exited{Exit{Started: t0.Add(61 * time.Second), Ended: t0.Add(5 * time.Minute), How: HowExited, Reason: "exited"}}),
		at(5*time.Minute, OutputsCollected{}))
	t.Run("retries double to the max", func(t *testing.T) {
		st, _ := run(t, rules, ended...)
		now := t0.Add(5 * time.Minute)
		var waits []time.Duration
		var effs []Effect
		for i := 0; i < 6; i++ {
			st, effs = rules.Step(st, ReportFailed{Err: "unreachable"}, now)
			if st.Phase != Retrying {
				t.Fatalf("%s", st.Phase)
			}
			waits = append(waits, st.Due.Sub(now))
			if i > 0 && counted(effs, "provider.settle_retry") != 1 {
				t.Fatalf("retry %d not counted", i)
			}
			now = st.Due
			st, effs = rules.Step(st, TimerDue{}, now)
			if st.Phase != Reporting || !has(effs, SendReport{}) {
				t.Fatalf("%s %#v", st.Phase, effs)
			}
		}
		want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second, 40 * time.Second}
		if !reflect.DeepEqual(waits, want) {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	})
	t.Run("given up after the window", func(t *testing.T) {
		st, _ := run(t, rules, ended...)
		st, effs := rules.Step(st, ReportFailed{Err: "x"}, testLease().End.Add(rules.SettleWindow+time.Second))
		if st.Phase != Abandoned || counted(effs, "provider.settle_abandoned") != 1 || has(effs, SendReport{}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
	})
	t.Run("a retry due after the window is not sent", func(t *testing.T) {
		st, _ := run(t, rules, ended...)
		st, _ = rules.Step(st, ReportFailed{Err: "x"}, t0.Add(5*time.Minute))
		st, effs := rules.Step(st, TimerDue{}, testLease().End.Add(rules.SettleWindow+time.Second))
		if st.Phase != Abandoned || has(effs, SendReport{}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
	})
	t.Run("disputed after max refusals", func(t *testing.T) {
		st, _ := run(t, rules, append(ended, at(5*time.Minute, ReportDelivered{}))...)
		now := t0.Add(5 * time.Minute)
		var effs []Effect
		for i := 1; i <= rules.MaxRefusals; i++ {
			st, effs = rules.Step(st, ReceiptRefused{Err: "span"}, now)
			if i < rules.MaxRefusals {
				now = st.Due
				st, _ = rules.Step(st, TimerDue{}, now)
				st, _ = rules.Step(st, ReportDelivered{}, now)
			}
		}
		if st.Phase != Disputed || !strings.Contains(st.Dispute, "refused 3 times") || counted(effs, "provider.settle_disputed") != 1 {
			t.Fatalf("%s %q %#v", st.Phase, st.Dispute, effs)
		}
		if !has(effs, RecordDispute{Reason: st.Dispute}) {
			t.Fatalf("%#v", effs)
		}
	})
	t.Run("no-persist purged once settled", func(t *testing.T) {
		c := confirmed()
		c.ev = Confirmed{Lease: testLease(), Job: terms.Job{NoPersist: true}}
		st, effs := run(t, rules, c, at(time.Second, StopRequested{As: terms.RunCancelled}), at(time.Second, ReportDelivered{}))
		if st.Phase != Settled || !has(effs, Purge{}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
	})
}

func TestStepRestarted(t *testing.T) {
	t.Run("pending ahead is booked again", func(t *testing.T) {
		st, _ := run(t, rules, confirmed(), at(time.Second, Prepared{}))
		st, effs := rules.Step(st, Restarted{}, t0.Add(10*time.Second))
		if st.Phase != Waiting || !has(effs, Rebook{}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
		st2, effs := rules.Step(st, Rebooked{}, t0.Add(10*time.Second))
		if !has(effs, ArmTimer{At: t0.Add(time.Minute)}) || counted(effs, "provider.reservation_restored") != 1 || st2.Phase != Waiting {
			t.Fatalf("%#v", effs)
		}
		st3, effs := rules.Step(st, RebookFailed{Err: "taken"}, t0.Add(10*time.Second))
		if st3.Run != terms.RunFailed || !has(effs, KillOrphan{}) {
			t.Fatalf("%s", st3.Run)
		}
	})
	t.Run("running is reported failed at its last beat", func(t *testing.T) {
		st, _ := run(t, rules, ran()...)
		st, effs := rules.Step(st, Restarted{LastBeat: t0.Add(3 * time.Minute)}, t0.Add(time.Hour))
		if st.Run != terms.RunFailed || st.Fault != terms.FaultProvider || !st.Ended.Equal(t0.Add(3*time.Minute)) ||
			!strings.Contains(st.Detail, "while the job was running") || st.Phase != Retrying {
			t.Fatalf("%+v", st)
		}
		if !has(effs, KillOrphan{}) || !has(effs, ArmTimer{At: t0.Add(time.Hour + rules.RecoverDelay)}) {
			t.Fatalf("%#v", effs)
		}
	})
	t.Run("legacy record without a phase", func(t *testing.T) {
		st := Lease{Lease: testLease(), Run: terms.RunSucceeded, Started: t0.Add(time.Minute), Ended: t0.Add(2 * time.Minute)}
		st, effs := rules.Step(st, Restarted{}, t0.Add(time.Hour))
		if st.Phase != Retrying || !has(effs, ArmTimer{At: t0.Add(time.Hour + rules.RecoverDelay)}) {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
		disputed := Lease{Lease: testLease(), Run: terms.RunFailed, Dispute: "refused"}
		if st, effs := rules.Step(disputed, Restarted{}, t0.Add(time.Hour)); st.Phase != Disputed || len(effs) != 0 {
			t.Fatalf("%s %#v", st.Phase, effs)
		}
	})
}

func TestConfirmedHostile(t *testing.T) {
	for _, l := range []terms.Lease{{}, {ID: "x", Start: t0, End: t0}, {ID: "x", Start: t0, End: t0.Add(-time.Hour)}} {
		if st, effs := rules.Step(Lease{}, Confirmed{Lease: l}, t0); st.Phase != "" || len(effs) != 0 {
			t.Fatalf("%+v confirmed: %s", l, st.Phase)
		}
	}
	// Any other event on a zero state does nothing.
	if st, effs := rules.Step(Lease{}, TimerDue{}, t0); st.Phase != "" || len(effs) != 0 {
		t.Fatal("timer on nothing")
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		e     Exit
		stop  *Stop
		run   terms.RunState
		fault terms.Fault
	}{
		{Exit{How: HowExited, Reason: "exited"}, nil, terms.RunSucceeded, terms.FaultNone},
		{Exit{How: HowExited, Reason: "exited", Code: 3}, nil, terms.RunFailed, terms.FaultJob},
		{Exit{How: HowDeadline, Reason: "deadline"}, nil, terms.RunExpired, terms.FaultJob},
		{Exit{How: HowOOM, Reason: "oom"}, nil, terms.RunFailed, terms.FaultJob},
		{Exit{Err: "no such image", SpecFault: true}, nil, terms.RunFailed, terms.FaultJob},
		{Exit{Err: "docker down"}, nil, terms.RunFailed, terms.FaultProvider},
		{Exit{How: HowOther, Reason: "signaled"}, nil, terms.RunFailed, terms.FaultProvider},
		{Exit{How: HowExited, Reason: "exited"}, &Stop{As: terms.RunCancelled}, terms.RunCancelled, terms.FaultNone},
		{Exit{How: HowExited, Reason: "exited"}, &Stop{As: terms.RunFailed}, terms.RunFailed, terms.FaultProvider},
	} {
		if run, _, fault := Classify(tc.e, tc.stop); run != tc.run || fault != tc.fault {
			t.Errorf("%+v %+v: %s %s, want %s %s", tc.e, tc.stop, run, fault, tc.run, tc.fault)
		}
	}
}

func TestBackfillGapEndIsPreemption(t *testing.T) {
	c := Confirmed{Lease: testLease(), Job: terms.Job{Duration: time.Hour, Preemptible: true}}
	st, effs := run(t, rules, at(0, c), at(time.Minute, TimerDue{}), at(time.Minute, Prepared{}), at(time.Minute, ExecStarted{}),
		at(11*time.Minute, Exited{Exit{Started: t0.Add(time.Minute), Ended: t0.Add(11 * time.Minute), How: HowDeadline, Reason: "deadline"}}),
		at(11*time.Minute, OutputsCollected{}))
	if st.Run != terms.RunPreempted || !has(effs, Snapshot{}) {
		t.Fatalf("%s %#v", st.Run, effs)
	}
}

func TestReceiptSpan(t *testing.T) {
	l := testLease()
	for _, tc := range []struct{ started, ended, wantS, wantE time.Time }{
		{l.Start.Add(time.Second), l.Start.Add(time.Minute), l.Start.Add(time.Second), l.Start.Add(time.Minute)},
		{l.Start.Add(-time.Second), l.End.Add(time.Second), l.Start, l.End},
		{time.Time{}, time.Time{}, l.Start, l.Start.Add(time.Millisecond)},
		{l.End.Add(time.Minute), l.End.Add(time.Minute), l.End.Add(-time.Millisecond), l.End},
	} {
		if s, e := ReceiptSpan(l, tc.started, tc.ended); !s.Equal(tc.wantS) || !e.Equal(tc.wantE) {
			t.Errorf("%v..%v: %v..%v, want %v..%v", tc.started, tc.ended, s, e, tc.wantS, tc.wantE)
		}
	}
	tiny := terms.Lease{Start: t0, End: t0.Add(time.Microsecond)}
	if s, e := ReceiptSpan(tiny, t0, t0); !s.Equal(t0) || !e.Equal(tiny.End) {
		t.Errorf("tiny lease: %v..%v", s, e)
	}
}

// TestStepReportReleased: a renter that answers the final report with its
// release ends the settlement at once: settled with nothing billed when
// the lease never ran, disputed (never a silent zero) when its job ran.
func TestStepReportReleased(t *testing.T) {
	t.Run("ahead of its start", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(),
			at(10*time.Second, StopRequested{As: terms.RunCancelled, Detail: "cancelled by the renter"}),
			at(11*time.Second, ReportReleased{}))
		if st.Phase != Settled || st.Dispute != "" || st.Due != (time.Time{}) {
			t.Fatalf("state %+v", st)
		}
		for _, e := range effs {
			switch e.(type) {
			case SendReceipt, RecordDispute:
				t.Fatalf("effect %#v for a lease that never ran", e)
			}
		}
		if counted(effs, "provider.settle_released") != 1 || counted(effs, "provider.settle_retry") != 0 {
			t.Fatalf("effects %+v", effs)
		}
	})
	t.Run("stopped while preparing", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(), at(time.Minute, TimerDue{}),
			at(time.Minute+time.Second, StopRequested{As: terms.RunCancelled, Detail: "cancelled by the renter"}),
			at(time.Minute+2*time.Second, Failed{Exit{Code: -1, Err: "preparation cancelled"}}),
			at(time.Minute+3*time.Second, ReportReleased{}))
		if st.Phase != Settled || st.Dispute != "" || has(effs, RecordDispute{Reason: ReleasedDispute}) {
			t.Fatalf("state %+v", st)
		}
	})
	t.Run("after a failed try", func(t *testing.T) {
		st, effs := run(t, rules, confirmed(),
			at(10*time.Second, StopRequested{As: terms.RunCancelled}),
			at(11*time.Second, ReportFailed{Err: "unreachable"}),
			at(16*time.Second, TimerDue{}),
			at(16*time.Second, ReportReleased{}))
		if st.Phase != Settled || st.Failures != 0 || !st.Due.IsZero() {
			t.Fatalf("state %+v", st)
		}
		if counted(effs, "provider.settle_released") != 1 {
			t.Fatalf("effects %+v", effs)
		}
	})
	t.Run("the job ran", func(t *testing.T) {
		// A hostile renter that watched the run and then says it released
		// the lease: the provider's ledger shows a dispute.
		steps := append(ran(),
			at(3*time.Minute, Exited{Exit{Started: t0.Add(61 * time.Second), Ended: t0.Add(3 * time.Minute), Code: 0, How: HowExited, Reason: "exited"}}),
			at(3*time.Minute, OutputsCollected{}),
			at(3*time.Minute, ReportReleased{}))
		st, effs := run(t, rules, steps...)
		if st.Phase != Disputed || st.Dispute != ReleasedDispute || !has(effs, RecordDispute{Reason: ReleasedDispute}) {
			t.Fatalf("state %+v, effects %+v", st, effs)
		}
		if counted(effs, "provider.settle_disputed") != 1 {
			t.Fatalf("effects %+v", effs)
		}
		// Final: nothing more happens to it.
		if st2, effs2 := rules.Step(st, ReportReleased{}, t0.Add(4*time.Minute)); !reflect.DeepEqual(st2, st) || len(effs2) != 0 {
			t.Fatalf("after final: %+v, %+v", st2, effs2)
		}
	})
	t.Run("out of phase", func(t *testing.T) {
		// Only an answer to a report counts: a running or receipting lease
		// ignores it.
		st, effs := run(t, rules, append(ran(), at(2*time.Minute, ReportReleased{}))...)
		if st.Phase != Running || counted(effs, "provider.settle_released") != 0 {
			t.Fatalf("state %+v", st)
		}
		steps := append(ran(),
			at(3*time.Minute, Exited{Exit{Started: t0.Add(61 * time.Second), Ended: t0.Add(3 * time.Minute), Code: 0, How: HowExited, Reason: "exited"}}),
			at(3*time.Minute, OutputsCollected{}),
			at(3*time.Minute, ReportDelivered{}),
			at(3*time.Minute, ReportReleased{}))
		if st, _ := run(t, rules, steps...); st.Phase != Receipting {
			t.Fatalf("state %+v", st)
		}
	})
}
