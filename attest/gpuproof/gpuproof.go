// Package gpuproof is the GPU challenge any peer can issue to a provider:
// proof that a claimed GPU computes like one.
//
// The verifier sends a signed challenge naming the provider, the claimed
// device and model, a size (n, k) chosen by the device's memory class and
// the hash of a secret seed. The provider prepares the device (context,
// kernels, buffers: nothing seed-dependent), then the verifier reveals the
// seed and starts its clock. The provider generates two n×n matrices A and
// B from the seed (Elem), computes C = A·B^k modulo 2^32 on the device and
// answers with a signed commitment to C's hash; the verifier's clock stops
// there, so C's transfer, which follows, is not timed. The verifier checks
// that C hashes to the commitment and that C = A·B^k with Freivalds'
// algorithm in O(k·n²) (Freivalds), and that the time from seed to
// commitment is within the budget of the claimed model: its operations at
// the model's floor rate (Floor, from the catalogue's peak INT32 rate) plus
// a fixed allowance (Budget). The verdict is signed by the verifier and
// gossiped; reputation books weigh it by the verifier's standing (attest).
//
// What it proves: the provider computed 2·k·n³ multiply-adds on something
// at least as fast as the claimed model's floor, within seconds of being
// asked, and answered as the claimed device. What it does not: the memory
// size (a seeded matrix can be regenerated, not stored), or that a device
// of equal or greater INT32 throughput is not passing for another model.
// The CPU path (CPU) serves declared GPUs and tests and is never verified.
package gpuproof

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Backends a provider reports.
const (
	BackendCUDA = "cuda"
	BackendCPU  = "cpu"
)

// Outcomes of a verdict.
const (
	// Verified: the right result, within the claimed model's budget, from a
	// device path.
	Verified = "verified"
	// Failed: a wrong result, a hash that does not match, too slow, or no
	// answer in time. Counts against the provider's standing.
	Failed = "failed"
	// Unverifiable: nothing to challenge (the provider has declared GPUs,
	// computes on its CPU path, or the catalogue has no rate for the
	// model). Neither helps nor hurts.
	Unverifiable = "unverifiable"
)

// Limits a provider enforces on challenges it accepts.
const (
	MaxN        = 8192
	MaxK        = 64
	MaxLifetime = 10 * time.Minute
	// ClockSkew is how far a challenge's issue time may be from the
	// provider's clock.
	ClockSkew = 2 * time.Minute
)

