package node

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
)

// counterJob counts to 40, a step every 250 ms, saving its counter in its
// checkpoint dir at each step (write, then rename) and resuming from it.
func counterJob(every time.Duration) auction.Job {
	j := shJob(auction.Bronze, 1.0, `d="$GPUMESH_CHECKPOINT_DIR"; i=0
if [ -f "$d/count" ]; then i=$(cat "$d/count"); echo "resumed from $i"; else echo "fresh start"; fi
trap 'echo "stopped, saved $(cat "$d/count")"; exit 0' TERM
while [ $i -lt 40 ]; do i=$((i+1)); echo $i > "$d/count.tmp"; mv "$d/count.tmp" "$d/count"; echo "step $i"; sleep 0.25 & wait; done
echo "done $i"; echo $i > "$GPUMESH_OUTPUTS/result"`)
	j.Duration = time.Minute
	j.CheckpointEvery = every
	// It must run within two minutes: once the H100 node is busy with
	// gold, its requeued attempt goes elsewhere.
	j.Deadline = time.Now().Add(2 * time.Minute)
	return j
}

// leaseLog reads a lease's job log on its provider.
func leaseLog(n *testNode, leaseID string) string {
	b, _ := os.ReadFile(filepath.Join(n.paths.Jobs(), "logs", leaseID+".log"))
	return string(b)
}

// waitLog polls a lease's log on its provider until it matches re.
func waitLog(t *testing.T, n *testNode, leaseID string, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		log := leaseLog(n, leaseID)
		if m := re.FindStringSubmatch(log); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %s: log never matched %q:\n%s", leaseID, re, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCheckpointSurvivesPreemption (issue 14, acceptance 2): a bronze job
// that checkpoints its counter is preempted by gold; its next attempt, on
// another provider, starts from the checkpoint the first one saved as it
// stopped, not from zero, and counts on to the end.
func TestCheckpointSurvivesPreemption(t *testing.T) {
	a := fastConfig(providerConfig("eu-west", 0.5, h100))
	a.Provider.Policy.AllowPreemption = true
	b := fastConfig(providerConfig("eu-west", 0.8, a100))
	boot, ns := startNet(t, a, b)
	pa, pb := ns[0], ns[1]
	waitAdvertised(t, boot, ns...)

	bv := post(t, boot, counterJob(0))
	if bv.State != auction.JobLeased || bv.Winner != pa.ID().String() {
		t.Fatalf("bronze job should go to the cheaper H100 node: %s winner %s", bv.State, bv.Winner)
	}
	first := bv.Lease.ID
	waitLog(t, pa, first, regexp.MustCompile(`step 6\n`), 30*time.Second)

	gold := shJob(auction.Gold, 5, "sleep 30")
	gold.GPUModels = []string{"H100"}
	if gv := post(t, boot, gold); gv.State != auction.JobLeased || gv.Winner != pa.ID().String() {
		t.Fatalf("gold job not leased on the H100 node: %s %v", gv.State, gv.Reasons)
	}
	m := waitLog(t, pa, first, regexp.MustCompile(`stopped, saved (\d+)\n`), 20*time.Second)
	saved, _ := strconv.Atoi(m[1])
	bv = waitJob(t, boot, bv.Job.ID, 60*time.Second, "bronze finished on its second lease", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run.Terminal() && v.Receipt != nil
	})
	h := bv.History[0]
	if h.Run != auction.RunPreempted || h.Checkpoint == nil || h.Checkpoint.Reason != auction.CheckpointStopped || h.Restored != nil || !h.Receipt {
		t.Fatalf("first attempt: %+v", h)
	}
	ck := *h.Checkpoint
	if ck.LeaseID != first || ck.Provider != pa.ID().String() || ck.Seq != 1 || ck.Work <= 0 || ck.Work > h.Ended.Sub(h.Started)+time.Second {
		t.Fatalf("checkpoint %+v of a lease that ran %v", ck, h.Ended.Sub(h.Started))
	}
	if bv.Lease.Provider != pb.ID().String() || bv.Run != auction.RunSucceeded || bv.Restored == nil || bv.Restored.Artifact != ck.Artifact {
		t.Fatalf("second attempt: provider %s run %s (%s), restored %+v", bv.Lease.Provider, bv.Run, bv.Detail, bv.Restored)
	}
	// It ran for what the checkpoint left of the job's minute.
	if len(bv.Job.Restore) != 1 || bv.Job.Duration != time.Minute-ck.Work {
		t.Fatalf("second attempt's job: duration %v, restore %+v (checkpoint work %v)", bv.Job.Duration, bv.Job.Restore, ck.Work)
	}
	log := leaseLog(pb, bv.Lease.ID)
	if saved < 6 || !strings.Contains(log, "resumed from "+strconv.Itoa(saved)+"\n") || strings.Contains(log, "fresh start") ||
		strings.Contains(log, "step "+strconv.Itoa(saved)+"\n") || !strings.Contains(log, "step "+strconv.Itoa(saved+1)+"\n") ||
		!strings.Contains(log, "done 40\n") {
		t.Fatalf("second attempt should resume from %d and count on to 40:\n%s", saved, log)
	}
	// The receipt of the first lease names the checkpoint; the renter holds it.
	if bv.Checkpoint == nil || bv.Checkpoint.Artifact != ck.Artifact {
		t.Fatalf("job's checkpoint %+v, want %s", bv.Checkpoint, ck.Artifact)
	}
	if in, err := boot.artifacts.Store().Info(ck.Artifact); err != nil || !in.Complete {
		t.Fatalf("renter does not hold the checkpoint: %+v %v", in, err)
	}
	if _, err := pa.artifacts.Store().Info(ck.Artifact); err == nil {
		t.Fatal("the provider kept its copy of the checkpoint after the renter took it")
	}
}

