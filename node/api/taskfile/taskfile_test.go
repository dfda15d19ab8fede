package taskfile

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

var now = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// Every shipped example converts, to the job its comments describe.
func TestExamplesConvert(t *testing.T) {
	paths, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 4 {
		t.Fatalf("want at least 4 examples, found %v", paths)
	}
	want := map[string]func(t *testing.T, j terms.Job){
		"finetune.yaml": func(t *testing.T, j terms.Job) {
			check(t, "gpu", j.GPUCount == 8 && reflect.DeepEqual(j.GPUModels, []string{"H100", "H200"}), j.GPUModels, j.GPUCount)
			check(t, "region", j.Region == "eu" && j.MinVRAMGB == 80, j.Region, j.MinVRAMGB)
			check(t, "sla", j.Tier == terms.Silver && j.MaxPrice == 2.40 && j.Duration == 6*time.Hour &&
				j.Deadline.Equal(now.Add(2*time.Hour)) && j.MaxAttempts == 5 && j.Verified && !j.Preemptible, j.Tier, j.MaxPrice, j.Duration, j.Deadline)
			check(t, "checkpoint", j.CheckpointEvery == 10*time.Minute, j.CheckpointEvery)
			check(t, "env", j.Run.Env["EPOCHS"] == "3" && j.Run.Env["MODEL"] == "meta-llama/Llama-3.1-8B", j.Run.Env)
			check(t, "inputs/outputs", len(j.Run.Inputs) == 1 && j.Run.Inputs["train"] != "" && j.Run.Outputs == "out", j.Run.Inputs, j.Run.Outputs)
			setup, run, ok := TaskScripts(j.Run.Command)
			check(t, "scripts", ok && strings.Contains(setup, "pip install") && strings.Contains(run, "torchrun"), j.Run.Command)
			check(t, "id", strings.HasPrefix(j.ID, "llama-finetune-"), j.ID)
		},
		"batch-inference.yaml": func(t *testing.T, j terms.Job) {
			check(t, "gpu", j.GPUCount == 1 && reflect.DeepEqual(j.GPUModels, []string{"L4", "RTX4090", "A10G"}), j.GPUModels, j.GPUCount)
			check(t, "bronze", j.Tier == terms.Bronze && j.Preemptible && j.MaxAttempts == 10, j.Tier, j.Preemptible)
			check(t, "workload", j.Workload == "batch" && j.CheckpointEvery == 5*time.Minute, j.Workload)
			check(t, "env", j.Run.Env["TEMPERATURES"] == "0.0 0.3 0.7", j.Run.Env)
		},
		"eval.yaml": func(t *testing.T, j terms.Job) {
			check(t, "gpu", j.GPUCount == 1 && reflect.DeepEqual(j.GPUModels, []string{"A100", "H100"}), j.GPUModels)
			check(t, "image", j.Run.Image == "ghcr.io/example/lm-eval:0.4" && j.Run.MemoryMB == 65536, j.Run.Image)
			check(t, "duration", j.Duration == 90*time.Minute && j.Deadline.Equal(now.Add(30*time.Minute)), j.Duration)
		},
	}
	// Service files: what serve post posts; job post refuses them.
	services := map[string]func(t *testing.T, s api.ServiceSpec){
		"vllm-service.yaml": func(t *testing.T, s api.ServiceSpec) {
			j := s.Job
			check(t, "id", s.ID == "llama-chat", s.ID)
			check(t, "probe", s.Health == "/v1/models" && s.StartTimeout == 20*time.Minute && s.ProbeTimeout == 15*time.Second,
				s.Health, s.StartTimeout, s.ProbeTimeout)
			check(t, "replicas", s.Replicas == 2 && s.MaxReplicas == 0, s.Replicas, s.MaxReplicas)
			check(t, "port", j.Run.ServicePort == 8000, j.Run.ServicePort)
			check(t, "lease", j.Duration == time.Hour && j.Tier == terms.Gold && !j.Preemptible && j.MaxPrice == 1.20, j.Duration, j.Tier)
			check(t, "gpu", j.GPUCount == 1 && reflect.DeepEqual(j.GPUModels, []string{"L4", "A10G", "RTX4090"}) && j.MinVRAMGB == 24, j.GPUModels)
			_, run, ok := TaskScripts(j.Run.Command)
			check(t, "run", ok && strings.Contains(run, "vllm.entrypoints.openai.api_server") && strings.Contains(run, "--port 8000"), j.Run.Command)
		},
	}
	for _, p := range paths {
		name := filepath.Base(p)
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !IsTask(b) {
				t.Fatalf("%s is not detected as a task file", name)
			}
			if w := services[name]; w != nil {
				s, err := ConvertService(name, b, now)
				if err != nil {
					t.Fatal(err)
				}
				w(t, s)
				if _, err := Convert(name, b, now); err == nil || !strings.Contains(err.Error(), "gpumesh serve post "+name) {
					t.Fatalf("job post of a service file: %v", err)
				}
				return
			}
			j, err := Convert(name, b, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Validate(); err != nil {
				t.Fatal(err)
			}
			if w := want[name]; w != nil {
				w(t, j)
			} else {
				t.Errorf("no expectations for example %s: add them here", name)
			}
		})
	}
}

