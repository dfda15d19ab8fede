package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/urfave/cli/v2"
)

var testNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// parseJob runs buildJob through a minimal app carrying the real job post
// flags, so flag parsing is exactly the CLI's.
func parseJob(t *testing.T, args ...string) (terms.Job, error) {
	t.Helper()
	var job terms.Job
	var berr error
	app := &cli.App{
		Name:      "t",
		Flags:     jobPostFlags(),
		Writer:    io.Discard,
		ErrWriter: io.Discard,
		Action: func(c *cli.Context) error {
			job, berr = buildJob(c, testNow)
			return nil
		},
	}
	if err := app.Run(append([]string{"t"}, args...)); err != nil {
		return job, err
	}
	return job, berr
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullJobYAML = `
id: train-7
tier: bronze
max_price: 1.25
gpu_count: 2
min_vram_gb: 24
gpu_models: [A100, H100]
region: eu
min_reliability: 0.8
duration: 90m
deadline: 2026-03-14T12:00:00Z
datasets: [imagenet]
workload: training
bid_window: 3s
run:
  image: trainer:1
  command: [python, train.py]
  env: {A: "1", B: "2"}
  outputs: out
  memory_mb: 4096
`

func TestBuildJob(t *testing.T) {
	base := []string{"--max-price", "2.5", "--duration", "2h"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	full := writeFile(t, "full.yaml", fullJobYAML)
	noPreempt := writeFile(t, "np.yaml", "tier: bronze\npreemptible: false\nmax_price: 1\nduration: 1h\nrun: {command: [x]}\n")
	bronzeNoKey := writeFile(t, "bronze.yaml", "tier: bronze\nmax_price: 1\nduration: 1h\nrun: {command: [x]}\n")

	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, j terms.Job)
	}{
		{"defaults", with("--", "python", "train.py"), func(t *testing.T, j terms.Job) {
			want := terms.Job{Tier: terms.Silver, MaxPrice: 2.5, GPUCount: 1, Duration: 2 * time.Hour,
				Run: terms.RunSpec{Command: []string{"python", "train.py"}}, BidWindow: terms.DefaultBidWindow, CreatedAt: testNow}
			if !reflect.DeepEqual(j, want) {
				t.Fatalf("job = %+v\nwant  %+v", j, want)
			}
		}},
		{"every flag", with("--tier", "Bronze", "--gpu", "H100", "--gpu", "A100", "--count", "4", "--min-vram", "40",
			"--region", "eu-west", "--min-reliability", "0.9", "--deadline", "30m", "--dataset", "imagenet", "--dataset", "c4",
			"--workload", "training", "--image", "img:1", "--env", "A=1", "--env", "B=x,y=z", "--env", "C=",
			"--outputs", "out", "--memory-mb", "2048", "--bid-window", "500ms", "--max-attempts", "5", "--", "run.sh", "--flag", "-v"),
			func(t *testing.T, j terms.Job) {
				want := terms.Job{Tier: terms.Bronze, MaxPrice: 2.5, GPUCount: 4, MinVRAMGB: 40, GPUModels: []string{"H100", "A100"},
					Region: "eu-west", MinReliability: 0.9, Preemptible: true, Duration: 2 * time.Hour, Deadline: testNow.Add(30 * time.Minute),
					Datasets: []string{"imagenet", "c4"}, Workload: "training",
					Run: terms.RunSpec{Image: "img:1", Command: []string{"run.sh", "--flag", "-v"},
						Env: map[string]string{"A": "1", "B": "x,y=z", "C": ""}, Outputs: "out", MemoryMB: 2048},
					BidWindow: 500 * time.Millisecond, MaxAttempts: 5, CreatedAt: testNow}
				if !reflect.DeepEqual(j, want) {
					t.Fatalf("job = %+v\nwant  %+v", j, want)
				}
			}},
		{"inputs", with("--input", "data="+strings.Repeat("ab", 32), "--input", " model = "+strings.Repeat("cd", 32), "--", "x"), func(t *testing.T, j terms.Job) {
			want := map[string]string{"data": strings.Repeat("ab", 32), "model": strings.Repeat("cd", 32)}
			if !reflect.DeepEqual(j.Run.Inputs, want) {
				t.Fatalf("inputs = %v, want %v", j.Run.Inputs, want)
			}
		}},
		{"image artifact", with("--image", "img:1", "--image-artifact", strings.Repeat("ef", 32), "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Run.Image != "img:1" || j.Run.ImageArtifact != strings.Repeat("ef", 32) {
				t.Fatalf("run = %+v", j.Run)
			}
		}},
		{"flags after -- belong to the command", with("--", "python", "-u", "train.py", "--max-price", "9", "--"), func(t *testing.T, j terms.Job) {
			if want := []string{"python", "-u", "train.py", "--max-price", "9", "--"}; !reflect.DeepEqual(j.Run.Command, want) {
				t.Fatalf("command = %q, want %q", j.Run.Command, want)
			}
			if j.MaxPrice != 2.5 {
				t.Fatalf("max price = %v: a flag after -- was parsed", j.MaxPrice)
			}
		}},
		{"bronze can opt out of preemption", with("--tier", "bronze", "--preemptible=false", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Preemptible {
				t.Fatal("--preemptible=false ignored")
			}
		}},
		{"silver can opt in to preemption", with("--preemptible", "--", "x"), func(t *testing.T, j terms.Job) {
			if !j.Preemptible || j.Tier != terms.Silver {
				t.Fatalf("tier %s preemptible %v", j.Tier, j.Preemptible)
			}
		}},
		{"gold is not preemptible by default", with("--tier", "gold", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Preemptible || j.Tier != terms.Gold {
				t.Fatalf("tier %s preemptible %v", j.Tier, j.Preemptible)
			}
		}},
		{"a quarter of a gpu", with("--count", "0.25", "--isolation", "MPS", "--min-vram", "6", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.GPUCount != 1 || j.GPUFraction != 0.25 || j.Isolation != terms.IsolationMPS || j.MinVRAMGB != 6 {
				t.Fatalf("count %d fraction %v isolation %q vram %d", j.GPUCount, j.GPUFraction, j.Isolation, j.MinVRAMGB)
			}
		}},
		{"a file's fraction stays", with("--file", writeFile(t, "h.yaml", "gpu_fraction: 0.5\nrun: {command: [x]}\n")), func(t *testing.T, j terms.Job) {
			if j.GPUCount != 1 || j.GPUFraction != 0.5 {
				t.Fatalf("count %d fraction %v", j.GPUCount, j.GPUFraction)
			}
		}},
		{"--count overrides a file's fraction", with("--file", writeFile(t, "q.yaml", "gpu_count: 1\ngpu_fraction: 0.5\nrun: {command: [x]}\n"), "--count", "2"), func(t *testing.T, j terms.Job) {
			if j.GPUCount != 2 || j.GPUFraction != 0 {
				t.Fatalf("count %d fraction %v", j.GPUCount, j.GPUFraction)
			}
		}},
		{"a gang", with("--nodes", "2", "--count", "2", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Nodes != 2 || j.GPUCount != 2 {
				t.Fatalf("nodes %d count %d", j.Nodes, j.GPUCount)
			}
		}},
		{"--nodes overrides a file's num_nodes", with("--file", writeFile(t, "g.yaml", "num_nodes: 4\nresources: {accelerators: H100:8}\nrun: x\n"), "--nodes", "2"), func(t *testing.T, j terms.Job) {
			if j.Nodes != 2 || j.GPUCount != 8 {
				t.Fatalf("nodes %d count %d", j.Nodes, j.GPUCount)
			}
		}},
		{"checkpoint every", with("--checkpoint-every", "10m", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.CheckpointEvery != 10*time.Minute {
				t.Fatalf("checkpoint every = %v, want 10m", j.CheckpointEvery)
			}
		}},
		{"no persistence", with("--no-persist", "--", "x"), func(t *testing.T, j terms.Job) {
			if !j.NoPersist || j.Retain != 0 {
				t.Fatalf("no persist %v, retain %v", j.NoPersist, j.Retain)
			}
		}},
		{"latency terms", with("--near", " eu-west ", "--max-rtt", "50ms", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Near != "eu-west" || j.MaxRTT != 50*time.Millisecond {
				t.Fatalf("near %q max rtt %v, want eu-west and 50ms", j.Near, j.MaxRTT)
			}
		}},
		{"near a client location", with("--near", "/ip4/203.0.113.7/tcp/443", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Near != "/ip4/203.0.113.7/tcp/443" || j.MaxRTT != 0 {
				t.Fatalf("near %q max rtt %v", j.Near, j.MaxRTT)
			}
		}},
		{"latency terms from file, flag overrides", []string{"--file", writeFile(t, "rtt.yaml", "max_price: 1\nduration: 1h\nmax_rtt: 80ms\nnear: us\nrun:\n  command: [x]\n"),
			"--max-rtt", "40ms"}, func(t *testing.T, j terms.Job) {
			if j.MaxRTT != 40*time.Millisecond || j.Near != "us" {
				t.Fatalf("max rtt %v near %q, want the flag's 40ms and the file's us", j.MaxRTT, j.Near)
			}
		}},
		{"retention", with("--retain", "1h", "--", "x"), func(t *testing.T, j terms.Job) {
			if j.Retain != time.Hour || j.NoPersist {
				t.Fatalf("retain %v, no persist %v", j.Retain, j.NoPersist)
			}
		}},
		{"retention and no persistence from file", []string{"--file", writeFile(t, "np.yaml", "max_price: 1\nduration: 1h\nno_persist: true\nrun:\n  command: [x]\n")},
			func(t *testing.T, j terms.Job) {
				if !j.NoPersist {
					t.Fatal("no_persist from the file ignored")
				}
			}},
		{"checkpoint every from file", []string{"--file", writeFile(t, "ck.yaml", "max_price: 1\nduration: 1h\ncheckpoint_every: 15m\nrun:\n  command: [x]\n")},
			func(t *testing.T, j terms.Job) {
				if j.CheckpointEvery != 15*time.Minute {
					t.Fatalf("checkpoint every = %v, want 15m", j.CheckpointEvery)
				}
			}},
		{"absolute deadline", with("--deadline", "2026-03-15T00:00:00+01:00", "--", "x"), func(t *testing.T, j terms.Job) {
			if want := time.Date(2026, 3, 14, 23, 0, 0, 0, time.UTC); !j.Deadline.Equal(want) {
				t.Fatalf("deadline = %v, want %v", j.Deadline, want)
			}
		}},
		{"file", []string{"--file", full}, func(t *testing.T, j terms.Job) {
			want := terms.Job{ID: "train-7", Tier: terms.Bronze, MaxPrice: 1.25, GPUCount: 2, MinVRAMGB: 24,
				GPUModels: []string{"A100", "H100"}, Region: "eu", MinReliability: 0.8, Preemptible: true, Duration: 90 * time.Minute,
				Deadline: time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC), Datasets: []string{"imagenet"}, Workload: "training",
				Run: terms.RunSpec{Image: "trainer:1", Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1", "B": "2"},
					Outputs: "out", MemoryMB: 4096},
				BidWindow: 3 * time.Second, CreatedAt: testNow}
			if !reflect.DeepEqual(j, want) {
				t.Fatalf("job = %+v\nwant  %+v", j, want)
			}
		}},
		{"flags override the file", []string{"--file", full, "--tier", "silver", "--max-price", "3", "--gpu", "L4",
			"--env", "B=3", "--env", "C=4", "--duration", "10m", "--count", "1", "--", "bash", "-c", "true"},
			func(t *testing.T, j terms.Job) {
				if j.Tier != terms.Silver || j.MaxPrice != 3 || j.Duration != 10*time.Minute || j.GPUCount != 1 {
					t.Fatalf("overrides not applied: %+v", j)
				}
				if j.Preemptible {
					t.Fatal("preemptible should follow the overridden tier (silver) when neither file nor flag sets it")
				}
				if !reflect.DeepEqual(j.GPUModels, []string{"L4"}) {
					t.Fatalf("gpu models = %q, want [L4]", j.GPUModels)
				}
				if want := map[string]string{"A": "1", "B": "3", "C": "4"}; !reflect.DeepEqual(j.Run.Env, want) {
					t.Fatalf("env = %v, want %v", j.Run.Env, want)
				}
				if want := []string{"bash", "-c", "true"}; !reflect.DeepEqual(j.Run.Command, want) {
					t.Fatalf("command = %q, want %q", j.Run.Command, want)
				}
				if j.MinVRAMGB != 24 || j.Region != "eu" || j.Run.Image != "trainer:1" || j.BidWindow != 3*time.Second {
					t.Fatalf("unrelated file fields lost: %+v", j)
				}
			}},
		{"file preemptible false is kept for bronze", []string{"--file", noPreempt}, func(t *testing.T, j terms.Job) {
			if j.Preemptible || j.Tier != terms.Bronze || j.GPUCount != 1 {
				t.Fatalf("tier %s preemptible %v count %d", j.Tier, j.Preemptible, j.GPUCount)
			}
		}},
		{"file bronze defaults to preemptible", []string{"--file", bronzeNoKey}, func(t *testing.T, j terms.Job) {
			if !j.Preemptible {
				t.Fatal("bronze job from file without a preemptible key should be preemptible")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, err := parseJob(t, c.args...)
			if err != nil {
				t.Fatalf("buildJob(%q): %v", c.args, err)
			}
			c.check(t, j)
		})
	}
}

