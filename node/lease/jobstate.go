package lease

import (
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
)

// jobState is a job as the tracker keeps it: the machine's record
// (jobmachine.Record: its phase, its current lease and how it runs, the
// decisions' inputs), which only jobmachine.Rules.Step changes, and what
// the tracker records beside it (the auction's call, telemetry, outputs,
// evidence, checkpoints, history). The API's job view is built from it
// (view); it is not the storage.
type jobState struct {
	jobmachine.Record
	jobFacts
}

// jobFacts are what the tracker records of a job beside the machine's
// record. Their fields are named as in api.JobView, which records stored
// before the machine existed, so they read as one.
type jobFacts struct {
	// The auction's call state, as its last auction left it (fold).
	Winner   string               `json:"winner,omitempty"`
	Bids     []terms.Ranked       `json:"bids,omitempty"`
	Attempts []terms.AwardAttempt `json:"attempts,omitempty"`
	Offers   int                  `json:"offers,omitempty"`
	Declines map[string]int       `json:"declines,omitempty"`
	Members  []terms.Lease        `json:"members,omitempty"`

	ObservedStart   time.Time                `json:"observed_start,omitempty"`
	ObservedEnd     time.Time                `json:"observed_end,omitempty"`
	ProviderClock   attest.ClockOffset       `json:"provider_clock,omitzero"`
	Heartbeats      *attest.HeartbeatSummary `json:"heartbeats,omitempty"`
	LastTelemetry   *attest.Heartbeat        `json:"last_telemetry,omitempty"`
	CostUSD         float64                  `json:"cost_usd"`
	History         []api.LeaseRecord        `json:"history,omitempty"`
	Outputs         []terms.OutputFile       `json:"outputs,omitempty"`
	OutputCount     int                      `json:"output_count,omitempty"`
	OutputsHash     string                   `json:"outputs_hash,omitempty"`
	OutputsArtifact string                   `json:"outputs_artifact,omitempty"`
	LogDigest       string                   `json:"log_digest,omitempty"`
	LogBytes        int64                    `json:"log_bytes,omitempty"`
	Evidence        string                   `json:"evidence,omitempty"`
	Kept            string                   `json:"kept,omitempty"`
	Checkpoint      *terms.Checkpoint        `json:"checkpoint,omitempty"`
	Checkpoints     []terms.Checkpoint       `json:"checkpoints,omitempty"`
	Restored        *terms.Checkpoint        `json:"restored,omitempty"`

	// reasonsFolded is how many of the auction's reasons for the job were
	// folded into its record (the auction forgets the job at a restart).
	reasonsFolded int
	// inlineLog is the current lease's whole log as its final report
	// carried it (wire.LeaseEvent.Log; nil: none, or not since the last
	// restart), for the evidence check.
	inlineLog []byte
}

// snapshot is a copy of s to read once t.mu is released (a save marshals
// it then): its archived leases (History), whose records change in place
// (a late receipt, a late report, a dispute), are a copy of its own. The
// other slices are only ever replaced or appended to.
func (s *jobState) snapshot() jobState {
	c := *s
	c.History = slices.Clone(s.History)
	return c
}

// view is the API's job view of s: a projection (a gang job's members are
// added by the tracker's View).
func (s *jobState) view() api.JobView {
	r, f := &s.Record, &s.jobFacts
	v := api.JobView{
		JobStatus: terms.JobStatus{Job: r.Job, State: r.Phase.State(), Lease: cloneLease(r.Lease), Winner: f.Winner,
			Bids: append([]terms.Ranked(nil), f.Bids...), Reasons: append([]string(nil), r.Reasons...),
			Attempts: append([]terms.AwardAttempt(nil), f.Attempts...), PostedAt: r.PostedAt, Offers: f.Offers,
			Members: append([]terms.Lease(nil), f.Members...)},
		Run: r.Run, ExitCode: r.ExitCode, Detail: r.Detail, Fault: r.Fault, Started: r.Started, Ended: r.Ended,
		ObservedStart: f.ObservedStart, ObservedEnd: f.ObservedEnd, ProviderClock: f.ProviderClock,
		Heartbeats: f.Heartbeats, LastTelemetry: f.LastTelemetry, Receipt: r.Receipt, Dispute: r.Dispute,
		CostUSD: f.CostUSD, History: append([]api.LeaseRecord(nil), f.History...), Outputs: f.Outputs,
		OutputCount: f.OutputCount, OutputsHash: f.OutputsHash, OutputsArtifact: f.OutputsArtifact,
		LogDigest: f.LogDigest, LogBytes: f.LogBytes, Evidence: f.Evidence, Kept: f.Kept,
		Checkpoint: f.Checkpoint, Checkpoints: append([]terms.Checkpoint(nil), f.Checkpoints...), Restored: f.Restored,
	}
	if f.Declines != nil {
		v.Declines = make(map[string]int, len(f.Declines))
		for k, n := range f.Declines {
			v.Declines[k] = n
		}
	}
	if len(v.Bids) == 0 {
		v.Bids = nil
	}
	if len(v.Reasons) == 0 {
		v.Reasons = nil
	}
	if len(v.Attempts) == 0 {
		v.Attempts = nil
	}
	if len(v.Members) == 0 {
		v.Members = nil
	}
	if len(v.History) == 0 {
		v.History = nil
	}
	if len(v.Checkpoints) == 0 {
		v.Checkpoints = nil
	}
	return v
}

func cloneLease(l *terms.Lease) *terms.Lease {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}

// foldLocked takes the auction's call state of a job (t.mu held): its
// bids, award attempts and offers are the tracker's facts; the job as the
// auction offered it and the reasons it gave since it was last folded go
// to the machine (Folded), whose step it returns. The auction's status is
// not the job's state, which is the machine's.
func (t *Tracker) foldLocked(key string, s *jobState, st terms.JobStatus) ready {
	s.Winner, s.Bids, s.Attempts, s.Offers, s.Declines, s.Members = st.Winner, st.Bids, st.Attempts, st.Offers, st.Declines, st.Members
	if s.Lease != nil {
		s.Winner = s.Lease.Provider
	}
	var said []string
	if n := len(st.Reasons); n > s.reasonsFolded {
		said = st.Reasons[s.reasonsFolded:]
		s.reasonsFolded = n
	} else if n < s.reasonsFolded {
		s.reasonsFolded = n // the auction forgot the job (a restart) and began again
	}
	return t.stepLocked(key, s, jobmachine.Folded{Job: st.Job, Reasons: said})
}