// Challenge is the verifier's signed request (sign.DomainGPUChallenge).
type Challenge struct {
	ID       string `json:"id"` // random, 32 hex digits: never accepted twice
	Verifier string `json:"verifier"`
	Provider string `json:"provider"`
	// Device is the claimed device (its UUID, or its index in the
	// provider's capability record when it has none).
	Device string `json:"device"`
	// Model is the claimed model as the catalogue names it ("h200-sxm-141g").
	Model  string `json:"model"`
	VRAMGB int    `json:"vram_gb"`
	N      int    `json:"n"`
	K      int    `json:"k"`
	// SeedHash is the hex SHA-256 of the seed revealed once the device is
	// ready.
	SeedHash string    `json:"seed_hash"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
}

// Ops is the challenge's multiply-add count times two: k products of n×n
// matrices.
func (c Challenge) Ops() float64 {
	return 2 * float64(c.K) * float64(c.N) * float64(c.N) * float64(c.N)
}

// ResultBytes is the size of C on the wire.
func (c Challenge) ResultBytes() int64 { return int64(c.N) * int64(c.N) * 4 }

// Check validates a challenge's shape and times as its provider sees them
// at now.
func (c Challenge) Check(now time.Time) error {
	switch {
	case !hexDigits(c.ID, 32):
		return errors.New("gpuproof: challenge id must be 32 hex digits")
	case c.N <= 0 || c.N%128 != 0 || c.N > MaxN:
		return fmt.Errorf("gpuproof: matrix size %d is not a multiple of 128 up to %d", c.N, MaxN)
	case c.K < 1 || c.K > MaxK:
		return fmt.Errorf("gpuproof: power %d is not in [1, %d]", c.K, MaxK)
	case !hexDigits(c.SeedHash, 64):
		return errors.New("gpuproof: seed hash must be 64 hex digits")
	case c.Issued.After(now.Add(ClockSkew)) || c.Issued.Before(now.Add(-ClockSkew)):
		return fmt.Errorf("gpuproof: challenge issued at %s, more than %s from now", c.Issued.Format(time.RFC3339), ClockSkew)
	case !c.Expires.After(now):
		return errors.New("gpuproof: challenge expired")
	case c.Expires.Sub(c.Issued) > MaxLifetime:
		return fmt.Errorf("gpuproof: challenge lives longer than %s", MaxLifetime)
	}
	return nil
}

// hexDigits reports whether s is n hex digits.
func hexDigits(s string, n int) bool {
	_, err := hex.DecodeString(s)
	return len(s) == n && err == nil
}

// Size is the challenge size for a device of vramGB: n×n matrices and the
// power k. Larger devices get more work, so that the timed part is well
// above the fixed allowance (a few hundred milliseconds on the device).
func Size(vramGB int) (n, k int) {
	switch {
	case vramGB < 12:
		return 2048, 16
	case vramGB < 32:
		return 4096, 8
	default:
		return 4096, 32
	}
}

// NewChallenge makes a challenge and its secret seed.
func NewChallenge(verifier, provider, device, model string, vramGB, n, k int, now time.Time) (Challenge, [32]byte, error) {
	var id [16]byte
	var seed [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Challenge{}, seed, err
	}
	if _, err := rand.Read(seed[:]); err != nil {
		return Challenge{}, seed, err
	}
	sh := sha256.Sum256(seed[:])
	return Challenge{ID: hex.EncodeToString(id[:]), Verifier: verifier, Provider: provider, Device: device,
		Model: model, VRAMGB: vramGB, N: n, K: k, SeedHash: hex.EncodeToString(sh[:]),
		Issued: now.UTC(), Expires: now.Add(MaxLifetime).UTC()}, seed, nil
}

// Key is the matrices' 64-bit generator key: it depends on the seed and
// on the challenge, so no result carries over from another challenge.
func Key(seed [32]byte, id string) uint64 {
	h := sha256.New()
	h.Write(seed[:])
	h.Write([]byte(id))
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// Elem is element idx (row-major) of matrix which (0: A, 1: B): a
// splitmix64 finaliser of the key plus a counter. runtime/cuda's kernel
// computes the same function bit for bit.
func Elem(key uint64, which uint32, idx uint32) uint32 {
	z := key + (uint64(which)<<40|uint64(idx))*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return uint32(z >> 32)
}

// Generate returns matrix which (n×n, row-major).
func Generate(key uint64, which uint32, n int) []uint32 {
	m := make([]uint32, n*n)
	parallel(n, func(lo, hi int) {
		for i := lo * n; i < hi*n; i++ {
			m[i] = Elem(key, which, uint32(i))
		}
	})
	return m
}

// parallel splits rows [0, n) across the CPUs.
func parallel(n int, f func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for i := 0; i < w; i++ {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, hi) }()
	}
	wg.Wait()
}

// MatPowCPU computes C = A·B^k modulo 2^32 on the CPU: the path of
// declared GPUs and tests.
func MatPowCPU(key uint64, n, k int) []uint32 {
	a, b := Generate(key, 0, n), Generate(key, 1, n)
	c := make([]uint32, n*n)
	for step := 0; step < k; step++ {
		parallel(n, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := c[i*n : (i+1)*n]
				clear(row)
				ai := a[i*n : (i+1)*n]
				for l, x := range ai {
					bl := b[l*n : (l+1)*n]
					for j := range row {
						row[j] += x * bl[j]
					}
				}
			}
		})
		a, c = c, a
	}
	return a
}

// ResultHash is the hex SHA-256 of C as sent: little-endian, row-major.
func ResultHash(c []uint32) string {
	h := sha256.New()
	_ = writeResult(h, c) // a hash.Hash never fails a write
	return hex.EncodeToString(h.Sum(nil))
}

// Freivalds checks C = A·B^k (modulo 2^32) for the seeded A and B with
// rounds random vectors r, comparing C·r with A·(B·(…(B·r))) in O(k·n²)
// per round. A wrong C passes one round with probability at most
// 2^(v-32), where v is the least 2-adic valuation of an error entry in a
// wrong row (a random error: about 2^-32; the worst, an error of 2^31: 1/2),
// and rounds independent vectors multiply that bound.
func Freivalds(key uint64, n, k int, c []uint32, rounds int) (bool, error) {
	if len(c) != n*n {
		return false, fmt.Errorf("gpuproof: result has %d elements, want %d", len(c), n*n)
	}
	a, b := Generate(key, 0, n), Generate(key, 1, n)
	return freivalds(a, b, k, c, n, rounds)
}

func freivalds(a, b []uint32, k int, c []uint32, n, rounds int) (bool, error) {
	r := make([]uint32, n)
	rb := make([]byte, 4*n)
	for ; rounds > 0; rounds-- {
		if _, err := rand.Read(rb); err != nil {
			return false, err
		}
		for i := range r {
			r[i] = binary.LittleEndian.Uint32(rb[4*i:])
		}
		v := r
		for step := 0; step < k; step++ {
			v = matVec(b, v, n)
		}
		want := matVec(a, v, n)
		got := matVec(c, r, n)
		for i := range want {
			if want[i] != got[i] {
				return false, nil
			}
		}
	}
	return true, nil
}

// matVec returns m·v modulo 2^32.
func matVec(m, v []uint32, n int) []uint32 {
	out := make([]uint32, n)
	parallel(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var s uint32
			for j, x := range m[i*n : (i+1)*n] {
				s += x * v[j]
			}
			out[i] = s
		}
	})
	return out
}
