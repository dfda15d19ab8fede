package lease

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
)

// TestOldJobRecordsReadAsMachineState: job records a renter stored as the
// API's job view, before the tracker stored the job machine's record, load
// as its state after an upgrade: each in the phase its stored state and
// run say, shown as before (its view the same), and the queued one driven
// by the machine again (given up, its start deadline past). Saved again,
// a record keeps its API state beside the phase.
func TestOldJobRecordsReadAsMachineState(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.renter()
	r.kill()
	now := time.Now().UTC().Truncate(time.Second)
	j := func(id string) terms.Job {
		jb := job(terms.Silver, 2, time.Minute, "true")
		jb.ID, jb.Owner, jb.CreatedAt, jb.Deadline = id, r.id(), now.Add(-time.Hour), now.Add(-time.Minute)
		return jb
	}
	l := func(id, jobID string, attempt int) *terms.Lease {
		return &terms.Lease{ID: id, JobID: jobID, Attempt: attempt, Renter: r.id(), Provider: "prov", Price: 1,
			Start: now.Add(-50 * time.Minute), End: now.Add(-40 * time.Minute), GPUCount: 1, State: terms.RunSucceeded}
	}
	exit := 0
	old := map[string]api.JobView{
		"old-finished": {JobStatus: terms.JobStatus{Job: j("old-finished"), State: terms.JobFinished, Lease: l("l2", "old-finished", 1),
			Winner: "prov", Reasons: []string{"leased"}, PostedAt: now.Add(-time.Hour), Offers: 2},
			Run: terms.RunSucceeded, ExitCode: &exit, Started: now.Add(-50 * time.Minute), Ended: now.Add(-45 * time.Minute),
			Receipt: &attest.Receipt{LeaseID: "l2", Amount: 2}, CostUSD: 2.5, Evidence: evidenceVerified + " (10 bytes)",
			History: []api.LeaseRecord{{Lease: *l("l1", "old-finished", 0), Run: terms.RunPreempted, CostUSD: 0.5, Receipt: true}}},
		// Written before JobFinished existed: leased, its lease ended for good.
		"old-ended": {JobStatus: terms.JobStatus{Job: j("old-ended"), State: terms.JobLeased, Lease: l("l3", "old-ended", 0),
			PostedAt: now.Add(-time.Hour)}, Run: terms.RunFailed, Fault: terms.FaultJob, Detail: "exit code 1"},
		"old-cancelled": {JobStatus: terms.JobStatus{Job: j("old-cancelled"), State: terms.JobCancelled,
			Reasons: []string{"cancelled"}, PostedAt: now.Add(-time.Hour)}},
		"old-queued": {JobStatus: terms.JobStatus{Job: j("old-queued"), State: terms.JobQueued,
			Reasons: []string{"queued: no bids (offered 3 times)"}, PostedAt: now.Add(-time.Hour), Offers: 3}},
	}
	store := r.db.State("renter-jobs")
	for id, v := range old {
		if err := store.Put(id, v); err != nil {
			t.Fatal(err)
		}
	}
	r = r.restart()
	for id, want := range old {
		got, err := r.tracker.View(id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if id == "old-ended" {
			want.State = terms.JobFinished
		}
		if id == "old-queued" {
			continue // below
		}
		if !reflect.DeepEqual(got, want) {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			t.Fatalf("%s: view after the upgrade\n%s\nwant\n%s", id, gb, wb)
		}
	}
	r.tracker.mu.Lock()
	phases := map[string]jobmachine.Phase{}
	for id := range old {
		phases[id] = r.tracker.jobs[id].Phase
	}
	leases := r.tracker.jobs["old-finished"].Leases
	r.tracker.mu.Unlock()
	want := map[string]jobmachine.Phase{"old-finished": jobmachine.Finished, "old-ended": jobmachine.Finished,
		"old-cancelled": jobmachine.Cancelled}
	for id, p := range want {
		if phases[id] != p {
			t.Fatalf("%s: phase %s, want %s", id, phases[id], p)
		}
	}
	if leases != 2 {
		t.Fatalf("old-finished counts %d leases, want 2 (its history and its lease)", leases)
	}
	v := r.waitJob("old-queued", "given up at its past start deadline", func(v api.JobView) bool {
		return v.State == terms.JobUnplaceable
	})
	if last := v.Reasons[len(v.Reasons)-1]; last != jobmachine.DeadlineDetail || v.Offers != 3 {
		t.Fatalf("queued job given up with reasons %q, %d offers", v.Reasons, v.Offers)
	}
	h.waitFor(3*time.Second, "the given-up job saved with its phase and state", func() bool {
		var rec map[string]any
		_ = store.List(func(key string, raw []byte) error {
			if key == "old-queued" {
				_ = json.Unmarshal(raw, &rec)
			}
			return nil
		})
		return rec["phase"] == string(jobmachine.Unplaceable) && rec["state"] == string(terms.JobUnplaceable) &&
			strings.HasSuffix(rec["reasons"].([]any)[1].(string), "queued")
	})
}

// TestJobSnapshotOwnsItsHistory: a save marshals a snapshot of the job
// once the tracker's lock is released, while a late receipt, report or
// dispute changes an archived lease's record in place under that lock
// (go test -race saw settledArchived write a record a save was
// marshalling): the snapshot's archived leases are its own.
func TestJobSnapshotOwnsItsHistory(t *testing.T) {
	t.Parallel()
	s := &jobState{}
	s.History = []api.LeaseRecord{{Lease: terms.Lease{ID: "l1"}, Detail: "lost"}}
	snap := s.snapshot()
	rec := historyRecordLocked(s, "l1")
	rec.CostUSD, rec.Receipt, rec.Detail = 1.5, true, "lost; its provider reported later"
	if got := snap.History[0]; got.Receipt || got.CostUSD != 0 || got.Detail != "lost" {
		t.Fatalf("snapshot's archived lease changed with the job's: %+v", got)
	}
	if !s.History[0].Receipt {
		t.Fatal("the job's own archived lease was not changed")
	}
}
