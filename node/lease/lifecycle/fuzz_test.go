package lifecycle

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// event decodes one byte pair of fuzz input into an event (and how far the
// clock moves before it).
func event(b, c byte, l terms.Lease) (Event, time.Duration) {
	d := time.Duration(c) * 7 * time.Second
	if c > 250 {
		d = time.Duration(c) * time.Hour // past the settlement window
	}
	exit := Exit{Started: l.Start.Add(time.Duration(c) * time.Second), Ended: l.Start.Add(time.Duration(c) * 5 * time.Second), Code: int(c%3) - 1,
		How: []How{HowExited, HowDeadline, HowOOM, HowOther, ""}[c%5], Reason: "r", SpecFault: c%2 == 0}
	if c%4 == 0 {
		exit.Err, exit.Reason = "err", ""
	}
	moved := l
	moved.Start = l.Start.Add(-time.Duration(c) * time.Second)
	evs := []Event{
		Moved{Lease: moved}, MoveTold{Lease: moved}, MoveUntold{Err: "x"}, TimerDue{}, TimerDue{}, TimerDue{},
		StopRequested{As: terms.RunStates()[c%7], Detail: "d"}, Keep{}, Prepared{}, ExecStarted{Backend: "b"},
		Failed{Exit: exit}, Exited{Exit: exit}, OutputsCollected{}, ReportDelivered{}, ReportFailed{Err: "x"}, ReportReleased{},
		ReceiptCountersigned{}, ReceiptRefused{Err: "x"}, ReceiptFailed{Err: "x"}, Restarted{LastBeat: exit.Ended},
		Rebooked{}, RebookFailed{Err: "x"}, Confirmed{Lease: l},
	}
	return evs[int(b)%len(evs)], d
}

// FuzzStep drives the machine with random event sequences: it never
// panics, never moves a run state back, ends and settles a lease at most
// once, asks for nothing once settled, sends no receipt after the
// settlement window, and bills only inside the lease and the run.
func FuzzStep(f *testing.F) {
	f.Add([]byte{3, 0, 8, 0, 9, 10, 11, 200, 12, 0, 13, 0, 15, 0})
	f.Add([]byte{0, 5, 1, 5, 3, 60, 6, 3, 13, 0})
	f.Add([]byte{3, 9, 8, 0, 9, 0, 16, 0, 16, 0, 16, 0, 14, 0, 3, 255})
	f.Add([]byte{18, 0, 20, 0, 3, 0, 7, 0, 3, 30})
	f.Fuzz(checkSequence)
}

// TestRandomSequences runs the fuzz test's checks on many random event
// sequences (a fixed seed: the same ones each run).
func TestRandomSequences(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		in := make([]byte, 2*(1+rnd.IntN(40)))
		for j := range in {
			in[j] = byte(rnd.UintN(256))
		}
		checkSequence(t, in)
	}
}

func checkSequence(t *testing.T, in []byte) {
	l := testLease()
	now := t0
	st, _ := rules.Step(Lease{}, Confirmed{Lease: l, Job: terms.Job{Duration: 5 * time.Minute, Preemptible: len(in)%2 == 0}}, now)
	ends, finals := 0, 0
	for i := 0; i+1 < len(in); i += 2 {
		ev, d := event(in[i], in[i+1], st.Lease)
		now = now.Add(d)
		prev := st
		next, effs := rules.Step(st, ev, now)
		if next.Run != prev.Run && !next.Run.Follows(prev.Run) {
			if _, restarted := ev.(Restarted); !restarted || prev.Run.Terminal() {
				t.Fatalf("%T moved %s back to %s", ev, prev.Run, next.Run)
			}
		}
		if prev.Phase.Final() && (len(effs) > 0 || next.Phase != prev.Phase) {
			t.Fatalf("%T after %s: %s %#v", ev, prev.Phase, next.Phase, effs)
		}
		if !prev.Run.Terminal() && next.Run.Terminal() {
			ends++
		}
		if !prev.Phase.Final() && next.Phase.Final() {
			finals++
		}
		for _, e := range effs {
			r, ok := e.(SendReceipt)
			if !ok {
				continue
			}
			if now.After(next.Lease.End.Add(rules.SettleWindow)) {
				t.Fatalf("receipt sent after the settlement window at %v", now)
			}
			if !r.End.After(r.Start) || r.Start.Before(next.Lease.Start) || r.End.After(next.Lease.End) {
				t.Fatalf("receipt %v..%v outside lease %v..%v", r.Start, r.End, next.Lease.Start, next.Lease.End)
			}
			if next.Ended.Sub(next.Started) > time.Millisecond && next.Started.Before(next.Lease.End) && next.Ended.After(next.Lease.Start) &&
				(r.Start.Before(next.Started) || r.End.After(next.Ended)) {
				t.Fatalf("receipt %v..%v outside the run %v..%v", r.Start, r.End, next.Started, next.Ended)
			}
			if next.Ended.Before(next.Started) {
				t.Fatalf("run ends before it starts: %v..%v", next.Started, next.Ended)
			}
		}
		st = next
	}
	if ends > 1 || finals > 1 {
		t.Fatalf("ended %d times, settled %d times", ends, finals)
	}
}
