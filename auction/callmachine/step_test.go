package callmachine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

var (
	t0    = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rules = Rules{QuietClose: 150 * time.Millisecond}
	job   = terms.Job{ID: "job-1", Attempt: 2, Tier: terms.Silver, BidWindow: time.Second}
)

func bid(provider, nonce string) terms.Bid {
	return terms.Bid{JobID: job.ID, Attempt: job.Attempt, Provider: provider, Nonce: nonce, ExpiresAt: t0.Add(time.Minute)}
}

func decline(provider, kind string) terms.Decline {
	return terms.Decline{JobID: job.ID, Attempt: job.Attempt, Provider: provider, Kind: kind}
}

// run steps a fresh call through evs and returns the state and every
// step's effects.
func run(r Rules, evs ...Event) (State, [][]Effect) {
	var st State
	var all [][]Effect
	for _, ev := range evs {
		var effs []Effect
		st, effs = r.Step(st, ev, t0)
		all = append(all, effs)
	}
	return st, all
}

// in returns a call brought to phase p (a bid taken from p1, p2 and p3
// expected).
func in(p Phase) State {
	evs := map[Phase][]Event{
		"":         nil,
		Collecting: {Opened{Job: job, Expected: []string{"p1", "p2", "p3"}}, BidArrived{Bid: bid("p1", "n1")}},
		Awarding:   {Opened{Job: job, Expected: []string{"p1", "p2", "p3"}}, BidArrived{Bid: bid("p1", "n1")}, TimerFired{Timer: WindowTimer, Seq: 1}},
		Done: {Opened{Job: job, Expected: []string{"p1", "p2", "p3"}}, BidArrived{Bid: bid("p1", "n1")}, TimerFired{Timer: WindowTimer, Seq: 1},
			NoLease{Reason: "no eligible bids"}},
	}[p]
	st, _ := run(rules, evs...)
	if st.Phase != p {
		panic(fmt.Sprintf("in(%q): got %q", p, st.Phase))
	}
	return st
}

func kinds(effs []Effect) string {
	var out []string
	for _, e := range effs {
		out = append(out, strings.TrimPrefix(fmt.Sprintf("%T", e), "callmachine."))
	}
	return strings.Join(out, ",")
}

// TestStepPhaseByEvent: every event in every phase moves the call where
// the package doc says, asking for exactly these effects.
func TestStepPhaseByEvent(t *testing.T) {
	events := []struct {
		name string
		ev   Event
	}{
		{"opened", Opened{Job: job}},
		{"bid", BidArrived{Bid: bid("p2", "n2")}},
		{"decline", DeclineArrived{Decline: decline("p2", "price")}},
		{"unreached", Unreached{Provider: "p2"}},
		{"measured", Measured{}},
		{"window", TimerFired{Timer: WindowTimer, Seq: 1}},
		{"quiet", TimerFired{Timer: QuietTimer, Seq: 1}},
		{"best", BestChecked{StartsNow: true}},
		{"leased", Leased{Lease: terms.Lease{ID: "lease-1", Provider: "p1"}}},
		{"nolease", NoLease{Reason: "no bids"}},
		{"failed", Failed{Reason: "publish failed"}},
		{"cancelled", Cancelled{}},
		{"context", ContextDone{Err: "context canceled"}},
	}
	type want struct {
		phase Phase
		effs  string
	}
	// want[phase][event]: a missing entry changes nothing and asks for
	// nothing.
	wants := map[Phase]map[string]want{
		"": {
			"opened": {Collecting, "ArmTimer"},
			"bid":    {"", "Reject"},
			// (a decline for a call not opened: refused as for a closed window)
			"decline": {"", "Reject"},
		},
		Collecting: {
			"opened":    {Collecting, ""},
			"bid":       {Collecting, "Lookup,ArmTimer"},
			"decline":   {Collecting, ""},
			"unreached": {Collecting, ""},
			"measured":  {Collecting, "ArmTimer"},
			"window":    {Awarding, "Close"},
			"quiet":     {Collecting, ""}, // one of three expected answered: not most
			"best":      {Awarding, "Close"},
			"failed":    {Done, "Finish"},
			"cancelled": {Done, "Finish"},
			"context":   {Done, "Finish"},
		},
		Awarding: {
			"bid":       {Awarding, "Reject"},
			"decline":   {Awarding, "Reject"},
			"leased":    {Done, "Finish"},
			"nolease":   {Done, "Finish"},
			"failed":    {Done, "Finish"},
			"cancelled": {Done, "Finish"},
			"context":   {Done, "Finish"},
		},
		Done: {
			"bid":     {Done, "Reject"},
			"decline": {Done, "Reject"},
		},
	}
	for _, p := range Phases() {
		for _, e := range events {
			w, ok := wants[p][e.name]
			if !ok {
				w = want{p, ""}
			}
			st := in(p)
			before := st.Clone()
			next, effs := rules.Step(st, e.ev, t0)
			if next.Phase != w.phase || kinds(effs) != w.effs {
				t.Errorf("%q + %s: phase %q effects [%s], want %q [%s]", p, e.name, next.Phase, kinds(effs), w.phase, w.effs)
			}
			if len(effs) == 0 && e.name != "decline" && e.name != "unreached" && !reflect.DeepEqual(next, before) {
				t.Errorf("%q + %s: state changed without an effect", p, e.name)
			}
		}
	}
}

