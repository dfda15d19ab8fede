package attest_test

import (
	"errors"
	"testing"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

func nvmlFingerprint(s *sign.Signer) attest.Fingerprint {
	return attest.Fingerprint{
		Peer: s.ID().String(),
		GPUs: []terms.GPU{
			{Model: "RTX 4090", VRAMGB: 24, UUID: "GPU-aaaa", Detected: true},
			{Model: "RTX 4090", VRAMGB: 24, UUID: "GPU-bbbb", Detected: true},
		},
		Driver:   "550.54",
		CUDA:     "12.4",
		Source:   attest.SourceNVML,
		IssuedAt: t0,
	}
}

func TestFingerprintRoundTrip(t *testing.T) {
	s := signtest.New(t)
	fp := nvmlFingerprint(s)
	env, err := attest.SignFingerprint(s, fp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	env2, err := sign.UnmarshalEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := attest.OpenFingerprint(env2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != fp.Hash() || !got.IssuedAt.Equal(fp.IssuedAt) || len(got.GPUs) != 2 || got.GPUs[1].UUID != "GPU-bbbb" {
		t.Fatalf("round trip changed the fingerprint: %+v", got)
	}
}

func TestFingerprintSignerMustBePeer(t *testing.T) {
	a, b := signtest.Pair(t)
	if _, err := attest.SignFingerprint(a, nvmlFingerprint(b)); !errors.Is(err, attest.ErrInvalidFingerprint) {
		t.Fatalf("signing another peer's fingerprint: got %v", err)
	}
	// A fingerprint naming b, sealed by a with the generic sign.Seal.
	env, err := sign.Seal(a, sign.DomainFingerprint, nvmlFingerprint(b))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.OpenFingerprint(env); !errors.Is(err, attest.ErrInvalidFingerprint) {
		t.Fatalf("fingerprint signed by a non-owner opened: %v", err)
	}
	// Tampered payload.
	good, err := attest.SignFingerprint(a, nvmlFingerprint(a))
	if err != nil {
		t.Fatal(err)
	}
	good.Payload[len(good.Payload)-3] ^= 1
	if _, err := attest.OpenFingerprint(good); !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("tampered fingerprint: got %v", err)
	}
}

func TestFingerprintValidation(t *testing.T) {
	s := signtest.New(t)
	fp := nvmlFingerprint(s)
	fp.Source = "guess"
	if _, err := attest.SignFingerprint(s, fp); !errors.Is(err, attest.ErrInvalidFingerprint) {
		t.Fatalf("unknown source accepted: %v", err)
	}
	fp = nvmlFingerprint(s)
	fp.Source = attest.SourceDeclared // but GPUs claim Detected
	if _, err := attest.SignFingerprint(s, fp); !errors.Is(err, attest.ErrInvalidFingerprint) {
		t.Fatalf("declared fingerprint with detected gpus accepted: %v", err)
	}
}

func TestFingerprintHash(t *testing.T) {
	s := signtest.New(t)
	base := nvmlFingerprint(s)
	h := base.Hash()
	if len(h) != 64 {
		t.Fatalf("hash %q is not hex sha256", h)
	}

	same := nvmlFingerprint(s)
	same.IssuedAt = t0.AddDate(0, 1, 0)
	same.GPUs[0], same.GPUs[1] = same.GPUs[1], same.GPUs[0] // enumeration order
	if same.Hash() != h {
		t.Fatal("re-issued fingerprint of the same hardware changed hash")
	}
	other := nvmlFingerprint(signtest.New(t))
	if other.Hash() != h {
		t.Fatal("hash depends on the peer, not only on the hardware")
	}

	changes := map[string]func(*attest.Fingerprint){
		"uuid":     func(f *attest.Fingerprint) { f.GPUs[0].UUID = "GPU-cccc" },
		"model":    func(f *attest.Fingerprint) { f.GPUs[1].Model = "RTX 3090" },
		"vram":     func(f *attest.Fingerprint) { f.GPUs[1].VRAMGB = 12 },
		"driver":   func(f *attest.Fingerprint) { f.Driver = "555.10" },
		"cuda":     func(f *attest.Fingerprint) { f.CUDA = "12.5" },
		"gpu gone": func(f *attest.Fingerprint) { f.GPUs = f.GPUs[:1] },
		"source": func(f *attest.Fingerprint) {
			f.Source = attest.SourceDeclared
			for i := range f.GPUs {
				f.GPUs[i].Detected = false
			}
		},
		// Field boundaries must not be ambiguous.
		"shifted": func(f *attest.Fingerprint) { f.Driver, f.CUDA = "550.5", "412.4" },
	}
	seen := map[string]string{h: "base"}
	for name, change := range changes {
		f := nvmlFingerprint(s)
		change(&f)
		got := f.Hash()
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: hash equals that of %s", name, prev)
		}
		seen[got] = name
	}
}
