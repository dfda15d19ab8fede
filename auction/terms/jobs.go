package terms

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/sign"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

// Bid window bounds. A job that does not set BidWindow gets DefaultBidWindow.
const (
	DefaultBidWindow = 2 * time.Second
	MinBidWindow     = 100 * time.Millisecond
	MaxBidWindow     = 60 * time.Second
)

// MaxGPUCount bounds how many GPUs one job may ask for (a gang's members
// together).
const MaxGPUCount = 1024

// MaxNodes bounds how many members a gang job (Job.Nodes) may have.
const MaxNodes = 64

// MaxIDLen bounds an identifier's length (see ValidID).
const MaxIDLen = 128

// ErrBadID is wrapped by ValidID's errors.
var ErrBadID = errors.New("auction: invalid id")

// ErrInvalidJob is wrapped by Job.Validate's errors (and so by DecodeCall's
// for a call whose job is invalid).
var ErrInvalidJob = errors.New("auction: invalid job")

// ValidID is the one rule for every identifier that crosses the network (job
// ids, lease ids, bid nonces): 1 to MaxIDLen characters from [A-Za-z0-9._-],
// starting with a letter or digit, and no "..". Such an id is safe as a file
// or directory name and as a key: it has no path separator, is never "." or
// "..", and cannot start an option ("-"). Decoders refuse messages whose ids
// break it.
func ValidID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("%w: length %d, want 1 to %d", ErrBadID, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return fmt.Errorf("%w: %q: character %d (%q) is not allowed", ErrBadID, id, i, c)
		}
	}
	if strings.Contains(id, "..") {
		return fmt.Errorf("%w: %q contains \"..\"", ErrBadID, id)
	}
	return nil
}

// NewID returns a random identifier that satisfies ValidID: prefix, a dash
// and 24 hex digits (96 random bits), e.g. "job-3f9c0a...". An empty prefix,
// or one that would break ValidID, yields the hex digits alone.
func NewID(prefix string) string {
	var b [12]byte
	// Since Go 1.24 crypto/rand.Read never returns an error.
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if prefix == "" || len(prefix)+1+len(id) > MaxIDLen || ValidID(prefix+"-"+id) != nil {
		return id
	}
	return prefix + "-" + id
}

// ParseGPUs reads a GPU request as people write it (job post --count, a
// task file's accelerators "L4:0.25"): a whole number of GPUs, or a
// fraction of one GPU (one of GPUFractions, as SkyPilot writes it). It
// returns the request as a Job holds it: GPUCount, and GPUFraction (0 for
// whole GPUs).
func ParseGPUs(s string) (count int, fraction float64, err error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil && n >= 1 {
		return n, 0, nil
	}
	f, ferr := strconv.ParseFloat(s, 64)
	switch {
	case ferr == nil && slices.Contains(GPUFractions, f):
		return 1, f, nil
	case ferr == nil && f >= 1 && f <= MaxGPUCount && f == math.Trunc(f):
		return int(f), 0, nil
	}
	return 0, 0, fmt.Errorf("gpu count must be a whole number of GPUs (1 or more) or a fraction of one GPU (0.125, 0.25 or 0.5), got %q", s)
}

// GPUsText is a GPU request as people read it: "2 GPU(s)", "0.25 GPU".
func GPUsText(count int, fraction float64) string {
	if fraction > 0 {
		return strconv.FormatFloat(fraction, 'g', -1, 64) + " GPU"
	}
	return strconv.Itoa(count) + " GPU(s)"
}

// ParseTier parses a tier name, case-insensitively.
func ParseTier(s string) (Tier, error) {
	switch t := Tier(strings.ToLower(strings.TrimSpace(s))); t {
	case Gold, Silver, Bronze:
		return t, nil
	}
	return "", fmt.Errorf("auction: unknown tier %q (want gold, silver or bronze)", s)
}

// FieldError is one problem with one field of a spec (a Job, a Query):
// Field is the field's name as in JSON and YAML ("max_price",
// "run.command", "gpu_models[2]") and Problem says what is wrong with it,
// e.g. "must be a positive number, got 0". Validate's errors wrap one
// FieldError per problem; FieldErrors lists them.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// FieldErrors returns every *FieldError in err's tree (joined and wrapped
// errors included), in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *FieldError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// MaxBidInvited bounds the providers a call invites by name
// (Job.BidInvited).
const MaxBidInvited = 32

// maxPeerIDLen bounds a peer id a job names: an Ed25519 identity's is 52
// characters.
const maxPeerIDLen = 128

