package attest_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// forge signs r's exact encoding with the given keys for each role, without
// any of NewReceipt's checks: what an attacker with those keys can produce.
func forge(t *testing.T, provKey, renterKey *sign.Signer, r attest.Receipt) *attest.SignedReceipt {
	t.Helper()
	payload, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var decoded attest.Receipt
	if err := json.Unmarshal(payload, &decoded); err != nil {
		t.Fatal(err)
	}
	sr := &attest.SignedReceipt{Receipt: decoded, Payload: payload}
	if sr.ProviderSig, err = provKey.Sign(sign.DomainReceiptProvider, payload); err != nil {
		t.Fatal(err)
	}
	if renterKey != nil {
		if sr.RenterSig, err = renterKey.Sign(sign.DomainReceiptRenter, payload); err != nil {
			t.Fatal(err)
		}
	}
	return sr
}

func TestReceiptRoundTrip(t *testing.T) {
	prov, renter := signtest.Pair(t)
	r := receipt("L1", prov, renter, t0)
	r.Amount = 0 // NewReceipt computes it
	r.ResultHash = "sha256:abc"
	sr, err := attest.NewReceipt(prov, r)
	if err != nil {
		t.Fatal(err)
	}
	if sr.Receipt.Amount != 2 {
		t.Fatalf("amount %v, want 2", sr.Receipt.Amount)
	}
	if err := sr.Verify(); !errors.Is(err, attest.ErrIncomplete) {
		t.Fatalf("provider-only receipt: got %v, want ErrIncomplete", err)
	}
	if err := sr.Countersign(signtest.New(t)); err == nil {
		t.Fatal("a stranger countersigned as renter")
	}
	if err := sr.Countersign(renter); err != nil {
		t.Fatal(err)
	}
	if err := sr.Verify(); err != nil {
		t.Fatalf("complete receipt: %v", err)
	}
	b, err := sr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := attest.OpenReceipt(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Receipt.LeaseID != "L1" || got.Receipt.ResultHash != "sha256:abc" || !got.Receipt.End.Equal(t0) || got.Receipt.Heartbeats.Count != 360 {
		t.Fatalf("round trip changed the receipt: %+v", got.Receipt)
	}
	// Provider-only wire form decodes but does not open.
	half, err := attest.NewReceipt(prov, receipt("L2", prov, renter, t0))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := half.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.UnmarshalReceipt(hb); err != nil {
		t.Fatalf("unmarshal provider-only receipt: %v", err)
	}
	if _, err := attest.OpenReceipt(hb); !errors.Is(err, attest.ErrIncomplete) {
		t.Fatalf("open provider-only receipt: %v", err)
	}
	if _, err := attest.UnmarshalReceipt(make([]byte, attest.MaxReceiptSize+1)); !errors.Is(err, sign.ErrOversized) {
		t.Fatalf("oversized receipt: %v", err)
	}
}

func TestReceiptForgeries(t *testing.T) {
	prov, renter, mallory := signtest.New(t), signtest.New(t), signtest.New(t)
	good := func() *attest.SignedReceipt { return signed(t, prov, renter, receipt("L1", prov, renter, t0)) }

	tamperedAmount := good()
	tamperedAmount.Receipt.Amount = 200
	tamperedGPUSec := good()
	tamperedGPUSec.Receipt.GPUSeconds = 7200
	tamperedGPUSec.Receipt.Amount = 4
	tamperedPayload := good()
	tamperedPayload.Payload = []byte(string(tamperedPayload.Payload[:len(tamperedPayload.Payload)-1]) + " }")
	swapped := good()
	swapped.ProviderSig, swapped.RenterSig = swapped.RenterSig, swapped.ProviderSig
	renterOnly := good()
	renterOnly.ProviderSig = nil
	// Mallory signs as "renter" of a receipt naming renter.
	strangerRenter := forge(t, prov, mallory, receipt("L1", prov, renter, t0))
	// Both roles signed under the provider domain by the right keys.
	crossDomain := good()
	crossDomain.RenterSig, _ = renter.Sign(sign.DomainReceiptProvider, crossDomain.Payload)
	badAmount := receipt("L1", prov, renter, t0)
	badAmount.Amount = 3
	endBeforeStart := receipt("L1", prov, renter, t0)
	endBeforeStart.Start = t0.Add(time.Hour)
	selfDealing := receipt("L1", prov, prov, t0)
	badOutcome := receipt("L1", prov, renter, t0)
	badOutcome.Outcome = "great"
	wrongDevices := receipt("L1", prov, renter, t0) // one GPU
	wrongDevices.Devices = []string{"GPU-a", "GPU-b"}
	emptyDevice := receipt("L1", prov, renter, t0)
	emptyDevice.Devices = []string{""}
	repeatedDevice := receipt("L1", prov, renter, t0)
	repeatedDevice.GPUCount, repeatedDevice.GPUSeconds, repeatedDevice.Amount = 2, 2*repeatedDevice.GPUSeconds, 2*repeatedDevice.Amount
	repeatedDevice.Devices = []string{"GPU-a", "GPU-a"}

	cases := []struct {
		name string
		sr   *attest.SignedReceipt
		want error
	}{
		{"provider only", func() *attest.SignedReceipt { s := good(); s.RenterSig = nil; return s }(), attest.ErrIncomplete},
		{"renter only", renterOnly, attest.ErrIncomplete},
		{"tampered amount", tamperedAmount, attest.ErrTampered},
		{"tampered gpu seconds", tamperedGPUSec, attest.ErrTampered},
		{"tampered payload", tamperedPayload, sign.ErrBadSignature},
		{"swapped signatures", swapped, sign.ErrBadSignature},
		{"stranger renter", strangerRenter, sign.ErrBadSignature},
		{"cross domain", crossDomain, sign.ErrBadSignature},
		{"amount arithmetic", forge(t, prov, renter, badAmount), attest.ErrInvalidReceipt},
		{"end before start", forge(t, prov, renter, endBeforeStart), attest.ErrInvalidReceipt},
		{"unknown outcome", forge(t, prov, renter, badOutcome), attest.ErrInvalidReceipt},
		{"devices not one per gpu", forge(t, prov, renter, wrongDevices), attest.ErrInvalidReceipt},
		{"empty device", forge(t, prov, renter, emptyDevice), attest.ErrInvalidReceipt},
		{"device repeated", forge(t, prov, renter, repeatedDevice), attest.ErrInvalidReceipt},
		{"self dealing", forge(t, prov, prov, selfDealing), attest.ErrSelfDealing},
		{"nil", nil, sign.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.sr.Verify(); !errors.Is(err, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			}
		})
	}
	// The constructors refuse what Verify rejects.
	if _, err := attest.NewReceipt(prov, selfDealing); !errors.Is(err, attest.ErrSelfDealing) {
		t.Errorf("NewReceipt self-dealing: %v", err)
	}
	if _, err := attest.NewReceipt(prov, badAmount); !errors.Is(err, attest.ErrInvalidReceipt) {
		t.Errorf("NewReceipt bad amount: %v", err)
	}
	if _, err := attest.NewReceipt(mallory, receipt("L1", prov, renter, t0)); err == nil {
		t.Error("NewReceipt signed another provider's receipt")
	}
	over := receipt("L1", prov, renter, t0)
	over.GPUSeconds, over.Amount = 7200, 4
	if _, err := attest.NewReceipt(prov, over); !errors.Is(err, attest.ErrInvalidReceipt) {
		t.Errorf("NewReceipt overclaim: %v", err)
	}
	if err := forge(t, prov, nil, over).Countersign(renter); !errors.Is(err, attest.ErrInvalidReceipt) {
		t.Errorf("Countersign overclaim: %v", err)
	}
}

