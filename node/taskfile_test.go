package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
)

// A task file's text posted to the daemon (what the Python client sends)
// is converted there by taskfile and runs; a bad one is refused naming its
// line, and nothing is posted.
func TestPostTaskText(t *testing.T) {
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns[0])
	cl := api.NewClient(boot.dir)
	ctx := context.Background()
	const task = "name: hello\nresources: {accelerators: \"A100:1\"}\nsetup: echo set\nrun: echo \"run $X\"\nenvs: {X: 7}\n" +
		"max_price: 2\nduration: 10m\nbid_window: 1500ms\n"

	j, err := cl.ConvertTask(ctx, "t.yaml", task)
	if err != nil {
		t.Fatal(err)
	}
	if s, r, ok := taskfile.TaskScripts(j.Run.Command); !ok || s != "echo set" || r != `echo "run $X"` || j.GPUModels[0] != "A100" || j.Run.Env["X"] != "7" {
		t.Fatalf("converted: %+v", j)
	}
	if _, err := cl.ConvertTask(ctx, "t.yaml", strings.Replace(task, "A100:1", "A100:x", 1)); err == nil ||
		!strings.Contains(err.Error(), `t.yaml:2: resources.accelerators: count must be a whole number ≥ 1 or a fraction of one GPU (0.125, 0.25 or 0.5), got "A100:x"`) {
		t.Fatalf("bad accelerators: %v", err)
	}
	if _, err := cl.PostTask(ctx, "t.yaml", "max_price: 2\nrun: echo\n"); err == nil || !strings.Contains(err.Error(), "t.yaml: missing duration") {
		t.Fatalf("no duration: %v", err)
	}
	var v api.JobView
	err = cl.Do(ctx, "POST", "/jobs", nil, api.PostJobRequest{Job: auction.Job{MaxPrice: 1}, Task: task}, &v)
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("job and task: %v", err)
	}
	if jobs, _ := cl.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("refused tasks were posted: %d jobs", len(jobs))
	}

	v, err = cl.PostTask(ctx, "t.yaml", task)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != auction.JobLeased || !strings.HasPrefix(v.Job.ID, "hello-") {
		t.Fatalf("posted: %s %s %v", v.Job.ID, v.State, v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "run ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v.Run != auction.RunSucceeded {
		t.Fatalf("run %s: %s", v.Run, v.Detail)
	}
	if got := jobLog(t, boot, v.Job.ID); got != "set\nrun 7" {
		t.Fatalf("log %q", got)
	}
}
