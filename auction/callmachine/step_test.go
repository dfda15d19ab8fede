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
			Ranked{}},
	}[p]
	st, _ := run(rules, evs...)
	if st.Phase != p {
		panic(fmt.Sprintf("in(%q): got %q", p, st.Phase))
	}
	return st
}

// ranks is bids ranked in that order, all eligible.
func ranks(bids ...terms.Bid) []terms.Ranked {
	out := make([]terms.Ranked, len(bids))
	for i, b := range bids {
		out[i] = terms.Ranked{Candidate: terms.Candidate{Bid: b}, Score: float64(len(bids) - i)}
	}
	return out
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
		{"ranked", Ranked{Ranked: ranks(bid("p1", "n1"))}},
		{"awarddone", AwardDone{Try: 0, Result: Confirmed, Lease: terms.Lease{ID: "lease-1", Provider: "p1"}}},
		{"claimed", Claimed{Try: 0}},
		{"hedge", HedgeTick{}},
		{"leased", Leased{Lease: terms.Lease{ID: "lease-1", Provider: "p1"}}},
		{"gangawarded", GangAwarded{Providers: []string{"p2"}}},
		{"gangended", GangEnded{Eligible: 1, Reason: "a gang of 2 needs 2 providers"}},
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
			"bid":     {Awarding, "Reject"},
			"decline": {Awarding, "Reject"},
			"ranked":  {Awarding, "Award"},
			// (leased, gangended: a gang's, and the job is no gang)
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

// TestStepQuietWaitsForFarProviders: a quiet spell counts, for each
// awaited provider whose round trip the renter knows (Opened.Reach), only
// from its answer's due time, a round trip after the window opened: the
// spell's end is put off until then, and once that provider answered (or
// where its round trip is short, or unknown) it is not.
func TestStepQuietWaitsForFarProviders(t *testing.T) {
	reach := map[string]time.Duration{"near": 2 * time.Millisecond, "far": 400 * time.Millisecond}
	st, _ := rules.Step(State{}, Opened{Job: job, Expected: []string{"near", "far"}, Reach: reach}, t0)
	at := t0.Add(5 * time.Millisecond)
	st, _ = rules.Step(st, BidArrived{Bid: bid("near", "n1")}, at)
	at = at.Add(rules.QuietClose)
	st, effs := rules.Step(st, TimerFired{Timer: QuietTimer, Seq: 1}, at)
	// far's answer is due at t0+400ms; the spell ends a QuietClose later.
	wait := t0.Add(400*time.Millisecond + rules.QuietClose).Sub(at)
	if !reflect.DeepEqual(effs, []Effect{ArmTimer{Timer: QuietTimer, Seq: 2, After: wait}}) {
		t.Fatalf("quiet before the far provider's answer is due: %#v, want the spell put off %v", effs, wait)
	}
	if st2, effs := rules.Step(st.Clone(), TimerFired{Timer: QuietTimer, Seq: 2}, at.Add(wait)); !reflect.DeepEqual(effs, []Effect{CheckBest{}}) || st2.Phase != Collecting {
		t.Fatalf("quiet once the far provider's answer was due: %#v, want CheckBest", effs)
	}
	// far answers before that: its bid starts a spell of its own, which
	// nothing puts off.
	at = at.Add(300 * time.Millisecond)
	st, _ = rules.Step(st, BidArrived{Bid: bid("far", "n2")}, at)
	if st.Phase != Awarding {
		t.Fatalf("every expected provider answered: %q, want the window closed", st.Phase)
	}

	// Three expected, the far one unmeasured: the spell is not put off.
	st, _ = rules.Step(State{}, Opened{Job: job, Expected: []string{"near", "near2", "far"}, Reach: map[string]time.Duration{"near": time.Millisecond}}, t0)
	st, _ = rules.Step(st, BidArrived{Bid: bid("near", "n1")}, t0)
	st, _ = rules.Step(st, BidArrived{Bid: bid("near2", "n2")}, t0)
	if _, effs := rules.Step(st, TimerFired{Timer: QuietTimer, Seq: 2}, t0.Add(rules.QuietClose)); !reflect.DeepEqual(effs, []Effect{CheckBest{}}) {
		t.Fatalf("quiet with no far provider known: %#v, want CheckBest", effs)
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

// TestStepAllInUnsampledWaitsForASoonerStart: when every expected
// provider of an unsampled call (one every provider hears) has answered
// and no bid starts now, the window stays open for a provider the renter
// did not expect to answer sooner; it closes at its timer. A sampled call
// (no other provider may bid) and an unsampled one with a bid that
// starts now close at the last expected answer.
func TestStepAllInUnsampledWaitsForASoonerStart(t *testing.T) {
	later := bid("p1", "n1")
	later.Start = t0.Add(10 * time.Second)
	st, all := run(rules, Opened{Job: job, Expected: []string{"p1"}}, BidArrived{Bid: later})
	if st.Phase != Collecting || strings.Contains(kinds(all[1]), "Close") {
		t.Fatalf("unsampled, the expected bid starts in 10 s: %q [%s], want the window open", st.Phase, kinds(all[1]))
	}
	st, effs := rules.Step(st, TimerFired{Timer: WindowTimer, Seq: 1}, t0.Add(time.Second))
	if st.Phase != Awarding || kinds(effs) != "Close" {
		t.Fatalf("at the window's end: %q [%s]", st.Phase, kinds(effs))
	}
	sampled := job
	sampled.BidSample = 0.5
	if st, all := run(rules, Opened{Job: sampled, Expected: []string{"p1"}}, BidArrived{Bid: later}); st.Phase != Awarding || !strings.Contains(kinds(all[1]), "Close") {
		t.Fatalf("sampled: %q [%s], want closed at the last expected answer", st.Phase, kinds(all[1]))
	}
	now := bid("p1", "n1")
	now.Start = t0
	if st, all := run(rules, Opened{Job: job, Expected: []string{"p1"}}, BidArrived{Bid: now}); st.Phase != Awarding || !strings.Contains(kinds(all[1]), "Close") {
		t.Fatalf("unsampled, the bid starts now: %q [%s], want closed", st.Phase, kinds(all[1]))
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
	st, effs := rules.Step(in(Awarding), Ranked{Ranked: ranks(bid("p1", "n1"))}, t0)
	if !reflect.DeepEqual(effs, []Effect{Award{Try: 0, Bid: bid("p1", "n1")}}) {
		t.Fatalf("ranked: %#v", effs)
	}
	st, effs = rules.Step(st, AwardDone{Try: 0, Result: Confirmed, Lease: l}, t0)
	if kinds(effs) != "Settle,Result,Finish" || st.End != terms.JobLeased {
		t.Fatalf("confirmed: [%s] %q", kinds(effs), st.End)
	}
	if f := effs[2].(Finish); f.As != terms.JobLeased || f.Lease == nil || f.Lease.ID != l.ID {
		t.Fatalf("leased: %#v", f)
	}
	if s := effs[0].(Settle); s.Lease == nil || s.Lease.ID != l.ID {
		t.Fatalf("the lease's claim not kept: %#v", s)
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
	evs = append(evs, Ranked{Ranked: ranks(bid("p1", "np1"), bid("p4", "np4"), bid("p7", "np7")), Late: []string{"p1"}},
		AwardDone{Try: 0, Result: Timeout, Lease: terms.Lease{ID: "lease-a", Provider: "p4"}}, HedgeTick{}, Claimed{Try: 2},
		AwardDone{Try: 1, Result: Confirmed, Lease: terms.Lease{ID: "lease-b", Provider: "p7"}}, Cancelled{})
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

// award steps a call ranked with bids through evs (rules r) and returns
// the state and every step's effects (the Ranked step's first).
func award(r Rules, bids []terms.Bid, late []string, evs ...Event) (State, [][]Effect) {
	st := in(Awarding)
	var all [][]Effect
	for _, ev := range append([]Event{Ranked{Ranked: ranks(bids...), Late: late}}, evs...) {
		var effs []Effect
		st, effs = r.Step(st, ev, t0)
		all = append(all, effs)
	}
	return st, all
}

// TestStepAwardOrder: the eligible bids are awarded best first, late
// providers' after all others, expired ones skipped, and while one starts
// at once, no later start.
func TestStepAwardOrder(t *testing.T) {
	rejected := terms.Ranked{Candidate: terms.Candidate{Bid: bid("p0", "n0")}, Rejected: "over budget"}
	later := bid("p9", "n9")
	later.Start = t0.Add(time.Hour)
	expired := bid("p8", "n8")
	expired.ExpiresAt = t0
	st := in(Awarding)
	st, effs := rules.Step(st, Ranked{Ranked: append([]terms.Ranked{rejected}, ranks(bid("p1", "n1"), later, expired, bid("p2", "n2"))...),
		Late: []string{"p1"}}, t0)
	want := []Effect{Award{Try: 0, Bid: expired, Skip: SkippedExpired}, Award{Try: 1, Bid: bid("p2", "n2")}}
	if !reflect.DeepEqual(effs, want) {
		t.Fatalf("first award: %#v, want %#v", effs, want)
	}
	if len(st.Order) != 3 || st.Order[2].Provider != "p1" || st.Eligible != 3 || st.FirstRejected != "over budget" {
		t.Fatalf("order %v eligible %d", st.Order, st.Eligible)
	}
	// Nothing starts at once: the later start is awarded.
	st, _ = award(rules, []terms.Bid{later}, nil)
	if st.Inflight != 1 || st.Tries[0].Provider != "p9" {
		t.Fatalf("only a later start: %+v", st.Tries)
	}
}

// TestStepAwardFailover: a failed award's provider ranks last for a while
// (its lease released when it may have been booked), and the next bid is
// awarded at once; when every award failed, the call ends unplaceable,
// saying why (raced when each was only claimed by another auction).
func TestStepAwardFailover(t *testing.T) {
	lr := Rules{QuietClose: rules.QuietClose, MaxParallelAwards: 8, Release: true}
	la := terms.Lease{ID: "lease-a", Provider: "p1"}
	st, all := award(lr, []terms.Bid{bid("p1", "n1"), bid("p2", "n2")}, nil,
		AwardDone{Try: 0, Result: Timeout, Lease: la},
		AwardDone{Try: 1, Result: "declined: capacity"})
	want := []Effect{Settle{Try: 0, Provider: "p1"}, NoConfirm{Provider: "p1", Result: Timeout}, Release{Lease: la},
		Result{Try: 0, Result: Timeout}, Award{Try: 1, Bid: bid("p2", "n2")}}
	if !reflect.DeepEqual(all[1], want) {
		t.Fatalf("timeout: %#v\nwant %#v", all[1], want)
	}
	if kinds(all[2]) != "Settle,NoConfirm,Result,Finish" || st.Phase != Done || st.End != terms.JobUnplaceable ||
		st.Reason != "all 2 awards failed (declined: capacity; timeout)" || all[2][3].(Finish).Raced {
		t.Fatalf("all failed: [%s] %q %q", kinds(all[2]), st.End, st.Reason)
	}
	st, all = award(rules, []terms.Bid{bid("p1", "n1"), bid("p2", "n2")}, nil, Claimed{Try: 0}, Claimed{Try: 1})
	if f, ok := all[2][0].(Finish); !ok || !f.Raced || f.Reason != "all 2 awards failed (2 × "+SkippedClaimed+")" || st.Inflight != 0 {
		t.Fatalf("all claimed: %#v", all[2])
	}
	// Lost: claimed by this renter's auctions or declined as taken by
	// another's award; any other failure among them is not a lost race.
	taken := DeclinedPrefix + terms.DeclinedTaken + "calendar overbooked"
	st, all = award(rules, []terms.Bid{bid("p1", "n1"), bid("p2", "n2")}, nil, Claimed{Try: 0}, AwardDone{Try: 1, Result: taken})
	if f, ok := all[2][len(all[2])-1].(Finish); !ok || f.Raced || !f.Lost || st.Inflight != 0 {
		t.Fatalf("claimed, then taken: %#v", all[2])
	}
	st, all = award(rules, []terms.Bid{bid("p1", "n1"), bid("p2", "n2")}, nil, AwardDone{Try: 0, Result: taken},
		AwardDone{Try: 1, Result: DeclinedPrefix + "bid expired"})
	if f, ok := all[2][len(all[2])-1].(Finish); !ok || f.Raced || f.Lost {
		t.Fatalf("taken, then expired: %#v", all[2])
	}
	st, all = award(rules, nil, nil)
	if st.End != terms.JobUnplaceable || st.Reason != "no bids" || kinds(all[0]) != "Finish" {
		t.Fatalf("no bids: %q %q", st.End, st.Reason)
	}
}

// TestStepAwardHedge: a hedging tick doubles the awards outstanding up to
// MaxParallelAwards; the first confirm is the lease, a later one is
// released (not released without a Releaser), and answers after the call
// was cancelled are still taken.
func TestStepAwardHedge(t *testing.T) {
	hr := Rules{QuietClose: rules.QuietClose, MaxParallelAwards: 3, Release: true}
	bids := []terms.Bid{bid("p1", "n1"), bid("p2", "n2"), bid("p3", "n3"), bid("p4", "n4"), bid("p5", "n5")}
	st, all := award(hr, bids, nil, HedgeTick{}, HedgeTick{}, HedgeTick{})
	if kinds(all[1]) != "Award" || kinds(all[2]) != "Award" || len(all[3]) != 0 || st.Inflight != 3 {
		t.Fatalf("hedged: [%s] [%s] [%s] inflight %d", kinds(all[1]), kinds(all[2]), kinds(all[3]), st.Inflight)
	}
	l2, l1 := terms.Lease{ID: "lease-2", Provider: "p2"}, terms.Lease{ID: "lease-1", Provider: "p1"}
	st, effs := hr.Step(st, AwardDone{Try: 1, Result: Confirmed, Lease: l2}, t0)
	if st.End != terms.JobLeased || kinds(effs) != "Settle,Result,Finish" {
		t.Fatalf("first confirm: [%s] %q", kinds(effs), st.End)
	}
	st, effs = hr.Step(st, AwardDone{Try: 0, Result: Confirmed, Lease: l1}, t0)
	want := []Effect{Settle{Try: 0, Provider: "p1"}, Release{Lease: l1}, Result{Try: 0, Result: "confirmed, released (not needed)"}}
	if !reflect.DeepEqual(effs, want) || st.Inflight != 1 {
		t.Fatalf("second confirm: %#v", effs)
	}
	if _, effs = hr.Step(st, AwardDone{Try: 0, Result: Confirmed, Lease: l1}, t0); len(effs) != 0 {
		t.Fatalf("an answer taken twice: %#v", effs)
	}

	norel := Rules{QuietClose: rules.QuietClose, MaxParallelAwards: 3}
	st, _ = award(norel, bids[:2], nil, HedgeTick{}, Cancelled{})
	if st.Phase != Done || st.End != terms.JobCancelled || st.Inflight != 2 {
		t.Fatalf("cancelled while awarding: %q %q inflight %d", st.Phase, st.End, st.Inflight)
	}
	st, effs = norel.Step(st, AwardDone{Try: 0, Result: Confirmed, Lease: l1}, t0)
	if !reflect.DeepEqual(effs, []Effect{Settle{Try: 0, Provider: "p1"}, Result{Try: 0, Result: "confirmed after the auction was cancelled"}}) || st.Inflight != 1 {
		t.Fatalf("confirm after the cancel: %#v", effs)
	}
}

// TestStepGang: a gang's awards are the driver's; its lease, or its
// failure's reason, ends the call.
func TestStepGang(t *testing.T) {
	gang := job
	gang.Nodes = 2
	st, _ := run(rules, Opened{Job: gang}, BidArrived{Bid: bid("p1", "n1")}, TimerFired{Timer: WindowTimer, Seq: 1})
	st, effs := rules.Step(st, Ranked{Ranked: ranks(bid("p1", "n1"))}, t0)
	if !reflect.DeepEqual(effs, []Effect{AwardGang{Order: []terms.Bid{bid("p1", "n1")}}}) {
		t.Fatalf("gang ranked: %#v", effs)
	}
	if _, effs = rules.Step(st.Clone(), HedgeTick{}, t0); len(effs) != 0 {
		t.Fatalf("a gang hedged: %#v", effs)
	}
	done, effs := rules.Step(st.Clone(), GangEnded{Eligible: 1, Reason: "a gang of 2 needs 2 providers, 1 eligible bids"}, t0)
	if done.End != terms.JobUnplaceable || done.Reason != "a gang of 2 needs 2 providers, 1 eligible bids" || kinds(effs) != "Finish" {
		t.Fatalf("gang ended: %q %q", done.End, done.Reason)
	}
	done, _ = rules.Step(st, Leased{Lease: terms.Lease{ID: "lease-g", Provider: "p1"}}, t0)
	if done.End != terms.JobLeased {
		t.Fatalf("gang leased: %q", done.End)
	}
}

// TestStepReleaseBids: however a call ends, the bids that hold GPUs and
// were not awarded (a gang's members included) are released, in the
// order they came; a bid without a hold is not.
func TestStepReleaseBids(t *testing.T) {
	held := func(p string) terms.Bid {
		b := bid(p, "n"+p)
		b.Held = true
		return b
	}
	opened := []Event{Opened{Job: job}, BidArrived{Bid: held("p1")}, BidArrived{Bid: bid("p2", "np2")}, BidArrived{Bid: held("p3")}}
	_, all := run(rules, append(opened, TimerFired{Timer: WindowTimer, Seq: 1}, Ranked{Ranked: ranks(held("p1"), held("p3"))},
		AwardDone{Try: 0, Result: Confirmed, Lease: terms.Lease{ID: "lease-1", Provider: "p1"}})...)
	last := all[len(all)-1]
	if !reflect.DeepEqual(last[len(last)-1], ReleaseBids{Bids: []terms.Bid{held("p3")}}) {
		t.Fatalf("leased: %#v", last)
	}
	_, all = run(rules, append(opened, Cancelled{})...)
	if !reflect.DeepEqual(all[len(all)-1], []Effect{Finish{As: terms.JobCancelled, Reason: "cancelled"}, ReleaseBids{Bids: []terms.Bid{held("p1"), held("p3")}}}) {
		t.Fatalf("cancelled: %#v", all[len(all)-1])
	}
	gang := job
	gang.Nodes = 2
	opened[0] = Opened{Job: gang}
	_, all = run(rules, append(opened, TimerFired{Timer: WindowTimer, Seq: 1}, Ranked{Ranked: ranks(held("p1"), held("p3"))},
		GangAwarded{Providers: []string{"p3"}}, GangEnded{Eligible: 2, Reason: "gang incomplete"})...)
	if !reflect.DeepEqual(all[len(all)-1], []Effect{Finish{As: terms.JobUnplaceable, Reason: "gang incomplete"}, ReleaseBids{Bids: []terms.Bid{held("p1")}}}) {
		t.Fatalf("gang ended: %#v", all[len(all)-1])
	}
}
