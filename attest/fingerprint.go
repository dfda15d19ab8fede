package attest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Telemetry and hardware sources.
const (
	// SourceNVML: read from the NVIDIA driver.
	SourceNVML = "nvml"
	// SourceDeclared: hardware declared in the provider's config, unverified.
	SourceDeclared = "declared"
	// SourceProcess: heartbeat telemetry from the job's process only (no GPU
	// counters).
	SourceProcess = "process"
)

// MaxFingerprintGPUs bounds the devices a fingerprint may list.
const MaxFingerprintGPUs = 64

// ErrInvalidFingerprint is returned for a fingerprint that is not well formed
// or whose signer is not the peer it describes.
var ErrInvalidFingerprint = errors.New("attest: invalid fingerprint")

// Fingerprint is a provider's signed description of its hardware and driver
// stack. Source says how it was obtained: SourceNVML when read from the
// driver, SourceDeclared when copied from configuration.
type Fingerprint struct {
	Peer     string      `json:"peer"`
	GPUs     []terms.GPU `json:"gpus"`
	Driver   string      `json:"driver,omitempty"`
	CUDA     string      `json:"cuda,omitempty"`
	Source   string      `json:"source"`
	IssuedAt time.Time   `json:"issued_at"`
}

func (fp Fingerprint) validate() error {
	if fp.Peer == "" {
		return fmt.Errorf("%w: empty peer", ErrInvalidFingerprint)
	}
	if fp.Source != SourceNVML && fp.Source != SourceDeclared {
		return fmt.Errorf("%w: source %q (want %q or %q)", ErrInvalidFingerprint, fp.Source, SourceNVML, SourceDeclared)
	}
	if len(fp.GPUs) > MaxFingerprintGPUs {
		return fmt.Errorf("%w: %d gpus (max %d)", ErrInvalidFingerprint, len(fp.GPUs), MaxFingerprintGPUs)
	}
	for i, g := range fp.GPUs {
		if g.VRAMGB < 0 {
			return fmt.Errorf("%w: gpu %d: negative vram", ErrInvalidFingerprint, i)
		}
		if g.Detected && fp.Source != SourceNVML {
			return fmt.Errorf("%w: gpu %d marked detected in a %s fingerprint", ErrInvalidFingerprint, i, fp.Source)
		}
	}
	return nil
}

// Hash is a stable hex SHA-256 of the hardware identity: the GPUs (model,
// VRAM, UUID, detected flag; in a canonical order, so device enumeration
// order does not matter), the driver and CUDA versions and the source. It
// does not cover IssuedAt, so re-issuing a fingerprint for the same hardware
// yields the same hash, nor Peer, so the same hardware re-registered under a
// new identity is recognisable. Any change of GPU, driver or source changes
// the hash.
func (fp Fingerprint) Hash() string {
	gpus := make([]terms.GPU, len(fp.GPUs))
	copy(gpus, fp.GPUs)
	sort.Slice(gpus, func(i, j int) bool {
		a, b := gpus[i], gpus[j]
		if a.UUID != b.UUID {
			return a.UUID < b.UUID
		}
		if a.Model != b.Model {
			return a.Model < b.Model
		}
		if a.VRAMGB != b.VRAMGB {
			return a.VRAMGB < b.VRAMGB
		}
		return !a.Detected && b.Detected
	})
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("gpumesh:fingerprint-hash/v1")
	field(fp.Source)
	field(fp.Driver)
	field(fp.CUDA)
	field(strconv.Itoa(len(gpus)))
	for _, g := range gpus {
		field(g.Model)
		field(strconv.Itoa(g.VRAMGB))
		field(g.UUID)
		field(strconv.FormatBool(g.Detected))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SignFingerprint signs fp with the provider's key. An empty fp.Peer is
// filled with the signer's ID; any other peer is an error, since a node can
// only vouch for its own hardware.
func SignFingerprint(s *sign.Signer, fp Fingerprint) (*sign.Envelope, error) {
	if s == nil {
		return nil, errors.New("attest: nil signer")
	}
	if fp.Peer == "" {
		fp.Peer = s.ID().String()
	}
	if fp.Peer != s.ID().String() {
		return nil, fmt.Errorf("%w: peer %s is not the signer %s", ErrInvalidFingerprint, fp.Peer, s.ID())
	}
	if err := fp.validate(); err != nil {
		return nil, err
	}
	return sign.Seal(s, sign.DomainFingerprint, fp)
}

// OpenFingerprint verifies a fingerprint envelope and returns the
// fingerprint. The envelope's signer must be the peer the fingerprint
// describes.
func OpenFingerprint(env *sign.Envelope) (Fingerprint, error) {
	var fp Fingerprint
	id, err := sign.Open(env, sign.DomainFingerprint, &fp)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("attest: open fingerprint: %w", err)
	}
	if fp.Peer != id.String() {
		return Fingerprint{}, fmt.Errorf("%w: signed by %s but describes %q", ErrInvalidFingerprint, id, fp.Peer)
	}
	if err := fp.validate(); err != nil {
		return Fingerprint{}, err
	}
	return fp, nil
}
