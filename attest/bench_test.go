package attest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

func perSecond(b *testing.B, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// distinct is how many distinct signed messages the verification
// benchmarks cycle through: more than sign remembers as verified (512), so
// that every verification is a real one, not a cache hit.
const distinct = 2048

// BenchmarkVerify measures envelope signature verification (sign.Open of a
// heartbeat, including JSON decoding).
func BenchmarkVerify(b *testing.B) {
	s := signtest.New(b)
	envs := make([]*sign.Envelope, distinct)
	for i := range envs {
		env, err := attest.SignHeartbeat(s, attest.Heartbeat{LeaseID: "L1", Seq: uint64(i + 1), Time: t0, GPUUtil: 75, Source: attest.SourceNVML})
		if err != nil {
			b.Fatal(err)
		}
		envs[i] = env
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var hb attest.Heartbeat
		if _, err := sign.Open(envs[i%distinct], sign.DomainHeartbeat, &hb); err != nil {
			b.Fatal(err)
		}
		i++
	}
	perSecond(b, "envelopes/s")
}

// BenchmarkReceiptVerify measures a complete receipt's Verify (two
// signatures, decoding and consistency checks).
func BenchmarkReceiptVerify(b *testing.B) {
	prov, renter := signtest.Pair(b)
	srs := make([]*attest.SignedReceipt, distinct)
	for i := range srs {
		srs[i] = signed(b, prov, renter, receipt(fmt.Sprintf("L%d", i), prov, renter, t0))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := srs[i%distinct].Verify(); err != nil {
			b.Fatal(err)
		}
		i++
	}
	perSecond(b, "receipts/s")
}

// BenchmarkBookAddReceipt measures AddReceipt (verification included) of
// distinct receipts spread over 100 providers and 1000 renters.
func BenchmarkBookAddReceipt(b *testing.B) {
	provs := make([]*sign.Signer, 100)
	for i := range provs {
		provs[i] = signtest.New(b)
	}
	renters := make([]*sign.Signer, 1000)
	for i := range renters {
		renters[i] = signtest.New(b)
	}
	srs := make([]*attest.SignedReceipt, b.N)
	for i := range srs {
		p, r := provs[i%len(provs)], renters[(i/len(provs))%len(renters)]
		srs[i] = signed(b, p, r, receipt(fmt.Sprintf("L%d", i), p, r, t0.Add(-time.Duration(i)*time.Minute)))
	}
	book := attest.NewBook(attest.BookOptions{Now: func() time.Time { return t0 }})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := book.AddReceipt(srs[i]); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, "receipts/s")
}

// BenchmarkBookScore measures Score for a provider with 1000 receipts.
func BenchmarkBookScore(b *testing.B) {
	prov := signtest.New(b)
	renters := make([]*sign.Signer, 50)
	for i := range renters {
		renters[i] = signtest.New(b)
	}
	book := attest.NewBook(attest.BookOptions{Now: func() time.Time { return t0 }})
	for i := 0; i < 1000; i++ {
		r := renters[i%len(renters)]
		if err := book.AddReceipt(signed(b, prov, r, receipt(fmt.Sprintf("L%d", i), prov, r, t0.Add(-time.Duration(i)*time.Hour)))); err != nil {
			b.Fatal(err)
		}
	}
	id := prov.ID().String()
	b.ReportAllocs()
	for b.Loop() {
		_ = book.Score(id)
	}
	perSecond(b, "scores/s")
}
