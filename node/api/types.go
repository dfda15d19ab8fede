// Package api is the daemon's control API as its clients see it: the
// request and response types of every /v1 endpoint and the Client that
// calls them over the daemon's unix socket. The CLI (and any other tool)
// uses this package, never the daemon's internals.
package api

import (
	"path/filepath"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// Control API payloads (JSON). These are the daemon's public contract with
// the CLI.

// APIVersion prefixes every control API path.
const APIVersion = "/v1"

// StatusInfo is the answer of GET /v1/status.
type StatusInfo struct {
	Version    string            `json:"version"`
	PeerID     string            `json:"peer_id"`
	Addrs      []string          `json:"addrs"`
	Peers      int               `json:"peers"`
	DataDir    string            `json:"data_dir"`
	Uptime     string            `json:"uptime"`
	Region     string            `json:"region"`
	Provider   bool              `json:"provider"`
	GPUSource  string            `json:"gpu_source,omitempty"`
	GPUs       []terms.GPU       `json:"gpus"`
	Driver     string            `json:"driver,omitempty"`
	CUDA       string            `json:"cuda,omitempty"`
	Executor   string            `json:"executor,omitempty"`
	Advertised *terms.Capability `json:"advertised,omitempty"`
	// Draining: the provider takes no new work (gpumesh provider drain,
	// or a daemon stopping).
	Draining bool `json:"draining,omitempty"`

	// Reachability is public, private or unknown: AutoNAT's verdict, or
	// the configured one.
	Reachability string `json:"reachability"`
}

// PeerInfo is one connected peer.
type PeerInfo struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"`
}

// ProviderView is one provider GET /v1/providers found: its capability
// record (with FreeGPUs, the GPUs it had free when it issued the record),
// what one GPU-hour starting now costs there at that occupancy
// (auction.PriceNow), and its reliability as this node's
// reputation book scores it: what its bids are ranked with.
type ProviderView struct {
	terms.Capability
	PriceNow    float64 `json:"price_now"`
	Reliability float64 `json:"reliability"`
}

// ErrorBody is the JSON body of every non-2xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// SocketName is the control socket's file name inside a data dir.
const SocketName = "gpumesh.sock"

// SocketTempName is where, inside a data dir, the daemon binds its control
// socket before it moves it to SocketName, listening and private: a socket
// at SocketName always has a daemon listening behind it (or had, until it
// died), and its appearance is what a client waits for (WaitReady).
const SocketTempName = "gpumesh.new"

// SocketPath is the control socket of the daemon whose data dir is dataDir.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, SocketName) }

// PostJobRequest is the body of POST /v1/jobs. The daemon fills Owner,
// OwnerAddrs, ID (if empty) and CreatedAt. The call returns when the auction
// has ended (leased or unplaceable).
type PostJobRequest struct {
	Job terms.Job `json:"job"`
	// Task, instead of Job, is the text of a job file: a task file or a
	// YAML (or JSON) job spec, which the daemon converts with
	// taskfile.Convert. TaskName names it in errors.
	Task     string `json:"task,omitempty"`
	TaskName string `json:"task_name,omitempty"`
	// Queue posts the job even when no provider this node knows could
	// ever run it (its GPU model, region, price... fit none of their
	// records), to wait for providers that may appear; without it such a
	// post fails at once saying why.
	Queue bool `json:"queue,omitempty"`
}

// ConvertTaskRequest is the body of POST /v1/tasks/convert: the daemon
// answers the terms.Job a job file's text stands for (what POST /v1/jobs
// would post), or a 400 naming the file's line at fault.
type ConvertTaskRequest struct {
	Task     string `json:"task"`
	TaskName string `json:"task_name,omitempty"`
}

