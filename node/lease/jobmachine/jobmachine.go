// Package jobmachine is a renter's job as a deterministic state machine:
// Rules.Step(state, event, now) returns the next state and the effects a
// driver carries out (node/lease's Tracker in the daemon, a simulator in
// tests). Step starts no goroutine, reads no clock and does no I/O; the
// driver runs the auctions, asks providers to stop or release leases,
// arms timers and persists the record, and feeds the results back as
// events. It is the renter's counterpart of node/lease/lifecycle (one
// lease on its provider), modelled like it on etcd raft's Step and Nomad's
// pure scheduler: every decision about where a job is lives here once.
//
// The phases of a job (Record.Phase), and the events that move it on:
//
//	(new) ──Posted──► Auctioning ──Awarded──► Awarding ──Confirmed──► Leased
//	                   ▲  ▲   │ NoLease, to retry                        │
//	                   │  │   ▼                                          ├─Reported succeeded─► Verifying ──Evidence ok──► Finished
//	                   │  └─ Queued ──TimerDue past its start deadline──► Unplaceable               │ Evidence not ok
//	                   │   TimerDue (due):                               │                           ▼
//	                   │   a new attempt                                 └─Reported otherwise, Lost─► (requeues?)
//	                   │                                                   within the attempt budget: Requeued
//	                   └──────────────────Reauctioned─────────────────────────────────────────────── Requeued
//	                                                                       otherwise: Finished
//
//	Rebooked: a Leased job whose lease is still pending takes a lease a
//	later auction found starting sooner (late binding), and releases the
//	one it replaces; it stays Leased.
//
//	Cancel: Auctioning, Awarding, Queued ─► Cancelled; a Leased job's
//	running lease is asked to stop (StopLease) and ends as its provider
//	reports. An auction that ends for good without a lease: Unplaceable,
//	or Failed (the job was refused before its auction began).
//
// Finished, Unplaceable, Cancelled and Failed are final: no event moves a
// job out of them (a receipt of its last lease is still recorded, or
// refused), but
// one: a gang job lives and dies together, and when it goes back to
// auction as a whole (GangRequeued) each of its records goes with it. A lease
// is the job's from the moment its award is sent (Awarded), so that its
// provider, which runs it as soon as it confirms, is never told the lease
// is unknown while the confirmation makes its way back.
//
// The record also keeps what the job owes its leases' settlement, in any
// phase: the refusals of a lease's receipt (ReceiptRefused), counted to a
// dispute at Rules.MaxRefusals (RecordDispute; shown in Dispute once
// recorded: Disputed), and the leases
// the job released (Release; Unused for a hedged award its auction gave
// back), and those archived before they settled (Archived: a lost lease,
// or one the job went back to auction without), remembered within their
// settlement window so that their providers' final reports and receipts
// are answered.
package jobmachine

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Phase is where a job is on its renter: finer than its terms.JobState,
// which the API shows (Phase.State).
type Phase string

// Phases (see the package doc's diagram).
const (
	Auctioning  Phase = "auctioning"  // an auction runs for it
	Awarding    Phase = "awarding"    // its auction sent an award, not yet confirmed
	Queued      Phase = "queued"      // no lease yet: offered again at Due, until its deadline
	Leased      Phase = "leased"      // a lease holds it (Record.Run says how it runs)
	Requeued    Phase = "requeued"    // its lease ended early: back to auction once that lease settled
	Verifying   Phase = "verifying"   // its lease succeeded: its evidence (the log) is being checked
	Finished    Phase = "finished"    // its last lease ended; not run again
	Unplaceable Phase = "unplaceable" // no lease by its deadline, or no provider could ever take it
	Cancelled   Phase = "cancelled"   // cancelled before it was leased
	Failed      Phase = "failed"      // refused before its auction began
)

// Phases lists every Phase.
func Phases() []Phase {
	return []Phase{Auctioning, Awarding, Queued, Leased, Requeued, Verifying, Finished, Unplaceable, Cancelled, Failed}
}

