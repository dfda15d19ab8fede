package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/runtime"
	"golang.org/x/sys/unix"
)

// counterJob counts to 40, a step every 250 ms, saving its counter in its
// checkpoint dir at each step (write, then rename) and resuming from it.
func counterJob(every time.Duration) terms.Job {
	j := shJob(terms.Bronze, 1.0, counterScript(40))
	j.Duration = time.Minute
	j.CheckpointEvery = every
	// It must run within two minutes: once the H100 node is busy with
	// gold, its requeued attempt goes elsewhere.
	j.Deadline = time.Now().Add(2 * time.Minute)
	return j
}

// counterScript counts to n, a step every 250 ms, saving its counter in
// its checkpoint dir at each step (written next to the dir, in the work
// dir, then renamed into it: a snapshot never holds a half-saved counter
// nor the next count under another name) and resuming from it; stopped
// (SIGTERM), it says what it saved.
func counterScript(n int) string {
	return `d="$GPUMESH_CHECKPOINT_DIR"; i=0
if [ -f "$d/count" ]; then i=$(cat "$d/count"); echo "resumed from $i"; else echo "fresh start"; fi
trap 'echo "stopped, saved $(cat "$d/count")"; exit 0' TERM
while [ $i -lt ` + strconv.Itoa(n) + ` ]; do i=$((i+1)); echo $i > "$d/../count.tmp"; mv "$d/../count.tmp" "$d/count"; echo "step $i"; sleep 0.25 & wait; done
echo "done $i"; echo $i > "$GPUMESH_OUTPUTS/result"`
}

// leaseLog reads a lease's job log on its provider.
func leaseLog(n *testNode, leaseID string) string {
	b, _ := os.ReadFile(filepath.Join(n.paths.Jobs(), "logs", leaseID+".log"))
	return string(b)
}

// waitLog reads a lease's log on its provider, a daemon of this process,
// at each write to it (lease.Supervisor.LogGrew) until it matches re.
func waitLog(t *testing.T, n *testNode, leaseID string, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	var m []string
	waitChange(t, within, "lease "+leaseID+": log matches "+re.String(), func() bool {
		m = re.FindStringSubmatch(leaseLog(n, leaseID))
		return m != nil
	}, func() <-chan struct{} { return n.market.sup.LogGrew(leaseID) })
	return m
}

// waitLogIn reads a lease's log under the jobs dir of a provider that is a
// daemon subprocess (<data dir>/jobs) at each write the kernel reports on
// its logs directory (inotify: the file is created or grows) until it
// matches re.
func waitLogIn(t *testing.T, jobsDir, leaseID string, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	dir := filepath.Join(jobsDir, "logs") // the provider made it before the job ran
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	deadline := time.Now().Add(within)
	buf := make([]byte, 64<<10)
	for {
		// The watch is set before this read, so a write after it is
		// reported below and never missed.
		b, _ := os.ReadFile(filepath.Join(dir, leaseID+".log"))
		if m := re.FindStringSubmatch(string(b)); m != nil {
			return m
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("lease %s: log never matched %q:\n%s", leaseID, re, b)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && err != unix.EINTR {
			t.Fatalf("poll inotify: %v", err)
		}
		for { // drain the events: any of them means read the log again
			if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
				break
			}
		}
	}
}

