package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
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
	// SkyPilot's shape as its users write it: num_nodes 1, MODEL:1, setup
	// and run.
	const task = "name: hello\nnum_nodes: 1\nresources: {accelerators: \"A100:1\"}\nsetup: echo set\nrun: echo \"run $X\"\nenvs: {X: 7}\n" +
		"max_price: 2\nduration: 10m\nbid_window: 1500ms\n"

	j, err := cl.ConvertTask(ctx, "t.yaml", task)
	if err != nil {
		t.Fatal(err)
	}
	if s, r, ok := taskfile.TaskScripts(j.Run.Command); !ok || s != "echo set" || r != `echo "run $X"` || j.GPUModels[0] != "A100" || j.Run.Env["X"] != "7" {
		t.Fatalf("converted: %+v", j)
	}
	if _, err := cl.ConvertTask(ctx, "t.yaml", strings.Replace(task, "A100:1", "A100:x", 1)); err == nil ||
		!strings.Contains(err.Error(), `t.yaml:3: resources.accelerators: count must be a whole number ≥ 1 or a fraction of one GPU (0.125, 0.25 or 0.5), got "A100:x"`) {
		t.Fatalf("bad accelerators: %v", err)
	}
	if _, err := cl.PostTask(ctx, "t.yaml", "max_price: 2\nrun: echo\n"); err == nil || !strings.Contains(err.Error(), "t.yaml: missing duration") {
		t.Fatalf("no duration: %v", err)
	}
	// The daemon validates a posted task's job once, where it enters (the
	// tracker), and explains that validation's problems by the task's lines.
	if _, err := cl.PostTask(ctx, "t.yaml", strings.Replace(task, "bid_window: 1500ms", "bid_window: 90s", 1)); err == nil ||
		!strings.Contains(err.Error(), "t.yaml:9: bid_window: must be in [100ms, 1m0s], got 1m30s") {
		t.Fatalf("bid window out of bounds: %v", err)
	}
	var v api.JobView
	err = cl.Do(ctx, "POST", "/jobs", nil, api.PostJobRequest{Job: terms.Job{MaxPrice: 1}, Task: task}, &v)
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
	if v.State != terms.JobLeased || !strings.HasPrefix(v.Job.ID, "hello-") {
		t.Fatalf("posted: %s %s %v", v.Job.ID, v.State, v.Reasons)
	}
	v = waitJob(t, boot, v.Job.ID, 30*time.Second, "run ended", func(v api.JobView) bool { return v.Run.Terminal() })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("run %s: %s", v.Run, v.Detail)
	}
	if got := jobLog(t, boot, v.Job.ID); got != "set\nrun 7" {
		t.Fatalf("log %q", got)
	}
}

// A service file's text posted to the daemon (what the Python client's
// serve sends) is converted there by taskfile, and its replica, leased
// and probed as the file says, serves requests through the gateway; a bad
// one is refused naming its line, a service file posted as a job is sent
// to serve post, and neither starts anything.
func TestPostServiceTask(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns[0])
	cl := api.NewClient(boot.dir)
	ctx := context.Background()
	task := "name: web\nresources: {accelerators: A100, region: eu, ports: 8000}\nrun: exec " + bin + "\n" +
		"max_price: 2\nbid_window: 1s\n" +
		"service:\n  readiness_probe: {path: /healthz, initial_delay_seconds: 20}\n  replicas: 1\n  probe_interval: 300ms\n  lease: 10m\n"

	if _, err := cl.PostServiceTask(ctx, "web.yaml", strings.Replace(task, "path: /healthz", "path: healthz", 1)); err == nil ||
		!strings.Contains(err.Error(), `web.yaml:7: service.readiness_probe.path: must be an HTTP path starting with /, got "healthz"`) {
		t.Fatalf("bad probe path: %v", err)
	}
	if _, err := cl.PostTask(ctx, "web.yaml", task); err == nil ||
		!strings.Contains(err.Error(), "web.yaml:6: service: the file describes a service: post it with `gpumesh serve post web.yaml`") {
		t.Fatalf("service posted as a job: %v", err)
	}
	var v api.ServiceView
	err := cl.Do(ctx, "POST", "/services", nil, api.PostServiceRequest{ServiceSpec: api.ServiceSpec{Replicas: 1}, Task: task}, &v)
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("spec and task: %v", err)
	}
	if svcs, _ := cl.Services(ctx); len(svcs) != 0 {
		t.Fatalf("refused services started: %+v", svcs)
	}
	if jobs, _ := cl.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("refused tasks were posted: %d jobs", len(jobs))
	}

	v, err = cl.PostServiceTask(ctx, "web.yaml", task)
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != "web" || v.Spec.Health != "/healthz" || v.Spec.StartTimeout != 20*time.Second || v.Spec.Job.Run.ServicePort != 8000 ||
		v.Spec.Job.Tier != terms.Gold || v.Spec.Job.Duration != 10*time.Minute {
		t.Fatalf("posted %+v", v.Spec)
	}
	st := waitService(t, cl, boot.Daemon, v.ID, 30*time.Second, "a ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })
	if !readyOn(st, ns[0].ID().String()) {
		t.Fatalf("replica not on the provider: %+v", st.Replicas)
	}
	resp, err := gatewayClient(v, 1).Get("http://" + v.Gateway + "/work")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "ok ") {
		t.Fatalf("through the gateway: %s %q", resp.Status, b)
	}
	if _, err := cl.StopService(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
}