// TestStepWindow: the window's timer closes a window with bids, extends
// an empty one once, and a stale fire (an earlier arming) does nothing.
func TestStepWindow(t *testing.T) {
	st, all := run(rules, Opened{Job: job}, TimerFired{Timer: WindowTimer, Seq: 1})
	if st.Phase != Collecting || !st.Extended || !reflect.DeepEqual(all[1], []Effect{ArmTimer{Timer: WindowTimer, Seq: 2, After: job.BidWindow}}) {
		t.Fatalf("empty window: phase %q extended %v effects %#v", st.Phase, st.Extended, all[1])
	}
	st, effs := rules.Step(st, TimerFired{Timer: WindowTimer, Seq: 1}, t0)
	if len(effs) != 0 || st.Phase != Collecting {
		t.Fatalf("stale window fire: %q %#v", st.Phase, effs)
	}
	st, effs = rules.Step(st, TimerFired{Timer: WindowTimer, Seq: 2}, t0)
	if st.Phase != Awarding || kinds(effs) != "Close" {
		t.Fatalf("extended window's end, still empty: %q [%s], want it closed", st.Phase, kinds(effs))
	}
}

// TestStepQuiet: each bid starts a quiet spell; its end asks for the
// best bid's check once most expected providers answered, and the window
// closes only if the best bid starts now. A gold job checks at each bid;
// a negative QuietClose never closes early.
func TestStepQuiet(t *testing.T) {
	st, all := run(rules, Opened{Job: job, Expected: []string{"p1", "p2", "p3", "p4"}}, BidArrived{Bid: bid("p1", "n1")},
		TimerFired{Timer: QuietTimer, Seq: 1})
	if len(all[2]) != 0 {
		t.Fatalf("quiet after 1 of 4 answered: %#v", all[2])
	}
	st, effs := rules.Step(st, DeclineArrived{Decline: decline("p2", "busy"), Busy: true}, t0)
	if len(effs) != 0 || !st.BusyDecliner("p2") || st.Declines["busy"] != 1 {
		t.Fatalf("busy decline: %#v busy %v declines %v", effs, st.Busy, st.Declines)
	}
	st, effs = rules.Step(st, TimerFired{Timer: QuietTimer, Seq: 1}, t0)
	if !reflect.DeepEqual(effs, []Effect{CheckBest{}}) {
		t.Fatalf("quiet after 2 of 4 answered: %#v, want CheckBest", effs)
	}
	st, effs = rules.Step(st, BestChecked{StartsNow: false}, t0)
	if len(effs) != 0 || st.Phase != Collecting {
		t.Fatalf("best starts later: %q %#v, want the window open", st.Phase, effs)
	}
	st, effs = rules.Step(st, BidArrived{Bid: bid("p3", "n3")}, t0)
	if !reflect.DeepEqual(effs, []Effect{Lookup{Provider: "p3"}, ArmTimer{Timer: QuietTimer, Seq: 2, After: rules.QuietClose}}) {
		t.Fatalf("second bid: %#v", effs)
	}
	st, effs = rules.Step(st, TimerFired{Timer: QuietTimer, Seq: 1}, t0)
	if len(effs) != 0 {
		t.Fatalf("stale quiet fire: %#v", effs)
	}
	st, _ = rules.Step(st, TimerFired{Timer: QuietTimer, Seq: 2}, t0)
	if st, effs = rules.Step(st, BestChecked{StartsNow: true}, t0); st.Phase != Awarding || kinds(effs) != "Close" {
		t.Fatalf("best starts now: %q [%s]", st.Phase, kinds(effs))
	}

	gold := job
	gold.Tier = terms.Gold
	_, all = run(rules, Opened{Job: gold}, BidArrived{Bid: bid("p1", "n1")})
	if kinds(all[1]) != "Lookup,CheckBest,ArmTimer" {
		t.Fatalf("gold bid: [%s]", kinds(all[1]))
	}
	_, all = run(Rules{QuietClose: -1}, Opened{Job: gold}, BidArrived{Bid: bid("p1", "n1")}, Measured{})
	if kinds(all[1]) != "Lookup" || len(all[2]) != 0 {
		t.Fatalf("quiet close off: [%s] [%s]", kinds(all[1]), kinds(all[2]))
	}
}

