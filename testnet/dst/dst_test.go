package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSeeds is the campaign `make test` runs: 500 seeds of the default
// world, none breaking an invariant.
func TestSeeds(t *testing.T) {
	n := uint64(500)
	if testing.Short() {
		n = 50
	}
	sum := Campaign(DefaultConfig(), 1, n, 2)
	for _, v := range sum.Violations {
		t.Errorf("%v\n  %s", v, strings.Join(v.Tail, "\n  "))
	}
	st := sum.Stats
	t.Logf("%d seeds, %d steps, trace hash %s; %d jobs: %d unplaceable, %d cancelled, %d requeues, %d rebooked; runs: %d succeeded, %d failed; %d settled, %d refused, %d crashes",
		n, sum.Steps, sum.TraceHash, st.Jobs, st.Unplaceable, st.Cancelled, st.Requeued, st.Rebooked, st.Finished, st.Failed, st.Settled, st.Refused, st.Crashes)
	// The world must do what the invariants are about, or they hold
	// vacuously.
	if st.Finished == 0 || st.Failed == 0 || st.Unplaceable == 0 || st.Cancelled == 0 || st.Requeued == 0 || st.Rebooked == 0 || st.Settled == 0 || st.Refused == 0 || st.Crashes == 0 || st.Partitions == 0 || st.Duplicated == 0 {
		t.Errorf("a campaign without every kind of outcome and fault: %+v", st)
	}
}

// TestReplay: a seed replays byte for byte (its whole trace), another
// seed does not, and a campaign's hash does not depend on how many seeds
// run at once.
func TestReplay(t *testing.T) {
	trace := func(seed uint64) (string, string) {
		var buf bytes.Buffer
		res := newSim(DefaultConfig(), seed, &buf).run()
		if res.Violation != nil {
			t.Fatal(res.Violation)
		}
		return res.TraceHash, buf.String()
	}
	h1, t1 := trace(7)
	h2, t2 := trace(7)
	if h1 != h2 || t1 != t2 {
		t.Fatalf("seed 7 twice: hashes %s and %s, traces equal %v", h1, h2, t1 == t2)
	}
	if h3, _ := trace(8); h3 == h1 {
		t.Fatal("seeds 7 and 8 have one trace hash")
	}
	if strings.Count(t1, "\n") < 100 {
		t.Fatalf("seed 7's trace is %d lines: the world did little", strings.Count(t1, "\n"))
	}
	one := Campaign(DefaultConfig(), 100, 20, 1)
	four := Campaign(DefaultConfig(), 100, 20, 4)
	if one.TraceHash != four.TraceHash {
		t.Fatalf("20 seeds on 1 worker hash %s, on 4 %s", one.TraceHash, four.TraceHash)
	}
}

// TestCommand runs the command as a user does, and with bad arguments.
func TestCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := Main([]string{"-seeds", "3", "-from", "10"}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s%s", rc, out.String(), errb.String())
	}
	if !strings.HasPrefix(out.String(), "3 seeds, 0 violations, trace hash ") {
		t.Fatalf("output %q", out.String())
	}
	var a, b bytes.Buffer
	Main([]string{"-seed", "10"}, &a, &errb)
	Main([]string{"-seed", "10"}, &b, &errb)
	if a.String() != b.String() || !strings.Contains(a.String(), "trace hash") {
		t.Fatalf("-seed 10 twice: %q and %q", a.String(), b.String())
	}
	for _, args := range [][]string{
		{}, {"-seeds", "2", "-seed", "3"}, {"-seeds", "x"}, {"-seed", "-1"}, {"stray"}, {"-seeds", "1", "-workers", "0"},
		{"-seeds", "18446744073709551615", "-from", "2"},
	} {
		out.Reset()
		errb.Reset()
		if rc := Main(args, &out, &errb); rc != 2 {
			t.Errorf("%q: exit %d, want 2", args, rc)
		}
		if errb.Len() == 0 {
			t.Errorf("%q: no error said", args)
		}
	}
}

// TestSeedOneSettlementAgrees: seed 1 is where the simulator found a
// provider disputing a lease its renter had settled (see
// TestBreakReissuedReceipt); it must stay clean.
func TestSeedOneSettlementAgrees(t *testing.T) {
	if res := newSim(DefaultConfig(), 1, nil).run(); res.Violation != nil {
		t.Fatalf("%v\n  %s", res.Violation, strings.Join(res.Violation.Tail, "\n  "))
	}
}

// TestReceiptJudgedAsRecorded: seeds a 30,000-seed campaign reported as
// billed-beyond-seen, because the check judged receipts recorded long
// before against the renter's later, better estimate of its provider's
// clock (an honest provider billing from its job's start, 0.8 s before
// its renter heard of it, on 2 GPUs). A receipt is judged once, as it is
// recorded, against what its renter knew then.
func TestReceiptJudgedAsRecorded(t *testing.T) {
	for _, seed := range []uint64{201958, 220470, 221746, 222442} {
		if res := newSim(DefaultConfig(), seed, nil).run(); res.Violation != nil {
			t.Fatalf("%v\n  %s", res.Violation, strings.Join(res.Violation.Tail, "\n  "))
		}
	}
}
