package terms

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/gpumodel"
)

// CapabilityNamespace is the DHT namespace of capability records; a
// provider's record lives under "/gpumesh-cap/<peer id>".
const CapabilityNamespace = "gpumesh-cap"

// MaxClockSkew is how far in the future a record's IssuedAt may be.
const MaxClockSkew = 2 * time.Minute

// MaxCapabilityTTL is the longest a capability record may be valid: a record
// whose ExpiresAt is more than this after its IssuedAt is refused, so that a
// stale or lying record cannot linger in the DHT.
const MaxCapabilityTTL = 24 * time.Hour

// CapabilityKey is the DHT key of a provider's capability record.
func CapabilityKey(p sign.ID) string { return "/" + CapabilityNamespace + "/" + p.String() }

// SealCapability signs a capability record for the DHT.
func SealCapability(s *sign.Signer, c Capability) ([]byte, error) {
	if c.Peer != s.ID().String() {
		return nil, fmt.Errorf("auction: capability peer %q is not the signer %s", c.Peer, s.ID())
	}
	if err := checkCapabilityTTL(c); err != nil {
		return nil, err
	}
	env, err := sign.Seal(s, sign.DomainCapability, c)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// OpenCapability verifies a sealed capability record (signature, signer ==
// record peer, expiry against now, at most MaxCapabilityTTL from issue to
// expiry) and returns it.
func OpenCapability(b []byte, now time.Time) (Capability, error) {
	var c Capability
	env, err := sign.UnmarshalEnvelope(b)
	if err != nil {
		return c, err
	}
	signer, err := sign.Open(env, sign.DomainCapability, &c)
	if err != nil {
		return c, err
	}
	if c.Peer != signer.String() {
		return c, fmt.Errorf("auction: capability for %q signed by %s", c.Peer, signer)
	}
	if !c.ExpiresAt.After(now) {
		return c, fmt.Errorf("auction: capability record of %s expired at %s", c.Peer, c.ExpiresAt.Format(time.RFC3339))
	}
	if c.IssuedAt.After(now.Add(MaxClockSkew)) {
		return c, fmt.Errorf("auction: capability record of %s issued in the future", c.Peer)
	}
	if err := checkCapabilityTTL(c); err != nil {
		return c, err
	}
	if f := c.FreeGPUs; f != nil && (*f < 0 || *f > len(c.GPUs)) {
		return c, fmt.Errorf("auction: capability record of %s has %d of its %d GPUs free", c.Peer, *f, len(c.GPUs))
	}
	for i, g := range c.GPUs {
		if g.MIG == nil {
			continue
		}
		if n := len(g.MIG.Instances); n > MaxMIGInstances {
			return c, fmt.Errorf("auction: capability record of %s: gpu %d has %d MIG instances, more than %d", c.Peer, i, n, MaxMIGInstances)
		}
		for _, in := range g.MIG.Instances {
			if in.MemoryMB <= 0 {
				return c, fmt.Errorf("auction: capability record of %s: gpu %d has a MIG instance of %d MB", c.Peer, i, in.MemoryMB)
			}
		}
	}
	return c, nil
}

// checkCapabilityTTL refuses a record without an issue time or valid for
// more than MaxCapabilityTTL.
func checkCapabilityTTL(c Capability) error {
	if c.IssuedAt.IsZero() {
		return fmt.Errorf("auction: capability record of %s has no issue time", c.Peer)
	}
	if c.ExpiresAt.Sub(c.IssuedAt) > MaxCapabilityTTL {
		return fmt.Errorf("auction: capability record of %s is valid for %v, more than %v", c.Peer, c.ExpiresAt.Sub(c.IssuedAt), MaxCapabilityTTL)
	}
	return nil
}

// CapabilityValidator is the DHT record validator for capability records.
// It rejects unsigned, forged (signer is not the key's peer), expired and
// overlong (more than MaxCapabilityTTL) records, and records a retired
// identity's old key signed after its succession, and selects the newest of
// several valid ones.
type CapabilityValidator struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Successions is the node's registry of identity successions; nil
	// retires no one.
	Successions *sign.Successions
}

// open opens a record as Validate and Select take it.
func (v CapabilityValidator) open(b []byte) (Capability, error) {
	c, err := OpenCapability(b, v.now())
	if err != nil {
		return c, err
	}
	if err := v.Successions.Check(c.Peer, c.IssuedAt); err != nil {
		return c, fmt.Errorf("auction: capability record: %w", err)
	}
	return c, nil
}

func (v CapabilityValidator) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Validate implements record.Validator.
func (v CapabilityValidator) Validate(key string, value []byte) error {
	want, err := keyPeer(key)
	if err != nil {
		return err
	}
	c, err := v.open(value)
	if err != nil {
		return err
	}
	if c.Peer != want.String() {
		return fmt.Errorf("auction: record under %s belongs to %s", key, c.Peer)
	}
	return nil
}

// Select implements record.Validator: the highest sequence number wins, then
// the latest issue time.
func (v CapabilityValidator) Select(key string, vals [][]byte) (int, error) {
	best, bestSeq, bestAt := -1, uint64(0), time.Time{}
	for i, b := range vals {
		c, err := v.open(b)
		if err != nil {
			continue
		}
		if best < 0 || c.Seq > bestSeq || (c.Seq == bestSeq && c.IssuedAt.After(bestAt)) {
			best, bestSeq, bestAt = i, c.Seq, c.IssuedAt
		}
	}
	if best < 0 {
		return 0, errors.New("auction: no valid capability record")
	}
	return best, nil
}

