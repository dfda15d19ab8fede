package lease

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
)

// TestRecordUpgrade: a lease record stored before the lease's machine was
// (its state an API view under "rec", a settled flag beside it) reads as
// the machine's state: settled and disputed ones are done, an unsettled
// one is settled again after a restart, and the job's terms come from its
// job.
func TestRecordUpgrade(t *testing.T) {
	t.Parallel()
	const old = `{"rec":{"lease":{"id":"l1","job_id":"j1","renter":"r","provider":"p","start":"2026-01-01T12:00:00Z",
		"end":"2026-01-01T13:00:00Z","gpu_count":1,"state":"pending"},"run":"%s","started":"2026-01-01T12:00:01Z",
		"ended":"2026-01-01T12:10:00Z","detail":"d","fault":"job","dispute":"%s"},
		"job":{"id":"j1","duration":600000000000,"preemptible":true,"no_persist":true},"settled":%s}`
	for _, tc := range []struct {
		run, dispute, settled string
		want                  lifecycle.Phase
	}{
		{"succeeded", "", "true", lifecycle.Settled},
		{"failed", "receipt refused 5 times", "false", lifecycle.Disputed},
		{"succeeded", "", "false", lifecycle.Retrying},
		{"running", "", "false", lifecycle.Retrying},
	} {
		var pr providerRecord
		raw := []byte(fmt.Sprintf(old, tc.run, tc.dispute, tc.settled))
		if err := json.Unmarshal(raw, &pr); err != nil {
			t.Fatal(err)
		}
		pr.upgrade()
		if pr.Rec.Terms != (lifecycle.Terms{Duration: 10 * time.Minute, Preemptible: true, NoPersist: true}) {
			t.Fatalf("terms %+v", pr.Rec.Terms)
		}
		if pr.Rec.Lease.ID != "l1" || pr.Rec.Detail != "d" || pr.Rec.Fault != terms.FaultJob || pr.Rec.Started.IsZero() {
			t.Fatalf("state %+v", pr.Rec)
		}
		now := time.Date(2026, 1, 1, 14, 0, 0, 0, time.UTC)
		st, _ := lifecycle.Rules{RecoverDelay: time.Second, SettleWindow: 24 * time.Hour}.Step(pr.Rec, lifecycle.Restarted{}, now)
		if st.Phase != tc.want {
			t.Fatalf("%s/%q/%s: phase %s, want %s", tc.run, tc.dispute, tc.settled, st.Phase, tc.want)
		}
		if tc.run == "running" && (st.Run != terms.RunFailed || st.Fault != terms.FaultProvider) {
			t.Fatalf("interrupted lease: %s %s", st.Run, st.Fault)
		}
	}
}
