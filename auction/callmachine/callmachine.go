// Package callmachine is one auction round of a renter's job (one call
// for bids of one attempt) as a deterministic state machine:
// Step(state, event, now) returns the next state and the effects a driver
// carries out (auction.Renter in the daemon, a table in tests). Step starts
// no goroutine, reads no clock and does no I/O; it is the auction's
// counterpart of node/lease/jobmachine (one job on its renter), modelled
// like it on etcd raft's Step/Ready/Advance: the driver turns the
// network's bids, declines and the timers it armed into events, and
// carries out the effects (arm a timer, start a bidder's lookups, rank the
// bids, record the call's end), feeding their results back as events.
//
// The phases of a call (State.Phase), and the events that move it on:
//
//	(new) ──Opened──► Collecting ──window closes──► Awarding ──a confirm, every award failed──► Done
//	                      │                             │
//	                      └──Cancelled, ContextDone, Failed (any phase but Done)──► Done
//
// The window closes (Close) at its timer (once extended by its length
// when no bid came), once every provider expected to answer has, after a
// quiet spell following the last bid once most expected providers have
// answered (and following each awaited provider's answer's due time, a
// round trip after the window opened, when the renter knows its round
// trip: Opened.Reach), or at a gold job's first acceptable bid: in the last two
// cases only when the driver found that the best bid starts at once
// (CheckBest, fed back as BestChecked).
//
// The driver then ranks the bids (Ranked: the ranking reads the renter's
// book, its bidders' holdings and round trips). Awarding, the machine
// awards the eligible bids best first (those of providers that recently
// did not confirm last; while some bid starts at once, only those), one
// at a time (Award, fed back as AwardDone, or Claimed when the driver
// finds the bid's GPUs awarded to another of the renter's auctions), and
// at each HedgeTick as many more as are outstanding, up to
// Rules.MaxParallelAwards. The first confirm is the lease (Finish); a
// later one is released, a failed award's provider ranks last for a
// while (NoConfirm) and its lease is released if it may have been booked.
// When every award failed, the call ends without a lease, saying why. A
// gang's awards (all or nothing) are the driver's (AwardGang, fed back
// as GangAwarded, then Leased or GangEnded). Awards outstanding when the
// call ends are still taken, to release their confirms. However a call
// ends, the bids that hold GPUs and were not awarded are released
// (ReleaseBids).
//
// Step updates the state's slices and maps in place (a bid is appended,
// never copied): the caller hands the state over and keeps the one Step
// returns, as raft's log is. Clone copies a state for a caller that needs
// the old one too.
package callmachine

