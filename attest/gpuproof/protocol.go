package gpuproof

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/p2p/frame"
)

// The exchange on one stream (wire.ProtoGPUChallenge), frames as p2p's:
//
//	verifier → provider  the signed Challenge
//	provider → verifier  Ready (or a refusal in it)
//	verifier → provider  "ping"; provider → verifier "pong" (the round trip)
//	verifier → provider  the seed (32 bytes); the verifier's clock starts
//	provider → verifier  the signed Commit; the clock stops
//	provider → verifier  C, n·n little-endian uint32, unframed

// Commit is the provider's signed commitment to its result
// (sign.DomainGPUCommit).
type Commit struct {
	Challenge string `json:"challenge"`
	// Result is ResultHash of C.
	Result     string `json:"result"`
	Backend    string `json:"backend"`
	Device     string `json:"device"`
	DeviceName string `json:"device_name,omitempty"`
	// Compute is the provider's own measure of its device time.
	Compute time.Duration `json:"compute"`
}

// Ready is the provider's answer to a challenge: prepared, or why not.
type Ready struct {
	// Busy: the device runs a lease now; ask again later (no verdict).
	Busy bool `json:"busy,omitempty"`
	// Refused is why the provider will not take the challenge.
	Refused    string `json:"refused,omitempty"`
	Backend    string `json:"backend,omitempty"`
	DeviceName string `json:"device_name,omitempty"`
}

// Runner computes challenges of one size on one device.
type Runner interface {
	// MatPow returns C = A·B^k mod 2^32 for the seeded matrices and the
	// device time it took.
	MatPow(key uint64, k int) ([]uint32, time.Duration, error)
	Backend() string
	DeviceName() string
	Close()
}

// Backend prepares a device for n×n challenges: a CUDA session on a GPU
// (runtime), or the CPU path.
type Backend interface {
	Prepare(device string, n int) (Runner, error)
}

// CPU is the pure Go path: declared GPUs and tests. Its results are right
// and never verified (the verifier judges BackendCPU unverifiable).
type CPU struct{ n int }

// Prepare returns a CPU runner.
func (CPU) Prepare(_ string, n int) (Runner, error) { return CPU{n: n}, nil }

// MatPow computes on the CPU.
func (c CPU) MatPow(key uint64, k int) ([]uint32, time.Duration, error) {
	start := time.Now()
	out := MatPowCPU(key, c.n, k)
	return out, time.Since(start), nil
}

func (CPU) Backend() string    { return BackendCPU }
func (CPU) DeviceName() string { return "cpu" }
func (CPU) Close()             {}

// Refusals and errors.
var (
	ErrReplay    = errors.New("gpuproof: challenge already seen")
	ErrRateLimit = errors.New("gpuproof: too many challenges; try later")
	ErrBusy      = errors.New("gpuproof: device busy with a lease; try later")
)

// Prover answers challenges on a provider.
type Prover struct {
	Signer  *sign.Signer
	Backend Backend
	// Devices reports whether device is one this provider offers.
	Devices func(device string) bool
	// Busy reports whether a lease uses device now (nil: never).
	Busy func(device string) bool
	Now  func() time.Time
	// PerVerifier is the least time between two challenges from one
	// verifier on one device (default one minute); challenges run one at
	// a time, others are refused as busy.
	PerVerifier time.Duration

	mu      sync.Mutex
	seen    map[string]time.Time // challenge id → expiry
	last    map[string]time.Time // verifier \x00 device → last accepted
	running bool
}

func (p *Prover) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// admit records an accepted challenge, refusing replays, a verifier asking
// too often, and a second challenge while one runs.
func (p *Prover) admit(c Challenge, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen, p.last = map[string]time.Time{}, map[string]time.Time{}
	}
	for id, exp := range p.seen {
		if now.After(exp) {
			delete(p.seen, id)
		}
	}
	for v, at := range p.last {
		if now.Sub(at) > time.Hour {
			delete(p.last, v)
		}
	}
	if _, ok := p.seen[c.ID]; ok {
		return ErrReplay
	}
	if p.running {
		return ErrBusy
	}
	gap := p.PerVerifier
	if gap == 0 {
		gap = time.Minute
	}
	key := c.Verifier + "\x00" + c.Device
	if at, ok := p.last[key]; ok && now.Sub(at) < gap {
		return ErrRateLimit
	}
	p.seen[c.ID] = c.Expires
	p.last[key] = now
	p.running = true
	return nil
}

func (p *Prover) done() {
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return frame.Write(w, b)
}

