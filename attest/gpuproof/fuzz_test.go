package gpuproof

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/p2p/frame"
)

// fuzzNow is the fuzz targets' clock.
var fuzzNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// instant answers every challenge at once with a fixed small C: the
// prover's side of a challenge without its arithmetic (a fuzzed challenge
// may ask for 8192×8192 matrices).
type instant struct{}

func (instant) Prepare(string, int) (Runner, error) { return instant{}, nil }
func (instant) MatPow(key uint64, _ int) ([]uint32, time.Duration, error) {
	return []uint32{uint32(key), 1, 2, 3}, time.Millisecond, nil
}
func (instant) Backend() string    { return BackendCUDA }
func (instant) DeviceName() string { return "NVIDIA H200" }
func (instant) Close()             {}

func frames(tb testing.TB, parts ...[]byte) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		if err := frame.Write(&b, p); err != nil {
			tb.Fatal(err)
		}
	}
	return b.Bytes()
}

func oneLine(t *testing.T, err error) {
	t.Helper()
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error is not one line: %q", err)
	}
}

func isHex(s string, n int) bool {
	_, err := hex.DecodeString(s)
	return len(s) == n && err == nil
}

// FuzzProverServe is a hostile verifier: it signs whatever challenge it
// likes and sends whatever frames follow. The prover never panics, and
// when it answers with a commitment, the challenge it took is one Check
// allows (an id of 32 hex digits, a 64-hex-digit seed hash, sizes and
// times in range) and the seed it was sent is the one the challenge
// committed to.
func FuzzProverServe(f *testing.F) {
	vs, ps := signtest.Seeded(f, "verifier"), signtest.Seeded(f, "provider")
	c, seed, err := NewChallenge(vs.ID().String(), ps.ID().String(), "GPU-0", "NVIDIA H200", 141, 128, 1, fuzzNow)
	if err != nil {
		f.Fatal(err)
	}
	payload, _ := json.Marshal(c)
	f.Add(payload, frames(f, []byte("ping"), seed[:]))
	f.Add(payload, frames(f, []byte("ping"), make([]byte, 32)))
	f.Add(payload, []byte{})
	bad := c
	bad.ID = strings.Repeat("z", 32)
	badPayload, _ := json.Marshal(bad)
	f.Add(badPayload, frames(f, []byte("ping"), seed[:]))
	f.Add([]byte(`{"n":8192,"k":64}`), []byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte(`{"verifier":"a\nb"}`), []byte{})
	f.Add([]byte(`{"verifier":"`+vs.ID().String()+`","provider":"a\nb"}`), []byte{})
	f.Fuzz(func(t *testing.T, challenge, rest []byte) {
		env := signtest.RawBytes(t, vs, sign.DomainGPUChallenge, challenge)
		in := append(frames(t, env), rest...)
		var out bytes.Buffer
		p := &Prover{Signer: ps, Backend: instant{}, Now: func() time.Time { return fuzzNow },
			Devices: func(d string) bool { return d == "GPU-0" }}
		err := p.Serve(vs.ID(), struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), &out})
		if err != nil {
			oneLine(t, err)
		}
		br := bufio.NewReader(&out)
		var ready Ready
		if rb, rerr := frame.Read(br); rerr != nil || json.Unmarshal(rb, &ready) != nil {
			return // refused before an answer: the challenge did not open
		}
		if ready.Refused != "" {
			if err == nil {
				t.Fatalf("refused (%s) but Serve returned no error", ready.Refused)
			}
			return
		}
		if _, perr := frame.Read(br); perr != nil {
			return // the verifier sent no ping
		}
		cb, cerr := frame.Read(br)
		if cerr != nil {
			return // no commitment
		}
		var cm Commit
		if err := sign.OpenFrom(cb, sign.DomainGPUCommit, ps.ID(), &cm); err != nil {
			t.Fatalf("the prover's commitment does not open: %v", err)
		}
		var took Challenge
		if err := json.Unmarshal(challenge, &took); err != nil {
			t.Fatalf("committed to a challenge that does not decode: %v", err)
		}
		if err := took.Check(fuzzNow); err != nil {
			t.Fatalf("committed to a challenge Check refuses: %v", err)
		}
		if !isHex(took.ID, 32) || !isHex(took.SeedHash, 64) || cm.Challenge != took.ID {
			t.Fatalf("committed (to %q) on a challenge with id %q, seed hash %q", cm.Challenge, took.ID, took.SeedHash)
		}
	})
}

