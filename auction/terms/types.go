// Package terms is the market's vocabulary: the nouns that cross the wire
// or the control API (jobs with their SLAs, GPUs, policies, capability
// records, bids, awards, leases, run states, faults, checkpoints, a gang's
// terms, the renter's and provider's status views), each with its own
// validity (Job.Validate, ValidID, Lease.Moved's rule, ...) and, for the
// signed messages, their encoding under attest/sign (EncodeBid,
// DecodeBidMessage, SealCapability, ...).
//
// It holds no rules of the market (eligibility, pricing, ranking, the
// calendar: package auction) and no engines: no goroutines and no clock
// but the explicit now its callers pass.
package terms

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/auction/gpumodel"
)

// Tier is a job's service level.
type Tier string

// Service tiers, from most to least protected.
const (
	Gold   Tier = "gold"   // reserved, low latency, may preempt bronze
	Silver Tier = "silver" // on demand
	Bronze Tier = "bronze" // interruptible / spot
)

// GPU is one device a provider offers.
type GPU struct {
	Model  string `json:"model" yaml:"model"`
	VRAMGB int    `json:"vram_gb" yaml:"vram_gb"`
	UUID   string `json:"uuid,omitempty" yaml:"uuid,omitempty"`
	// Detected is true when the device was read from the driver (NVML) and
	// false when it was declared in the provider's config. The provider
	// sets it itself, so it is informational only: eligibility, pricing,
	// ranking and discovery ignore it (TestDetectedFlagGivesNoAdvantage).
	Detected bool `json:"detected" yaml:"-"`
	// Isolation is how a slice of the device is enforced when the
	// provider's policy sells it in slices (Policy.Slices): IsolationMPS,
	// IsolationMIG or IsolationNone; empty for a device sold whole. The
	// provider's runtime sets it from what it can enforce, not its config,
	// and a job's Isolation picks among them.
	Isolation string `json:"isolation,omitempty" yaml:"-"`
	// MIG is the device's Multi-Instance GPU state as the driver reports
	// it; nil on a device without MIG (or a declared one).
	MIG *MIG `json:"mig,omitempty" yaml:"-"`
}

// MIG is a device's Multi-Instance GPU state. In MIG mode CUDA sees only
// the device's MIG instances, never the device itself, so such a device is
// sold as its instances: one instance per slice (SliceRule.Count is their
// count), or its one instance to a whole-GPU job. The instances are the
// partition its owner made (nvidia-smi mig); gpumesh creates none.
type MIG struct {
	// Enabled is the current mode; Pending the mode after the next GPU
	// reset (they differ while a change waits for one).
	Enabled bool `json:"enabled"`
	Pending bool `json:"pending,omitempty"`
	// Instances are the MIG devices, in the driver's order: a sliced
	// device's slice k is its instance k.
	Instances []MIGInstance `json:"instances,omitempty"`
}

// MIGInstance is one MIG device: its UUID ("MIG-..."), profile (such as
// "3g.40gb") and memory.
type MIGInstance struct {
	UUID     string `json:"uuid"`
	Profile  string `json:"profile,omitempty"`
	MemoryMB int    `json:"memory_mb"`
}

// MaxMIGInstances bounds the MIG devices of one GPU (NVIDIA's largest
// have 7).
const MaxMIGInstances = 8

// Partitioned reports whether m is a device in MIG mode: then CUDA sees
// only its instances (nil: no MIG).
func (m *MIG) Partitioned() bool { return m != nil && m.Enabled }

// Slice isolation: how a provider keeps the jobs sharing one device apart
// (GPU.Isolation), and which of them a job takes (Job.Isolation).
const (
	// IsolationNone is accounting only: the slices share the device
	// unchecked (declared GPUs, where there is no driver to enforce one).
	IsolationNone = "none"
	// IsolationMPS is CUDA MPS with a pinned device memory limit and an
	// active thread percentage set to the slice's fraction.
	IsolationMPS = "mps"
	// IsolationMIG is a MIG instance per slice.
	IsolationMIG = "mig"
	// IsolationAny is a job's default: any slice will do, enforced or not.
	IsolationAny = "any"
)

// GPUFractions are the fractions of one device a job may ask for
// (Job.GPUFraction), the sizes of the slices a device may be cut into
// (SliceCounts) allowing: an eighth, a quarter and a half.
var GPUFractions = []float64{0.125, 0.25, 0.5}

// SliceCounts are how many equal slices a provider may cut a device into
// (SliceRule.Count).
var SliceCounts = []int{2, 4, 8}

// BilledGPUs is how many GPUs count devices amount to when each is held
// at fraction (0: whole devices): what a lease is priced, billed and
// counted against a provider's capacity by. A quarter of one device is
// 0.25.
func BilledGPUs(count int, fraction float64) float64 {
	if fraction > 0 && fraction < 1 {
		return float64(count) * fraction
	}
	return float64(count)
}

// LeaseCost is what count devices at fraction cost at price per GPU-hour
// over d: a slice pays its fraction of the device's price.
func LeaseCost(price float64, count int, fraction float64, d time.Duration) float64 {
	if d <= 0 || math.IsNaN(price) {
		return 0
	}
	return price * BilledGPUs(count, fraction) * d.Hours()
}

