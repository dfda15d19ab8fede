package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"
)

func startDaemonProcess(t *testing.T, bin, dir string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-d", dir, "daemon")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			t.Logf("daemon log of %s:\n%s", dir, b)
		}
	})
	if err := api.NewClient(dir).WaitReady(context.Background(), 15*time.Second); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
		t.Fatalf("daemon did not start: %v\n%s", err, b)
	}
	return cmd
}

// markerRunning reports whether any process's command line contains marker.
func markerRunning(marker string) bool { return len(markerPids(marker)) > 0 }

// markerPids are the processes whose command line holds marker.
func markerPids(marker string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), marker) && !strings.Contains(string(b), "go test") {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// waitMarkerGone waits until the processes whose command line holds
// marker have exited, on the kernel's word: a process's pidfd turns
// readable when it exits.
func waitMarkerGone(t *testing.T, marker string, within time.Duration) {
	t.Helper()
	var fds []unix.PollFd
	for _, pid := range markerPids(marker) {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone already
		}
		defer unix.Close(fd)
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	deadline := time.Now().Add(within)
	for len(fds) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%d of the killed daemon's job processes still run %s after the restart", len(fds), within)
		}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		kept := fds[:0]
		for _, f := range fds {
			if f.Revents == 0 {
				kept = append(kept, f)
			}
		}
		fds = kept
	}
	if markerRunning(marker) {
		t.Fatal("a process of the killed daemon's job started after the restart")
	}
}

