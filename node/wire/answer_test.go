package wire

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

// TestLeaseEventAnswerReleased: a release holds only when its renter
// signed it, under the cancel domain, for that very lease.
func TestLeaseEventAnswerReleased(t *testing.T) {
	renter, other := signtest.Pair(t)
	seal := func(s *sign.Signer, domain string, req CancelRequest) LeaseEventAnswer {
		env, err := sign.Seal(s, domain, req)
		if err != nil {
			t.Fatal(err)
		}
		// As it travels: encoded and decoded.
		b, err := json.Marshal(LeaseEventAnswer{Released: env})
		if err != nil {
			t.Fatal(err)
		}
		var a LeaseEventAnswer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	ok := CancelRequest{LeaseID: "l1", JobID: "j1"}
	if err := seal(renter, sign.DomainLeaseCancel, ok).CheckReleased(renter.ID(), "l1", "j1"); err != nil {
		t.Fatalf("a good release refused: %v", err)
	}
	forged := seal(renter, sign.DomainLeaseCancel, ok)
	forged.Released.Payload = []byte(`{"lease_id":"l2","job_id":"j1"}`)
	for name, c := range map[string]struct {
		a          LeaseEventAnswer
		lease, job string
	}{
		"none":           {LeaseEventAnswer{}, "l1", "j1"},
		"other signer":   {seal(other, sign.DomainLeaseCancel, ok), "l1", "j1"},
		"other domain":   {seal(renter, sign.DomainLeaseEvent, ok), "l1", "j1"},
		"other lease":    {seal(renter, sign.DomainLeaseCancel, ok), "l2", "j1"},
		"other job":      {seal(renter, sign.DomainLeaseCancel, ok), "l1", "j2"},
		"gang stop":      {seal(renter, sign.DomainLeaseCancel, CancelRequest{LeaseID: "l1", JobID: "j1", Gang: true}), "l1", "j1"},
		"forged payload": {forged, "l2", "j1"},
	} {
		if err := c.a.CheckReleased(renter.ID(), c.lease, c.job); err == nil {
			t.Errorf("%s: release accepted", name)
		}
	}
}

// TestLeaseEventAnswerSummary: an answer without a release is the
// heartbeat summary, inline, as before LeaseEventAnswer: what
// attest.DecodeHeartbeatSummary reads.
func TestLeaseEventAnswerSummary(t *testing.T) {
	sum := attest.HeartbeatSummary{Count: 7, Expected: 8, Coverage: 0.875}
	old, _ := json.Marshal(sum)
	var a LeaseEventAnswer
	if err := json.Unmarshal(old, &a); err != nil || a.Released != nil || !reflect.DeepEqual(a.HeartbeatSummary, sum) {
		t.Fatalf("answer %+v, err %v", a, err)
	}
	b, _ := json.Marshal(LeaseEventAnswer{HeartbeatSummary: sum})
	if got, err := attest.DecodeHeartbeatSummary(b); err != nil || !reflect.DeepEqual(got, sum) {
		t.Fatalf("summary %+v, err %v", got, err)
	}
}
