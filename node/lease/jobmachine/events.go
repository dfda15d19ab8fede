package jobmachine

import (
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Event is something that happened to a job: a caller's request, a
// timer, a provider's report, or the result of an effect the driver
// carried out.
type Event interface{ event() }

// Events.
type (
	// Posted: the job was posted. It starts the machine (on a zero
	// Record); a job without an id is ignored.
	Posted struct{ Job terms.Job }
	// Awarded: the job's auction sent the award of lease LeaseID.
	Awarded struct{ LeaseID string }
	// Confirmed: the provider confirmed Lease of Job (a gang member's
	// record starts with it).
	Confirmed struct {
		Lease terms.Lease
		Job   terms.Job
	}
	// NoLease: the job's auction ended without a lease, saying Reason.
	// Retry: no acceptable bid now, the job may be offered again (Raced:
	// it only lost a race among this renter's own auctions, and is
	// offered again at once; Lost: it lost races, one at least declined
	// by its provider as taken by another award, and is offered again at
	// once if it did not lose the offer before too); otherwise it ends As
	// (Unplaceable when unset).
	// Offers is how many auctions the job had (its queued reason says
	// so).
	NoLease struct {
		Reason string
		Retry  bool
		Raced  bool
		Lost   bool
		As     Phase
		Offers int
	}
	// Folded: the job's auction says where its call is: the job as it
	// offered it last (its attempt, restored checkpoints, exclusions),
	// and the reasons it gave since it was last folded.
	Folded struct {
		Job     terms.Job
		Reasons []string
	}
	// TimerDue: the timer armed last (ArmTimer) fired.
	TimerDue struct{}
	// Wake: a provider has room for the queued job now (a capacity
	// notice): it is offered at once.
	Wake struct{}
	// Cancel: the job's poster cancels it.
	Cancel struct{}
	// Reported: the provider of the current lease reported its run state
	// (and, once it ended, how).
	Reported struct {
		LeaseID  string
		Run      terms.RunState
		Fault    terms.Fault
		Detail   string
		ExitCode *int
		Started  time.Time
		Ended    time.Time
	}
	// Moved: the provider moved the current, pending lease earlier (the
	// driver checked the move: terms.Lease.Moved).
	Moved struct{ Lease terms.Lease }
	// Lost: the current lease's provider went silent (or never reported
	// by the lease's end): the lease failed, the provider's fault, ended
	// At (the last heartbeat heard; zero: unknown).
	Lost struct {
		LeaseID string
		Detail  string
		At      time.Time
	}
	// Evidence: the check of a succeeded run's evidence (its log) ended:
	// OK, or the run is not accepted, why saying so.
	Evidence struct {
		LeaseID string
		OK      bool
		Why     string
	}
	// ReceiptRecorded: the receipt of a lease of the job (its current
	// one, or one archived before it settled) was countersigned and
	// recorded.
	ReceiptRecorded struct{ Receipt attest.Receipt }
	// ReceiptRefused: the renter refused the receipt of Lease, a lease of
	// the job (its current one, or one archived before it settled),
	// saying Why. At the Rules.MaxRefusals-th refusal the lease's
	// settlement is given up as a dispute (RecordDispute).
	ReceiptRefused struct {
		Lease terms.Lease
		Why   string
	}
	// Disputed: the dispute of lease LeaseID's settlement (RecordDispute)
	// is recorded, saying Reason: the record shows it if the lease is the
	// current one.
	Disputed struct {
		LeaseID string
		Reason  string
	}
	// Reauctioned: a requeued job's lease is archived and its auction
	// begins again.
	Reauctioned struct{ Job terms.Job }
	// GangRequeued: the gang job this record is part of (a gang's member,
	// or its rank 0) goes back to auction as a whole, every member's
	// lease archived: the record goes with it, whatever its own lease's
	// end (a member that succeeded while another was lost runs again). It
	// is the one event a final phase takes; a record whose lease still
	// runs ignores it (its lease is stopped first).
	GangRequeued struct{ Job terms.Job }
	// Closed: the job ends As (a final phase) with the job it is part of
	// (a gang member's record with its gang).
	Closed struct{ As Phase }
	// LateReport: the provider of archived lease LeaseID sent its final
	// report (taken once).
	LateReport struct{ LeaseID string }
	// Unused: the job's auction gives back Lease, confirmed and not used
	// (a hedged award another beat): it is released.
	Unused struct{ Lease terms.Lease }
	// Rebooked: a later auction of the leased job (late binding: see
	// node/lease's rebook) confirmed Lease, for Job's next attempt. A job
	// whose current lease is still pending and starts later than Lease
	// takes it, releasing the lease it replaces (never run, so no attempt
	// of the job's budget is spent); any other job releases Lease.
	Rebooked struct {
		Lease terms.Lease
		Job   terms.Job
	}
	// Restarted: the daemon started again with this stored record. State
	// is the record's stored API state (read when the record has no phase:
	// one stored before phases were); Leases the leases the record shows
	// (read when it has no count); Unverified says its lease succeeded
	// but the renter had not checked its evidence yet. Archived are the
	// unsettled leases a record stored before the machine kept them
	// (read when it has none). A job queued or in auction is queued
	// again, a running lease watched again, and a requeued job's wait for
	// its lease to settle begun again (Requeue).
	Restarted struct {
		State      terms.JobState
		Leases     int
		Unverified bool
		Archived   []Archived
	}
)

func (Posted) event()          {}
func (Awarded) event()         {}
func (Confirmed) event()       {}
func (NoLease) event()         {}
func (Folded) event()          {}
func (TimerDue) event()        {}
func (Wake) event()            {}
func (Cancel) event()          {}
func (Reported) event()        {}
func (Moved) event()           {}
func (Lost) event()            {}
func (Evidence) event()        {}
func (ReceiptRecorded) event() {}
func (ReceiptRefused) event()  {}
func (Disputed) event()        {}
func (Reauctioned) event()     {}
func (Closed) event()          {}
func (GangRequeued) event()    {}
func (Unused) event()          {}
func (Rebooked) event()        {}
func (LateReport) event()      {}
func (Restarted) event()       {}

// Effect is what the driver does for a step, in order.
type Effect interface{ effect() }

// Effects.
type (
	// Persist: store the job's record.
	Persist struct{}
	// StartAuction: run an auction for Job; feed back Awarded,
	// Confirmed and NoLease. Reoffer: a queued job offered again.
	StartAuction struct {
		Job     terms.Job
		Reoffer bool
	}
	// CancelAuction: stop the job's auction (or its queue's wait).
	CancelAuction struct{}
	// GiveUp: the job's wait in the queue ended, saying Reason.
	GiveUp struct{ Reason string }
	// ArmTimer: fire TimerDue at At (replacing any armed timer).
	ArmTimer struct{ At time.Time }
	// Watch: watch Lease for its provider's silence and for the end of
	// its lease without a final report, from Since (zero: the lease's
	// start; a renter that restarted watches from its restart, so that
	// its own outage is not the provider's silence); feed back Lost.
	Watch struct {
		Lease terms.Lease
		Since time.Time
	}
	// StopLease: ask the provider of Lease to stop it (it reports how it
	// ended).
	StopLease struct{ Lease terms.Lease }
	// Release: tell the provider of Lease that the job does not use it
	// (the record remembers the release: Record.Released).
	Release struct{ Lease terms.Lease }
	// Requeue: Lease ended in Run (through Fault, its provider saying
	// Detail) and the job goes back to auction: once the lease settled
	// (or the driver's wait for it passed), archive it and feed back
	// Reauctioned.
	Requeue struct {
		Lease  terms.Lease
		Run    terms.RunState
		Fault  terms.Fault
		Detail string
	}
	// CheckEvidence: check the succeeded run of Lease (its log); feed
	// back Evidence.
	CheckEvidence struct{ Lease terms.Lease }
	// RecordDispute: the settlement of Lease is given up, saying Reason:
	// record the dispute (the ledger; an archived lease's history); feed
	// back Disputed.
	RecordDispute struct {
		Lease  terms.Lease
		Reason string
	}
	// StopGang: the record is a gang job's (Job.Nodes > 1) and its lease
	// ended for good without success: stop the gang's other members (a
	// gang lives and dies together).
	StopGang struct{}
)

func (Persist) effect()       {}
func (StartAuction) effect()  {}
func (CancelAuction) effect() {}
func (GiveUp) effect()        {}
func (ArmTimer) effect()      {}
func (Watch) effect()         {}
func (StopLease) effect()     {}
func (Release) effect()       {}
func (Requeue) effect()       {}
func (CheckEvidence) effect() {}
func (RecordDispute) effect() {}
func (StopGang) effect()      {}
