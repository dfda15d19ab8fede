package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
)

// The shipped example spec must stay loadable as the job it documents.
func TestExampleJobFile(t *testing.T) {
	j, err := parseJob(t, "--file", "testdata/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := terms.Job{
		Tier: terms.Bronze, MaxPrice: 1.80, GPUCount: 2, GPUModels: []string{"A100", "H100"}, MinVRAMGB: 40,
		Region: "eu", MinReliability: 0.7, Preemptible: true, Duration: 3 * time.Hour, Datasets: []string{"imagenet-1k"},
		Workload: "training", BidWindow: 5 * time.Second, CreatedAt: testNow,
		Run: terms.RunSpec{Image: "ghcr.io/example/trainer:1.4", Command: []string{"python", "train.py", "--epochs", "10"},
			Env: map[string]string{"WANDB_MODE": "offline"}, Outputs: "checkpoints", MemoryMB: 65536},
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("testdata/job.yaml = %+v\nwant %+v", j, want)
	}
}

// A task file is job post's argument (or --file); flags given before it
// override it, and its problems name its lines.
func TestJobPostTaskFile(t *testing.T) {
	task := writeFile(t, "task.yaml", "name: sweep\nresources:\n  accelerators: A100:2\n  region: eu\nsetup: pip install x\nrun: |\n  python3 sweep.py\nmax_price: 1.5\nduration: 2h\ntier: bronze\n")
	for _, args := range [][]string{{task}, {"--file", task}} {
		j, err := parseJob(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		setup, run, ok := taskfile.TaskScripts(j.Run.Command)
		if j.GPUCount != 2 || j.GPUModels[0] != "A100" || j.Region != "eu" || j.Tier != terms.Bronze || !j.Preemptible ||
			j.MaxPrice != 1.5 || j.Duration != 2*time.Hour || !ok || setup != "pip install x" || run != "python3 sweep.py\n" {
			t.Fatalf("%v: %+v", args, j)
		}
	}
	j, err := parseJob(t, "--count", "4", "--max-price", "3", "--tier", "silver", task)
	if err != nil {
		t.Fatal(err)
	}
	if j.GPUCount != 4 || j.MaxPrice != 3 || j.Tier != terms.Silver || j.Region != "eu" {
		t.Fatalf("flags over the task: %+v", j)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{task, "--wait"}, `unexpected "--wait" after the job file`},
		{[]string{"--file", task, task}, "two job files"},
		{[]string{writeFile(t, "bad.yaml", "max_price: 1\nduration: 1h\nresources:\n  accelerators: H100:x\nrun: go\n")}, "bad.yaml:4: resources.accelerators: count must be a whole number"},
		{[]string{writeFile(t, "zero.yaml", "max_price: 0\nduration: 1h\nrun: go\n")}, "zero.yaml:1: max_price: must be a positive number, got 0"},
		{[]string{"--max-price", "0", task}, "invalid --max-price: must be a positive number"},
		{[]string{"../../examples/vllm-service.yaml"}, "job file ../../examples/vllm-service.yaml:29: service: the file describes a service: post it with `gpumesh serve post ../../examples/vllm-service.yaml`"},
	} {
		_, err := parseJob(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	// A command after -- is still a command, even with a file-like name
	// among its arguments.
	j, err = parseJob(t, "--max-price", "1", "--duration", "1h", "--", "python3", "cfg.yaml")
	if err != nil || !reflect.DeepEqual(j.Run.Command, []string{"python3", "cfg.yaml"}) {
		t.Fatalf("command: %v %v", j.Run.Command, err)
	}
}