// Identity is the device's canonical model: its name, sized by its VRAM
// where the name does not say (gpumodel.Device). Matching a request,
// grouping devices of one model and counting them all go through it.
func (g GPU) Identity() gpumodel.Model { return gpumodel.Device(g.Model, g.VRAMGB) }

// DeviceName is how device i of a GPU list is named between peers (GPU
// challenges, scrubbing): its UUID, or its index when it has none
// (declared GPUs).
func DeviceName(gpus []GPU, i int) string {
	if i >= 0 && i < len(gpus) && gpus[i].UUID != "" {
		return gpus[i].UUID
	}
	return strconv.Itoa(i)
}

// Window is a recurring weekly time window, e.g. nights or weekends.
// From and To are "HH:MM" in the policy's time zone; a window whose To is not
// after its From wraps past midnight. Days lists the weekdays on which the
// window opens ("mon".."sun"); empty means every day.
type Window struct {
	Days []string `json:"days,omitempty" yaml:"days,omitempty"`
	From string   `json:"from" yaml:"from"`
	To   string   `json:"to" yaml:"to"`
}

// Interval is a half-open span of absolute time [Start, End).
type Interval struct {
	Start time.Time `json:"start" yaml:"start"`
	End   time.Time `json:"end" yaml:"end"`
}

// Policy is what a provider is willing to sell, and on what terms.
type Policy struct {
	// PriceFloor is the minimum price per GPU-hour, in USD.
	PriceFloor float64 `json:"price_floor" yaml:"price_floor"`
	// PeakWindows cost PeakMultiplier times the floor (default 1.5).
	PeakWindows    []Window `json:"peak_windows,omitempty" yaml:"peak_windows,omitempty"`
	PeakMultiplier float64  `json:"peak_multiplier,omitempty" yaml:"peak_multiplier,omitempty"`
	// OccupancySurcharge raises the price linearly with occupancy: at full
	// occupancy the price is (1+OccupancySurcharge) times the base.
	OccupancySurcharge float64 `json:"occupancy_surcharge,omitempty" yaml:"occupancy_surcharge,omitempty"`
	// Availability lists when the machine is for sale; empty means always.
	Availability []Window `json:"availability,omitempty" yaml:"availability,omitempty"`
	// Reserved lists absolute spans the owner keeps for itself (gaps between
	// them are sold as backfill).
	Reserved []Interval `json:"reserved,omitempty" yaml:"reserved,omitempty"`
	// Timezone is an IANA zone name for the windows; empty means UTC.
	Timezone string `json:"timezone,omitempty" yaml:"timezone,omitempty"`
	// AllowedWorkloads lists accepted workload kinds (inference, training,
	// batch, eval, sweep...); empty means any.
	AllowedWorkloads []string `json:"allowed_workloads,omitempty" yaml:"allowed_workloads,omitempty"`
	// AcceptPreemptible: whether interruptible (bronze) work is accepted.
	AcceptPreemptible bool `json:"accept_preemptible" yaml:"accept_preemptible"`
	// AllowPreemption: whether gold work may preempt running bronze work here.
	AllowPreemption bool `json:"allow_preemption" yaml:"allow_preemption"`
	// MaxTempC and MaxPowerW: above these the provider does not bid (0 = no limit).
	MaxTempC  int `json:"max_temp_c,omitempty" yaml:"max_temp_c,omitempty"`
	MaxPowerW int `json:"max_power_w,omitempty" yaml:"max_power_w,omitempty"`
	// MaxLease caps a single lease's length (0 = no cap).
	MaxLease time.Duration `json:"max_lease,omitempty" yaml:"max_lease,omitempty"`
	// NoPersist is whether no-persist jobs (Job.NoPersist) are taken: ""
	// takes none, NoPersistOffer takes them beside others,
	// NoPersistRequire takes no others.
	NoPersist string `json:"no_persist,omitempty" yaml:"no_persist,omitempty"`
	// Sealed says the provider runs sealed jobs (Job.Sealed): it can
	// mount a tmpfs for each one's plaintext (it runs as root). Its daemon
	// finds it out (runtime.CanSeal), whatever a config says.
	Sealed bool `json:"sealed,omitempty" yaml:"-"`
	// Slices sells devices in slices, to jobs that ask for a fraction of
	// one (Job.GPUFraction): several such jobs share a device at once,
	// each on its own slices. A device no rule names is sold whole only,
	// and a sliced device holds either one whole-GPU lease or slices at
	// any instant, never both.
	Slices []SliceRule `json:"slices,omitempty" yaml:"slices,omitempty"`
	// InterruptibleDiscount takes this share off the price of a job the
	// provider may interrupt (Job.Preemptible: bronze jobs by default),
	// e.g. 0.3 for 30 % off; 0 prices it as any other. It applies to the
	// floor too: an interruptible job's floor is PriceFloor×(1−discount).
	InterruptibleDiscount float64 `json:"interruptible_discount,omitempty" yaml:"interruptible_discount,omitempty"`
}

// SliceRule cuts each of Devices (indices into the provider's GPUs) into
// Count equal slices (one of SliceCounts): a slice is 1/Count of the
// device's memory and compute.
type SliceRule struct {
	Devices []int `json:"devices" yaml:"devices"`
	Count   int   `json:"count" yaml:"count"`
}