// JobView is the renter's full view of one job (GET /v1/jobs/{id}; with
// ?wait=D, up to a minute, a long poll that answers at the view's next
// change or after D).
type JobView struct {
	terms.JobStatus
	// Run is the execution state of the current lease (empty before one).
	Run terms.RunState `json:"run,omitempty"`
	// ExitCode of the job's command once it ended.
	ExitCode *int   `json:"exit_code,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// Fault says who caused an unsuccessful run: the job or the provider.
	Fault terms.Fault `json:"fault,omitempty"`
	// Started/Ended are when the job ran on the provider, as it reported.
	Started time.Time `json:"started,omitempty"`
	Ended   time.Time `json:"ended,omitempty"`
	// ObservedStart/ObservedEnd are when this renter saw the run start (its
	// first report or heartbeat) and end, by its own clock: the bounds of
	// what it countersigns (attest.BillableSeconds).
	ObservedStart time.Time `json:"observed_start,omitempty"`
	ObservedEnd   time.Time `json:"observed_end,omitempty"`
	// ProviderClock is how far this renter measured the provider's clock
	// ahead of its own, from the times the provider signed: how the lease's
	// window is moved onto ObservedStart/End's clock (attest.CheckBilled).
	ProviderClock attest.ClockOffset `json:"provider_clock,omitzero"`
	// Heartbeats summarises the verified telemetry received so far.
	Heartbeats *attest.HeartbeatSummary `json:"heartbeats,omitempty"`
	// LastTelemetry is the latest verified heartbeat.
	LastTelemetry *attest.Heartbeat `json:"last_telemetry,omitempty"`
	// Receipt is the two-party signed completion receipt, once settled.
	Receipt *attest.Receipt `json:"receipt,omitempty"`
	// Dispute says why this renter gave up settling the current lease:
	// it refused its provider's receipt time after time (the ledger holds
	// a dispute entry saying so).
	Dispute string `json:"dispute,omitempty"`
	// CostUSD is what the renter owes for this job so far (settled leases).
	CostUSD float64 `json:"cost_usd"`
	// History lists earlier leases of this job (e.g. preempted attempts).
	History []LeaseRecord `json:"history,omitempty"`
	// Outputs lists the result files the provider reported, with checksums:
	// the first wire.MaxEventOutputs of OutputCount files, whose whole
	// manifest hashes to OutputsHash (terms.ManifestHash; the receipt's
	// ResultHash must name it). The outputs stream serves the whole list.
	Outputs     []terms.OutputFile `json:"outputs,omitempty"`
	OutputCount int                `json:"output_count,omitempty"`
	OutputsHash string             `json:"outputs_hash,omitempty"`
	// OutputsArtifact is the artifact id of the outputs directory (fetch
	// it with gpumesh artifact get).
	OutputsArtifact string `json:"outputs_artifact,omitempty"`
	// LogDigest and LogBytes name the job's log as the provider's final
	// report did (SHA-256, hex); Evidence is what the renter made of a
	// succeeded run: "" until checked, "log verified (N bytes)" once its
	// own fetch of the log matched, else why the run was not accepted.
	LogDigest string `json:"log_digest,omitempty"`
	LogBytes  int64  `json:"log_bytes,omitempty"`
	Evidence  string `json:"evidence,omitempty"`
	// Kept is where this renter keeps a no-persist job's log and outputs
	// of its current lease, once taken from the provider (which deletes
	// its copies at settlement); logs and outputs are served from there.
	Kept string `json:"kept,omitempty"`
	// Checkpoint is the newest good checkpoint of the job (any attempt),
	// held by this renter; Checkpoints are the ones kept, newest first
	// (at most terms.MaxRestore): a requeued attempt restores them.
	Checkpoint  *terms.Checkpoint  `json:"checkpoint,omitempty"`
	Checkpoints []terms.Checkpoint `json:"checkpoints,omitempty"`
	// Restored is the checkpoint the current lease started from, as its
	// provider reported (nil: it started fresh).
	Restored *terms.Checkpoint `json:"restored,omitempty"`
	// Gang lists a gang job's members (Job.Nodes > 1) by rank, each on
	// its latest lease; the record's own lease fields are rank 0's, and
	// CostUSD is every member's.
	Gang []GangMember `json:"gang,omitempty"`
}

// GangMember is one member of a gang job as its renter sees it: its rank,
// its latest lease and how that lease runs or ended.
type GangMember struct {
	Rank     int            `json:"rank"`
	Provider string         `json:"provider"`
	LeaseID  string         `json:"lease_id"`
	Attempt  int            `json:"attempt"`
	Price    float64        `json:"price"`
	Run      terms.RunState `json:"run,omitempty"`
	// Fault says who caused an unsuccessful run (as JobView.Fault).
	Fault   terms.Fault `json:"fault,omitempty"`
	Detail  string      `json:"detail,omitempty"`
	Started time.Time   `json:"started,omitempty"`
	Ended   time.Time   `json:"ended,omitempty"`
	// Settled says the lease's receipt is countersigned; CostUSD is its
	// amount (each member lease settles with its own receipt).
	Settled bool    `json:"settled,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
	// Checkpoint is the newest checkpoint of this rank held.
	Checkpoint *terms.Checkpoint `json:"checkpoint,omitempty"`
}

