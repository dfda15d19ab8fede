// Package lifecycle is a provider's lease as a deterministic state machine:
// Rules.Step(state, event, now) returns the next state and the effects a
// driver carries out (node/lease's Supervisor in the daemon, a simulator in
// tests). Step starts no goroutine, reads no clock and does no I/O; the
// driver executes the effects (persist, arm a timer, prepare and start the
// job, send reports and receipts...) and feeds their results back as
// events. It is modelled on etcd raft's Step and Nomad's pure scheduler:
// every decision about a lease lives here once, and can be tested without
// a network, a disk or an executor.
//
// The phases of a lease (Lease.Phase), and the events that move it on:
//
//	Confirmed ─► Waiting ──TimerDue (start came)──► Preparing ──Prepared──► Starting ──ExecStarted──► Running
//	              │  ▲ Moved / MoveTold                │ Failed               │ Failed                 │ StopRequested
//	              │  └──────────┘                      ▼                      ▼                        ▼
//	              │ Keep ─► Parked               (ended: see below)     (ended)                   Stopping
//	              │ StopRequested, MoveUntold,                                                       │
//	              │ TimerDue after its end                                  Running/Stopping ──Exited──► Collecting
//	              ▼                                                                                  │ OutputsCollected
//	            (ended) ◄──────────────────────────────────────────────────────────────────────────────┘
//
//	(ended) = Reporting ──ReportDelivered──► Receipting ──ReceiptCountersigned──► Settled
//	            ▲   │ ReportFailed                │ ReceiptFailed, ReceiptRefused
//	            │   ▼                             ▼
//	            └── Retrying ◄────────────────────┘   (until the settlement window closes: Abandoned;
//	                 TimerDue                           after MaxRefusals refusals: Disputed)
//
//	Reporting ──ReportReleased──► Settled (it never ran) or Disputed (it ran)
//
// A lease that ended before its start (stopped while waiting) is reported
// and then Settled with no receipt: it has nothing to bill. A lease whose
// start is taken up, or whose preparing ends, after its end is not run,
// and one whose job the executor started only after it is not called
// expired: a slow host's lateness is the provider's (failed, and its
// renter requeues the job), never the job's. Restarted (the
// daemon started again with the lease's persisted state) re-books a lease
// still waiting for a start ahead (Rebook, then Rebooked or RebookFailed),
// reports any other unfinished lease failed, and takes up an unsettled
// one's settlement again.
//
// Invariants, checked by the package's property test: the run state never
// moves back (terms.RunState.Follows); a lease ends (reaches a terminal
// run state) once and is settled, disputed or abandoned at most once, and
// nothing happens to it after that; no receipt is sent after the
// settlement window closed; a receipt's span lies inside the lease and,
// when the job ran inside the lease, inside the run.
package lifecycle

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Phase is where a lease is in its life on the provider: finer than its
// terms.RunState, which the renter and the API see.
type Phase string

// Phases (see the package doc's diagram).
const (
	Waiting    Phase = "waiting"    // confirmed, waiting for its start
	Parked     Phase = "parked"     // kept pending for the daemon's next start
	Preparing  Phase = "preparing"  // its start came: inputs, checkpoint, network being prepared
	Starting   Phase = "starting"   // the executor is starting the job
	Running    Phase = "running"    // the job runs
	Stopping   Phase = "stopping"   // the job was told to stop, with a grace period
	Collecting Phase = "collecting" // the job exited: its outputs are being collected
	Reporting  Phase = "reporting"  // ended: the final report is being sent
	Receipting Phase = "receipting" // the renter has the report: the receipt is being countersigned
	Retrying   Phase = "retrying"   // the settlement failed; tried again at Due
	Settled    Phase = "settled"    // receipt countersigned (or nothing to bill): done
	Disputed   Phase = "disputed"   // the renter refused the receipt for good: done
	Abandoned  Phase = "abandoned"  // not settled within the settlement window: done
)

// Final reports whether nothing more happens to a lease in phase p.
func (p Phase) Final() bool { return p == Settled || p == Disputed || p == Abandoned }