func check(t *testing.T, what string, ok bool, got ...any) {
	t.Helper()
	if !ok {
		t.Errorf("%s: got %v", what, got)
	}
}

// The terms.Job-shaped file of `job post --file` keeps working through
// the same entry point, with the CLI's defaults.
func TestJobShapedFile(t *testing.T) {
	b, err := os.ReadFile("../../../cmd/gpumesh/testdata/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if IsTask(b) {
		t.Fatal("the job-shaped example is detected as a task file")
	}
	j, err := Convert("job.yaml", b, now)
	if err != nil {
		t.Fatal(err)
	}
	if j.Tier != terms.Bronze || !j.Preemptible || j.GPUCount != 2 || j.Duration != 3*time.Hour ||
		!reflect.DeepEqual(j.Run.Command, []string{"python", "train.py", "--epochs", "10"}) {
		t.Fatalf("job.yaml = %+v", j)
	}
	j, err = Convert("small.yaml", []byte("max_price: 1\nduration: 1h\nrun: {command: [echo, hi]}\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	if j.Tier != terms.Silver || j.GPUCount != 1 || j.Preemptible {
		t.Fatalf("defaults: %+v", j)
	}
	// JSON is YAML: the Python client sends dicts that way.
	j, err = Convert("dict", []byte(`{"max_price": 1, "duration": "1h", "resources": {"accelerators": "A100:2"}, "run": "echo hi"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	if j.GPUCount != 2 || j.GPUModels[0] != "A100" {
		t.Fatalf("json task: %+v", j)
	}
	// A gang, SkyPilot's way (num_nodes) or as a job spec names it (nodes).
	for _, key := range []string{"num_nodes", "nodes"} {
		j, err = Convert("gang.yaml", []byte("max_price: 1\nduration: 1h\n"+key+": 3\nresources: {accelerators: H100:2}\nrun: echo hi\n"), now)
		if err != nil || j.Nodes != 3 || j.GPUCount != 2 {
			t.Fatalf("%s: %+v %v", key, j, err)
		}
	}
	// A fraction of one GPU, SkyPilot's way, with the slice's isolation.
	for _, acc := range []string{"L4:0.25", "{L4: 0.25}", "[L4:0.25, T4:0.25]"} {
		j, err = Convert("slice.yaml", []byte("max_price: 1\nduration: 1h\nresources:\n  accelerators: "+acc+"\n  isolation: mps\nrun: echo hi\n"), now)
		if err != nil {
			t.Fatalf("%s: %v", acc, err)
		}
		if j.GPUCount != 1 || j.GPUFraction != 0.25 || j.GPUModels[0] != "L4" || j.Isolation != terms.IsolationMPS {
			t.Fatalf("%s: %+v", acc, j)
		}
	}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		text string
		task bool
	}{
		{"run: echo hi\n", true},
		{"run: |\n  echo hi\n", true},
		{"resources: {accelerators: H100}\n", true},
		{"name: x\nrun: {command: [x]}\n", true},
		{"run:\n  command: [x]\n", false},
		{"max_price: 2\nrun:\n", false},
		{"- a\n", false},
		{"", false},
	} {
		if got := IsTask([]byte(c.text)); got != c.task {
			t.Errorf("IsTask(%q) = %v, want %v", c.text, got, c.task)
		}
	}
}

// Each bad field is named with its line, on one line.
func TestTaskErrorsNameTheLine(t *testing.T) {
	const base = "max_price: 1\nduration: 1h\n"
	for _, c := range []struct {
		name, text, want string
	}{
		{"bad count", base + "resources:\n  accelerators: H100:0\nrun: x\n", `t.yaml:4: resources.accelerators: count must be a whole number ≥ 1 or a fraction of one GPU (0.125, 0.25 or 0.5), got "H100:0"`},
		{"fractional count", base + "resources:\n  accelerators: H100:0.3\nrun: x\n", `t.yaml:4: resources.accelerators: count must be a whole number ≥ 1 or a fraction of one GPU (0.125, 0.25 or 0.5), got "H100:0.3"`},
		{"mixed fractions", base + "resources:\n  accelerators: [L4:0.25, T4:0.5]\nrun: x\n", "t.yaml:4: resources.accelerators: every model needs the same count (a job leases COUNT GPUs of any one listed model), got L4:0.25 and T4:0.5"},
		{"bad isolation", base + "resources:\n  accelerators: L4:0.25\n  isolation: vgpu\nrun: x\n", `t.yaml:5: resources.isolation: must be mig, mps or any, got "vgpu"`},
		{"mixed counts", base + "resources:\n  accelerators:\n    - H100:8\n    - A100:4\nrun: x\n", "t.yaml:6: resources.accelerators: every model needs the same count"},
		{"map count", base + "resources:\n  accelerators: {H100: many}\nrun: x\n", `t.yaml:4: resources.accelerators.H100: count must be a whole number ≥ 1 or a fraction of one GPU (0.125, 0.25 or 0.5), got "many"`},
		{"unknown field", base + "run: x\nretries: 3\n", "t.yaml:4: retries: unknown field (task fields: name, resources"},
		{"unknown resource", base + "resources:\n  gpus: 8\nrun: x\n", "t.yaml:4: resources.gpus: unknown field (resources fields: accelerators"},
		{"too many nodes", base + "num_nodes: 65\nrun: x\n", "t.yaml:3: num_nodes: must be in [1, 64], got 65"},
		{"gang of slices", base + "nodes: 2\nresources: {accelerators: L4:0.5}\nrun: x\n", "t.yaml:3: nodes: a gang's members take whole GPUs"},
		{"skypilot field", base + "workdir: .\nrun: x\n", "t.yaml:3: workdir: not supported by gpumesh: upload it"},
		{"skypilot resource", base + "resources:\n  cloud: aws\nrun: x\n", "t.yaml:4: resources.cloud: not supported by gpumesh: there are no clouds"},
		{"price not a number", "max_price: cheap\nduration: 1h\nrun: x\n", `t.yaml:1: max_price: must be a price in USD per GPU-hour, e.g. 2.5, got "cheap"`},
		{"negative price", "max_price: -1\nduration: 1h\nrun: x\n", "t.yaml:1: max_price: must be a positive number, got -1"},
		{"bare number duration", "max_price: 1\nduration: 600\nrun: x\n", `t.yaml:2: duration: must be a positive duration such as 10m or 2h, got "600"`},
		{"bad checkpoint", base + "checkpoint: {every: soon}\nrun: x\n", `t.yaml:3: checkpoint.every: must be a positive duration such as 10m or 2h, got "soon"`},
		{"short checkpoint", base + "checkpoint:\n  every: 10ms\nrun: x\n", "t.yaml:4: checkpoint.every: must be 0 (only when stopped early) or at least 1s, got 10ms"},
		{"bad tier", base + "tier: platinum\nrun: x\n", `t.yaml:3: tier: must be gold, silver or bronze, got "platinum"`},
		{"gold spot", base + "tier: gold\nresources: {use_spot: true}\nrun: x\n", "t.yaml:4: resources.use_spot: must be false for a gold job"},
		{"bad input", base + "inputs:\n  data: not-an-id\nrun: x\n", `t.yaml:4: inputs.data: "not-an-id" is not an artifact id`},
		{"env without value", base + "envs:\n  HF_TOKEN:\nrun: x\n", "t.yaml:4: envs.HF_TOKEN: has no value"},
		{"run as list", base + "resources: {}\nrun: [echo, hi]\n", "t.yaml:4: run: must be a shell script (a string; use `run: |` for several lines), got a list"},
		{"empty run", base + "run: \"  \"\n", "t.yaml:3: run: is empty"},
		{"no run", base + "resources: {accelerators: H100}\n", "t.yaml: missing run"},
		{"no price", "duration: 1h\nrun: x\n", "t.yaml: missing max_price (the most you pay per GPU-hour, USD)"},
		{"bad deadline", base + "deadline: tomorrow\nrun: x\n", `t.yaml:3: deadline: must be an RFC3339 time or a positive duration from now (e.g. 30m), got "tomorrow"`},
		{"bad name", base + "name: my job!\nrun: x\n", `t.yaml:3: name: "my job!" must be 1-103 letters`},
		{"too many attempts", base + "max_attempts: 99\nrun: x\n", "t.yaml:3: max_attempts: must be in [1, 20]"},
		{"duplicate", base + "run: x\nrun: y\n", "t.yaml:4: run: given twice"},
		{"no_persist not a bool", base + "no_persist: please\nrun: x\n", "t.yaml:3: no_persist: must be true or false"},
		{"short retain", base + "retain: 1s\nrun: x\n", "t.yaml:3: retain: must be in [1m0s, 8760h0m0s] (0: 168h0m0s), got 1s"},
		{"retain of a no-persist task", base + "no_persist: true\nretain: 2h\nrun: x\n", "t.yaml:4: retain: must not be set for a no_persist job"},
		{"short max_rtt", base + "resources:\n  max_rtt: 100us\nrun: x\n", "t.yaml:4: resources.max_rtt: must be in [1ms, 10s] (0: no bound), got 100µs"},
		{"bare number max_rtt", base + "resources:\n  max_rtt: 50\nrun: x\n", `t.yaml:4: resources.max_rtt: must be a positive duration such as 10m or 2h, got "50"`},
		{"bad near", base + "resources:\n  accelerators: H100\n  near: eu west\nrun: x\n", `t.yaml:5: resources.near: "eu west" is neither a region`},
		{"bad yaml", base + "run: [x\n", "t.yaml: "},
		{"not a mapping", "- run: x\n", "t.yaml:1: a job file is a mapping of fields"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Convert("t.yaml", []byte(c.text), now)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q\nwant it to contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

// A task file's no_persist and retain become the job's.
func TestTaskNoPersistAndRetain(t *testing.T) {
	const base = "max_price: 1\nduration: 1h\nrun: x\n"
	j, err := Convert("t.yaml", []byte(base+"no_persist: true\n"), now)
	if err != nil || !j.NoPersist || j.Retain != 0 {
		t.Fatalf("no_persist: %+v %v", j, err)
	}
	j, err = Convert("t.yaml", []byte(base+"retain: 90m\n"), now)
	if err != nil || j.Retain != 90*time.Minute || j.NoPersist {
		t.Fatalf("retain: %+v %v", j, err)
	}
}

// A task's resources.near and resources.max_rtt become the job's latency
// terms, and so do a job-shaped file's near and max_rtt.
func TestTaskLatencyTerms(t *testing.T) {
	j, err := Convert("t.yaml", []byte("max_price: 1\nduration: 1h\nresources: {accelerators: H100, near: eu-west, max_rtt: 50ms}\nrun: x\n"), now)
	if err != nil || j.Near != "eu-west" || j.MaxRTT != 50*time.Millisecond {
		t.Fatalf("task: near %q max_rtt %v (%v)", j.Near, j.MaxRTT, err)
	}
	j, err = Convert("t.yaml", []byte("max_price: 1\nduration: 1h\nnear: /ip4/203.0.113.7\nmax_rtt: 80ms\nrun: {command: [x]}\n"), now)
	if err != nil || j.Near != "/ip4/203.0.113.7" || j.MaxRTT != 80*time.Millisecond {
		t.Fatalf("job-shaped: near %q max_rtt %v (%v)", j.Near, j.MaxRTT, err)
	}
}

// Several problems are all reported, each with its line.
func TestTaskErrorsAllReported(t *testing.T) {
	_, err := Convert("t.yaml", []byte("max_price: x\nduration: 1h\nresources:\n  accelerators: H100:0\nbogus: 1\nrun: x\n"), now)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"t.yaml:1: max_price", "t.yaml:4: resources.accelerators", "t.yaml:5: bogus"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// The command a task becomes runs setup, then run; a failing setup stops
// the job with its status before run, and run's status is the job's.
func TestTaskCommandRunsSetupThenRun(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	run := func(setup, script string) (string, int) {
		cmd := Command(setup, script)
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run("echo setting up; X=1", "echo running; exit 3")
	if out != "setting up\nrunning\n" || code != 3 {
		t.Fatalf("setup+run: %q, exit %d", out, code)
	}
	out, code = run("echo a; false; echo not reached", "echo running")
	if code != 1 || strings.Contains(out, "not reached") || strings.Contains(out, "running") ||
		!strings.Contains(out, "gpumesh: setup failed (exit status 1); run not started") {
		t.Fatalf("failing setup: %q, exit %d", out, code)
	}
	out, code = run("", "echo \"$0\" 'quotes' \"and $((1+2))\"")
	if out != "run quotes and 3\n" || code != 0 {
		t.Fatalf("run alone: %q, exit %d", out, code)
	}
}