// TestStepAllIn: the last expected answer (a bid, a decline, a provider
// not reached) closes the window at once.
func TestStepAllIn(t *testing.T) {
	st, all := run(rules, Opened{Job: job, Expected: []string{"p1", "p2", "p3"}}, BidArrived{Bid: bid("p1", "n1")},
		DeclineArrived{Decline: decline("p2", "price")}, Unreached{Provider: "p3"})
	if st.Phase != Awarding || kinds(all[3]) != "Close" {
		t.Fatalf("all answered: %q [%s]", st.Phase, kinds(all[3]))
	}
	st, all = run(rules, Opened{Job: job, Expected: []string{"p1"}}, BidArrived{Bid: bid("p1", "n1")})
	if st.Phase != Awarding || kinds(all[1]) != "Lookup,Close" {
		t.Fatalf("the one expected bid: %q [%s]", st.Phase, kinds(all[1]))
	}
	// Nobody expected: answers never close the window.
	st, _ = run(rules, Opened{Job: job}, BidArrived{Bid: bid("p1", "n1")}, Unreached{Provider: "p1"})
	if st.Phase != Collecting {
		t.Fatalf("nobody expected: %q", st.Phase)
	}
}

// TestStepAdmission: a bid is taken once per provider and nonce, for the
// call's attempt, unexpired; a decline once per provider that has not
// bid.
func TestStepAdmission(t *testing.T) {
	expired := bid("p4", "n4")
	expired.ExpiresAt = t0
	wrong := bid("p5", "n5")
	wrong.Attempt = 1
	cases := []struct {
		ev     Event
		reject string
	}{
		{BidArrived{Bid: bid("p2", "n2")}, ""},
		{BidArrived{Bid: bid("p3", "n1")}, "replayed_nonce"},
		{BidArrived{Bid: bid("p3", "")}, "replayed_nonce"},
		{BidArrived{Bid: bid("p1", "n9")}, "duplicate_provider"},
		{BidArrived{Bid: bid("p3", "n9")}, "replayed_nonce"}, // n9 was seen, though refused
		{BidArrived{Bid: expired}, "expired"},
		{BidArrived{Bid: wrong}, "wrong_attempt"},
		{DeclineArrived{Decline: decline("p1", "price")}, "duplicate_provider"},
		{DeclineArrived{Decline: decline("p6", "price")}, ""},
		{DeclineArrived{Decline: decline("p6", "vram")}, "duplicate_provider"},
		{DeclineArrived{Decline: terms.Decline{JobID: job.ID, Attempt: 1, Provider: "p7"}}, "window_closed"},
	}
	st := in(Collecting)
	for i, c := range cases {
		var effs []Effect
		st, effs = rules.Step(st, c.ev, t0)
		got := ""
		for _, e := range effs {
			if r, ok := e.(Reject); ok {
				got = r.Reason
			}
		}
		if got != c.reject {
			t.Errorf("case %d (%T): refused %q, want %q", i, c.ev, got, c.reject)
		}
	}
	if len(st.Bids) != 2 || st.Bids[1].Bid.Provider != "p2" || st.Declines["price"] != 1 {
		t.Fatalf("taken: %d bids, declines %v", len(st.Bids), st.Declines)
	}
}