func TestCheckReceipt(t *testing.T) {
	prov, renter := signtest.Pair(t)
	r := receipt("L1", prov, renter, t0)
	leased := terms.Lease{ID: "L1", JobID: "job-L1", Renter: r.Renter, Provider: r.Provider,
		Price: 2, Start: r.Start, End: r.End.Add(time.Hour), GPUCount: 1}
	now := r.End.Add(time.Minute)
	if err := attest.CheckReceipt(r, leased, now); err != nil {
		t.Fatalf("matching receipt (ended early): %v", err)
	}
	if err := attest.CheckReceipt(r, leased, r.End.Add(-attest.HeartbeatSkew)); err != nil {
		t.Fatalf("receipt ending within the clock skew: %v", err)
	}
	mutate := map[string]func(*attest.Receipt){
		"price":     func(r *attest.Receipt) { r.Price = 3 },
		"lease":     func(r *attest.Receipt) { r.LeaseID = "L9" },
		"job":       func(r *attest.Receipt) { r.JobID = "other" },
		"gpus":      func(r *attest.Receipt) { r.GPUCount = 2 },
		"late end":  func(r *attest.Receipt) { r.End = leased.End.Add(time.Minute) },
		"early":     func(r *attest.Receipt) { r.Start = leased.Start.Add(-time.Minute) },
		"overclaim": func(r *attest.Receipt) { r.GPUSeconds = 3600 * 2 },
		"renter":    func(r *attest.Receipt) { r.Renter = prov.ID().String() },
		// Within the lease, but after the checker's now.
		"future end": func(r *attest.Receipt) { r.End = now.Add(10 * time.Minute) },
	}
	for name, m := range mutate {
		rr := r
		m(&rr)
		if err := attest.CheckReceipt(rr, leased, now); !errors.Is(err, attest.ErrMismatch) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// TestBillableSeconds: what a renter can vouch for is bounded by the lease,
// by what it observed, by now and by the heartbeat gaps its own monitor
// recorded.
func TestBillableSeconds(t *testing.T) {
	prov := signtest.New(t)
	lease := terms.Lease{ID: "L1", Start: t0, End: t0.Add(time.Hour), GPUCount: 2}
	// The renter's own monitor: one heartbeat per interval for the first
	// 30 minutes, nothing for 20 minutes, then again until the end.
	mon := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, iv)
	seq := uint64(0)
	for at := t0.Add(iv); !at.After(lease.End); at = at.Add(iv) {
		if at.After(t0.Add(30*time.Minute)) && at.Before(t0.Add(50*time.Minute)) {
			continue
		}
		seq++
		if err := mon.Accept(hbEnv(t, prov, "L1", seq, at), at); err != nil {
			t.Fatal(err)
		}
	}
	withGap := mon.Summary(lease.End)
	if len(withGap.Gaps) != 1 {
		t.Fatal("want one gap")
	}
	perfect := attest.HeartbeatSummary{Count: 360, Expected: 360, Coverage: 1}
	end := lease.End
	for _, c := range []struct {
		name       string
		start, obs time.Time // observed start and end
		now        time.Time
		hs         attest.HeartbeatSummary
		want       time.Duration
	}{
		{"whole lease", t0, end, end.Add(time.Minute), perfect, time.Hour},
		{"still running, bounded by now", t0, time.Time{}, t0.Add(25 * time.Minute), perfect, 25 * time.Minute},
		{"ended early", t0, t0.Add(40 * time.Minute), end.Add(time.Minute), perfect, 40 * time.Minute},
		{"started late", t0.Add(5 * time.Minute), end, end, perfect, 55 * time.Minute},
		{"observed end after the lease", t0, end.Add(time.Hour), end.Add(2 * time.Hour), perfect, time.Hour},
		{"heartbeat gap", t0, end, end, withGap, time.Hour - (withGap.Gaps[0].End.Sub(withGap.Gaps[0].Start))},
		{"gap clipped by now", t0, time.Time{}, t0.Add(40 * time.Minute), withGap, 40*time.Minute - t0.Add(40*time.Minute).Sub(withGap.Gaps[0].Start)},
		{"no heartbeat at all", t0, end, end, attest.HeartbeatSummary{Expected: 360}, 0},
		{"never seen starting", time.Time{}, end, end, perfect, 0},
		{"now before the start", t0, end, t0.Add(-time.Minute), perfect, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := attest.BillableSeconds(lease, c.start, c.obs, c.now, c.hs)
			if math.Abs(got-c.want.Seconds()) > 1e-6 {
				t.Fatalf("billable %v s, want %v s", got, c.want.Seconds())
			}
		})
	}
}

