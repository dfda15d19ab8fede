package lifecycle

import (
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Event is something that happened to a lease: a caller's request, a
// timer, or the result of an effect the driver carried out.
type Event interface{ event() }

// Events.
type (
	// Confirmed: the provider confirmed lease for job. It starts the
	// machine (on a zero Lease); a lease without an id or with an end
	// not after its start is ignored.
	Confirmed struct {
		Lease terms.Lease
		Job   terms.Job
	}
	// Moved: the provider moved the lease earlier (terms.Lease.Moved);
	// taken only while it Moves.
	Moved struct{ Lease terms.Lease }
	// MoveTold: the renter was told of the move to Lease; MoveUntold: it
	// could not be.
	MoveTold   struct{ Lease terms.Lease }
	MoveUntold struct{ Err string }
	// TimerDue: the timer armed last (ArmTimer) fired.
	TimerDue struct{}
	// StopRequested: stop the lease, ending it As (a terminal state).
	StopRequested Stop
	// Keep: the daemon is stopping; a lease still waiting for a start
	// ahead is parked for the next start instead of stopped.
	Keep struct{}
	// Prepared: the job's inputs, checkpoint and network are ready.
	Prepared struct{}
	// ExecStarted: the executor started the job on Backend; its Start
	// had returned At (zero: when the event is stepped). The event may be
	// stepped a while later on a busy host: the run is billed from At.
	ExecStarted struct {
		Backend string
		At      time.Time
	}
	// Failed: preparing or starting the job failed, or the driver did
	// (an internal error): the lease ends with Exit.
	Failed struct{ Exit Exit }
	// Exited: the job exited.
	Exited struct{ Exit Exit }
	// OutputsCollected: the job's outputs are collected.
	OutputsCollected struct{}
	// ReportDelivered: the renter answered the final report;
	// ReportFailed: it could not be reached.
	ReportDelivered struct{}
	ReportFailed    struct{ Err string }
	// ReportReleased: the renter answered the final report with its
	// signed word that it released (or cancelled) the lease before it
	// ran: there is no one to bill, and nothing to try again.
	ReportReleased struct{}
	// ReceiptCountersigned: the renter countersigned the receipt (and
	// the ledger holds it); ReceiptRefused: the renter, reached, refused
	// it; ReceiptFailed: the exchange failed otherwise.
	ReceiptCountersigned struct{}
	ReceiptRefused       struct{ Err string }
	ReceiptFailed        struct{ Err string }
	// Restarted: the daemon started again with this persisted state;
	// LastBeat is the last heartbeat it sent (how long the job ran).
	Restarted struct{ LastBeat time.Time }
	// Rebooked: the lease is booked on the calendar again; RebookFailed:
	// it could not be.
	Rebooked     struct{}
	RebookFailed struct{ Err string }
)

func (Confirmed) event()            {}
func (Moved) event()                {}
func (MoveTold) event()             {}
func (MoveUntold) event()           {}
func (TimerDue) event()             {}
func (StopRequested) event()        {}
func (Keep) event()                 {}
func (Prepared) event()             {}
func (ExecStarted) event()          {}
func (Failed) event()               {}
func (Exited) event()               {}
func (OutputsCollected) event()     {}
func (ReportDelivered) event()      {}
func (ReportFailed) event()         {}
func (ReportReleased) event()       {}
func (ReceiptCountersigned) event() {}
func (ReceiptRefused) event()       {}
func (ReceiptFailed) event()        {}
func (Restarted) event()            {}
func (Rebooked) event()             {}
func (RebookFailed) event()         {}

// Effect is what the driver does for a step, in order.
type Effect interface{ effect() }

// Effects.
type (
	// Persist: store the lease's state (and the driver's record).
	Persist struct{}
	// ArmTimer: fire TimerDue at At (replacing any armed timer).
	ArmTimer struct{ At time.Time }
	// AnnounceMove: tell the renter the lease moved to Lease; feed back
	// MoveTold or MoveUntold.
	AnnounceMove struct{ Lease terms.Lease }
	// StartHeartbeats: send heartbeats from now until Release.
	StartHeartbeats struct{}
	// Prepare: lay out the job's inputs, restore its checkpoint, set up
	// its network; feed back Prepared or Failed.
	Prepare struct{}
	// CancelPrepare: abandon the preparation under way (it then fails).
	CancelPrepare struct{}
	// StartExecutor: start the job; feed back ExecStarted or Failed.
	StartExecutor struct{}
	// Notify: tell the renter the lease's state (not final; no answer
	// needed).
	Notify struct{}
	// StopExecutor: stop the job, giving it Grace; Exited follows.
	StopExecutor struct{ Grace time.Duration }
	// Snapshot: save the job's checkpoint once more after its exit.
	Snapshot struct{}
	// CollectOutputs: collect the job's outputs; feed back
	// OutputsCollected.
	CollectOutputs struct{}
	// Release: stop the heartbeats, free what the run held (sealed
	// scratch, inputs, restored checkpoint, network), record the log's
	// digest, clear the devices' memory.
	Release struct{}
	// Free: give the lease's devices back to the calendar (the run
	// ended).
	Free struct{}
	// SendReport: send the final report; feed back ReportDelivered or
	// ReportFailed.
	SendReport struct{}
	// SendReceipt: send the receipt billing Start to End; feed back
	// ReceiptCountersigned, ReceiptRefused or ReceiptFailed.
	SendReceipt struct{ Start, End time.Time }
	// RecordDispute: record in the ledger that the settlement was given
	// up as a dispute.
	RecordDispute struct{ Reason string }
	// Purge: remove a no-persist lease's files (settled or given up).
	Purge struct{}
	// Count: count one Name (a metric).
	Count struct{ Name string }
	// Park: the lease stays pending in the store for the next start;
	// nothing more happens to it here.
	Park struct{}
	// Rebook: book the lease on the calendar again; feed back Rebooked or
	// RebookFailed.
	Rebook struct{}
	// KillOrphan: kill what the previous daemon left of the job.
	KillOrphan struct{}
)

func (Persist) effect()         {}
func (ArmTimer) effect()        {}
func (AnnounceMove) effect()    {}
func (StartHeartbeats) effect() {}
func (Prepare) effect()         {}
func (CancelPrepare) effect()   {}
func (StartExecutor) effect()   {}
func (Notify) effect()          {}
func (StopExecutor) effect()    {}
func (Snapshot) effect()        {}
func (CollectOutputs) effect()  {}
func (Release) effect()         {}
func (Free) effect()            {}
func (SendReport) effect()      {}
func (SendReceipt) effect()     {}
func (RecordDispute) effect()   {}
func (Purge) effect()           {}
func (Count) effect()           {}
func (Park) effect()            {}
func (Rebook) effect()          {}
func (KillOrphan) effect()      {}