// TestStepEnds: a call ends once, with its finish as the event says.
func TestStepEnds(t *testing.T) {
	l := terms.Lease{ID: "lease-1", Provider: "p1"}
	st, effs := rules.Step(in(Awarding), Leased{Lease: l}, t0)
	if f, ok := effs[0].(Finish); !ok || f.As != terms.JobLeased || f.Lease == nil || f.Lease.ID != l.ID || st.End != terms.JobLeased {
		t.Fatalf("leased: %#v", effs)
	}
	if _, effs = rules.Step(st, Cancelled{}, t0); len(effs) != 0 {
		t.Fatalf("cancelled after the lease: %#v", effs)
	}
	st, effs = rules.Step(in(Collecting), ContextDone{Err: "context deadline exceeded"}, t0)
	if !reflect.DeepEqual(effs, []Effect{Finish{As: terms.JobCancelled, Reason: "context: context deadline exceeded"}}) || st.Reason != "context: context deadline exceeded" {
		t.Fatalf("context: %#v", effs)
	}
	if _, effs = rules.Step(in(Collecting), Leased{Lease: l}, t0); len(effs) != 0 {
		t.Fatalf("a lease before the window closed: %#v", effs)
	}
}

// TestStepDeterministic: replaying the same events gives the same effects,
// byte for byte, and the same state.
func TestStepDeterministic(t *testing.T) {
	expected := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"}
	evs := []Event{Opened{Job: job, Expected: expected}}
	for i, p := range expected {
		switch i % 3 {
		case 0:
			evs = append(evs, BidArrived{Bid: bid(p, "n"+p)}, TimerFired{Timer: QuietTimer, Seq: i/3 + 1}, BestChecked{})
		case 1:
			evs = append(evs, DeclineArrived{Decline: decline(p, []string{"price", "busy", "vram"}[i%3]), Busy: i%2 == 0})
		case 2:
			evs = append(evs, Unreached{Provider: p}, Measured{})
		}
	}
	evs = append(evs, Leased{Lease: terms.Lease{ID: "lease-1", Provider: "p1"}}, Cancelled{})
	enc := func() ([]byte, State) {
		st, all := run(rules, evs...)
		var b []byte
		for _, effs := range all {
			for _, e := range effs {
				j, err := json.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				b = fmt.Appendf(b, "%T%s;", e, j)
			}
			b = append(b, '\n')
		}
		return b, st
	}
	a, sa := enc()
	for range 20 {
		b, sb := enc()
		if string(a) != string(b) || !reflect.DeepEqual(sa, sb) {
			t.Fatalf("replay differs:\n%s\n%s", a, b)
		}
	}
	if !strings.Contains(string(a), "callmachine.Close") || !strings.Contains(string(a), `"As":"leased"`) {
		t.Fatalf("the replay did not close and lease:\n%s", a)
	}
}
