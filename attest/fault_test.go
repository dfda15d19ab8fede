package attest_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestJobFaultsDoNotCountAgainstTheProvider: failures the job caused itself
// (non-zero exit, its own memory limit, outrunning its duration) leave the
// provider's completion as it was; failures the provider caused lower it.
func TestJobFaultsDoNotCountAgainstTheProvider(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	b, c := newBook(t0)
	innocent, guilty := signtest.Pair(t)
	for i := 0; i < 8; i++ {
		for _, p := range []struct {
			prov  *sign.Signer
			fault terms.Fault
		}{{innocent, terms.FaultJob}, {guilty, terms.FaultProvider}} {
			renter := signtest.New(t)
			establish(t, b, c, renter)
			r := receipt(fmt.Sprintf("%s-%d", p.fault, i), p.prov, renter, t0.Add(-time.Duration(i)*time.Hour))
			r.Outcome, r.Fault = terms.RunFailed, p.fault
			mustAdd(t, b, signed(t, p.prov, renter, r))
		}
	}
	in, gu := b.Stats(innocent.ID().String()), b.Stats(guilty.ID().String())
	if in.Failed != 0 || in.JobFaults != 8 || gu.Failed != 8 || gu.JobFaults != 0 {
		t.Fatalf("innocent %+v, guilty %+v", in, gu)
	}
	if in.Completion != attest.Prior || gu.Completion >= in.Completion || gu.Score > in.Score+1e-9 {
		t.Fatalf("completion innocent %.3f guilty %.3f; score innocent %.3f guilty %.3f", in.Completion, gu.Completion, in.Score, gu.Score)
	}
	// The job's own failures leave the provider's score where it was: that
	// of a provider the book never heard of.
	if unknown := b.Stats(signtest.New(t).ID().String()).Score; math.Abs(in.Score-unknown) > 1e-12 || in.Weight != 0 {
		t.Fatalf("innocent provider's score %.6f (weight %.3f), a stranger's %.6f", in.Score, in.Weight, unknown)
	}
}

// TestFaultOnlyWithAFailure: a receipt names a fault only for a failed or
// expired lease, and only a known one.
func TestFaultOnlyWithAFailure(t *testing.T) {
	prov, renter := signtest.Pair(t)
	for _, c := range []struct {
		outcome terms.RunState
		fault   terms.Fault
		ok      bool
	}{
		{terms.RunFailed, terms.FaultJob, true},
		{terms.RunExpired, terms.FaultJob, true},
		{terms.RunFailed, terms.FaultProvider, true},
		{terms.RunSucceeded, terms.FaultNone, true},
		{terms.RunSucceeded, terms.FaultJob, false},
		{terms.RunPreempted, terms.FaultProvider, false},
		{terms.RunFailed, "renter", false},
	} {
		t.Run(fmt.Sprintf("%s/%q", c.outcome, c.fault), func(t *testing.T) {
			r := receipt("L", prov, renter, time.Now())
			r.Outcome, r.Fault = c.outcome, c.fault
			_, err := attest.NewReceipt(prov, r)
			if (err == nil) != c.ok {
				t.Fatalf("NewReceipt = %v, want ok %v", err, c.ok)
			}
		})
	}
}