// ValidPeerID is the rule for a peer id a job names: a libp2p peer id of
// at most maxPeerIDLen characters.
func ValidPeerID(s string) error {
	if s == "" || len(s) > maxPeerIDLen {
		return fmt.Errorf("peer id of %d characters, want 1 to %d", len(s), maxPeerIDLen)
	}
	if _, err := sign.Decode(s); err != nil {
		return fmt.Errorf("%q is not a peer id", s)
	}
	return nil
}

// SampledBidder reports whether provider is among the providers hearing
// j's call that it asks to answer: all of them when the call is not
// sampled; else those it invites by name (Job.BidInvited) and the share
// Job.BidSample that a hash of the call's seed and the provider's id
// picks, so that the renter knows whom it asked and a provider cannot
// make itself more likely.
func SampledBidder(j *Job, provider string) bool {
	if j.BidSample <= 0 || j.BidSample >= 1 || slices.Contains(j.BidInvited, provider) {
		return true
	}
	h := sha256.Sum256([]byte(j.BidSeed + "/" + provider))
	return float64(binary.BigEndian.Uint64(h[:8])) < j.BidSample*math.MaxUint64
}

// Validate checks a job spec and fills defaults: a zero BidWindow becomes
// DefaultBidWindow. It rejects an unknown tier, a MaxPrice that is not a
// positive finite number, GPUCount outside [1, MaxGPUCount], a GPUFraction
// not in GPUFractions or with a GPUCount other than 1, an unknown
// Isolation or one other than any without a fraction, a non-positive
// Duration, a negative MinVRAMGB, MinReliability outside [0,1], an empty
// command, a Run.Env variable no runtime would set (CheckEnvVar), a negative Run.MemoryMB, an empty GPU model or dataset name, a
// preemptible gold job (gold is the protected tier), a negative attempt, a
// BidWindow outside [MinBidWindow, MaxBidWindow], more than MaxBidInvited
// invited bidders, one that is not a peer id or is invited twice, a
// MaxRTT outside [MinMaxRTT, MaxMaxRTT] (other than 0), a Near that is
// neither a region name nor a multiaddr, a Deadline before CreatedAt, and
// an ID that breaks ValidID. ID, Owner and CreatedAt may be empty (the renter fills them
// when it posts the job). Each problem is a *FieldError (see FieldErrors).
func (j *Job) Validate() error {
	if j == nil {
		return fmt.Errorf("%w: nil job", ErrInvalidJob)
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if _, err := ParseTier(string(j.Tier)); err != nil {
		bad("tier", "must be gold, silver or bronze, got %q", j.Tier)
	}
	if math.IsNaN(j.MaxPrice) || math.IsInf(j.MaxPrice, 0) || j.MaxPrice <= 0 {
		bad("max_price", "must be a positive number, got %v", j.MaxPrice)
	}
	if j.GPUCount < 1 || j.GPUCount > MaxGPUCount {
		bad("gpu_count", "must be in [1, %d], got %d", MaxGPUCount, j.GPUCount)
	}
	if j.GPUFraction != 0 {
		switch {
		case !slices.Contains(GPUFractions, j.GPUFraction):
			bad("gpu_fraction", "must be 0.125, 0.25 or 0.5 of one GPU (0: whole GPUs), got %v", j.GPUFraction)
		case j.GPUCount != 1:
			bad("gpu_fraction", "is a fraction of one GPU: gpu_count must be 1, got %d", j.GPUCount)
		}
	}
	switch {
	case j.Nodes < 0 || j.Nodes > MaxNodes:
		bad("nodes", "must be in [1, %d], got %d", MaxNodes, j.Nodes)
	case j.Nodes > 1 && j.GPUFraction != 0:
		bad("nodes", "a gang's members take whole GPUs: gpu_fraction must be unset with %d nodes", j.Nodes)
	case j.Nodes > 1 && j.GPUCount*j.Nodes > MaxGPUCount:
		bad("nodes", "%d nodes × %d GPUs is more than %d GPUs", j.Nodes, j.GPUCount, MaxGPUCount)
	}
	switch j.Isolation {
	case "", IsolationAny:
	case IsolationMPS, IsolationMIG:
		if j.GPUFraction == 0 {
			bad("isolation", "%s isolates a slice of a GPU: it needs gpu_fraction (whole GPUs are not shared)", j.Isolation)
		}
	default:
		bad("isolation", "must be %s, %s or %s, got %q", IsolationMIG, IsolationMPS, IsolationAny, j.Isolation)
	}
	if j.Duration <= 0 {
		bad("duration", "must be positive, got %v", j.Duration)
	}
	if j.MinVRAMGB < 0 {
		bad("min_vram_gb", "must not be negative, got %d", j.MinVRAMGB)
	}
	if math.IsNaN(j.MinReliability) || j.MinReliability < 0 || j.MinReliability > 1 {
		bad("min_reliability", "must be in [0, 1], got %v", j.MinReliability)
	}
	if len(j.Run.Command) == 0 || strings.TrimSpace(j.Run.Command[0]) == "" {
		bad("run.command", "must not be empty")
	}
	envNames := make([]string, 0, len(j.Run.Env))
	for k := range j.Run.Env {
		envNames = append(envNames, k)
	}
	sort.Strings(envNames)
	for _, k := range envNames {
		// The runtimes' own rule: a spec every provider would refuse to
		// start is refused here, before any provider is blamed for it.
		if err := CheckEnvVar(k, j.Run.Env[k]); err != nil {
			bad("run.env", "%v", err)
		}
	}
	if j.Run.MemoryMB < 0 {
		bad("run.memory_mb", "must not be negative, got %d", j.Run.MemoryMB)
	}
	if j.Run.ServicePort < 0 || j.Run.ServicePort > 65535 {
		bad("run.service_port", "must be in [1, 65535] (0: not a service), got %d", j.Run.ServicePort)
	}
	if j.Tier == Gold && j.Preemptible {
		bad("preemptible", "must be false for a gold job (gold work is never preempted)")
	}
	if j.ID != "" {
		if err := ValidID(j.ID); err != nil {
			bad("id", "%v", err)
		}
	}
	if j.Attempt < 0 {
		bad("attempt", "must not be negative, got %d", j.Attempt)
	}
	if j.CheckpointEvery < 0 || (j.CheckpointEvery > 0 && j.CheckpointEvery < MinCheckpointEvery) {
		bad("checkpoint_every", "must be 0 (only when stopped early) or at least %v, got %v", MinCheckpointEvery, j.CheckpointEvery)
	}
	switch {
	case j.Retain != 0 && j.NoPersist:
		bad("retain", "must not be set for a no_persist job: nothing of it is kept past its lease, got %v", j.Retain)
	case j.Retain < 0 || (j.Retain > 0 && j.Retain < MinRetain) || j.Retain > MaxRetain:
		bad("retain", "must be in [%v, %v] (0: %v), got %v", MinRetain, MaxRetain, DefaultRetain, j.Retain)
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > MaxAttempts {
		bad("max_attempts", "must be in [1, %d] (0: %d), got %d", MaxAttempts, DefaultMaxAttempts, j.MaxAttempts)
	}
	if len(j.Exclude) > MaxAttempts {
		bad("exclude", "at most %d providers, got %d", MaxAttempts, len(j.Exclude))
	}
	if n := MaxRestore * max(j.Nodes, 1); len(j.Restore) > n {
		bad("restore", "at most %d checkpoints (%d per member), got %d", n, MaxRestore, len(j.Restore))
	}
	for i, c := range j.Restore {
		if !ValidArtifactID(c.Artifact) || c.Work < 0 || c.Bytes < 0 || c.Bytes > MaxCheckpointBytes || c.Rank < 0 || c.Rank >= max(j.Nodes, 1) {
			bad(fmt.Sprintf("restore[%d]", i), "not a checkpoint (artifact %q, %d bytes, work %v)", c.Artifact, c.Bytes, c.Work)
		}
	}
	for i, m := range j.GPUModels {
		if strings.TrimSpace(m) == "" {
			bad(fmt.Sprintf("gpu_models[%d]", i), "must not be empty")
		}
	}
	for i, d := range j.Datasets {
		if strings.TrimSpace(d) == "" {
			bad(fmt.Sprintf("datasets[%d]", i), "must not be empty")
		}
	}
	if len(j.Run.Inputs) > MaxInputs {
		bad("run.inputs", "at most %d inputs, got %d", MaxInputs, len(j.Run.Inputs))
	}
	if j.Run.ImageArtifact != "" {
		if !ValidArtifactID(j.Run.ImageArtifact) {
			bad("run.image_artifact", "%q is not an artifact id (64 hex digits)", j.Run.ImageArtifact)
		}
		if j.Run.Image == "" {
			bad("run.image_artifact", "needs run.image: the image the tarball holds")
		}
	}
	for id, n := range j.InputBytes {
		if n < 0 || !ValidArtifactID(id) {
			bad("input_bytes", "%q: %d bytes is not an artifact size", id, n)
		}
	}
	for name, id := range j.Run.Inputs {
		if !inputNameRE.MatchString(name) {
			bad("run.inputs", "name %q must be 1-64 letters, digits, '.', '_' or '-', not starting with a symbol", name)
		}
		if !ValidArtifactID(id) {
			bad("run.inputs", "%s=%q: not an artifact id (64 hex digits)", name, id)
		}
	}
	if j.BidWindow == 0 {
		j.BidWindow = DefaultBidWindow
	} else if j.BidWindow < MinBidWindow || j.BidWindow > MaxBidWindow {
		bad("bid_window", "must be in [%v, %v], got %v", MinBidWindow, MaxBidWindow, j.BidWindow)
	}
	if math.IsNaN(j.BidSample) || j.BidSample < 0 || j.BidSample > 1 {
		bad("bid_sample", "must be in [0, 1], got %v", j.BidSample)
	}
	if len(j.BidSeed) > 64 {
		bad("bid_seed", "at most 64 bytes, got %d", len(j.BidSeed))
	}
	if len(j.BidInvited) > MaxBidInvited {
		bad("bid_invited", "at most %d providers, got %d", MaxBidInvited, len(j.BidInvited))
	} else {
		for i, p := range j.BidInvited {
			if err := ValidPeerID(p); err != nil {
				bad(fmt.Sprintf("bid_invited[%d]", i), "%v", err)
			} else if slices.Index(j.BidInvited, p) < i {
				bad(fmt.Sprintf("bid_invited[%d]", i), "%s is invited twice", p)
			}
		}
	}
	if j.MaxRTT < 0 || (j.MaxRTT > 0 && j.MaxRTT < MinMaxRTT) || j.MaxRTT > MaxMaxRTT {
		bad("max_rtt", "must be in [%v, %v] (0: no bound), got %v", MinMaxRTT, MaxMaxRTT, j.MaxRTT)
	}
	if p := nearProblem(j.Near); p != "" {
		bad("near", "%s", p)
	}
	if !j.Deadline.IsZero() && !j.CreatedAt.IsZero() && j.Deadline.Before(j.CreatedAt) {
		bad("deadline", "%s is before created_at %s", j.Deadline.Format(time.RFC3339), j.CreatedAt.Format(time.RFC3339))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w %q: %w", ErrInvalidJob, j.ID, errors.Join(errs...))
}

// Bounds of Job.MaxRTT (when set) and of Job.Near.
const (
	MinMaxRTT = time.Millisecond
	MaxMaxRTT = 10 * time.Second
	// maxNearLen bounds Job.Near: a multiaddr of a client location, or a
	// region.
	maxNearLen = 256
	// maxNearRegionLen bounds a region Job.Near names.
	maxNearRegionLen = 64
)

// LatencySensitive reports whether the job ranks its bids by the
// round-trip time to their providers: it sets MaxRTT or Near.
func (j *Job) LatencySensitive() bool { return j.MaxRTT > 0 || j.Near != "" }

// NearRegion is the region Job.Near names ("" when it names none, or a
// client location's multiaddr).
func (j *Job) NearRegion() string {
	if nearIsAddr(j.Near) {
		return ""
	}
	return strings.TrimSpace(j.Near)
}

// nearIsAddr reports whether a Job.Near value is a multiaddr (they all
// start with "/") rather than a region.
func nearIsAddr(near string) bool { return strings.HasPrefix(strings.TrimSpace(near), "/") }

// nearProblem says what is wrong with a Job.Near value ("" when nothing
// is): a multiaddr must parse, a region must be a region name.
func nearProblem(near string) string {
	switch s := strings.TrimSpace(near); {
	case s == "":
		return ""
	case len(s) > maxNearLen:
		return fmt.Sprintf("must be a region or a multiaddr of at most %d characters, got %d", maxNearLen, len(s))
	case nearIsAddr(s):
		if _, err := ma.NewMultiaddr(s); err != nil {
			return fmt.Sprintf("%q is not a multiaddr (e.g. /ip4/203.0.113.7): %v", s, err)
		}
	case RegionProblem(s) != "":
		return fmt.Sprintf("%q is neither a region (e.g. eu-west: letters, digits, '-', '_' or '.', at most %d) nor a multiaddr (starting with /)", s, maxNearRegionLen)
	}
	return ""
}

// RegionProblem says what is wrong with a region name ("" when nothing
// is): letters, digits, '-', '_' or '.', not starting with a mark, at
// most 64 characters (a region Job.Near names, a service's regions).
func RegionProblem(region string) string {
	if len(region) > maxNearRegionLen || !regionNameRE.MatchString(region) {
		return fmt.Sprintf("%q is not a region (e.g. eu-west: letters, digits, '-', '_' or '.', at most %d)", region, maxNearRegionLen)
	}
	return ""
}

var regionNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// MaxInputs bounds a job's input artifacts.
const MaxInputs = 32

var inputNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidArtifactID reports whether s is shaped like an artifact id: the
// lower-case hex SHA-256 of its manifest.
func ValidArtifactID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