func TestBuildJobErrors(t *testing.T) {
	base := []string{"--max-price", "2", "--duration", "1h"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	cmd := []string{"--", "x"}
	withCmd := func(extra ...string) []string { return append(with(extra...), cmd...) }
	file := func(body string) string { return writeFile(t, "job.yaml", body) }
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"zero price", []string{"--max-price", "0", "--duration", "1h", "--", "x"}, "invalid --max-price: must be a positive number, got 0"},
		{"negative price", []string{"--max-price", "-1", "--duration", "1h", "--", "x"}, "invalid --max-price: must be a positive number, got -1"},
		{"NaN price", []string{"--max-price", "NaN", "--duration", "1h", "--", "x"}, "invalid --max-price: must be a positive number, got NaN"},
		{"infinite price", []string{"--max-price", "+Inf", "--duration", "1h", "--", "x"}, "invalid --max-price: must be a positive number, got +Inf"},
		{"no price", []string{"--duration", "1h", "--", "x"}, "--max-price is required"},
		{"no duration", []string{"--max-price", "1", "--", "x"}, "--duration is required"},
		{"negative duration", []string{"--max-price", "1", "--duration", "-1s", "--", "x"}, "invalid --duration: must be positive, got -1s"},
		{"unknown tier", withCmd("--tier", "platinum"), `unknown tier "platinum" (gold, silver, bronze)`},
		{"no command", with(), "no command: put it after --"},
		{"empty command", with("--", ""), "no command: put it after --"},
		{"env without =", withCmd("--env", "FOO"), `--env must be KEY=VALUE, got "FOO"`},
		{"input without =", withCmd("--input", "data"), `--input must be NAME=ARTIFACT_ID, got "data"`},
		{"input bad id", withCmd("--input", "data=abc"), `invalid --input: data="abc": not an artifact id`},
		{"image artifact without image", withCmd("--image-artifact", strings.Repeat("ef", 32)), "invalid --image-artifact: needs run.image"},
		{"env without key", withCmd("--env", "=1"), "--env must be KEY=VALUE"},
		{"zero count", withCmd("--count", "0"), `invalid --count: gpu count must be a whole number of GPUs (1 or more) or a fraction of one GPU (0.125, 0.25 or 0.5), got "0"`},
		{"odd fraction", withCmd("--count", "0.3"), `invalid --count: gpu count must be a whole number of GPUs (1 or more) or a fraction of one GPU (0.125, 0.25 or 0.5), got "0.3"`},
		{"isolation of whole gpus", withCmd("--count", "2", "--isolation", "mps"), "invalid --isolation: mps isolates a slice of a GPU: it needs gpu_fraction (whole GPUs are not shared)"},
		{"unknown isolation", withCmd("--count", "0.5", "--isolation", "vgpu"), `invalid --isolation: must be mig, mps or any, got "vgpu"`},
		{"huge count", withCmd("--count", "5000"), "invalid --count: must be in [1, 1024], got 5000"},
		{"negative vram", withCmd("--min-vram", "-1"), "invalid --min-vram: must not be negative, got -1"},
		{"reliability above 1", withCmd("--min-reliability", "1.5"), "invalid --min-reliability: must be in [0, 1], got 1.5"},
		{"negative memory", withCmd("--memory-mb", "-1"), "invalid --memory-mb: must not be negative, got -1"},
		{"short bid window", withCmd("--bid-window", "10ms"), "invalid --bid-window: must be in [100ms, 1m0s], got 10ms"},
		{"long bid window", withCmd("--bid-window", "2m"), "invalid --bid-window: must be in [100ms, 1m0s], got 2m0s"},
		{"too many attempts", withCmd("--max-attempts", "21"), "invalid --max-attempts: must be in [1, 20] (0: 3), got 21"},
		{"negative attempts", withCmd("--max-attempts", "-1"), "invalid --max-attempts: must be in [1, 20] (0: 3), got -1"},
		{"short max rtt", withCmd("--max-rtt", "500us"), "invalid --max-rtt: must be in [1ms, 10s] (0: no bound), got 500µs"},
		{"long max rtt", withCmd("--max-rtt", "1m"), "invalid --max-rtt: must be in [1ms, 10s] (0: no bound), got 1m0s"},
		{"near neither region nor multiaddr", withCmd("--near", "eu west"), `invalid --near: "eu west" is neither a region`},
		{"near bad multiaddr", withCmd("--near", "/ip4/300.1.2.3"), `invalid --near: "/ip4/300.1.2.3" is not a multiaddr`},
		{"file bad max rtt", withCmd("--file", file("max_rtt: 20s\n")), "invalid job: max_rtt must be in [1ms, 10s] (0: no bound), got 20s"},
		{"short retention", withCmd("--retain", "1s"), "invalid --retain: must be in [1m0s, 8760h0m0s] (0: 168h0m0s), got 1s"},
		{"retention of a no-persist job", withCmd("--no-persist", "--retain", "1h"), "invalid --retain: must not be set for a no_persist job: nothing of it is kept past its lease, got 1h0m0s"},
		{"short checkpoint interval", withCmd("--checkpoint-every", "10ms"), "invalid --checkpoint-every: must be 0 (only when stopped early) or at least 1s, got 10ms"},
		{"file short checkpoint interval", withCmd("--file", file("checkpoint_every: 10ms\n")), "invalid job: checkpoint_every must be 0 (only when stopped early) or at least 1s, got 10ms"},
		{"past deadline", withCmd("--deadline", "2026-03-13T00:00:00Z"), "invalid --deadline: 2026-03-13T00:00:00Z is before created_at 2026-03-14T09:26:53Z"},
		{"bad deadline", withCmd("--deadline", "soon"), `--deadline must be an RFC3339 time or a positive duration from now, got "soon"`},
		{"negative deadline", withCmd("--deadline", "-5m"), "--deadline must be an RFC3339 time or a positive duration"},
		{"gold preemptible", withCmd("--tier", "gold", "--preemptible"), "invalid --preemptible: must be false for a gold job (gold work is never preempted)"},
		{"empty gpu", withCmd("--gpu", ""), "invalid --gpu: must not be empty"},
		{"empty dataset", withCmd("--dataset", " "), "invalid --dataset: must not be empty"},
		{"bad duration syntax", withCmd("--duration", "forever"), "invalid value \"forever\" for flag -duration"},
		{"missing file", withCmd("--file", filepath.Join(t.TempDir(), "absent.yaml")), "no such file"},
		{"empty file", withCmd("--file", file("")), "is empty"},
		{"unknown file key", withCmd("--file", file("maxprice: 3\n")), "field maxprice not found"},
		{"bad file yaml", withCmd("--file", file("tier: [gold\n")), "job file"},
		{"bad file tier", withCmd("--file", file("tier: platinum\n")), `unknown tier "platinum"`},
		{"file gold preemptible", withCmd("--file", file("tier: gold\npreemptible: true\n")), "invalid job: preemptible must be false for a gold job (gold work is never preempted)"},
		{"file zero count", withCmd("--file", file("gpu_count: 0\n")), "invalid job: gpu_count must be in [1, 1024], got 0"},
		{"file bad price", []string{"--file", file("max_price: -3\nduration: 1h\nrun: {command: [x]}\n")}, "invalid job: max_price must be a positive number"},
		{"flag and file problems", []string{"--file", file("gpu_count: 0\nduration: 1h\nrun: {command: [x]}\n"), "--max-price", "0"},
			"invalid --max-price: must be a positive number, got 0; invalid job: gpu_count must be in [1, 1024], got 0"},
		{"file empty command", []string{"--file", file("max_price: 1\nduration: 1h\nrun: {command: []}\n")}, "no command: put it after --"},
		{"file several problems", []string{"--file", file("max_price: -3\nduration: -1h\nmin_reliability: 2\nrun: {command: [x]}\n")},
			"invalid job: max_price must be a positive number, got -3; duration must be positive, got -1h0m0s; min_reliability must be in [0, 1], got 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseJob(t, c.args...)
			if err == nil {
				t.Fatalf("buildJob(%q) succeeded, want error %q", c.args, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("buildJob(%q) = %q, want it to mention %q", c.args, err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}
