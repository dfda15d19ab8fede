package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestJobStatusShowsCheckpoint: job status names the job's newest
// checkpoint (seq, size, work saved) and the one its lease restored.
func TestJobStatusShowsCheckpoint(t *testing.T) {
	id := strings.Repeat("ab", 32)
	v := &api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-1", Attempt: 1}, State: terms.JobLeased},
		Checkpoint: &terms.Checkpoint{Seq: 3, Attempt: 1, Reason: terms.CheckpointPeriodic, Bytes: 2048, Work: 95 * time.Second, Artifact: id},
		Restored:   &terms.Checkpoint{Seq: 7, Reason: terms.CheckpointStopped, Bytes: 1024, Work: time.Minute, Artifact: id}}
	var b bytes.Buffer
	printJobView(&b, v, shortPeer)
	out := b.String()
	for _, want := range []string{
		"checkpoint: seq 3 of attempt 1 (periodic), 2048 bytes, work saved 1m35s, artifact " + id + "\n",
		"restored:   seq 7 of attempt 0 (stopped), 1024 bytes, work saved 1m0s, artifact " + id + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("job status lacks %q:\n%s", want, out)
		}
	}
}

// TestJobStatusShowsGang: a gang job's status names its shape and lists
// its members, rank by rank.
func TestJobStatusShowsGang(t *testing.T) {
	v := &api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-g", Nodes: 2, GPUCount: 2, Tier: terms.Silver}, State: terms.JobLeased},
		Gang: []api.GangMember{
			{Rank: 0, Provider: "12D3KooWAAAAAAAAAAAA", LeaseID: "lease-0", Price: 1.5, Run: terms.RunRunning,
				Checkpoint: &terms.Checkpoint{Seq: 2, Work: 30 * time.Second}},
			{Rank: 1, Provider: "12D3KooWBBBBBBBBBBBB", LeaseID: "lease-1", Price: 2, Run: terms.RunSucceeded, Settled: true, CostUSD: 0.25},
		}}
	var b bytes.Buffer
	printJobView(&b, v, shortPeer)
	out := b.String()
	for _, re := range []string{
		`tier:       silver, gang of 2 × 2 GPU\(s\), `,
		`members:    2, \$7/h together \(the sum of their quotes, each for 2 GPU\(s\)\)\n`,
		`  0 +\S+ +lease-0 +running +\$0\.0000 \(unsettled\) +seq 2, 30s of work +-\n`,
		`  1 +\S+ +lease-1 +succeeded +\$0\.2500 +- +-\n`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("job status lacks %q:\n%s", re, out)
		}
	}
}

// TestJobStatusShowsNoPersistAndScrub: job status says what becomes of
// a job's files on its provider (no-persist, kept here once taken, or
// its retention) and what the receipt says of the GPU scrub and of the
// no-persist policy.
func TestJobStatusShowsNoPersistAndScrub(t *testing.T) {
	for _, c := range []struct {
		v     api.JobView
		wants []string
		not   []string
	}{
		{api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-1", NoPersist: true}}, Kept: "/data/kept/lease-1",
			Receipt: &attest.Receipt{Outcome: terms.RunSucceeded, NoPersist: true, Scrub: attest.ScrubZeroed}},
			[]string{"files:      no-persist; the log and outputs are kept by this node in /data/kept/lease-1\n",
				"no-persist: held, as the provider signed in its receipt (it deletes its copies at settlement)\n",
				"scrub:      zeroed (the GPUs' memory was cleared after the lease)\n"}, nil},
		{api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-2", NoPersist: true}}},
			[]string{"files:      no-persist: the provider keeps nothing past the lease's settlement, and the job's memory never swaps\n"},
			[]string{"scrub:", "no-persist: held"}},
		{api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-3", Retain: time.Hour}},
			Receipt: &attest.Receipt{Outcome: terms.RunFailed, Scrub: attest.ScrubNoneDeclared}},
			[]string{"files:      kept by the provider for 1h0m0s after the lease (at most its own maximum)\n",
				"scrub:      none-declared (declared GPUs: no device memory to clear)\n"}, []string{"no-persist"}},
		{api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-4"}},
			Receipt: &attest.Receipt{Outcome: terms.RunSucceeded, Scrub: attest.ScrubFailure("gpu-scrub: exit status 2")}},
			[]string{"scrub:      failed: gpu-scrub: exit status 2 (the GPUs' memory may hold what the job left in it)\n"}, []string{"files:"}},
	} {
		var b bytes.Buffer
		printJobView(&b, &c.v, shortPeer)
		out := b.String()
		for _, want := range c.wants {
			if !strings.Contains(out, want) {
				t.Fatalf("job status of %s lacks %q:\n%s", c.v.Job.ID, want, out)
			}
		}
		for _, not := range c.not {
			if strings.Contains(out, not) {
				t.Fatalf("job status of %s says %q:\n%s", c.v.Job.ID, not, out)
			}
		}
	}
}

// TestJobStatusShowsDispute: job status says that the current lease's
// settlement was given up, and why.
func TestJobStatusShowsDispute(t *testing.T) {
	v := &api.JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: "job-1"}, State: terms.JobFinished}, Run: terms.RunSucceeded,
		Dispute: "receipt refused 5 times: attest: receipt disagrees with the lease: price 2, lease has 1"}
	var b bytes.Buffer
	printJobView(&b, v, shortPeer)
	want := "dispute:    settlement given up, receipt refused 5 times: attest: receipt disagrees with the lease: price 2, lease has 1\n"
	if out := b.String(); !strings.Contains(out, want) {
		t.Fatalf("job status lacks %q:\n%s", want, out)
	}
}