// Leases are the job's leases in the order they were awarded: its
// history, then the current lease. Attempt N of a job (gpumesh job logs
// --attempt N, the attempts table of job status) is Leases()[N-1].
func (v *JobView) Leases() []terms.Lease {
	out := make([]terms.Lease, 0, len(v.History)+1)
	for _, r := range v.History {
		out = append(out, r.Lease)
	}
	if v.Lease != nil {
		out = append(out, *v.Lease)
	}
	return out
}

// LeaseRecord is one lease of a job and how it ended.
type LeaseRecord struct {
	Lease    terms.Lease    `json:"lease"`
	Run      terms.RunState `json:"run"`
	Detail   string         `json:"detail,omitempty"`
	CostUSD  float64        `json:"cost_usd"`
	Started  time.Time      `json:"started,omitempty"`
	Ended    time.Time      `json:"ended,omitempty"`
	Attempt  int            `json:"attempt"`
	Receipt  bool           `json:"receipt"`
	ExitCode *int           `json:"exit_code,omitempty"`
	Fault    terms.Fault    `json:"fault,omitempty"`
	// Checkpoint is the last good checkpoint the attempt left (nil: none);
	// Restored is the one it started from.
	Checkpoint *terms.Checkpoint `json:"checkpoint,omitempty"`
	Restored   *terms.Checkpoint `json:"restored,omitempty"`
	// Dispute says why the attempt's settlement was given up (JobView).
	Dispute string `json:"dispute,omitempty"`
}

// BidsView is GET /v1/jobs/{id}/bids: ranked bids and why the winner won.
type BidsView struct {
	JobID string         `json:"job_id"`
	Bids  []terms.Ranked `json:"bids"`
	// Explain names the bid that holds the lease and the rule that gave
	// it the lease (auction.Explain).
	Explain terms.Explanation `json:"explain"`
	// Declines counts why providers did not bid, by Ineligible.Kind.
	Declines map[string]int `json:"declines,omitempty"`
}

// ProviderStatsView is GET /v1/provider/stats.
type ProviderStatsView struct {
	terms.ProviderStats
	Enabled    bool               `json:"enabled"`
	GPUs       int                `json:"gpus"`
	Running    []ProviderLease    `json:"running"`
	Recent     []ProviderLease    `json:"recent"`
	Reputation attest.ProviderRep `json:"reputation"`
	// LedgerEarnedUSD is the settled earnings recorded in the ledger.
	LedgerEarnedUSD float64 `json:"ledger_earned_usd"`
	// UtilizationPct is the mean GPU utilisation over running leases' last
	// heartbeats.
	UtilizationPct float64 `json:"utilization_pct"`
	// P95JobSeconds is the 95th percentile run time of finished leases.
	P95JobSeconds float64 `json:"p95_job_seconds"`
	// USDPerGPUHour is the mean settled price.
	USDPerGPUHour float64 `json:"usd_per_gpu_hour"`
	// Drain is the drain's progress while the provider drains.
	Drain *DrainView `json:"drain,omitempty"`
	// Limits is the thermal and power watch over running work.
	Limits LimitsView `json:"limits"`
}

