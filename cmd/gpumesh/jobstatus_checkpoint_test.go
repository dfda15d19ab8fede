package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestJobStatusShowsCheckpoint: job status names the job's newest
// checkpoint (seq, size, work saved) and the one its lease restored.
func TestJobStatusShowsCheckpoint(t *testing.T) {
	id := strings.Repeat("ab", 32)
	v := &api.JobView{JobStatus: auction.JobStatus{Job: auction.Job{ID: "job-1", Attempt: 1}, State: auction.JobLeased},
		Checkpoint: &auction.Checkpoint{Seq: 3, Attempt: 1, Reason: auction.CheckpointPeriodic, Bytes: 2048, Work: 95 * time.Second, Artifact: id},
		Restored:   &auction.Checkpoint{Seq: 7, Reason: auction.CheckpointStopped, Bytes: 1024, Work: time.Minute, Artifact: id}}
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