// Final reports whether nothing more happens to a job in phase p.
func (p Phase) Final() bool {
	return p == Finished || p == Unplaceable || p == Cancelled || p == Failed
}

// State is the job's state as the API shows it.
func (p Phase) State() terms.JobState {
	switch p {
	case Auctioning:
		return terms.JobBidding
	case Awarding:
		return terms.JobAwarding
	case Queued:
		return terms.JobQueued
	case Leased, Requeued:
		return terms.JobLeased
	case Verifying, Finished:
		// A succeeded run is shown finished while its evidence is checked
		// (a run not accepted goes back to auction, its budget permitting).
		return terms.JobFinished
	case Unplaceable:
		return terms.JobUnplaceable
	case Cancelled:
		return terms.JobCancelled
	case Failed:
		return terms.JobFailed
	}
	return ""
}

// PhaseOf is the phase of a record stored before phases were (its API
// state, and its current lease's run state).
func PhaseOf(state terms.JobState, run terms.RunState, requeues bool) Phase {
	switch state {
	case terms.JobBidding:
		return Auctioning
	case terms.JobAwarding:
		return Awarding
	case terms.JobQueued:
		return Queued
	case terms.JobLeased:
		if run.Terminal() {
			if requeues {
				return Requeued
			}
			return Finished
		}
		return Leased
	case terms.JobFinished:
		return Finished
	case terms.JobUnplaceable:
		return Unplaceable
	case terms.JobCancelled:
		return Cancelled
	case terms.JobFailed:
		return Failed
	}
	return ""
}