// TestReceiptPolicyStatements: the provider's no-persist and scrub
// statements are signed by both parties like any other field, and a scrub
// statement outside its vocabulary (or a failure statement that is not
// one line of printable text) is not a receipt.
func TestReceiptPolicyStatements(t *testing.T) {
	prov, renter := signtest.Pair(t)
	for _, scrub := range []string{"", attest.ScrubZeroed, attest.ScrubNoneDeclared, attest.ScrubFailure("gpu-scrub: exit status 1")} {
		r := receipt("L1", prov, renter, t0)
		r.NoPersist, r.Scrub = true, scrub
		sr := signed(t, prov, renter, r)
		b, err := sr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := attest.OpenReceipt(b)
		if err != nil {
			t.Fatalf("scrub %q: %v", scrub, err)
		}
		if !got.Receipt.NoPersist || got.Receipt.Scrub != scrub {
			t.Fatalf("round trip: no_persist %v scrub %q, want true %q", got.Receipt.NoPersist, got.Receipt.Scrub, scrub)
		}
		// The statements are signed: dropping one is tampering.
		dropped := *sr
		dropped.Receipt.NoPersist = false
		if err := dropped.Verify(); !errors.Is(err, attest.ErrTampered) {
			t.Fatalf("receipt with no_persist dropped: %v, want ErrTampered", err)
		}
	}
	for _, bad := range []string{"done", "failed: ", "failed: two\nlines", "failed: nul\x00", "zeroed ", "failed: " + strings.Repeat("x", attest.MaxScrubStatement)} {
		r := receipt("L1", prov, renter, t0)
		r.Scrub = bad
		if _, err := attest.NewReceipt(prov, r); !errors.Is(err, attest.ErrInvalidReceipt) {
			t.Errorf("NewReceipt with scrub %q: %v, want ErrInvalidReceipt", bad, err)
		}
		if err := forge(t, prov, renter, r).Verify(); !errors.Is(err, attest.ErrInvalidReceipt) {
			t.Errorf("forged receipt with scrub %q: %v, want ErrInvalidReceipt", bad, err)
		}
	}
	long := attest.ScrubFailure("cuda: " + strings.Repeat("é", 300) + "\n\tend")
	if len(long) > attest.MaxScrubStatement || !strings.HasPrefix(long, attest.ScrubFailed+"cuda: é") || strings.ContainsAny(long, "\n\t") {
		t.Fatalf("ScrubFailure of a long, multi-line reason: %q", long)
	}
	spaced := attest.ScrubFailure(strings.Repeat("ab ", 200))
	r := receipt("L1", prov, renter, t0)
	r.Scrub = spaced
	if _, err := attest.NewReceipt(prov, r); err != nil {
		t.Fatalf("ScrubFailure cut at a space (%q) is not a receipt's statement: %v", spaced, err)
	}
	if got := attest.ScrubFailure("  \n"); got != attest.ScrubFailed+"unknown error" {
		t.Fatalf("ScrubFailure of no reason: %q", got)
	}
}