// SliceCount is how many slices the policy cuts device d into: 0 when it
// is sold whole.
func (p Policy) SliceCount(d int) int {
	for _, r := range p.Slices {
		if slices.Contains(r.Devices, d) {
			return r.Count
		}
	}
	return 0
}

// SliceMap is the policy's slicing as device index → slice count (nil when
// it sells every device whole): what the provider's calendar books slices
// by (auction.Calendar.SetSlices).
func (p Policy) SliceMap() map[int]int {
	var m map[int]int
	for _, r := range p.Slices {
		for _, d := range r.Devices {
			if m == nil {
				m = map[int]int{}
			}
			m[d] = r.Count
		}
	}
	return m
}

// Policy.NoPersist values. A provider that offers no-persist jobs keeps
// nothing of them past their lease's settlement (logs, outputs, staged
// checkpoints), stores none of their outputs as artifacts, keeps their
// memory from swap, and says so in its receipts: a provider's operator
// opts in, as its host must allow it.
const (
	NoPersistOffer   = "offer"
	NoPersistRequire = "require"
)

// Capability is a provider's signed advertisement, stored in the DHT.
type Capability struct {
	Peer        string   `json:"peer"`
	Addrs       []string `json:"addrs,omitempty"`
	Region      string   `json:"region"`
	GPUs        []GPU    `json:"gpus"`
	Policy      Policy   `json:"policy"`
	Datasets    []string `json:"datasets,omitempty"`
	Fingerprint string   `json:"fingerprint,omitempty"` // hash of the signed hardware fingerprint
	Driver      string   `json:"driver,omitempty"`
	// Containers is what the provider's container engine can do with
	// image jobs (see ContainerSupport).
	Containers ContainerSupport `json:"containers,omitempty"`
	CUDA       string           `json:"cuda,omitempty"`
	// FreeGPUs is how many of GPUs no lease holds at IssuedAt, as the
	// provider's calendar says (none while it drains); the provider renews
	// its record when the number changes. Nil in a record that does not
	// say (an older provider's).
	FreeGPUs  *int      `json:"free_gpus,omitempty"`
	Seq       uint64    `json:"seq"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Artifacts are the complete artifacts the provider's store holds
	// (most recently used first, at most MaxAdvertisedArtifacts): a
	// public one by its id, a private one by its HeldToken (never its id);
	// the daemon takes them from its store, they are not configured.
	Artifacts []string `json:"artifacts,omitempty"`
}

// MaxAdvertisedArtifacts bounds Capability.Artifacts.
const MaxAdvertisedArtifacts = 64

// RunSpec is what a job runs: a container image and command, or a command.
type RunSpec struct {
	Image   string            `json:"image,omitempty" yaml:"image,omitempty"`
	Command []string          `json:"command" yaml:"command"`
	Env     map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	// Outputs is a directory, relative to the job's work dir, whose files are
	// returned to the renter.
	Outputs string `json:"outputs,omitempty" yaml:"outputs,omitempty"`
	// MemoryMB caps the job's memory where the runtime can enforce it.
	MemoryMB int `json:"memory_mb,omitempty" yaml:"memory_mb,omitempty"`
	// Inputs are artifacts the job reads, by name (NAME → artifact id):
	// the provider fetches them (the job's owner is the origin) and
	// exposes them read-only before the job starts.
	Inputs map[string]string `json:"inputs,omitempty" yaml:"inputs,omitempty"`
	// ImageArtifact is an artifact holding Image as a `docker save`
	// tarball: a provider without the image loads it from there.
	ImageArtifact string `json:"image_artifact,omitempty" yaml:"image_artifact,omitempty"`
	// ServicePort, when set, makes the job a service replica: a long-running
	// server listening on this port (on the job's own loopback) that the
	// renter reaches through the provider over libp2p (wire.ProtoService),
	// never through a public port.
	ServicePort int `json:"service_port,omitempty" yaml:"service_port,omitempty"`
}

// Artifacts returns the distinct artifact ids the job needs: its inputs
// (sorted by name) and its image artifact.
func (r *RunSpec) Artifacts() []string {
	names := make([]string, 0, len(r.Inputs))
	for n := range r.Inputs {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []string
	for _, n := range names {
		if !slices.Contains(out, r.Inputs[n]) {
			out = append(out, r.Inputs[n])
		}
	}
	if r.ImageArtifact != "" && !slices.Contains(out, r.ImageArtifact) {
		out = append(out, r.ImageArtifact)
	}
	return out
}

// Job is a renter's request with its SLA.
type Job struct {
	ID    string `json:"id" yaml:"id,omitempty"`
	Owner string `json:"owner" yaml:"-"`
	// OwnerAddrs are the renter's addresses as it announces them. Anyone
	// can fill them, so providers never dial them (see auction.Transport.SendBid);
	// they are kept for older peers.
	OwnerAddrs []string `json:"owner_addrs,omitempty" yaml:"-"`
	Tier       Tier     `json:"tier" yaml:"tier"`
	// MaxPrice is the most the renter pays per GPU-hour, in USD.
	MaxPrice float64 `json:"max_price" yaml:"max_price"`
	GPUCount int     `json:"gpu_count" yaml:"gpu_count"`
	// Nodes, when above 1, makes the job a gang: Nodes members on as many
	// distinct providers, GPUCount GPUs each, placed all or nothing and
	// living and dying together (see Gang). 0 or 1: one provider.
	Nodes int `json:"nodes,omitempty" yaml:"nodes,omitempty"`
	// GPUFraction, when set, asks for that fraction of one device (one of
	// GPUFractions, with GPUCount 1) instead of whole devices: the job
	// shares the device with others, each on its own slices of a device
	// its provider sells in slices (Policy.Slices), and pays that fraction
	// of the price (BilledGPUs). MinVRAMGB is then the slice's memory.
	GPUFraction float64 `json:"gpu_fraction,omitempty" yaml:"gpu_fraction,omitempty"`
	// Isolation is how the job's slice must be enforced: IsolationMPS,
	// IsolationMIG, or IsolationAny (or empty: any, IsolationNone
	// included). Only a fractional job sets it.
	Isolation string   `json:"isolation,omitempty" yaml:"isolation,omitempty"`
	MinVRAMGB int      `json:"min_vram_gb,omitempty" yaml:"min_vram_gb,omitempty"`
	GPUModels []string `json:"gpu_models,omitempty" yaml:"gpu_models,omitempty"`
	// Region is a residency constraint: a region ("eu-west") or a prefix of
	// regions ("eu"). Empty means anywhere. It is hard: only compliant
	// providers may bid.
	Region string `json:"region,omitempty" yaml:"region,omitempty"`
	// MaxRTT and Near make the job latency-sensitive (LatencySensitive):
	// its renter measures the round-trip time to each bidder itself
	// (libp2p ping from the renter's host; a provider's word is never
	// taken) and ranks bids by it (auction.RTTFactor). MaxRTT is a hard bound: a
	// bid whose provider's measured RTT exceeds it, or that the renter
	// could not measure within the bid window, is rejected. 0 means none;
	// else in [MinMaxRTT, MaxMaxRTT].
	MaxRTT time.Duration `json:"max_rtt,omitempty" yaml:"max_rtt,omitempty"`
	// Near is where the job's clients are: a region, matched as Region is
	// ("eu" is near "eu-west"), whose providers rank ahead of all others
	// (others may still win), or the multiaddr of a client location
	// ("/ip4/203.0.113.7"). The renter cannot measure from a client
	// location, and no provider is asked to (providers never dial
	// addresses a call names): the RTT ranked is the renter's own to each
	// provider, an approximation that holds when the renter runs near its
	// clients.
	Near           string  `json:"near,omitempty" yaml:"near,omitempty"`
	MinReliability float64 `json:"min_reliability,omitempty" yaml:"min_reliability,omitempty"`
	// Verified takes bids only from providers the renter's reputation book
	// holds verified (a passed GPU challenge, attest/gpuproof) for the
	// model they bid with.
	Verified    bool          `json:"verified,omitempty" yaml:"verified,omitempty"`
	Preemptible bool          `json:"preemptible" yaml:"preemptible"`
	Duration    time.Duration `json:"duration" yaml:"duration"`
	// Deadline is the latest time the job may start; zero means no deadline.
	Deadline  time.Time     `json:"deadline,omitempty" yaml:"deadline,omitempty"`
	Datasets  []string      `json:"datasets,omitempty" yaml:"datasets,omitempty"`
	Workload  string        `json:"workload,omitempty" yaml:"workload,omitempty"`
	Run       RunSpec       `json:"run" yaml:"run"`
	BidWindow time.Duration `json:"bid_window,omitempty" yaml:"bid_window,omitempty"`
	Attempt   int           `json:"attempt" yaml:"-"`
	CreatedAt time.Time     `json:"created_at" yaml:"-"`
	// InputBytes is the size of each input artifact (id → bytes), filled
	// by the renter's daemon from its store: bidders report how much of
	// it they lack, and the ranking charges for fetching it.
	InputBytes map[string]int64 `json:"input_bytes,omitempty" yaml:"-"`
	// WantDeclines asks the providers that will not bid to say why (a
	// signed Decline, at most one per provider and call).
	WantDeclines bool `json:"want_declines,omitempty" yaml:"-"`
	// BidSample, when in (0, 1), asks only that share of the providers
	// that hear the call to answer it: those SampledBidder picks with
	// BidSeed. The renter sets both when more providers fit the job than
	// it needs bids from (auction.RenterConfig.MaxBidders), so that a job's cost
	// does not grow with every fitting provider of a large market.
	BidSample float64 `json:"bid_sample,omitempty" yaml:"-"`
	BidSeed   string  `json:"bid_seed,omitempty" yaml:"-"`
	// BidInvited names providers a sampled call asks to answer whatever
	// the draw: the renter invites those its own book holds established,
	// so that fresh capability records, however many, cannot crowd them
	// out of the sample (see auction.Renter.Post). At most MaxBidInvited.
	BidInvited []string `json:"bid_invited,omitempty" yaml:"-"`
	// CheckpointEvery is how often the provider saves the job's checkpoint
	// dir (GPUMESH_CHECKPOINT_DIR) as an artifact while it runs; 0 saves it
	// only when the lease ends early (preemption, drain, gap end).
	CheckpointEvery time.Duration `json:"checkpoint_every,omitempty" yaml:"checkpoint_every,omitempty"`
	// NoPersist asks that nothing of the job stay on its provider: its log
	// and outputs go to the renter and are deleted from the provider once
	// the lease is settled, no outputs or checkpoints are kept there as
	// artifacts, and its memory never swaps to the provider's disk. Only
	// providers whose policy offers it (Policy.NoPersist) bid, and their
	// receipts must state it held (attest.Receipt.NoPersist).
	NoPersist bool `json:"no_persist,omitempty" yaml:"no_persist,omitempty"`
	// Sealed says the job reads sealed (end-to-end encrypted) artifacts
	// and its checkpoints and outputs are sealed to its renter: its
	// provider asks the renter for the lease's keys, keeps them in memory
	// only, and holds the plaintext on a tmpfs alone (node/artifact,
	// seal.go). The renter sets it when an input is sealed.
	Sealed bool `json:"sealed,omitempty" yaml:"sealed,omitempty"`
	// Retain is how long the provider keeps the job's log and outputs
	// after its lease ends, for the renter to fetch; 0 means DefaultRetain.
	// A provider keeps them no longer than its own maximum, whatever the
	// job asks.
	Retain time.Duration `json:"retain,omitempty" yaml:"retain,omitempty"`
	// MaxAttempts bounds the leases one job may use (the first included)
	// when attempts end early through no fault of the job; 0 means
	// DefaultMaxAttempts.
	MaxAttempts int `json:"max_attempts,omitempty" yaml:"max_attempts,omitempty"`
	// Exclude lists the providers that lost an earlier attempt of this job:
	// they may not bid for its later attempts.
	Exclude []string `json:"exclude,omitempty" yaml:"-"`
	// Restore is the checkpoints this attempt starts from, newest first:
	// the provider restores the first one that verifies, and the job
	// starts fresh when none does.
	Restore []Checkpoint `json:"restore,omitempty" yaml:"-"`
}

// Attempt budgets and checkpoint bounds.
const (
	// DefaultMaxAttempts is a job's attempt budget when it sets none.
	DefaultMaxAttempts = 3
	// MaxAttempts bounds Job.MaxAttempts.
	MaxAttempts = 20
	// MaxRestore bounds Job.Restore: the newest checkpoint and the one
	// before it, in case the newest does not verify.
	MaxRestore = 2
	// MinCheckpointEvery is the shortest periodic checkpoint interval.
	MinCheckpointEvery = time.Second
	// DefaultRetain is how long a provider keeps a job's log and outputs
	// when the job sets no Retain; MinRetain and MaxRetain bound Retain
	// (a renter needs a moment to fetch them).
	DefaultRetain = 7 * 24 * time.Hour
	MinRetain     = time.Minute
	MaxRetain     = 365 * 24 * time.Hour
)

// MaxCheckpointBytes caps one checkpoint of a job.
const MaxCheckpointBytes = 4 << 30

// Checkpoint is one saved state of a job's checkpoint dir, kept as an
// artifact. The provider that took it signs it (sign.DomainCheckpoint) and
// sends it to the job's renter, whose daemon keeps the artifact; a later
// attempt, on any provider, restores it.
type Checkpoint struct {
	JobID   string `json:"job_id"`
	LeaseID string `json:"lease_id"`
	Attempt int    `json:"attempt"`
	// Seq orders one lease's checkpoints.
	Seq int `json:"seq"`
	// Artifact is the id of the artifact holding the dir's files.
	Artifact string `json:"artifact"`
	Bytes    int64  `json:"bytes"`
	// Work is the job's run time this checkpoint captures, over all its
	// attempts: a later attempt has Duration − Work left to run.
	Work time.Duration `json:"work"`
	// Reason is why it was taken: CheckpointPeriodic, CheckpointStopped
	// (preempted, drained or gap end) or CheckpointEnded.
	Reason   string    `json:"reason"`
	Provider string    `json:"provider"`
	TakenAt  time.Time `json:"taken_at"`
	// Rank is the gang member whose checkpoint dir this is (Gang.Rank),
	// set by the renter in a gang's Restore: each member restores its own
	// rank's (Job.RestoreOf).
	Rank int `json:"rank,omitempty"`
}

// Why a checkpoint was taken.
const (
	CheckpointPeriodic = "periodic"
	CheckpointStopped  = "stopped"
	CheckpointEnded    = "ended"
)

// TotalDuration is the job's whole run time over all its attempts: an
// attempt that restores checkpoints runs for what the newest one
// (Restore[0]) left, Duration.
func (j *Job) TotalDuration() time.Duration {
	return j.Duration + j.SavedWork()
}

// SavedWork is the work the checkpoints the job restores hold: the newest
// one's (Restore[0]); a gang's is its least advanced rank's newest, none
// unless every rank has one.
func (j *Job) SavedWork() time.Duration {
	if len(j.Restore) == 0 {
		return 0
	}
	if j.Nodes <= 1 {
		return j.Restore[0].Work
	}
	saved := time.Duration(-1)
	for rank := range j.Nodes {
		rs := j.RestoreOf(rank)
		if len(rs) == 0 {
			return 0
		}
		if saved < 0 || rs[0].Work < saved {
			saved = rs[0].Work
		}
	}
	return saved
}

// RestoreFor is the checkpoints lease l of the job restores: its gang
// rank's (RestoreOf), or every one.
func (j *Job) RestoreFor(l Lease) []Checkpoint {
	if l.Gang == nil {
		return j.Restore
	}
	return j.RestoreOf(l.Gang.Rank)
}

// RestoreOf is the checkpoints the member of rank restores, newest
// first: a gang's of that rank (Checkpoint.Rank), every one otherwise.
func (j *Job) RestoreOf(rank int) []Checkpoint {
	if j.Nodes <= 1 {
		return j.Restore
	}
	var out []Checkpoint
	for _, c := range j.Restore {
		if c.Rank == rank {
			out = append(out, c)
		}
	}
	return out
}

// BilledGPUs is how many GPUs the job asks for: GPUCount, or the fraction
// of one device it asks for (GPUFraction).
func (j *Job) BilledGPUs() float64 { return BilledGPUs(j.GPUCount, j.GPUFraction) }

// Attempts is the job's attempt budget.
func (j *Job) Attempts() int {
	if j.MaxAttempts > 0 {
		return j.MaxAttempts
	}
	return DefaultMaxAttempts
}

// Excludes reports whether provider lost an earlier attempt of the job, so
// that it may not bid for this one: providers decline such a job
// (auction.Evaluate, kind "excluded") and renters refuse their bids.
func (j *Job) Excludes(provider string) bool {
	return provider != "" && slices.Contains(j.Exclude, provider)
}

// AcceptsGPU reports whether device g is of a model the job asks for:
// any, when it names none; else one of GPUModels, by family or by the
// variant or memory size a request names (see GPU.Identity).
func (j *Job) AcceptsGPU(g GPU) bool {
	if len(j.GPUModels) == 0 {
		return true
	}
	id := g.Identity()
	for _, w := range j.GPUModels {
		if id.Matches(gpumodel.Request(w)) {
			return true
		}
	}
	return false
}

// OutputFile is one result file a job left in its outputs directory.
type OutputFile struct {
	Path   string `json:"path"` // slash-separated, relative to the outputs dir
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
}

// ManifestHash is the hash of a list of output files that a receipt names
// as its result ("" for no outputs): both parties compute it the same way.
func ManifestHash(outs []OutputFile) string {
	if len(outs) == 0 {
		return ""
	}
	h := sha256.New()
	for _, o := range outs {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", o.Path, o.Size, o.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Bid is a provider's signed offer for a job, sent directly to the renter.
type Bid struct {
	JobID    string `json:"job_id"`
	Attempt  int    `json:"attempt"`
	Provider string `json:"provider"`
	Region   string `json:"region"`
	// Price per GPU-hour, in USD.
	Price float64   `json:"price"`
	Start time.Time `json:"start"`
	// End is when the lease would end; for bronze backfill it may be earlier
	// than Start+Duration (the job is preempted at the gap's end).
	End      time.Time `json:"end"`
	GPUModel string    `json:"gpu_model"`
	VRAMGB   int       `json:"vram_gb"`
	Datasets []string  `json:"datasets,omitempty"` // the job's datasets this provider holds cached
	// Evicts is how many running or booked bronze leases the award would
	// preempt (gold jobs only); the renter charges for it in the ranking.
	Evicts    int       `json:"evicts,omitempty"`
	Nonce     string    `json:"nonce"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// MissingBytes is how much of the job's input artifacts the provider
	// lacks and would fetch before the job starts.
	MissingBytes int64 `json:"missing_bytes,omitempty"`
	// Held says the provider holds the bid's span tentatively on its
	// calendar (auction.ProviderConfig.HoldGrace): the renter releases such a bid
	// when it does not award it. A bid without a hold expires by itself.
	Held bool `json:"held,omitempty"`
	// Free is how many whole GPUs no booking held over [Start, End) when
	// the bid was issued (0: not said, as for a slice of a GPU): with it
	// the renter knows that its own awards confirmed before IssuedAt are
	// already out of the offer, and that its awards in flight may take
	// the rest, so it never races two of its auctions for one GPU.
	Free int `json:"free,omitempty"`
}