// TestCorruptCheckpointRefused (issue 14, acceptance 5): the newest of a
// job's checkpoints has a flipped byte in the renter's store; the next
// attempt refuses it, says so in its log, and restores the previous one.
func TestCorruptCheckpointRefused(t *testing.T) {
	a := fastConfig(providerConfig("eu-west", 0.5, h100))
	a.Provider.Policy.AllowPreemption = true
	boot, ns := startNet(t, a)
	pa := ns[0]
	waitAdvertised(t, boot, pa)

	bv := post(t, boot, counterJob(time.Second))
	if bv.State != auction.JobLeased || bv.Winner != pa.ID().String() {
		t.Fatalf("bronze job: %s winner %s", bv.State, bv.Winner)
	}
	first := bv.Lease.ID
	// Periodic checkpoints while it runs.
	waitLog(t, pa, first, regexp.MustCompile(`checkpoint 2 saved \(periodic`), 30*time.Second)
	gold := shJob(auction.Gold, 5, "sleep 300")
	gold.GPUModels = []string{"H100"}
	if gv := post(t, boot, gold); gv.State != auction.JobLeased {
		t.Fatalf("gold job not leased: %s %v", gv.State, gv.Reasons)
	}
	// Preempted, and nowhere to go: queued with its checkpoints.
	bv = waitJob(t, boot, bv.Job.ID, 30*time.Second, "bronze requeued", func(v api.JobView) bool {
		return len(v.History) == 1 && len(v.Checkpoints) == 2 && v.Lease == nil && v.State == auction.JobQueued
	})
	newest, prev := bv.Checkpoints[0], bv.Checkpoints[1]
	if newest.LeaseID != first || prev.LeaseID != first || newest.Seq <= prev.Seq {
		t.Fatalf("checkpoints %+v", bv.Checkpoints)
	}
	st := boot.artifacts.Store()
	want := readCheckpointCount(t, boot, prev.Artifact)
	m, _, err := st.Manifest(newest.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	var chunk string
	for _, e := range m.Entries {
		if e.Path == "count" {
			chunk = e.Chunks[0]
		}
	}
	p := filepath.Join(boot.paths.Artifacts(), "chunks", chunk[:2], chunk)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0x01
	_ = os.Chmod(p, 0o600)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// A second provider comes; the queued job goes to it.
	b := fastConfig(providerConfig("eu-west", 0.8, a100))
	pb := startNode(t, filepath.Join(t.TempDir(), "b"), b, boot.Daemon)
	t.Cleanup(func() { pb.Close() })
	waitAdvertised(t, boot, pa, pb)
	bv = waitJob(t, boot, bv.Job.ID, 90*time.Second, "bronze finished on a second provider", func(v api.JobView) bool {
		return v.Lease != nil && v.Lease.Provider == pb.ID().String() && v.Run.Terminal()
	})
	log := leaseLog(pb, bv.Lease.ID)
	refused := "gpumesh: checkpoint " + newest.Artifact + " refused: "
	if !strings.Contains(log, refused) || !strings.Contains(log, "did not match its hash") ||
		!strings.Contains(log, "; restoring the previous checkpoint "+prev.Artifact+"\n") {
		t.Fatalf("the corrupt checkpoint was not refused with a clear message:\n%s", log)
	}
	if !strings.Contains(log, "resumed from "+want+"\n") || !strings.Contains(log, "done 40\n") || bv.Run != auction.RunSucceeded {
		t.Fatalf("the job should resume from the previous checkpoint's %s and finish (run %s %s):\n%s", want, bv.Run, bv.Detail, log)
	}
	if bv.Restored == nil || bv.Restored.Artifact != prev.Artifact {
		t.Fatalf("restored %+v, want %s", bv.Restored, prev.Artifact)
	}
}

// readCheckpointCount is the counter a checkpoint the renter holds saved.
func readCheckpointCount(t *testing.T, n *testNode, id string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if err := n.artifacts.Store().Export(id, dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "count"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
