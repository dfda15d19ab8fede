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
//	(new) ──Opened──► Collecting ──window closes──► Awarding ──Leased, NoLease──► Done
//	                      │                             │
//	                      └──Cancelled, ContextDone, Failed (any phase but Done)──► Done
//
// The window closes (Close) at its timer (once extended by its length
// when no bid came), once every provider expected to answer has, after a
// quiet spell following the last bid once most expected providers have
// answered, or at a gold job's first acceptable bid: in the last two
// cases only when the driver found that the best bid starts at once
// (CheckBest, fed back as BestChecked). What happens while Awarding
// (ranking, awards, confirms, hedging, claims) is the driver's; its end
// comes back as Leased or NoLease.
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
	// Extended: the window ran out once without a bid and was extended.
	Extended bool
	// WindowSeq and QuietSeq number the last arming of each timer: a
	// timer's fire for an earlier one is stale.
	WindowSeq, QuietSeq int
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
	// Leased: the call's award of Lease was confirmed (a gang's: every
	// member committed, Lease its rank 0's).
	Leased struct{ Lease terms.Lease }
	// NoLease: the call ended without a lease, saying Reason.
	NoLease struct{ Reason string }
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
func (Leased) event()         {}
func (NoLease) event()        {}
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
	// Close: the window closed: rank the bids and award them; feed back
	// Leased or NoLease.
	Close struct{}
	// Finish: the call ended As (terms.JobLeased, JobUnplaceable,
	// JobCancelled, JobFailed), saying Reason (none for a lease), with
	// Lease when leased.
	Finish struct {
		As     terms.JobState
		Reason string
		Lease  *terms.Lease
	}
)

func (ArmTimer) effect()  {}
func (Reject) effect()    {}
func (Lookup) effect()    {}
func (CheckBest) effect() {}
func (Close) effect()     {}
func (Finish) effect()    {}