func readJSON(r *bufio.Reader, v any) error {
	b, err := frame.Read(r)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Serve answers one challenge from peer from on rw (a stream whose remote
// peer the transport authenticated).
func (p *Prover) Serve(from sign.ID, rw io.ReadWriter) error {
	br := bufio.NewReader(rw)
	raw, err := frame.Read(br)
	if err != nil {
		return err
	}
	var c Challenge
	if err := sign.OpenFrom(raw, sign.DomainGPUChallenge, from, &c); err != nil {
		return err
	}
	refuse := func(err error) error {
		_ = writeJSON(rw, Ready{Refused: err.Error(), Busy: errors.Is(err, ErrBusy) || errors.Is(err, ErrRateLimit)})
		return err
	}
	now := p.now()
	switch {
	case c.Verifier != from.String():
		return refuse(fmt.Errorf("gpuproof: challenge names verifier %q, sent by %s", c.Verifier, from))
	case c.Provider != p.Signer.ID().String():
		return refuse(fmt.Errorf("gpuproof: challenge is for %q, not this provider", c.Provider))
	case p.Devices != nil && !p.Devices(c.Device):
		return refuse(fmt.Errorf("gpuproof: no device %q here", c.Device))
	}
	if err := c.Check(now); err != nil {
		return refuse(err)
	}
	if p.Busy != nil && p.Busy(c.Device) {
		return refuse(ErrBusy)
	}
	if err := p.admit(c, now); err != nil {
		return refuse(err)
	}
	defer p.done()
	run, err := p.Backend.Prepare(c.Device, c.N)
	if err != nil {
		return refuse(fmt.Errorf("gpuproof: prepare device: %w", err))
	}
	defer run.Close()
	if err := writeJSON(rw, Ready{Backend: run.Backend(), DeviceName: run.DeviceName()}); err != nil {
		return err
	}
	ping, err := frame.Read(br)
	if err != nil {
		return err
	}
	if err := frame.Write(rw, ping); err != nil {
		return err
	}
	seed, err := frame.Read(br)
	if err != nil {
		return err
	}
	sh := sha256.Sum256(seed)
	if len(seed) != 32 || hex.EncodeToString(sh[:]) != c.SeedHash {
		return errors.New("gpuproof: seed does not match the challenge's seed hash")
	}
	result, took, err := run.MatPow(Key([32]byte(seed), c.ID), c.K)
	if err != nil {
		return fmt.Errorf("gpuproof: compute: %w", err)
	}
	env, err := sign.Seal(p.Signer, sign.DomainGPUCommit, Commit{Challenge: c.ID, Result: ResultHash(result),
		Backend: run.Backend(), Device: c.Device, DeviceName: run.DeviceName(), Compute: took})
	if err != nil {
		return err
	}
	b, err := env.Marshal()
	if err != nil {
		return err
	}
	if err := frame.Write(rw, b); err != nil {
		return err
	}
	return writeResult(rw, result)
}

func writeResult(w io.Writer, c []uint32) error {
	buf := make([]byte, 0, 1<<16)
	for _, v := range c {
		buf = binary.LittleEndian.AppendUint32(buf, v)
		if len(buf) == cap(buf) {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if len(buf) == 0 {
		return nil
	}
	_, err := w.Write(buf)
	return err
}

// Verifier issues challenges.
type Verifier struct {
	Signer *sign.Signer
	Policy Policy
	Now    func() time.Time
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// ErrNoVerdict wraps a challenge that ended without a finding: the device
// was busy or the provider rate-limited this verifier.
var ErrNoVerdict = errors.New("gpuproof: no verdict")

// Run challenges provider's device (claimed as model with vramGB) on rw,
// whose deadline the caller sets (SetDeadline) or whose ctx it cancels, and
// returns the signed verdict. A timed-out or misbehaving provider gets a
// Failed verdict; ErrNoVerdict comes back when there is nothing to judge.
// n and k of 0 mean Size(vramGB).
func (v *Verifier) Run(ctx context.Context, rw io.ReadWriter, provider sign.ID, device, model string, vramGB, n, k int) (*SignedVerdict, error) {
	if n == 0 || k == 0 {
		n, k = Size(vramGB)
	}
	c, seed, err := NewChallenge(v.Signer.ID().String(), provider.String(), device, model, vramGB, n, k, v.now())
	if err != nil {
		return nil, err
	}
	verdict := Verdict{Challenge: c}
	seal := func(outcome, reason string) (*SignedVerdict, error) {
		verdict.Outcome, verdict.Reason, verdict.Time = outcome, reason, v.now().UTC()
		return Seal(v.Signer, verdict)
	}
	env, err := sign.Seal(v.Signer, sign.DomainGPUChallenge, c)
	if err != nil {
		return nil, err
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, err
	}
	if err := frame.Write(rw, b); err != nil {
		return nil, fmt.Errorf("gpuproof: send challenge: %w", err)
	}
	br := bufio.NewReader(rw)
	var ready Ready
	if err := readJSON(br, &ready); err != nil {
		return seal(Failed, fmt.Sprintf("no answer to the challenge: %v", err))
	}
	verdict.Backend, verdict.DeviceName = ready.Backend, ready.DeviceName
	switch {
	case ready.Busy:
		return nil, fmt.Errorf("%w: %s", ErrNoVerdict, ready.Refused)
	case ready.Refused != "":
		return seal(Failed, "refused: "+ready.Refused)
	}
	budget, rated := v.Policy.Budget(c, 0)
	switch {
	case ready.Backend == BackendCPU:
		return seal(Unverifiable, "the provider computes on its CPU path (declared GPUs): never verified")
	case !rated:
		return seal(Unverifiable, fmt.Sprintf("the catalogue has no rate for model %q", model))
	}
	t0 := v.now()
	if err := frame.Write(rw, []byte("ping")); err != nil {
		return seal(Failed, fmt.Sprintf("ping: %v", err))
	}
	if _, err := frame.Read(br); err != nil {
		return seal(Failed, fmt.Sprintf("no pong: %v", err))
	}
	verdict.RTT = v.now().Sub(t0)
	budget, _ = v.Policy.Budget(c, verdict.RTT)
	verdict.Budget = budget
	// Past twice the budget the provider has failed; stop waiting then.
	timer := time.AfterFunc(2*budget+time.Second, func() {
		if d, ok := rw.(interface{ SetReadDeadline(time.Time) error }); ok {
			_ = d.SetReadDeadline(time.Now())
		}
	})
	start := v.now()
	if err := frame.Write(rw, seed[:]); err != nil {
		timer.Stop()
		return seal(Failed, fmt.Sprintf("send seed: %v", err))
	}
	raw, err := frame.Read(br)
	verdict.Elapsed = v.now().Sub(start)
	timer.Stop()
	if d, ok := rw.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = d.SetReadDeadline(time.Time{})
	}
	if err != nil {
		return seal(Failed, fmt.Sprintf("no commitment after %s (budget %s): %v", verdict.Elapsed.Round(time.Millisecond), budget.Round(time.Millisecond), err))
	}
	var cm Commit
	if err := sign.OpenFrom(raw, sign.DomainGPUCommit, provider, &cm); err != nil {
		return seal(Failed, fmt.Sprintf("bad commitment: %v", err))
	}
	if cm.Challenge != c.ID {
		// Not kept in the verdict: a commitment to another challenge
		// would make the verdict one no book opens (SignedVerdict.Open),
		// and the provider's failure would go unrecorded.
		return seal(Failed, "commitment names another challenge")
	}
	cenv, _ := sign.UnmarshalEnvelope(raw)
	verdict.Commit = cenv
	verdict.Backend, verdict.DeviceName = cm.Backend, cm.DeviceName
	verdict.Rate = c.Ops() / verdict.Elapsed.Seconds()
	result, err := readResult(ctx, br, c.N)
	if err != nil {
		return seal(Failed, fmt.Sprintf("result: %v", err))
	}
	if ResultHash(result) != cm.Result {
		return seal(Failed, "the result does not match its commitment")
	}
	ok, err := Freivalds(Key(seed, c.ID), c.N, c.K, result, Rounds)
	if err != nil {
		return nil, err
	}
	switch {
	case !ok:
		return seal(Failed, "wrong result (Freivalds)")
	case cm.Backend == BackendCPU:
		return seal(Unverifiable, "the provider computed on its CPU path: never verified")
	case verdict.Elapsed > budget:
		return seal(Failed, fmt.Sprintf("too slow for %s: %s, budget %s", model, verdict.Elapsed.Round(time.Millisecond), budget.Round(time.Millisecond)))
	}
	return seal(Verified, "")
}

// readResult reads C (n·n little-endian uint32), giving up when ctx ends.
func readResult(ctx context.Context, r io.Reader, n int) ([]uint32, error) {
	out := make([]uint32, n*n)
	buf := make([]byte, 1<<16)
	for i := 0; i < len(out); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		want := min(len(buf), 4*(len(out)-i))
		if _, err := io.ReadFull(r, buf[:want]); err != nil {
			return nil, err
		}
		for j := 0; j < want; j += 4 {
			out[i] = binary.LittleEndian.Uint32(buf[j:])
			i++
		}
	}
	return out, nil
}