// TestCheckpointSurvivesPreemption (issue 14, acceptance 2): a bronze job
// that checkpoints its counter is preempted by gold; its next attempt, on
// another provider, starts from the checkpoint the first one saved as it
// stopped, not from zero, and counts on to the end.
func TestCheckpointSurvivesPreemption(t *testing.T) {
	t.Parallel()
	a := fastConfig(providerConfig("eu-west", 0.5, h100))
	a.Provider.Policy.AllowPreemption = true
	b := fastConfig(providerConfig("eu-west", 0.8, a100))
	boot, ns := startNet(t, a, b)
	pa, pb := ns[0], ns[1]
	waitAdvertised(t, boot, ns...)

	bv := post(t, boot, counterJob(0))
	if bv.State != terms.JobLeased || bv.Winner != pa.ID().String() {
		t.Fatalf("bronze job should go to the cheaper H100 node: %s winner %s", bv.State, bv.Winner)
	}
	first := bv.Lease.ID
	waitLog(t, pa, first, regexp.MustCompile(`step 6\n`), 30*time.Second)

	gold := shJob(terms.Gold, 5, "sleep 30")
	gold.GPUModels = []string{"H100"}
	if gv := post(t, boot, gold); gv.State != terms.JobLeased || gv.Winner != pa.ID().String() {
		t.Fatalf("gold job not leased on the H100 node: %s %v", gv.State, gv.Reasons)
	}
	m := waitLog(t, pa, first, regexp.MustCompile(`stopped, saved (\d+)\n`), 20*time.Second)
	saved, _ := strconv.Atoi(m[1])
	bv = waitJob(t, boot, bv.Job.ID, 60*time.Second, "bronze finished on its second lease", func(v api.JobView) bool {
		return len(v.History) == 1 && v.Lease != nil && v.Run.Terminal() && v.Receipt != nil
	})
	h := bv.History[0]
	if h.Run != terms.RunPreempted || h.Checkpoint == nil || h.Checkpoint.Reason != terms.CheckpointStopped || h.Restored != nil || !h.Receipt {
		t.Fatalf("first attempt: %+v", h)
	}
	ck := *h.Checkpoint
	if ck.LeaseID != first || ck.Provider != pa.ID().String() || ck.Seq != 1 || ck.Work <= 0 || ck.Work > h.Ended.Sub(h.Started)+time.Second {
		t.Fatalf("checkpoint %+v of a lease that ran %v", ck, h.Ended.Sub(h.Started))
	}
	if bv.Lease.Provider != pb.ID().String() || bv.Run != terms.RunSucceeded || bv.Restored == nil || bv.Restored.Artifact != ck.Artifact {
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
	// The renter's artifact list says whose checkpoint it is.
	cl := api.NewClient(boot.dir)
	ctx := context.Background()
	arts, err := cl.Artifacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(arts, func(a api.ArtifactView) bool { return a.ID == ck.Artifact })
	if i < 0 || arts[i].Job != bv.Job.ID || arts[i].Use != api.ArtifactCheckpoint || arts[i].Checkpoint == nil ||
		arts[i].Checkpoint.Reason != terms.CheckpointStopped {
		t.Fatalf("the renter lists the checkpoint as %+v, want job %s's stopped checkpoint", arts, bv.Job.ID)
	}
	// Each attempt's log comes from its own lease's provider.
	for attempt, want := range map[int]string{1: "stopped, saved " + strconv.Itoa(saved) + "\n", 2: "resumed from " + strconv.Itoa(saved) + "\n"} {
		rc, err := cl.Logs(ctx, bv.Job.ID, api.LogsOptions{Attempt: attempt})
		if err != nil {
			t.Fatalf("log of attempt %d: %v", attempt, err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if !strings.Contains(string(b), want) {
			t.Fatalf("log of attempt %d lacks %q:\n%s", attempt, want, b)
		}
	}
	if _, err := cl.Logs(ctx, bv.Job.ID, api.LogsOptions{Attempt: 3}); err == nil || !strings.Contains(err.Error(), "has no attempt 3 (it had 2)") {
		t.Fatalf("log of attempt 3 of 2: %v", err)
	}
}

// TestCorruptCheckpointRefused (issue 14, acceptance 5): the newest of a
// job's checkpoints has a flipped byte in the renter's store; the next
// attempt refuses it, says so in its log, and restores the previous one.
func TestCorruptCheckpointRefused(t *testing.T) {
	t.Parallel()
	a := fastConfig(providerConfig("eu-west", 0.5, h100))
	a.Provider.Policy.AllowPreemption = true
	boot, ns := startNet(t, a)
	pa := ns[0]
	waitAdvertised(t, boot, pa)

	bv := post(t, boot, counterJob(time.Second))
	if bv.State != terms.JobLeased || bv.Winner != pa.ID().String() {
		t.Fatalf("bronze job: %s winner %s", bv.State, bv.Winner)
	}
	first := bv.Lease.ID
	// Periodic checkpoints while it runs.
	waitLog(t, pa, first, regexp.MustCompile(`checkpoint 2 saved \(periodic`), 30*time.Second)
	gold := shJob(terms.Gold, 5, "sleep 300")
	gold.GPUModels = []string{"H100"}
	if gv := post(t, boot, gold); gv.State != terms.JobLeased {
		t.Fatalf("gold job not leased: %s %v", gv.State, gv.Reasons)
	}
	// Preempted, and nowhere to go: queued with its checkpoints.
	bv = waitJob(t, boot, bv.Job.ID, 30*time.Second, "bronze requeued", func(v api.JobView) bool {
		return len(v.History) == 1 && len(v.Checkpoints) == 2 && v.Lease == nil && v.State == terms.JobQueued
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
	// Corrupt a chunk only the newest checkpoint holds: chunks are content
	// addressed, so one both hold would corrupt both.
	pm, _, err := st.Manifest(prev.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	shared := map[string]bool{}
	for _, e := range pm.Entries {
		for _, c := range e.Chunks {
			shared[c] = true
		}
	}
	var chunk string
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			if !shared[c] && (chunk == "" || e.Path == "count") {
				chunk = c
			}
		}
	}
	if chunk == "" {
		t.Fatalf("the newest checkpoint %+v holds no chunk the previous one %+v does not", m, pm)
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
	if !strings.Contains(log, "resumed from "+want+"\n") || !strings.Contains(log, "done 40\n") || bv.Run != terms.RunSucceeded {
		t.Fatalf("the job should resume from the previous checkpoint's %s and finish (run %s %s):\n%s", want, bv.Run, bv.Detail, log)
	}
	if bv.Restored == nil || bv.Restored.Artifact != prev.Artifact {
		t.Fatalf("restored %+v, want %s", bv.Restored, prev.Artifact)
	}
}

// readCheckpointCount is the counter a checkpoint the renter holds saved.
func readCheckpointCount(t *testing.T, n *testNode, id string) string {
	t.Helper()
	return readCheckpointFile(t, n, id, "count")
}

// readCheckpointFile is a file of a checkpoint the renter holds, trimmed.
func readCheckpointFile(t *testing.T, n *testNode, id, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if err := n.artifacts.Store().Export(id, dir, artifact.Local); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sumCounterScript counts to n, a step every step seconds, keeping its
// state (the count and a running checksum of every step applied, "i h")
// in its checkpoint dir, replaced whole at each step, and resuming from
// it; at the end it writes "count N sum H" to its outputs. A step lost or
// applied twice changes the sum.
func sumCounterScript(n int, step string) string {
	return `d="$GPUMESH_CHECKPOINT_DIR"; i=0; h=0
if [ -f "$d/state" ]; then read i h < "$d/state"; echo "resumed from $i"; else echo "fresh start"; fi
while [ $i -lt ` + strconv.Itoa(n) + ` ]; do i=$((i+1)); h=$(( (h*31+i) % 1000000007 )); echo "$i $h" > "$d/state.tmp"; mv "$d/state.tmp" "$d/state"; echo "step $i"; sleep ` + step + `; done
echo "done $i"; echo "count $i sum $h" > "$GPUMESH_OUTPUTS/result"`
}

// TestCheckpointSurvivesProviderKill (issue 14, acceptance 1): a silver
// job counts to N, checkpointing its state every second; its provider, a
// daemon of its own, is killed with SIGKILL mid-job once the renter holds
// a periodic checkpoint. The renter calls the lease lost when the
// heartbeats stop, requeues the job at once without that provider, and
// the next attempt, on the other provider, resumes from the checkpoint:
// the job's output equals an uninterrupted run's, and the work repeated is
// at most one checkpoint interval's.
func TestCheckpointSurvivesProviderKill(t *testing.T) {
	t.Parallel()
	const n, stepEvery, every = 50, 200 * time.Millisecond, time.Second
	script := sumCounterScript(n, "0.2")

	// The reference: the same script run uninterrupted, here.
	ref := t.TempDir()
	refCmd := exec.Command("sh", "-c", script)
	refCmd.Env = append(os.Environ(), runtime.EnvCheckpoint+"="+filepath.Join(ref, "ck"), runtime.EnvOutputs+"="+filepath.Join(ref, "out"))
	for _, d := range []string{"ck", "out"} {
		if err := os.MkdirAll(filepath.Join(ref, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := refCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = refCmd.Process.Kill(); _ = refCmd.Wait() })

	bin := buildDaemon(t)
	root := t.TempDir()
	boot := startNode(t, root+"/boot", fastConfig(renterConfig()), nil)
	t.Cleanup(func() { boot.Close() })
	dir := filepath.Join(root, "prov")
	proc, st := startProviderProcessWith(t, bin, dir, boot, fastConfig(providerConfig("eu-west", 0.5, a100)))
	other := startNode(t, root+"/other", fastConfig(providerConfig("eu-west", 1.5, a100)), boot.Daemon)
	t.Cleanup(func() { other.Close() })
	eventuallyProviders(t, boot.Daemon, terms.Query{}, sortedIDs(st.PeerID, other.ID().String()), 30*time.Second)
	waitSubscribed(t, boot.Daemon, other.ID(), other.Advertised())

	job := shJob(terms.Silver, 2, script)
	job.Duration, job.CheckpointEvery = time.Minute, every
	v := post(t, boot, job)
	if v.State != terms.JobLeased || v.Lease.Provider != st.PeerID {
		t.Fatalf("job should be leased on the cheaper provider process: %s winner %s %v", v.State, v.Winner, v.Reasons)
	}
	first := v.Lease.ID
	// Mid-job: the renter holds a periodic checkpoint, the second.
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "second periodic checkpoint held", func(v api.JobView) bool {
		return v.Checkpoint != nil && v.Checkpoint.LeaseID == first && v.Checkpoint.Seq >= 2 && v.Run == terms.RunRunning
	})
	if v.Checkpoint.Reason != terms.CheckpointPeriodic {
		t.Fatalf("checkpoint %+v, want a periodic one", v.Checkpoint)
	}
	// Kill it between two checkpoints: a few steps past the one held.
	heldAt, _ := strconv.Atoi(strings.Fields(readCheckpointFile(t, boot, v.Checkpoint.Artifact, "state"))[0])
	waitLogIn(t, filepath.Join(dir, "jobs"), first, regexp.MustCompile(`(?m)^step `+strconv.Itoa(heldAt+3)+`$`), 20*time.Second)
	if boot.artifacts.Store().PinnedBytes() == 0 {
		t.Fatal("the renter does not pin the checkpoints it holds")
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Process.Wait()
	killed := time.Now()

	v = waitJob(t, boot, v.Job.ID, 40*time.Second, "finished on the other provider", func(v api.JobView) bool {
		return v.Lease != nil && v.Lease.ID != first && v.Run.Terminal()
	})
	if len(v.History) != 1 {
		t.Fatalf("%d earlier attempts, want 1", len(v.History))
	}
	h := v.History[0]
	if h.Lease.ID != first || h.Run != terms.RunFailed || h.Fault != terms.FaultProvider || !strings.Contains(h.Detail, "no heartbeat") {
		t.Fatalf("first attempt: lease %s run %s fault %q detail %q", h.Lease.ID, h.Run, h.Fault, h.Detail)
	}
	if !slices.Contains(v.Job.Exclude, st.PeerID) {
		t.Fatalf("the killed provider is not excluded from the job: %v", v.Job.Exclude)
	}
	if v.Lease.Provider != other.ID().String() || v.Run != terms.RunSucceeded || v.State != terms.JobFinished {
		t.Fatalf("second attempt: provider %s run %s (%s) state %s", v.Lease.Provider, v.Run, v.Detail, v.State)
	}
	if h.Checkpoint == nil || v.Restored == nil || v.Restored.Artifact != h.Checkpoint.Artifact || v.Restored.LeaseID != first {
		t.Fatalf("second attempt restored %+v, want the first attempt's last checkpoint %+v", v.Restored, h.Checkpoint)
	}
	// The lost attempt ends at the last heartbeat the renter verified
	// (what it pays for), before the kill; the loss is called about
	// LossAfter later and the next attempt starts at once.
	if h.Ended.IsZero() || h.Ended.After(killed) {
		t.Fatalf("lost attempt ended %s, the kill was at %s", h.Ended, killed)
	}
	if d := v.Started.Sub(killed); d < lease.DefaultLossAfter(300*time.Millisecond)-time.Second || d > lease.DefaultLossAfter(300*time.Millisecond)+20*time.Second {
		t.Fatalf("second attempt started %v after the kill", d)
	}
	t.Logf("second attempt started %v after the kill", v.Started.Sub(killed).Round(10*time.Millisecond))

	// At most one checkpoint interval of work repeated: the last step
	// attempt 1 printed against the count attempt 2 resumed from, which
	// is the count the restored checkpoint holds.
	log1, err := os.ReadFile(filepath.Join(dir, "jobs", "logs", first+".log"))
	if err != nil {
		t.Fatal(err)
	}
	steps := regexp.MustCompile(`(?m)^step (\d+)$`).FindAllStringSubmatch(string(log1), -1)
	if len(steps) == 0 {
		t.Fatalf("attempt 1 printed no step:\n%s", log1)
	}
	last, _ := strconv.Atoi(steps[len(steps)-1][1])
	log2 := leaseLog(other, v.Lease.ID)
	m := regexp.MustCompile(`(?m)^resumed from (\d+)$`).FindStringSubmatch(log2)
	if m == nil || strings.Contains(log2, "fresh start") || !strings.Contains(log2, "done "+strconv.Itoa(n)+"\n") {
		t.Fatalf("attempt 2 should resume from a checkpoint and count on to %d:\n%s", n, log2)
	}
	resumed, _ := strconv.Atoi(m[1])
	held := strings.Fields(readCheckpointFile(t, boot, v.Restored.Artifact, "state"))
	perInterval := int(every / stepEvery)
	t.Logf("attempt 1 printed up to step %d; attempt 2 resumed from %d (%d steps repeated; %d per checkpoint interval)", last, resumed, last-resumed, perInterval)
	if len(held) != 2 || held[0] != m[1] || resumed <= 0 || resumed > last || last-resumed > perInterval+1 {
		t.Fatalf("attempt 1 reached step %d, attempt 2 resumed from %d (checkpoint holds %v): more than one interval (%d steps) repeated", last, resumed, held, perInterval)
	}
	if strings.Contains(log2, "step "+m[1]+"\n") || !strings.Contains(log2, "step "+strconv.Itoa(resumed+1)+"\n") {
		t.Fatalf("attempt 2 did not count on from %d:\n%s", resumed, log2)
	}

	// The job's output equals the uninterrupted run's.
	if err := refCmd.Wait(); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	want, _ := os.ReadFile(filepath.Join(ref, "out", "result"))
	sum := 0
	for i := 1; i <= n; i++ {
		sum = (sum*31 + i) % 1000000007
	}
	if string(want) != fmt.Sprintf("count %d sum %d\n", n, sum) {
		t.Fatalf("reference run wrote %q", want)
	}
	if v.OutputsArtifact == "" {
		t.Fatal("no outputs artifact")
	}
	dest := t.TempDir()
	if _, err := api.NewClient(boot.dir).GetArtifact(context.Background(), v.OutputsArtifact, api.ArtifactGetRequest{Dest: dest, Peers: other.Addrs()}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dest, "result"))
	if err != nil || string(got) != string(want) {
		t.Fatalf("output %q (%v), want the uninterrupted run's %q", got, err, want)
	}
	// The job is over: the renter no longer pins its checkpoints (nor
	// anything else: the job had no inputs). The pins follow the record's
	// save, after its change signal: the store's own signal says when.
	waitChange(t, 5*time.Second, "the finished job's checkpoints unpinned", func() bool {
		return boot.artifacts.Store().PinnedBytes() == 0
	}, boot.artifacts.Store().Changed)
}