// Record is a job as the machine knows it: the part of the renter's job
// record the rules decide on. Its fields are named as in the API's job
// view (api.JobView), which records stored before this package existed,
// so they read as one.
type Record struct {
	Job      terms.Job `json:"job"`
	Phase    Phase     `json:"phase,omitempty"`
	PostedAt time.Time `json:"posted_at"`
	// Reasons say why the job is where it is (the auction's, the
	// queue's, the machine's own).
	Reasons []string `json:"reasons,omitempty"`
	// Lease is the job's current lease (nil before one, and while a
	// requeued job is in auction again); Run its run state, Fault who
	// caused an unsuccessful run, Detail why, Started and Ended the run's
	// span as the provider reported it, ExitCode its command's.
	Lease    *terms.Lease   `json:"lease,omitempty"`
	Run      terms.RunState `json:"run,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
	Detail   string         `json:"detail,omitempty"`
	Fault    terms.Fault    `json:"fault,omitempty"`
	Started  time.Time      `json:"started,omitempty"`
	Ended    time.Time      `json:"ended,omitempty"`
	// Receipt is the current lease's countersigned receipt, once settled;
	// Dispute why its settlement was given up instead (its receipt
	// refused Rules.MaxRefusals times).
	Receipt *attest.Receipt `json:"receipt,omitempty"`
	Dispute string          `json:"dispute,omitempty"`
	// Refused counts the refused receipts of the job's leases (the
	// current one, or one archived before it settled), by lease id, until
	// the lease settles or its settlement is given up.
	Refused map[string]int `json:"refused,omitempty"`
	// Leases counts the leases the job was confirmed (the current one
	// too): its attempts against Job.Attempts.
	Leases int `json:"leases,omitempty"`
	// Awarded are the leases the job's current auction sent awards for,
	// not confirmed yet: the job's, should their providers report first.
	Awarded []string `json:"awarded,omitempty"`
	// Released are the leases the job released (a lease confirmed that it
	// could not use, one given up as lost, a hedged award another beat),
	// within their settlement window: their providers' final reports are
	// answered with the renter's signed release.
	Released []Released `json:"released,omitempty"`
	// Archived are the job's leases no longer its current attempt (or
	// given up as lost) that have not settled: their providers may still
	// report and settle them, within their settlement window.
	Archived []Archived `json:"archived,omitempty"`
	// Due is when a queued job is offered again, or a requeued one goes
	// back to auction without its lease's receipt; Backoff the wait
	// before the last offer (half QueueBackoff after an offer made at
	// once for a race lost to other awards: the next wait is
	// QueueBackoff).
	Due     time.Time     `json:"due,omitzero"`
	Backoff time.Duration `json:"backoff,omitempty"`
}

// Released is a lease a job released, as its record keeps it.
type Released struct {
	Lease    string    `json:"lease"`
	Job      string    `json:"job"`
	Provider string    `json:"provider"`
	End      time.Time `json:"end"`
}

// Archived is a lease of a job, no longer its current attempt, that has
// not settled. Lost: the renter gave it up (its provider went silent, or
// never reported by its end) before any final report; Reported: its
// provider's final report was taken.
type Archived struct {
	Lease    string    `json:"lease"`
	End      time.Time `json:"end"`
	Lost     bool      `json:"lost,omitempty"`
	Reported bool      `json:"reported,omitempty"`
}

// ArchivedLease is lease id among the job's archived leases.
func (r *Record) ArchivedLease(id string) (Archived, bool) {
	for _, a := range r.Archived {
		if a.Lease == id {
			return a, true
		}
	}
	return Archived{}, false
}

// Knows reports whether lease id is the job's: its current lease, or one
// its auction awarded and has not heard back on.
func (r *Record) Knows(id string) bool {
	return id != "" && ((r.Lease != nil && r.Lease.ID == id) || slices.Contains(r.Awarded, id))
}

// Live reports whether the job may still run (its renter keeps what it
// needs).
func (r *Record) Live() bool { return r.Phase.State().Live() }

// Deadline is the job's start deadline (zero: none).
func (r *Record) Deadline() time.Time { return r.Job.Deadline }

// Rules are the renter's policy: the only inputs to Step besides the
// state, the event and the time.
type Rules struct {
	// QueueBackoff is how long a queued job first waits before it is
	// offered again, doubling up to QueueBackoffMax.
	QueueBackoff, QueueBackoffMax time.Duration
	// MaxRefusals is how many refusals of one lease's receipt give its
	// settlement up as a dispute (0: never); its provider gives up by the
	// same count.
	MaxRefusals int
	// SettleWindow is how long after its end a lease may still be
	// settled: a released or archived lease is remembered that long (0:
	// forever).
	// MaxReleased bounds the released leases a record keeps, the oldest
	// going first (0: no bound).
	SettleWindow time.Duration
	MaxReleased  int
}

// Requeues reports whether job r goes back to auction now that its
// current lease ended in run through fault (terms.Job.Requeues, within
// its attempt budget); when a run that would requeue does not, why not.
func (r *Record) Requeues(run terms.RunState, fault terms.Fault) (bool, string) {
	switch {
	case !run.Requeues(fault):
		return false, ""
	case !r.Job.Requeues(run, fault):
		return false, "a service replica: its service replaces it"
	}
	if spent, why := r.BudgetSpent(); spent {
		return false, why
	}
	return true, ""
}

// BudgetSpent reports whether the job's current lease is its last allowed
// attempt (Leases against Job.Attempts), and a detail saying so.
func (r *Record) BudgetSpent() (bool, string) {
	used, budget := max(r.Leases, 1), r.Job.Attempts()
	if used < budget {
		return false, ""
	}
	return true, fmt.Sprintf("attempt budget spent (%d of %d attempts used): the job is not run again", used, budget)
}

// DeadlineDetail is why a queued job whose start deadline passed is given
// up.
const DeadlineDetail = "start deadline passed while queued"

// QueuedPrefix begins the reason of a queued job (the last of its
// reasons): "queued: <why> (offered N times)".
const QueuedPrefix = "queued: "

// RestartDetail is the reason of a job queued again because its renter
// restarted during its auction.
const RestartDetail = "queued: renter daemon restarted during the auction"