// Award is the renter's signed acceptance of a bid.
type Award struct {
	LeaseID  string    `json:"lease_id"`
	JobID    string    `json:"job_id"`
	Attempt  int       `json:"attempt"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	BidNonce string    `json:"bid_nonce"`
	Price    float64   `json:"price"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	GPUCount int       `json:"gpu_count"`
	// GPUFraction is the job's (Job.GPUFraction): 0 for whole devices.
	GPUFraction float64   `json:"gpu_fraction,omitempty"`
	Job         Job       `json:"job"`
	IssuedAt    time.Time `json:"issued_at"`
	// Gang, for a gang job's member, is the gang's terms with this
	// member's rank: the provider holds the award until the renter
	// commits the whole gang (GangDecision).
	Gang *Gang `json:"gang,omitempty"`
}

// BidRelease tells a provider that its bid will not be awarded (the
// auction went to another bid or ended), so it frees the bid's tentative
// hold on its calendar at once instead of at the hold's expiry.
type BidRelease struct {
	JobID    string    `json:"job_id"`
	Attempt  int       `json:"attempt"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	BidNonce string    `json:"bid_nonce"`
	IssuedAt time.Time `json:"issued_at"`
}

// Decline is a provider's signed word that it will not bid for a job's
// call, and why: Kind is the auction.Ineligible.Kind (price, vram, region,
// availability, ...). Sent only when the call asked (Job.WantDeclines).
type Decline struct {
	JobID    string    `json:"job_id"`
	Attempt  int       `json:"attempt"`
	Provider string    `json:"provider"`
	Kind     string    `json:"kind"`
	IssuedAt time.Time `json:"issued_at"`
}

// Confirm is the provider's signed answer to an award.
type Confirm struct {
	LeaseID  string `json:"lease_id"`
	Accepted bool   `json:"accepted"`
	// Reason says why an award was declined; one whose GPUs another award
	// took since the bid begins with DeclinedTaken.
	Reason string `json:"reason,omitempty"`
	// Devices are the provider's device indices booked for an accepted
	// lease (Lease.Devices).
	Devices []int `json:"devices,omitempty"`
	// Start and End, when set, are the span an accepted lease was booked
	// over instead of the award's: the award came too late for its own
	// span (Lease.Late), and the provider re-timed the lease to begin at
	// its confirm (Lease.Retimed). Unset: the award's span.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
}

// DeclinedTaken begins a declined Confirm's Reason when the bid's GPUs
// were taken since it was made (another award booked them first): the
// renter lost a race, and may offer its job again at once.
const DeclinedTaken = "capacity: "

// RunState is where a lease is in its life: the one state vocabulary used by
// the provider's calendar, lease events, receipts (a receipt's outcome is the
// lease's terminal state), the lease lifecycle and the API views.
type RunState string

// Run states. Pending, then Running, then exactly one terminal state.
const (
	RunPending   RunState = "pending" // confirmed, not started yet
	RunRunning   RunState = "running"
	RunSucceeded RunState = "succeeded"
	RunFailed    RunState = "failed"
	RunPreempted RunState = "preempted"
	RunExpired   RunState = "expired" // stopped at the lease end
	RunCancelled RunState = "cancelled"
)

// RunStates lists every RunState.
func RunStates() []RunState {
	return []RunState{RunPending, RunRunning, RunSucceeded, RunFailed, RunPreempted, RunExpired, RunCancelled}
}

// Terminal reports whether no further transition is possible.
func (s RunState) Terminal() bool {
	switch s {
	case RunSucceeded, RunFailed, RunPreempted, RunExpired, RunCancelled:
		return true
	}
	return false
}

// Follows reports whether a lease in state prev may move to s: states only
// move forward (pending, running, then one terminal state), and a terminal
// state never changes. A late or duplicated report fails this test and is
// ignored, on both sides of a lease.
func (s RunState) Follows(prev RunState) bool {
	rank := func(r RunState) int {
		switch {
		case r == "":
			return 0
		case r == RunPending:
			return 1
		case r == RunRunning:
			return 2
		case r.Terminal():
			return 3
		}
		return -1
	}
	return rank(s) > rank(prev) && rank(s) > 0
}

// Fault says who caused a lease to end without success: the job itself
// (its command failed, hit its own memory limit or outran its declared
// duration) or the provider (its daemon, executor or host failed). A
// failure that is the job's fault says nothing about the provider, so the
// reputation book does not count it against the provider.
type Fault string

// Faults.
const (
	FaultNone     Fault = ""
	FaultJob      Fault = "job"
	FaultProvider Fault = "provider"
)

// Valid reports whether f is one of the faults above.
func (f Fault) Valid() bool { return f == FaultNone || f == FaultJob || f == FaultProvider }

// Lease is a confirmed reservation of a provider's GPUs for a job.
type Lease struct {
	ID       string    `json:"id"`
	JobID    string    `json:"job_id"`
	Attempt  int       `json:"attempt"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	Price    float64   `json:"price"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	GPUCount int       `json:"gpu_count"`
	// GPUFraction is the share of its one device a slice lease holds
	// (Job.GPUFraction); 0 for whole devices. The lease is billed for
	// BilledGPUs GPUs.
	GPUFraction float64  `json:"gpu_fraction,omitempty"`
	Tier        Tier     `json:"tier"`
	Preemptible bool     `json:"preemptible"`
	State       RunState `json:"state"`
	// Devices are the provider's device indices the lease holds (its
	// calendar booking's devices).
	Devices []int `json:"devices,omitempty"`
	// Gang is set on a gang member's lease: the gang's terms as its
	// renter signed them in the award, with this member's rank.
	Gang *Gang `json:"gang,omitempty"`
}

// BilledGPUs is how many GPUs the lease is billed for: its GPU count, or
// the fraction of one device a slice lease holds.
func (l Lease) BilledGPUs() float64 { return BilledGPUs(l.GPUCount, l.GPUFraction) }

// ErrBadMove is a lease move that breaks Lease.Moved's rule.
var ErrBadMove = errors.New("auction: invalid lease move")

// MoveSkew is how far before now a moved lease's new start may lie (the
// provider's and the renter's clocks differ a little).
const MoveSkew = 30 * time.Second

// Moved returns l moved to begin at start on devices, its length, price
// and terms kept: a confirmed lease that has not begun moves earlier when
// its provider's GPUs free up before its start (a job ahead of it ended
// early). Only a pending lease moves, only earlier, and onto as many
// distinct devices as it has GPUs (or none named). The provider moves its booking
// by this rule and tells the renter, who checks the move by it too. A lease
// moves no earlier than now (less MoveSkew for the two clocks): freed GPUs
// are used from now on, never in the past.
func (l Lease) Moved(start time.Time, devices []int, now time.Time) (Lease, error) {
	switch {
	case l.State != RunPending:
		return Lease{}, fmt.Errorf("%w: lease %s is %s, not pending", ErrBadMove, l.ID, l.State)
	case start.IsZero() || !start.Before(l.Start):
		return Lease{}, fmt.Errorf("%w: lease %s: a lease only moves earlier than its start %s", ErrBadMove, l.ID, l.Start.Format(time.RFC3339Nano))
	case start.Before(now.Add(-MoveSkew)):
		return Lease{}, fmt.Errorf("%w: lease %s: new start %s is %s in the past", ErrBadMove, l.ID,
			start.Format(time.RFC3339Nano), now.Sub(start).Round(time.Millisecond))
	case len(devices) > 0 && len(devices) != l.GPUCount:
		return Lease{}, fmt.Errorf("%w: lease %s: %d devices for %d gpus", ErrBadMove, l.ID, len(devices), l.GPUCount)
	case !distinctDevices(devices):
		return Lease{}, fmt.Errorf("%w: lease %s: devices %v are not distinct device indices", ErrBadMove, l.ID, devices)
	}
	m := l
	m.Start, m.End = start, start.Add(l.End.Sub(l.Start))
	m.Devices = append([]int(nil), devices...)
	return m, nil
}

// MinRun is how much of a lease of length d must still lie ahead when it
// is confirmed: max(1 s, 5 % of d), at most d.
func MinRun(d time.Duration) time.Duration { return min(d, max(time.Second, d/20)) }

// Late reports whether l, confirmed at now, has less than MinRun of its
// span left. Its award came late (a long failover, a loaded renter or
// network: a bid's span is fixed when it is made): run as it stands, the
// lease would start after its end, or run too short to be of use and end
// expired. Its provider re-times it (Retimed) or declines it.
func (l Lease) Late(now time.Time) bool { return l.End.Sub(now) < MinRun(l.End.Sub(l.Start)) }

// ErrBadRetime is a lease re-time that breaks Lease.Retimed's rule.
var ErrBadRetime = errors.New("auction: invalid lease re-time")

// Retimed returns l, confirmed late (Late) at start, re-timed to begin
// then: its length, price and terms kept. Only a late lease is re-timed,
// only to its confirm (within MoveSkew of now: the provider's and the
// renter's clocks differ a little) and only before its job's start
// deadline (zero: none). The provider books a late award by this rule and
// says so in its confirm; the renter checks the confirm by it too.
func (l Lease) Retimed(start, deadline, now time.Time) (Lease, error) {
	switch {
	case !l.Late(start):
		return Lease{}, fmt.Errorf("%w: lease %s was not late at %s: %s of its span was left", ErrBadRetime, l.ID,
			start.Format(time.RFC3339Nano), l.End.Sub(start).Round(time.Millisecond))
	case start.Before(now.Add(-MoveSkew)) || start.After(now.Add(MoveSkew)):
		return Lease{}, fmt.Errorf("%w: lease %s: new start %s is not now (%s)", ErrBadRetime, l.ID,
			start.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	case !deadline.IsZero() && !start.Before(deadline):
		return Lease{}, fmt.Errorf("%w: lease %s: the job's start deadline %s has passed", ErrBadRetime, l.ID, deadline.Format(time.RFC3339))
	}
	m := l
	m.Start, m.End = start, start.Add(l.End.Sub(l.Start))
	return m, nil
}

// distinctDevices reports whether devices are device indices (not
// negative), none named twice: a lease's GPUs are as many devices.
func distinctDevices(devices []int) bool {
	seen := make(map[int]bool, len(devices))
	for _, d := range devices {
		if d < 0 || seen[d] {
			return false
		}
		seen[d] = true
	}
	return true
}

// HandBackDetail is the run detail of a lease its provider handed back
// while draining (RunPreempted, FaultNone): its renter requeues it,
// whatever its tier.
const HandBackDetail = "provider draining: handed back"

// Requeues reports whether a lease that ended in run, through fault, goes
// back to auction for the rest of its job. A preempted lease does, of any
// tier: a bronze lease evicted for gold, stopped over the provider's
// thermal or power limits or at the end of its backfill gap, and a lease of
// any tier its provider handed back while draining (HandBackDetail: a
// provider preempts non-preemptible work only then). So does a lease that
// failed through its provider's fault (a lost, restarted or broken
// provider), of any tier. A job's own failure never does. The renter's
// lease lifecycle asks this and nothing else.
func (s RunState) Requeues(fault Fault) bool {
	return s == RunPreempted || (s == RunFailed && fault == FaultProvider)
}

// Requeues reports whether j goes back to auction after a lease of it ended
// in run, through fault: RunState.Requeues, except for a service replica
// (Run.ServicePort > 0). A service owns its replicas' replacement: it sees
// the lease end, retires the replica and leases a new one with its own
// readiness and failover, so the renter never requeues a replica's job (two
// owners would race, one auction wasted, its attempt budget meaningless).
func (j *Job) Requeues(run RunState, fault Fault) bool {
	return j.Run.ServicePort == 0 && run.Requeues(fault)
}
