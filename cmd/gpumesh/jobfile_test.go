package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
)

// The shipped example spec must stay loadable as the job it documents.
func TestExampleJobFile(t *testing.T) {
	j, err := parseJob(t, "--file", "testdata/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := auction.Job{
		Tier: auction.Bronze, MaxPrice: 1.80, GPUCount: 2, GPUModels: []string{"A100", "H100"}, MinVRAMGB: 40,
		Region: "eu", MinReliability: 0.7, Preemptible: true, Duration: 3 * time.Hour, Datasets: []string{"imagenet-1k"},
		Workload: "training", BidWindow: 5 * time.Second, CreatedAt: testNow,
		Run: auction.RunSpec{Image: "ghcr.io/example/trainer:1.4", Command: []string{"python", "train.py", "--epochs", "10"},
			Env: map[string]string{"WANDB_MODE": "offline"}, Outputs: "checkpoints", MemoryMB: 65536},
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("testdata/job.yaml = %+v\nwant %+v", j, want)
	}
}
