package attest_test

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// receipt is a valid one-hour, one-GPU succeeded lease ending at end.
func receipt(lease string, prov, renter *sign.Signer, end time.Time) attest.Receipt {
	return attest.Receipt{
		LeaseID:    lease,
		JobID:      "job-" + lease,
		Renter:     renter.ID().String(),
		Provider:   prov.ID().String(),
		Start:      end.Add(-time.Hour),
		End:        end,
		GPUCount:   1,
		GPUSeconds: 3600,
		Price:      2,
		Amount:     2,
		Outcome:    terms.RunSucceeded,
		Heartbeats: attest.HeartbeatSummary{Count: 360, Expected: 360, Coverage: 1},
		IssuedAt:   end,
	}
}

// signed returns r signed by both parties.
func signed(tb testing.TB, prov, renter *sign.Signer, r attest.Receipt) *attest.SignedReceipt {
	tb.Helper()
	sr, err := attest.NewReceipt(prov, r)
	if err != nil {
		tb.Fatal(err)
	}
	if err := sr.Countersign(renter); err != nil {
		tb.Fatal(err)
	}
	return sr
}