func keyPeer(key string) (sign.ID, error) {
	prefix := "/" + CapabilityNamespace + "/"
	if !strings.HasPrefix(key, prefix) {
		return "", fmt.Errorf("auction: key %q is not in namespace %s", key, CapabilityNamespace)
	}
	id, err := sign.Decode(strings.TrimPrefix(key, prefix))
	if err != nil {
		return "", fmt.Errorf("auction: key %q: %w", key, err)
	}
	return id, nil
}

// vramClasses are the VRAM buckets under which providers announce
// themselves, so "at least N GB" queries look up a single key.
var vramClasses = []int{8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 141, 192}

// Query is what a renter looks for.
type Query struct {
	GPU      string `json:"gpu,omitempty"`
	Region   string `json:"region,omitempty"`
	MinVRAM  int    `json:"min_vram,omitempty"`
	GPUCount int    `json:"gpu_count,omitempty"`
}

// Validate checks a query's values; each problem is a *FieldError named
// after the query's JSON field.
func (q Query) Validate() error {
	var errs []error
	if q.MinVRAM < 0 {
		errs = append(errs, &FieldError{Field: "min_vram", Problem: fmt.Sprintf("must be >= 0, got %d", q.MinVRAM)})
	}
	if q.GPUCount < 0 {
		errs = append(errs, &FieldError{Field: "gpu_count", Problem: fmt.Sprintf("must be >= 0, got %d", q.GPUCount)})
	}
	return errors.Join(errs...)
}

// DiscoveryKeys are the DHT keys a provider announces itself under: every
// GPU model it has, every prefix of its region, each VRAM class it reaches,
// and "all".
func DiscoveryKeys(c Capability) []string {
	set := map[string]bool{"all": true}
	for _, r := range RegionPrefixes(c.Region) {
		set["region/"+r] = true
	}
	for _, g := range c.GPUs {
		set["gpu/"+gpumodel.FamilyOf(g.Model)] = true
		for _, cl := range vramClasses {
			if g.VRAMGB >= cl {
				set[fmt.Sprintf("vram/%d", cl)] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// QueryKey is the single most selective discovery key for a query: GPU
// model, else region, else VRAM class, else "all". Results are then
// filtered exactly with Matches.
func QueryKey(q Query) string {
	switch {
	case q.GPU != "":
		return "gpu/" + gpumodel.FamilyOf(q.GPU)
	case q.Region != "":
		return "region/" + strings.ToLower(q.Region)
	case q.MinVRAM > 0:
		best := 0
		for _, cl := range vramClasses {
			if cl <= q.MinVRAM {
				best = cl
			}
		}
		if best > 0 {
			return fmt.Sprintf("vram/%d", best)
		}
	}
	return "all"
}

// Matches reports whether the capability satisfies the query exactly.
func (c Capability) Matches(q Query) bool {
	if q.Region != "" && !RegionMatches(q.Region, c.Region) {
		return false
	}
	n := 0
	want := gpumodel.Request(q.GPU)
	for _, g := range c.GPUs {
		if q.GPU != "" && !g.Identity().Matches(want) {
			continue
		}
		if g.VRAMGB < q.MinVRAM {
			continue
		}
		n++
	}
	if q.GPUCount > 0 {
		return n >= q.GPUCount
	}
	return n > 0 || (q.GPU == "" && q.MinVRAM == 0 && len(c.GPUs) > 0)
}

// RegionPrefixes lists a region and its dash-separated parents, most
// general first: "eu-west-1" → eu, eu-west, eu-west-1.
func RegionPrefixes(region string) []string {
	region = strings.ToLower(strings.TrimSpace(region))
	if region == "" {
		return nil
	}
	parts := strings.Split(region, "-")
	out := make([]string, 0, len(parts))
	for i := range parts {
		out = append(out, strings.Join(parts[:i+1], "-"))
	}
	return out
}

// RegionMatches reports whether region satisfies a residency constraint:
// the constraint equals the region or is one of its dash prefixes ("eu"
// matches "eu-west" but not "europe"). An empty constraint matches anything.
func RegionMatches(constraint, region string) bool {
	constraint = strings.ToLower(strings.TrimSpace(constraint))
	if constraint == "" {
		return true
	}
	for _, p := range RegionPrefixes(region) {
		if p == constraint {
			return true
		}
	}
	return false
}

// HeldToken is how a capability record lists a private artifact held for
// owner (Capability.Artifacts): a digest of the owner and the id, which
// only a peer that knows the id can match, so a record never tells one
// renter what another keeps.
func HeldToken(owner, id string) string {
	s := sha256.Sum256([]byte("gpumesh/held/v1\x00" + owner + "\x00" + id))
	return hex.EncodeToString(s[:])
}

// Holds reports whether held (a capability record's Artifacts) lists
// artifact id of owner: public, by its id, or private, by its HeldToken.
func Holds(held []string, owner, id string) bool {
	return slices.Contains(held, id) || slices.Contains(held, HeldToken(owner, id))
}
