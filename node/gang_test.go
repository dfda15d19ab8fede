package node

import (
	"fmt"
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
)

// TestGangResumesFromCheckpointsAfterProviderKill (issue 25, item 3 and
// acceptance 1): a gang of two members of two GPUs each, on three two-GPU
// providers, does a ring all-reduce over its gang network (every rank
// prints the same, correct sum), then counts to N, each rank
// checkpointing its own state every second. Rank 0's provider, a daemon
// of its own, is killed with SIGKILL mid-run. The renter calls its lease
// lost, stops rank 1 (which checkpoints on its way out), and places the
// whole gang again without the killed provider; each rank resumes from its
// own checkpoint and counts on to N. Each member lease settles with its
// own receipt.
func TestGangResumesFromCheckpointsAfterProviderKill(t *testing.T) {
	t.Parallel()
	const n = 80 // 16 s of counting: rank 1 still runs when rank 0's loss is called (about 9 s in)
	bin := buildDaemon(t)
	root := t.TempDir()
	boot := startNode(t, root+"/boot", fastConfig(renterConfig()), nil)
	t.Cleanup(func() { boot.Close() })
	dir := filepath.Join(root, "prov")
	proc, st := startProviderProcessWith(t, bin, dir, boot, fastConfig(providerConfig("eu-west", 0.5, a100, a100)))
	b := startNode(t, root+"/b", fastConfig(providerConfig("eu-west", 1.0, a100, a100)), boot.Daemon)
	t.Cleanup(func() { b.Close() })
	c := startNode(t, root+"/c", fastConfig(providerConfig("eu-west", 1.5, a100, a100)), boot.Daemon)
	t.Cleanup(func() { c.Close() })
	eventuallyProviders(t, boot.Daemon, terms.Query{}, sortedIDs(st.PeerID, b.ID().String(), c.ID().String()), 30*time.Second)
	waitSubscribed(t, boot.Daemon, b.ID(), b.Advertised())
	waitSubscribed(t, boot.Daemon, c.ID(), c.Advertised())
	jobsDir := map[string]string{st.PeerID: filepath.Join(dir, "jobs"), b.ID().String(): b.paths.Jobs(), c.ID().String(): c.paths.Jobs()}

	// Each rank says where it runs in its gang (the torchrun environment
	// its gang network gives it, from the lease's signed gang terms), does
	// a ring all-reduce with the other over the gang network, then counts.
	ring := gangRing(t)
	job := shJob(terms.Silver, 2, `echo "rank $RANK of $WORLD_SIZE, master $MASTER_ADDR"; `+ring+` allreduce 1000 || exit 1; `+
		sumCounterScript(n, "0.2"))
	job.Nodes, job.GPUCount, job.Duration, job.CheckpointEvery = 2, 2, time.Minute, time.Second
	v := post(t, boot, job)
	if v.State != terms.JobLeased || len(v.Members) != 2 {
		t.Fatalf("gang not placed: %s %v", v.State, v.Reasons)
	}
	// The cheapest two: the provider process (rank 0) and b.
	if v.Members[0].Provider != st.PeerID || v.Members[1].Provider != b.ID().String() {
		t.Fatalf("gang placed on %s, %s", v.Members[0].Provider, v.Members[1].Provider)
	}
	for _, l := range v.Members {
		if l.GPUCount != 2 || len(l.Devices) != 2 {
			t.Fatalf("member lease %s holds %d GPUs, devices %v", l.ID, l.GPUCount, l.Devices)
		}
	}
	first := slices.Clone(v.Members)
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "every rank holds a second periodic checkpoint", func(v api.JobView) bool {
		if len(v.Gang) != 2 {
			return false
		}
		for i, m := range v.Gang {
			if m.Run != terms.RunRunning || m.Checkpoint == nil || m.Checkpoint.LeaseID != first[i].ID || m.Checkpoint.Seq < 2 {
				return false
			}
		}
		return true
	})
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Process.Wait()
	killed := time.Now()

	v = waitJob(t, boot, v.Job.ID, 60*time.Second, "the gang finished on the other providers", func(v api.JobView) bool {
		if len(v.Gang) != 2 || v.Job.Attempt != 1 {
			return false
		}
		for _, m := range v.Gang {
			if m.Run != terms.RunSucceeded || !m.Settled {
				return false
			}
		}
		return true
	})
	t.Logf("gang placed again %v after the kill", v.Gang[0].Started.Sub(killed).Round(10*time.Millisecond))
	if !slices.Contains(v.Job.Exclude, st.PeerID) {
		t.Fatalf("the killed provider is not excluded: %v", v.Job.Exclude)
	}
	for rank, m := range v.Gang {
		if m.Provider == st.PeerID || m.LeaseID == first[rank].ID {
			t.Fatalf("rank %d's second lease %s on %s", rank, m.LeaseID, m.Provider)
		}
		log, err := os.ReadFile(filepath.Join(jobsDir[m.Provider], "logs", m.LeaseID+".log"))
		if err != nil {
			t.Fatal(err)
		}
		// Each element i sums (r+1)(i+1) over the two ranks: 3(i+1).
		for _, want := range []string{fmt.Sprintf("rank %d of 2, master 127.77.0.1\n", rank),
			fmt.Sprintf("rank %d/2 allreduce n=1000 sum=1501500 first=3 last=3000 ", rank)} {
			if !strings.Contains(string(log), want) {
				t.Fatalf("rank %d's log lacks %q:\n%s", rank, want, log)
			}
		}
		got := regexp.MustCompile(`(?m)^resumed from (\d+)$`).FindStringSubmatch(string(log))
		if got == nil || strings.Contains(string(log), "fresh start") || !strings.Contains(string(log), "done "+strconv.Itoa(n)+"\n") {
			t.Fatalf("rank %d should resume from its checkpoint and count on to %d:\n%s", rank, n, log)
		}
		if from, _ := strconv.Atoi(got[1]); from <= 0 {
			t.Fatalf("rank %d resumed from %d", rank, from)
		}
		t.Logf("rank %d resumed from %s on %s", rank, got[1], m.Provider)
	}
	// Rank 1's first lease was stopped with its gang: preempted, not its
	// provider's fault, and settled.
	r1, err := boot.market.tracker.View(v.Job.ID + "#1")
	if err != nil || len(r1.History) != 1 {
		t.Fatalf("rank 1's record: %v, %d earlier leases", err, len(r1.History))
	}
	if h := r1.History[0]; h.Lease.ID != first[1].ID || h.Run != terms.RunPreempted || h.Fault != terms.FaultNone || !h.Receipt || h.Checkpoint == nil {
		t.Fatalf("rank 1's first lease: %+v", h)
	}
	if h := v.History[0]; h.Lease.ID != first[0].ID || h.Run != terms.RunFailed || h.Fault != terms.FaultProvider {
		t.Fatalf("rank 0's first lease: %+v", h)
	}
}

// gangRing builds node/gangnet's test program (gangring: a ring all-reduce
// over the gang network) where every job uid can run it, and returns its
// path; it skips a test where jobs get no network of their own.
func gangRing(t *testing.T) string {
	t.Helper()
	needGangNetworks(t)
	base, err := os.MkdirTemp("/run", "gpumesh-gang-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return copyProgram(t, goProgram(t, "./gangnet/testdata/gangring"), base)
}

// needGangNetworks skips a test where jobs get no network of their own,
// which a gang's members need.
func needGangNetworks(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gang networks need job network namespaces, which need root")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("gang networks need iptables-restore: ", err)
	}
}