// TestSliceReceiptBillsItsFraction: a receipt for a quarter of a GPU bills
// a quarter of the span's GPU-seconds at the GPU-hour price; a provider
// that bills the whole span for it overclaims, and one that drops the
// fraction from the receipt disagrees with the lease.
func TestSliceReceiptBillsItsFraction(t *testing.T) {
	prov, renter := signtest.Pair(t)
	q := receipt("L1", prov, renter, t0) // one hour
	q.GPUFraction, q.GPUSeconds = 0.25, 900
	q.Amount = attest.AmountFor(q.GPUSeconds, q.Price)
	sr := signed(t, prov, renter, q)
	if err := sr.Verify(); err != nil || sr.Receipt.Amount != 0.5 {
		t.Fatalf("a quarter gpu-hour at $2: amount %v, %v", sr.Receipt.Amount, err)
	}
	lease := terms.Lease{ID: "L1", JobID: "job-L1", Renter: q.Renter, Provider: q.Provider, Price: 2, Start: q.Start, End: q.End,
		GPUCount: 1, GPUFraction: 0.25}
	if err := attest.CheckReceipt(q, lease, q.End); err != nil {
		t.Fatalf("quarter receipt against its lease: %v", err)
	}
	whole := q
	whole.GPUSeconds, whole.Amount = 3600, 2
	if _, err := attest.NewReceipt(prov, whole); !errors.Is(err, attest.ErrInvalidReceipt) {
		t.Errorf("a whole hour billed for a quarter: %v", err)
	}
	if err := attest.CheckReceipt(whole, lease, q.End); !errors.Is(err, attest.ErrMismatch) {
		t.Errorf("CheckReceipt of a whole hour billed for a quarter: %v", err)
	}
	dropped := whole
	dropped.GPUFraction = 0
	if err := attest.CheckReceipt(dropped, lease, q.End); !errors.Is(err, attest.ErrMismatch) {
		t.Errorf("a quarter lease's receipt without its fraction: %v", err)
	}
	for name, m := range map[string]func(*attest.Receipt){
		"fraction 0.3":       func(r *attest.Receipt) { r.GPUFraction = 0.3 },
		"fraction of 2 gpus": func(r *attest.Receipt) { r.GPUCount = 2 },
	} {
		bad := q
		m(&bad)
		if err := forge(t, prov, renter, bad).Verify(); !errors.Is(err, attest.ErrInvalidReceipt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