// ProviderSample is one point of a provider's recent past: what its
// stats said then (ProviderStatsView's fields of the same names).
type ProviderSample struct {
	Time            time.Time `json:"time"`
	Occupancy       float64   `json:"occupancy"`
	Running         int       `json:"running"`
	EarningsUSD     float64   `json:"earnings_usd"`
	LedgerEarnedUSD float64   `json:"ledger_earned_usd"`
}

// ProviderHistoryView is GET /v1/provider/history: a sample every Every
// over the last day (kept in memory: since the daemon started at most),
// oldest first, the last one taken at the call.
type ProviderHistoryView struct {
	Every   time.Duration    `json:"every"`
	Samples []ProviderSample `json:"samples"`
}

// LimitsView is a provider's last GPU sensor reading against its policy's
// limits (0 = none) and what the limits did.
type LimitsView struct {
	TempC     int `json:"temp_c"`
	PowerW    int `json:"power_w"`
	MaxTempC  int `json:"max_temp_c,omitempty"`
	MaxPowerW int `json:"max_power_w,omitempty"`
	// Over is "thermal" or "power" while a limit is exceeded (the provider
	// does not bid then), "" otherwise.
	Over string `json:"over,omitempty"`
	// Breaches counts the samples over a limit; Preempted the preemptible
	// leases stopped because of them.
	Breaches  int `json:"breaches"`
	Preempted int `json:"preempted"`
}

// ProviderLease is a provider's view of one lease it serves.
type ProviderLease struct {
	Lease    terms.Lease    `json:"lease"`
	Run      terms.RunState `json:"run"`
	Backend  string         `json:"backend,omitempty"`
	Started  time.Time      `json:"started,omitempty"`
	Ended    time.Time      `json:"ended,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
	Detail   string         `json:"detail,omitempty"`
	Fault    terms.Fault    `json:"fault,omitempty"`
	// Dispute says why the provider gave up settling the lease: its
	// renter refused its receipt time after time (the ledger holds a
	// dispute entry saying so).
	Dispute string `json:"dispute,omitempty"`
}

// LedgerVerifyView is GET /v1/ledger/verify on success. On tampering the
// call fails with status 409 and an error naming the first bad entry.
type LedgerVerifyView = record.VerifyReport

// ReputationView is GET /v1/reputation/{peer}.
type ReputationView struct {
	Peer string             `json:"peer"`
	Rep  attest.ProviderRep `json:"reputation"`
	// GPU is its GPU challenge standing per model family (gpumesh verify).
	GPU []attest.GPUStanding `json:"gpu,omitempty"`
}

// ManifestHeader carries the JSON []terms.OutputFile of GET
// /v1/jobs/{id}/outputs, whose body is the outputs bundle (see
// wire.ExtractBundle).
const ManifestHeader = "X-Gpumesh-Manifest"

// VerifyRequest asks the daemon to challenge a provider's GPUs (all, or
// Device: a UUID or an index in its capability record). N and K override
// the challenge size (diagnostics; both or neither).
type VerifyRequest struct {
	Peer   string `json:"peer"`
	Device string `json:"device,omitempty"`
	N      int    `json:"n,omitempty"`
	K      int    `json:"k,omitempty"`
}

// VerifyResult is one device's challenge: its verdict, or why there is
// none (NoVerdict: busy or rate-limited, ask later).
type VerifyResult struct {
	Device    string            `json:"device"`
	Model     string            `json:"model"`
	Verdict   *gpuproof.Verdict `json:"verdict,omitempty"`
	Error     string            `json:"error,omitempty"`
	NoVerdict bool              `json:"no_verdict,omitempty"`
}