// Lease is a provider's lease as the machine knows it: the value a driver
// persists. Its first fields (lease to dispute) are named as in the API's
// provider lease view (api.ProviderLease), which records before this
// package stored, so they read as one.
type Lease struct {
	Lease    terms.Lease    `json:"lease"`
	Run      terms.RunState `json:"run"`
	Backend  string         `json:"backend,omitempty"`
	Started  time.Time      `json:"started,omitempty"`
	Ended    time.Time      `json:"ended,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
	Detail   string         `json:"detail,omitempty"`
	Fault    terms.Fault    `json:"fault,omitempty"`
	// Dispute says why the settlement was given up as a dispute.
	Dispute string `json:"dispute,omitempty"`

	Phase Phase `json:"phase,omitempty"`
	// Terms are what the rules need of the lease's job.
	Terms Terms `json:"terms"`
	// Stop is the first stop asked for (nil: none).
	Stop *Stop `json:"stop,omitempty"`
	// Told is the lease as its renter knows it while a move is not yet
	// told (nil: the renter knows Lease).
	Told *terms.Lease `json:"told,omitempty"`
	// Exit is the job's end while its outputs are collected.
	Exit *Exit `json:"exit,omitempty"`
	// Due is when the armed timer is due (the start, or a settlement
	// retry).
	Due time.Time `json:"due,omitzero"`
	// Failures and Wait are the settlement attempts failed in a row and
	// the last wait before a retry; Refusals the receipts the renter
	// refused.
	Failures int           `json:"failures,omitempty"`
	Wait     time.Duration `json:"wait,omitempty"`
	Refusals int           `json:"refusals,omitempty"`
}

// Terms are the job's terms the rules need.
type Terms struct {
	// Duration and Preemptible tell a backfill gap (a bronze job on a
	// lease shorter than itself) whose end is a preemption.
	Duration    time.Duration `json:"duration,omitempty"`
	Preemptible bool          `json:"preemptible,omitempty"`
	// NoPersist: the lease's files are purged once it is settled or
	// given up.
	NoPersist bool `json:"no_persist,omitempty"`
}

// TermsOf is job's terms.
func TermsOf(job terms.Job) Terms {
	return Terms{Duration: job.Duration, Preemptible: job.Preemptible, NoPersist: job.NoPersist}
}

// Stop is a stop asked for: the terminal state the lease ends in and why.
type Stop struct {
	As     terms.RunState `json:"as"`
	Detail string         `json:"detail,omitempty"`
}

// Exit is how a job ended, in the executor's words: the driver's
// translation of its result.
type Exit struct {
	// Started and Ended are the run's span as the executor saw it (zero
	// when it never started).
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	// Code is the exit status (-1 unknown).
	Code int `json:"code"`
	// How is how it ended; Reason the executor's own word for it ("" when
	// the executor failed with Err).
	How    How    `json:"how,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Err is the executor's (or preparation's) error; SpecFault that the
	// runtime refused the job's own spec (every provider would).
	Err       string `json:"err,omitempty"`
	SpecFault bool   `json:"spec_fault,omitempty"`
}

// How is how a job ended.
type How string

// Ways a job ends. Any other end (signalled, stopped, lost) is HowOther.
const (
	HowExited   How = "exited"   // on its own, with Exit.Code
	HowDeadline How = "deadline" // stopped at the lease's end
	HowOOM      How = "oom"      // over its memory limit
	HowOther    How = "other"
)

// Rules are the provider's policy: the only inputs to Step besides the
// state, the event and the time.
type Rules struct {
	// Grace is how long a stopped job has to checkpoint and exit.
	Grace time.Duration
	// SettleRetry is the first wait before a failed settlement is tried
	// again; it doubles up to SettleRetryMax. SettleWindow is how long
	// after the lease's end it is tried at all.
	SettleRetry, SettleRetryMax, SettleWindow time.Duration
	// MaxRefusals is how many receipts the renter may refuse before the
	// settlement is given up as a dispute.
	MaxRefusals int
	// RecoverDelay is how long after a restart a lease's settlement
	// waits (for the network).
	RecoverDelay time.Duration
}

// ShutdownDetail is the stop of a lease whose daemon is stopping.
const ShutdownDetail = "provider daemon shut down during the lease"

// EndedAhead reports whether l was stopped before its start came (evicted,
// released, its move untold): it never ran, has no start and nothing to
// bill, so it is reported but settled with no receipt.
func (l *Lease) EndedAhead() bool {
	return l.Run.Terminal() && l.Started.IsZero() && !l.Ended.IsZero() && l.Ended.Before(l.Lease.Start)
}

// Moves reports whether l can still move earlier: it waits for its start,
// stopped by no one.
func (l *Lease) Moves() bool { return l.Phase == Waiting && l.Stop == nil }