// TestProviderKilledMidJob: the provider daemon is killed (SIGKILL) while a
// job runs and restarted on the same data dir: the job is reported failed,
// honestly, to the renter; no process of it survives; its peer ID is kept.
func TestProviderKilledMidJob(t *testing.T) {
	t.Parallel()
	bin := buildDaemon(t)
	root := t.TempDir()
	boot := startNode(t, root+"/boot", fastConfig(renterConfig()), nil)
	t.Cleanup(func() { boot.Close() })

	dir := filepath.Join(root, "prov")
	proc, st := startProviderProcess(t, bin, dir, boot)

	marker := "gpumesh-restart-marker-" + terms.NewID("m")
	v := post(t, boot, shJob(terms.Silver, 2, "sleep 120 # "+marker))
	if v.State != terms.JobLeased {
		t.Fatalf("not leased: %v", v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 20*time.Second, "running with telemetry", func(v api.JobView) bool {
		return v.Run == terms.RunRunning && v.LastTelemetry != nil
	})
	leaseID := v.Lease.ID

	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Process.Wait()
	startDaemonProcess(t, bin, dir)
	var st2 api.StatusInfo
	if err := api.NewClient(dir).Do(context.Background(), "GET", "/status", nil, nil, &st2); err != nil {
		t.Fatal(err)
	}
	if st2.PeerID != st.PeerID {
		t.Fatalf("peer id changed across restart: %s -> %s", st.PeerID, st2.PeerID)
	}
	// The interrupted attempt is read wherever the view holds it: the
	// job's current lease, or its history once the job was requeued
	// (which may happen before any poll sees the failure).
	var a api.LeaseRecord
	waitJob(t, boot, v.Job.ID, 40*time.Second, "reported failed", func(v api.JobView) bool {
		a = attemptOf(v, leaseID)
		return a.Run == terms.RunFailed
	})
	if !strings.Contains(a.Detail, "restarted") {
		t.Fatalf("failure detail %q does not say the provider restarted", a.Detail)
	}
	waitMarkerGone(t, marker, 10*time.Second)
	// The interrupted lease still settles: a receipt for the time used.
	waitJob(t, boot, v.Job.ID, 20*time.Second, "settled", func(v api.JobView) bool {
		if v.Lease != nil && v.Lease.ID == leaseID && v.Receipt != nil && v.Receipt.Outcome != terms.RunFailed {
			t.Fatalf("receipt outcome %s", v.Receipt.Outcome)
		}
		a = attemptOf(v, leaseID)
		return a.Receipt
	})
	if a.Run != terms.RunFailed {
		t.Fatalf("settled attempt ran %s, want failed", a.Run)
	}
}

// attemptOf is the attempt of v that ran on leaseID: the current one, or
// one in its history (zero if neither).
func attemptOf(v api.JobView, leaseID string) api.LeaseRecord {
	if v.Lease != nil && v.Lease.ID == leaseID {
		return api.LeaseRecord{Lease: *v.Lease, Run: v.Run, Detail: v.Detail, Receipt: v.Receipt != nil}
	}
	for _, h := range v.History {
		if h.Lease.ID == leaseID {
			return h
		}
	}
	return api.LeaseRecord{}
}

// TestAbandonedLeaseIsSlashed: a provider that dies mid-lease and never
// comes back is reported as having abandoned the lease once it is over, the
// renter slashes its reputation and requeues the job without it.
func TestAbandonedLeaseIsSlashed(t *testing.T) {
	t.Parallel()
	bin := buildDaemon(t)
	root := t.TempDir()
	d, err := Start(context.Background(), Options{DataDir: root + "/boot", Config: fastConfig(renterConfig()),
		Log: testLogger(t), AbandonGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	boot := &testNode{Daemon: d, dir: root + "/boot"}
	t.Cleanup(func() { boot.Close() })
	dir := filepath.Join(root, "prov")
	proc, st := startProviderProcess(t, bin, dir, boot)
	before := boot.market.book.Score(st.PeerID)

	job := shJob(terms.Silver, 2, "sleep 60")
	job.Duration = 3 * time.Second
	v := post(t, boot, job)
	waitJob(t, boot, v.Job.ID, 20*time.Second, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	_ = proc.Process.Signal(syscall.SIGKILL)
	_, _ = proc.Process.Wait()

	// The abandoned attempt is archived and the job goes back to auction
	// without that provider (here there is no other: it stays queued).
	v = waitJob(t, boot, v.Job.ID, 20*time.Second, "abandoned and requeued", func(v api.JobView) bool { return len(v.History) > 0 && v.Job.Attempt > 0 })
	if h := v.History[0]; h.Run != terms.RunFailed || h.Fault != terms.FaultProvider || !strings.Contains(h.Detail, "abandoned") {
		t.Fatalf("abandoned attempt recorded as %s (fault %q): %q", h.Run, h.Fault, h.Detail)
	}
	if !slices.Contains(v.Job.Exclude, st.PeerID) {
		t.Fatalf("the abandoning provider is not excluded from the job's next attempt: %v", v.Job.Exclude)
	}
	rep := boot.market.book.Stats(st.PeerID)
	if rep.Slashes != 1 || rep.Score >= before {
		t.Fatalf("abandoning provider not slashed: %+v (score before %.3f)", rep, before)
	}
}

// startProviderProcess runs a provider daemon as a subprocess in dir,
// bootstrapped from boot, and waits until boot discovers it.
func startProviderProcess(t *testing.T, bin, dir string, boot *testNode) (*exec.Cmd, api.StatusInfo) {
	t.Helper()
	return startProviderProcessWith(t, bin, dir, boot, fastConfig(providerConfig("eu-west", 1.0, a100)))
}

// startProviderProcessWith is startProviderProcess with the provider's
// config.
func startProviderProcessWith(t *testing.T, bin, dir string, boot *testNode, cfg config.Config) (*exec.Cmd, api.StatusInfo) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Bootstrap = boot.Addrs()
	b, _ := yaml.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	proc := startDaemonProcess(t, bin, dir)
	var st api.StatusInfo
	if err := api.NewClient(dir).Do(context.Background(), "GET", "/status", nil, nil, &st); err != nil {
		t.Fatal(err)
	}
	eventuallyProviders(t, boot.Daemon, terms.Query{}, []string{st.PeerID}, 30*time.Second)
	pid, err := peer.Decode(st.PeerID)
	if err != nil {
		t.Fatal(err)
	}
	// Discovered means advertised: read the record it advertised.
	if err := api.NewClient(dir).Do(context.Background(), "GET", "/status", nil, nil, &st); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, boot.Daemon, pid, st.Advertised)
	return proc, st
}