// FuzzVerifierRun is a hostile provider: whatever it answers a challenge
// with (ready, pong, commitment, result), the verifier never panics, ends
// with a verdict it signed or with no verdict for a busy device, and never
// calls verified a provider that could not know its seed.
func FuzzVerifierRun(f *testing.F) {
	vs, ps := signtest.Seeded(f, "verifier"), signtest.Seeded(f, "provider")
	ready, _ := json.Marshal(Ready{Backend: BackendCUDA, DeviceName: "NVIDIA H200"})
	busy, _ := json.Marshal(Ready{Busy: true, Refused: "busy"})
	refused, _ := json.Marshal(Ready{Refused: "no"})
	other, _, _ := NewChallenge(vs.ID().String(), ps.ID().String(), "GPU-0", "NVIDIA H200", 141, 128, 1, fuzzNow)
	result := make([]uint32, 128*128)
	env, err := sign.Seal(ps, sign.DomainGPUCommit, Commit{Challenge: other.ID, Result: ResultHash(result), Backend: BackendCUDA, Device: "GPU-0"})
	if err != nil {
		f.Fatal(err)
	}
	commit, _ := env.Marshal()
	var c bytes.Buffer
	_ = writeResult(&c, result)
	f.Add(append(frames(f, ready, []byte("ping"), commit), c.Bytes()...))
	f.Add(frames(f, ready, []byte("ping"), []byte("{}")))
	f.Add(frames(f, busy))
	f.Add(frames(f, refused))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	pol := Policy{Floor: func(string) (float64, bool) { return 1e12, true }}
	f.Fuzz(func(t *testing.T, answers []byte) {
		v := &Verifier{Signer: vs, Policy: pol}
		sv, err := v.Run(context.Background(), struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(answers), io.Discard}, ps.ID(), "GPU-0", "NVIDIA H200", 141, 128, 1)
		if err != nil {
			oneLine(t, err)
			if !errors.Is(err, ErrNoVerdict) {
				t.Fatalf("no verdict and not for a busy device: %v", err)
			}
			return
		}
		verdict, err := sv.Open()
		if err != nil {
			t.Fatalf("the verifier's own verdict does not open: %v", err)
		}
		if verdict.Outcome == Verified || verdict.Provider() != ps.ID().String() || verdict.Verifier() != vs.ID().String() {
			t.Fatalf("verdict %s on %s by %s for a provider that never saw the seed", verdict.Outcome, verdict.Provider(), verdict.Verifier())
		}
	})
}

// FuzzOpenVerdict: verdicts are gossiped (wire.GPUVerdictGossip) to every
// node's book. Whatever Open accepts from a verifier seals again to the
// same verdict, and a verified one carries the provider's commitment.
func FuzzOpenVerdict(f *testing.F) {
	vs, ps := signtest.Seeded(f, "verifier"), signtest.Seeded(f, "provider")
	c, _, err := NewChallenge(vs.ID().String(), ps.ID().String(), "GPU-0", "NVIDIA H200", 141, 128, 1, fuzzNow)
	if err != nil {
		f.Fatal(err)
	}
	commit, err := sign.Seal(ps, sign.DomainGPUCommit, Commit{Challenge: c.ID, Result: ResultHash(nil), Backend: BackendCUDA, Device: "GPU-0"})
	if err != nil {
		f.Fatal(err)
	}
	for _, v := range []Verdict{{Challenge: c, Commit: commit, Outcome: Verified, Elapsed: time.Second, Budget: 2 * time.Second, Rate: 1e12, Time: fuzzNow},
		{Challenge: c, Outcome: Failed, Reason: "no answer", Time: fuzzNow}, {Challenge: c, Outcome: Unverifiable, Time: fuzzNow}} {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	for _, b := range []string{"", "{}", "null", `{"outcome":"verified"}`, `{"challenge":{"verifier":"x"},"outcome":"failed"}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		v, err := (&SignedVerdict{Env: signtest.Raw(t, vs, sign.DomainGPUVerdict, payload)}).Open()
		if err != nil {
			oneLine(t, err)
			return
		}
		if v.Outcome == Verified && v.Commit == nil {
			t.Fatal("opened a verified verdict without the provider's commitment")
		}
		sv, err := Seal(vs, v)
		if err != nil {
			t.Fatalf("an opened verdict does not seal again: %v", err)
		}
		v2, err := sv.Open()
		if err != nil {
			t.Fatalf("a re-sealed verdict does not open: %v", err)
		}
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(v2)
		if !bytes.Equal(a, b) {
			t.Fatalf("verdict changed in a round trip:\n%s\n%s", a, b)
		}
	})
}