// ReceiptSpan is the span a receipt of lease l whose run went from started
// to ended states: the run clipped to the lease (a job stopped at the
// lease's end ends a moment after it; the renter refuses a receipt outside
// the lease, attest.CheckReceipt), and a positive interval: a lease that
// never ran (or died before its first heartbeat) is settled as a 1 ms span
// inside the lease (the whole lease, were it shorter).
func ReceiptSpan(l terms.Lease, started, ended time.Time) (time.Time, time.Time) {
	if started.Before(l.Start) {
		started = l.Start
	}
	if ended.After(l.End) {
		ended = l.End
	}
	if !ended.After(started) {
		if last := l.End.Add(-time.Millisecond); started.After(last) {
			started = last
		}
		if started.Before(l.Start) {
			started = l.Start
		}
		ended = started.Add(time.Millisecond)
		if ended.After(l.End) && l.End.After(l.Start) {
			ended = l.End
		}
	}
	return started, ended
}

// Classify maps how a job ended, and the stop asked for (nil: none), to
// its terminal run state, a detail and whose fault it was.
func Classify(e Exit, stop *Stop) (terms.RunState, string, terms.Fault) {
	switch {
	case stop != nil && stop.As == terms.RunFailed:
		return stop.As, stop.Detail, terms.FaultProvider // the provider stopped it (shut down)
	case stop != nil:
		return stop.As, stop.Detail, terms.FaultNone // preempted or cancelled as agreed
	case e.Err != "" && e.Reason == "" && e.SpecFault:
		// The runtime refused the job's own spec (its environment, a
		// command missing from its image or the host): every provider
		// would, so it is not requeued nor held against this one.
		return terms.RunFailed, e.Err, terms.FaultJob
	case e.Err != "" && e.Reason == "":
		return terms.RunFailed, e.Err, terms.FaultProvider
	case e.How == HowDeadline:
		return terms.RunExpired, "lease ended before the job did (stopped at the lease end)", terms.FaultJob
	case e.How == HowOOM:
		return terms.RunFailed, "killed: memory limit exceeded", terms.FaultJob
	case e.How == HowExited && e.Code == 0:
		return terms.RunSucceeded, "", terms.FaultNone
	case e.How == HowExited:
		return terms.RunFailed, fmt.Sprintf("exit code %d", e.Code), terms.FaultJob
	case e.Err != "":
		return terms.RunFailed, e.Err, terms.FaultProvider
	}
	return terms.RunFailed, "job ended: " + e.Reason, terms.FaultProvider
}

// outcome is the terminal state of a lease whose job ended with e: Classify,
// but a job the executor started only after its lease's end (a slow host)
// and that was stopped there at once had none of its lease: the lateness
// is the provider's, as for a lease not started at all (over), and its
// renter requeues the job. The end of a backfill gap shorter than the job
// (a bronze job reaching its lease's end) is a preemption, whose renter
// requeues the rest.
func (l *Lease) outcome(e Exit) (terms.RunState, string, terms.Fault) {
	state, detail, fault := Classify(e, l.Stop)
	if state == terms.RunExpired && !l.Started.IsZero() && !l.Started.Before(l.Lease.End) {
		return terms.RunFailed, fmt.Sprintf("lease was over (its end %s passed by %s) before the provider started the job",
			l.Lease.End.Format(time.RFC3339Nano), l.Started.Sub(l.Lease.End).Round(time.Millisecond)), terms.FaultProvider
	}
	if state == terms.RunExpired && l.Terms.Preemptible && l.Lease.End.Before(l.Lease.Start.Add(l.Terms.Duration)) {
		return terms.RunPreempted, "backfill gap ended before the job did", terms.FaultNone
	}
	if late := l.Started.Sub(l.Lease.Start); state == terms.RunExpired && !l.Started.IsZero() && late > LateStartSlack {
		// The job had its lease only from a late start (a slow host):
		// stopped at the end it was promised, it lost what the provider
		// took, and its renter requeues it.
		return terms.RunFailed, fmt.Sprintf("started %s into its lease (a slow start on the provider), stopped at the lease end",
			late.Round(time.Millisecond)), terms.FaultProvider
	}
	return state, detail, fault
}

// LateStartSlack is how late into its lease a job may start before a stop
// at the lease's end is the provider's fault rather than the job's (a job
// that declared too short a duration).
const LateStartSlack = 500 * time.Millisecond

// StoppedEarly reports whether a job that ended with e was stopped before
// it was done through no fault of its own (preempted, drained, its backfill
// gap over): its checkpoint is taken once more after it exited.
func (l *Lease) StoppedEarly(e Exit) bool {
	state, _, _ := l.outcome(e)
	return state == terms.RunPreempted
}