import (
	"maps"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Phase is where a call is.
type Phase string

// Phases (see the package doc's diagram).
const (
	Collecting Phase = "collecting" // the bid window is open
	Awarding   Phase = "awarding"   // the window closed: the bids are ranked and awarded
	Done       Phase = "done"       // the call ended (State.End says how)
)

// Phases lists every Phase, the zero one (a call not opened yet) first.
func Phases() []Phase { return []Phase{"", Collecting, Awarding, Done} }

// Rules are the renter's policy for its calls: the only inputs to Step
// besides the state, the event and the time.
type Rules struct {
	// QuietClose closes a window early once this long has passed since
	// the last bid (see auction.RenterConfig.QuietClose); negative: never
	// early by quiet, nor at a gold job's first bid.
	QuietClose time.Duration
	// MaxParallelAwards bounds the awards outstanding at once (hedging).
	MaxParallelAwards int
	// Release: the renter can release a lease it does not use (a confirm
	// after the lease was won, an award that may have been booked).
	Release bool
}

// Timer names a timer of the call.
type Timer string

// Timers.
const (
	WindowTimer Timer = "window" // the bid window's end
	QuietTimer  Timer = "quiet"  // the quiet spell since the last bid
)

// State is one call as the machine knows it.
type State struct {
	Phase Phase
	// The call's job: its id, attempt, tier, gang size and bid window.
	JobID   string
	Attempt int
	Tier    terms.Tier
	Nodes   int
	Window  time.Duration
	// Bids are the bids taken, in arrival order.
	Bids []terms.Candidate
	// Nonces are the nonces of the bids seen (taken or refused as a
	// provider's second); Bidders and Decliners the providers that bid,
	// or declined.
	Nonces    map[string]bool
	Bidders   map[string]bool
	Decliners map[string]bool
	// Busy are the providers that declined the job as busy (KindBusy),
	// in any of its calls: the only ones whose capacity notice may name
	// it.
	Busy map[string]bool
	// Declines counts the call's declines by kind.
	Declines map[string]int
	// Awaited are the providers expected to answer (a bid, a decline, or
	// not reached) that have not yet, out of Expected.
	Awaited  map[string]bool
	Expected int
	// OpenedAt is when the window opened; Reach the round trips the
	// renter knew to expected providers (Opened.Reach): an awaited one's
	// answer is due that long after OpenedAt, and no quiet spell counts
	// before it is. Reach is read, never written, after Opened.
	OpenedAt time.Time
	Reach    map[string]time.Duration
	// Unsampled: the call asks every provider that hears it (no bid
	// sample), so providers the renter did not expect may answer too.
	Unsampled bool
	// Extended: the window ran out once without a bid and was extended.
	Extended bool
	// WindowSeq and QuietSeq number the last arming of each timer: a
	// timer's fire for an earlier one is stale.
	WindowSeq, QuietSeq int
	// The ranked bids (Ranked): how many there were, the first one's
	// rejection (the best bid's, when none is eligible), and the
	// eligible ones in the order they are awarded.
	Ranked        bool
	RankedN       int
	FirstRejected string
	Order         []terms.Bid
	Eligible      int
	// Next is the next bid of Order to award; Tries the call's awards;
	// Inflight those sent and not answered.
	Next     int
	Tries    []Try
	Inflight int
	// End is how the call ended (Done): the job's auction state and why.
	End    terms.JobState
	Reason string
}

// Open reports whether the call takes bids and declines.
func (s *State) Open() bool { return s.Phase == Collecting }

// MostAnswered reports whether a quiet spell may close the window: at
// least half the providers expected to answer have (always, when the
// renter expected nobody in particular).
func (s *State) MostAnswered() bool { return 2*(s.Expected-len(s.Awaited)) >= s.Expected }

// BusyDecliner reports whether provider declined the job as busy.
func (s *State) BusyDecliner(provider string) bool { return s.Busy[provider] }

// Clone is a deep copy of s (Step updates its state in place).
func (s State) Clone() State {
	s.Bids = slices.Clone(s.Bids)
	s.Nonces = maps.Clone(s.Nonces)
	s.Bidders = maps.Clone(s.Bidders)
	s.Decliners = maps.Clone(s.Decliners)
	s.Busy = maps.Clone(s.Busy)
	s.Declines = maps.Clone(s.Declines)
	s.Awaited = maps.Clone(s.Awaited)
	s.Reach = maps.Clone(s.Reach)
	s.Order = slices.Clone(s.Order)
	s.Tries = slices.Clone(s.Tries)
	return s
}

// Event is something that happened to a call: a provider's message, a
// timer, the poster's request, or the result of an effect.
type Event interface{ event() }

// Events.
type (
	// Opened: the call for Job (its id, attempt, tier, gang size, bid
	// window) is about to go out, the providers Expected to answer it
	// (none: nobody in particular), and Busy those that declined an
	// earlier call of the job as busy. It starts the machine (on a zero
	// State).
	Opened struct {
		Job      terms.Job
		Expected []string
		Busy     map[string]bool
		// Reach is the round trip the renter last measured to some of
		// the Expected providers: a quiet spell waits for their answers
		// (a provider 200 ms away answers a call 200 ms after a near
		// one, and may be the cheapest).
		Reach map[string]time.Duration
	}
	// BidArrived: a bid for the call, its envelope and sender checked.
	BidArrived struct{ Bid terms.Bid }
	// DeclineArrived: a provider's decline of the call, its envelope and
	// sender checked, within the renter's decline rate (DeclineRefusal
	// said it fits). Busy: its kind says the provider is busy
	// (auction.KindBusy).
	DeclineArrived struct {
		Decline terms.Decline
		Busy    bool
	}
	// Unreached: the call could not be sent to Provider: it will not
	// answer.
	Unreached struct{ Provider string }
	// Measured: a bidder's lookup ended (its round trip): the best bid
	// may have changed.
	Measured struct{}
	// TimerFired: timer Timer, armed as Seq, fired.
	TimerFired struct {
		Timer Timer
		Seq   int
	}
	// BestChecked: the driver ranked the bids for CheckBest: StartsNow
	// says whether the best (a gang's Nodes best) is acceptable and
	// starts at once.
	BestChecked struct{ StartsNow bool }
	// Ranked: the driver ranked the window's bids (Close): Ranked
	// best first, Late the providers among them that recently did not
	// confirm an award.
	Ranked struct {
		Ranked []terms.Ranked
		Late   []string
	}
	// AwardDone: award Try was answered: Result is Confirmed (Lease as
	// its provider confirmed it) or why not (Lease as awarded).
	AwardDone struct {
		Try    int
		Result string
		Lease  terms.Lease
	}
	// Claimed: award Try was not sent, its bid's GPUs awarded to another
	// of this renter's auctions.
	Claimed struct{ Try int }
	// HedgeTick: the renter's hedging interval passed with awards
	// outstanding and none confirmed.
	HedgeTick struct{}
	// Leased: a gang's awards placed it (every member committed), Lease
	// its rank 0's.
	Leased struct{ Lease terms.Lease }
	// GangAwarded: a gang's round awarded its members to Providers (its
	// awards are the driver's: AwardGang).
	GangAwarded struct{ Providers []string }
	// GangEnded: a gang's awards placed no gang, out of Eligible bids,
	// saying Reason.
	GangEnded struct {
		Eligible int
		Reason   string
	}
	// Failed: the call could not go out (not admitted, not published),
	// saying Reason.
	Failed struct{ Reason string }
	// Cancelled: the job's poster cancelled the call.
	Cancelled struct{}
	// ContextDone: the context the call runs in ended, with Err.
	ContextDone struct{ Err string }
)

func (Opened) event()         {}
func (BidArrived) event()     {}
func (DeclineArrived) event() {}
func (Unreached) event()      {}
func (Measured) event()       {}
func (TimerFired) event()     {}
func (BestChecked) event()    {}
func (Ranked) event()         {}
func (AwardDone) event()      {}
func (Claimed) event()        {}
func (HedgeTick) event()      {}
func (GangAwarded) event()    {}
func (GangEnded) event()      {}
func (Leased) event()         {}
func (Failed) event()         {}
func (Cancelled) event()      {}
func (ContextDone) event()    {}

// Effect is what the driver does for a step, in order.
type Effect interface{ effect() }

// Effects.
type (
	// ArmTimer: fire TimerFired{Timer, Seq} After from now, replacing
	// that timer's earlier arming.
	ArmTimer struct {
		Timer Timer
		Seq   int
		After time.Duration
	}
	// Reject: the event's message is refused, Reason its counter key and
	// Detail what was wrong.
	Reject struct{ Reason, Detail string }
	// Lookup: start the lookups of bidder Provider that ranking uses (its
	// holdings, its round trip); a round trip measured comes back as
	// Measured.
	Lookup struct{ Provider string }
	// CheckBest: rank the bids taken so far; feed back BestChecked.
	CheckBest struct{}
	// Close: the window closed: rank the bids; feed back Ranked.
	Close struct{}
	// Award: award Bid (try Try of the call): feed back AwardDone, or
	// Claimed when its GPUs are claimed by another of the renter's
	// auctions. Skip: record the try with that result, not sent.
	Award struct {
		Try  int
		Bid  terms.Bid
		Skip string
	}
	// AwardGang: award a gang job's members among Order (the eligible
	// bids); feed back Leased or GangEnded.
	AwardGang struct{ Order []terms.Bid }
	// Settle: award Try's claim on its provider's GPUs is kept over
	// Lease, the call's lease, or dropped (Lease nil).
	Settle struct {
		Try      int
		Provider string
		Lease    *terms.Lease
	}
	// NoConfirm: Provider did not confirm an award (Result says why): it
	// ranks last for a while.
	NoConfirm struct{ Provider, Result string }
	// Release: tell the provider of Lease that the renter does not use
	// it.
	Release struct{ Lease terms.Lease }
	// ReleaseBids: the call ended: tell the providers of Bids (bids that
	// hold GPUs, Bid.Held, not awarded) that they will not be.
	ReleaseBids struct{ Bids []terms.Bid }
	// Result: award Try ended with Result.
	Result struct {
		Try    int
		Result string
	}
	// Finish: the call ended As (terms.JobLeased, JobUnplaceable,
	// JobCancelled, JobFailed), saying Reason (none for a lease), with
	// Lease when leased. Raced: unplaceable only because every award's
	// GPUs were claimed by another of the renter's auctions. Lost:
	// unplaceable only because every award lost a race (LostRace), one at
	// least declined as taken.
	Finish struct {
		As     terms.JobState
		Reason string
		Lease  *terms.Lease
		Raced  bool
		Lost   bool
	}
)

func (ArmTimer) effect()    {}
func (Reject) effect()      {}
func (Lookup) effect()      {}
func (CheckBest) effect()   {}
func (Close) effect()       {}
func (Award) effect()       {}
func (AwardGang) effect()   {}
func (Settle) effect()      {}
func (NoConfirm) effect()   {}
func (Release) effect()     {}
func (Result) effect()      {}
func (ReleaseBids) effect() {}
func (Finish) effect()      {}
