package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/urfave/cli/v2"
)

var testNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// parseJob runs buildJob through a minimal app carrying the real job post
// flags, so flag parsing is exactly the CLI's.
func parseJob(t *testing.T, args ...string) (auction.Job, error) {
	t.Helper()
	var job auction.Job
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
		check func(t *testing.T, j auction.Job)
	}{
		{"defaults", with("--", "python", "train.py"), func(t *testing.T, j auction.Job) {
			want := auction.Job{Tier: auction.Silver, MaxPrice: 2.5, GPUCount: 1, Duration: 2 * time.Hour,
				Run: auction.RunSpec{Command: []string{"python", "train.py"}}, BidWindow: auction.DefaultBidWindow, CreatedAt: testNow}
			if !reflect.DeepEqual(j, want) {
				t.Fatalf("job = %+v\nwant  %+v", j, want)
			}
		}},
		{"every flag", with("--tier", "Bronze", "--gpu", "H100", "--gpu", "A100", "--count", "4", "--min-vram", "40",
			"--region", "eu-west", "--min-reliability", "0.9", "--deadline", "30m", "--dataset", "imagenet", "--dataset", "c4",
			"--workload", "training", "--image", "img:1", "--env", "A=1", "--env", "B=x,y=z", "--env", "C=",
			"--outputs", "out", "--memory-mb", "2048", "--bid-window", "500ms", "--", "run.sh", "--flag", "-v"),
			func(t *testing.T, j auction.Job) {
				want := auction.Job{Tier: auction.Bronze, MaxPrice: 2.5, GPUCount: 4, MinVRAMGB: 40, GPUModels: []string{"H100", "A100"},
					Region: "eu-west", MinReliability: 0.9, Preemptible: true, Duration: 2 * time.Hour, Deadline: testNow.Add(30 * time.Minute),
					Datasets: []string{"imagenet", "c4"}, Workload: "training",
					Run: auction.RunSpec{Image: "img:1", Command: []string{"run.sh", "--flag", "-v"},
						Env: map[string]string{"A": "1", "B": "x,y=z", "C": ""}, Outputs: "out", MemoryMB: 2048},
					BidWindow: 500 * time.Millisecond, CreatedAt: testNow}
				if !reflect.DeepEqual(j, want) {
					t.Fatalf("job = %+v\nwant  %+v", j, want)
				}
			}},
		{"flags after -- belong to the command", with("--", "python", "-u", "train.py", "--max-price", "9", "--"), func(t *testing.T, j auction.Job) {
			if want := []string{"python", "-u", "train.py", "--max-price", "9", "--"}; !reflect.DeepEqual(j.Run.Command, want) {
				t.Fatalf("command = %q, want %q", j.Run.Command, want)
			}
			if j.MaxPrice != 2.5 {
				t.Fatalf("max price = %v: a flag after -- was parsed", j.MaxPrice)
			}
		}},
		{"bronze can opt out of preemption", with("--tier", "bronze", "--preemptible=false", "--", "x"), func(t *testing.T, j auction.Job) {
			if j.Preemptible {
				t.Fatal("--preemptible=false ignored")
			}
		}},
		{"silver can opt in to preemption", with("--preemptible", "--", "x"), func(t *testing.T, j auction.Job) {
			if !j.Preemptible || j.Tier != auction.Silver {
				t.Fatalf("tier %s preemptible %v", j.Tier, j.Preemptible)
			}
		}},
		{"gold is not preemptible by default", with("--tier", "gold", "--", "x"), func(t *testing.T, j auction.Job) {
			if j.Preemptible || j.Tier != auction.Gold {
				t.Fatalf("tier %s preemptible %v", j.Tier, j.Preemptible)
			}
		}},
		{"absolute deadline", with("--deadline", "2026-03-15T00:00:00+01:00", "--", "x"), func(t *testing.T, j auction.Job) {
			if want := time.Date(2026, 3, 14, 23, 0, 0, 0, time.UTC); !j.Deadline.Equal(want) {
				t.Fatalf("deadline = %v, want %v", j.Deadline, want)
			}
		}},
		{"file", []string{"--file", full}, func(t *testing.T, j auction.Job) {
			want := auction.Job{ID: "train-7", Tier: auction.Bronze, MaxPrice: 1.25, GPUCount: 2, MinVRAMGB: 24,
				GPUModels: []string{"A100", "H100"}, Region: "eu", MinReliability: 0.8, Preemptible: true, Duration: 90 * time.Minute,
				Deadline: time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC), Datasets: []string{"imagenet"}, Workload: "training",
				Run: auction.RunSpec{Image: "trainer:1", Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1", "B": "2"},
					Outputs: "out", MemoryMB: 4096},
				BidWindow: 3 * time.Second, CreatedAt: testNow}
			if !reflect.DeepEqual(j, want) {
				t.Fatalf("job = %+v\nwant  %+v", j, want)
			}
		}},
		{"flags override the file", []string{"--file", full, "--tier", "silver", "--max-price", "3", "--gpu", "L4",
			"--env", "B=3", "--env", "C=4", "--duration", "10m", "--count", "1", "--", "bash", "-c", "true"},
			func(t *testing.T, j auction.Job) {
				if j.Tier != auction.Silver || j.MaxPrice != 3 || j.Duration != 10*time.Minute || j.GPUCount != 1 {
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
		{"file preemptible false is kept for bronze", []string{"--file", noPreempt}, func(t *testing.T, j auction.Job) {
			if j.Preemptible || j.Tier != auction.Bronze || j.GPUCount != 1 {
				t.Fatalf("tier %s preemptible %v count %d", j.Tier, j.Preemptible, j.GPUCount)
			}
		}},
		{"file bronze defaults to preemptible", []string{"--file", bronzeNoKey}, func(t *testing.T, j auction.Job) {
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
		{"zero price", []string{"--max-price", "0", "--duration", "1h", "--", "x"}, "--max-price must be > 0"},
		{"negative price", []string{"--max-price", "-1", "--duration", "1h", "--", "x"}, "--max-price must be > 0"},
		{"NaN price", []string{"--max-price", "NaN", "--duration", "1h", "--", "x"}, "--max-price must be > 0"},
		{"infinite price", []string{"--max-price", "+Inf", "--duration", "1h", "--", "x"}, "--max-price must be > 0"},
		{"no price", []string{"--duration", "1h", "--", "x"}, "--max-price is required"},
		{"no duration", []string{"--max-price", "1", "--", "x"}, "--duration is required"},
		{"negative duration", []string{"--max-price", "1", "--duration", "-1s", "--", "x"}, "--duration must be > 0"},
		{"unknown tier", withCmd("--tier", "platinum"), `unknown tier "platinum" (gold, silver, bronze)`},
		{"no command", with(), "no command: put it after --"},
		{"empty command", with("--", ""), "no command: put it after --"},
		{"env without =", withCmd("--env", "FOO"), `--env must be KEY=VALUE, got "FOO"`},
		{"env without key", withCmd("--env", "=1"), "--env must be KEY=VALUE"},
		{"zero count", withCmd("--count", "0"), "--count must be in [1, 1024], got 0"},
		{"huge count", withCmd("--count", "5000"), "--count must be in [1, 1024]"},
		{"negative vram", withCmd("--min-vram", "-1"), "--min-vram must be >= 0"},
		{"reliability above 1", withCmd("--min-reliability", "1.5"), "--min-reliability must be in [0, 1]"},
		{"negative memory", withCmd("--memory-mb", "-1"), "--memory-mb must be >= 0"},
		{"short bid window", withCmd("--bid-window", "10ms"), "--bid-window must be in [100ms, 1m0s]"},
		{"long bid window", withCmd("--bid-window", "2m"), "--bid-window must be in [100ms, 1m0s]"},
		{"past deadline", withCmd("--deadline", "2026-03-13T00:00:00Z"), "--deadline 2026-03-13T00:00:00Z is in the past"},
		{"bad deadline", withCmd("--deadline", "soon"), `--deadline must be an RFC3339 time or a positive duration from now, got "soon"`},
		{"negative deadline", withCmd("--deadline", "-5m"), "--deadline must be an RFC3339 time or a positive duration"},
		{"gold preemptible", withCmd("--tier", "gold", "--preemptible"), "--preemptible cannot be used with --tier gold"},
		{"empty gpu", withCmd("--gpu", ""), "--gpu must not be empty"},
		{"empty dataset", withCmd("--dataset", " "), "--dataset must not be empty"},
		{"bad duration syntax", withCmd("--duration", "forever"), "invalid value \"forever\" for flag -duration"},
		{"missing file", withCmd("--file", filepath.Join(t.TempDir(), "absent.yaml")), "no such file"},
		{"empty file", withCmd("--file", file("")), "is empty"},
		{"unknown file key", withCmd("--file", file("maxprice: 3\n")), "field maxprice not found"},
		{"bad file yaml", withCmd("--file", file("tier: [gold\n")), "job file"},
		{"bad file tier", withCmd("--file", file("tier: platinum\n")), `unknown tier "platinum"`},
		{"file gold preemptible", withCmd("--file", file("tier: gold\npreemptible: true\n")), "invalid job: a gold job cannot be preemptible"},
		{"file zero count", withCmd("--file", file("gpu_count: 0\n")), "invalid job: gpu_count must be in [1, 1024], got 0"},
		{"file bad price", []string{"--file", file("max_price: -3\nduration: 1h\nrun: {command: [x]}\n")}, "invalid job: max_price must be a positive number"},
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

// ---- extractOutputs ----

type tarEntry struct {
	name     string
	typeflag byte
	body     string
	link     string
	mode     int64
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: mode, Linkname: e.link}
		if e.typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name, body string) tarEntry { return tarEntry{name: name, typeflag: tar.TypeReg, body: body} }

func outFile(name, body string) auction.OutputFile {
	s := sha256.Sum256([]byte(body))
	return auction.OutputFile{Path: name, Size: int64(len(body)), SHA256: hex.EncodeToString(s[:])}
}

// listTree returns every path under dir, relative and slash-separated.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestExtractOutputs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	archive := makeTar(t,
		tarEntry{name: "sub/", typeflag: tar.TypeDir, mode: 0o755},
		reg("metrics.json", `{"loss":0.1}`),
		reg("sub/model.bin", strings.Repeat("w", 10000)),
		tarEntry{name: "run.sh", typeflag: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o755},
		reg("empty", ""),
	)
	manifest := []auction.OutputFile{
		outFile("sub/model.bin", strings.Repeat("w", 10000)),
		outFile("metrics.json", `{"loss":0.1}`),
		outFile("run.sh", "#!/bin/sh\n"),
		outFile("empty", ""),
	}
	got, err := extractOutputs(bytes.NewReader(archive), manifest, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []auction.OutputFile{manifest[1], manifest[0], manifest[2], manifest[3]} // archive order
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("extracted %+v\nwant %+v", got, want)
	}
	if tree, want := listTree(t, dir), []string{"empty", "metrics.json", "run.sh", "sub", "sub/model.bin"}; !reflect.DeepEqual(tree, want) {
		t.Fatalf("destination holds %q, want %q (no staging leftovers)", tree, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sub", "model.bin"))
	if err != nil || string(b) != strings.Repeat("w", 10000) {
		t.Fatalf("sub/model.bin: %v, %d bytes", err, len(b))
	}
	if fi, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("run.sh lost its executable bit: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "metrics.json")); err != nil || fi.Mode().Perm()&0o111 != 0 {
		t.Fatalf("metrics.json mode %v, %v", fi.Mode(), err)
	}

	// A second fetch refuses to overwrite, and leaves the files alone.
	changed := makeTar(t, reg("metrics.json", `{"loss":0.2}`))
	changedManifest := []auction.OutputFile{outFile("metrics.json", `{"loss":0.2}`)}
	if _, err := extractOutputs(bytes.NewReader(changed), changedManifest, dir, false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrite without force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "metrics.json")); string(b) != `{"loss":0.1}` {
		t.Fatalf("metrics.json changed without --force: %s", b)
	}
	if _, err := extractOutputs(bytes.NewReader(changed), changedManifest, dir, true); err != nil {
		t.Fatalf("overwrite with force: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "metrics.json")); string(b) != `{"loss":0.2}` {
		t.Fatalf("metrics.json after --force: %s", b)
	}
}

func TestExtractOutputsRefuses(t *testing.T) {
	ok := reg("ok.txt", "fine")
	okM := outFile("ok.txt", "fine")
	cases := []struct {
		name     string
		entries  []tarEntry
		manifest []auction.OutputFile
		want     string
	}{
		{"parent escape", []tarEntry{ok, reg("../x", "evil")}, []auction.OutputFile{okM, outFile("../x", "evil")}, "escapes the destination"},
		{"nested escape", []tarEntry{reg("a/../../x", "evil")}, []auction.OutputFile{outFile("x", "evil")}, "escapes the destination"},
		{"absolute path", []tarEntry{reg("/tmp/x", "evil")}, []auction.OutputFile{outFile("x", "evil")}, "absolute"},
		{"symlink", []tarEntry{ok, {name: "link", typeflag: tar.TypeSymlink, link: "/etc/passwd"}}, []auction.OutputFile{okM}, "links are not extracted"},
		{"hard link", []tarEntry{ok, {name: "hard", typeflag: tar.TypeLink, link: "ok.txt"}}, []auction.OutputFile{okM}, "links are not extracted"},
		{"fifo", []tarEntry{{name: "pipe", typeflag: tar.TypeFifo}}, nil, "not a regular file"},
		{"device", []tarEntry{{name: "dev", typeflag: tar.TypeChar}}, nil, "not a regular file"},
		{"checksum mismatch", []tarEntry{ok, reg("model.bin", "tampered")},
			[]auction.OutputFile{okM, {Path: "model.bin", Size: 8, SHA256: outFile("x", "original").SHA256}}, `checksum mismatch for "model.bin"`},
		{"size mismatch", []tarEntry{reg("a", "abc")}, []auction.OutputFile{outFile("a", "abcd")}, "archive says 3 bytes, manifest 4"},
		{"not in manifest", []tarEntry{ok, reg("extra", "x")}, []auction.OutputFile{okM}, `"extra" is not in the manifest`},
		{"missing from archive", []tarEntry{ok}, []auction.OutputFile{okM, outFile("b", "x"), outFile("a", "y")}, "missing from the archive: a, b"},
		{"duplicate in archive", []tarEntry{ok, ok}, []auction.OutputFile{okM}, "appears twice"},
		{"duplicate in manifest", []tarEntry{ok}, []auction.OutputFile{okM, okM}, "twice"},
		{"bad manifest path", []tarEntry{ok}, []auction.OutputFile{okM, outFile("../../etc/x", "")}, "manifest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			_, err := extractOutputs(bytes.NewReader(makeTar(t, c.entries...)), c.manifest, dir, true)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("extractOutputs = %v, want an error mentioning %q", err, c.want)
			}
			// Nothing lands anywhere: not in dir (all or nothing), not beside it.
			if tree := listTree(t, parent); len(tree) > 1 || (len(tree) == 1 && tree[0] != "out") {
				t.Fatalf("files left after a refused fetch: %q", tree)
			}
		})
	}

	t.Run("truncated archive", func(t *testing.T) {
		a := makeTar(t, reg("big", strings.Repeat("z", 4096)))
		_, err := extractOutputs(bytes.NewReader(a[:1024]), []auction.OutputFile{outFile("big", strings.Repeat("z", 4096))}, t.TempDir(), false)
		if err == nil {
			t.Fatal("truncated archive accepted")
		}
	})
}

func TestExtractOutputsDoesNotFollowSymlinks(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, "file")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sub/x", "file"} {
		a := makeTar(t, reg(name, "evil"))
		if _, err := extractOutputs(bytes.NewReader(a), []auction.OutputFile{outFile(name, "evil")}, dir, true); err == nil {
			t.Fatalf("%s: wrote through a symlink in the destination", name)
		}
	}
	if tree := listTree(t, outside); len(tree) != 0 {
		t.Fatalf("files written outside the destination: %q", tree)
	}
}

// ---- CLI without a daemon ----

func TestMarketCLIWithoutDaemon(t *testing.T) {
	dir := t.TempDir()
	cmds := [][]string{
		{"job", "post", "--max-price", "2", "--duration", "1h", "--", "true"},
		{"job", "status", "j1"},
		{"job", "list"},
		{"job", "cancel", "j1"},
		{"job", "logs", "j1"},
		{"job", "logs", "--follow", "j1"},
		{"job", "fetch", "j1", filepath.Join(dir, "out")},
		{"bids", "j1"},
		{"provider", "stats"},
		{"reputation", "12D3KooWabc"},
		{"ledger", "list", "--kind", "receipt", "--limit", "3"},
		{"ledger", "show", "1"},
		{"ledger", "verify"},
		{"ledger", "balances", "--json"},
		{"ledger", "export", "--csv"},
	}
	for _, args := range cmds {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			oneLineError(t, "daemon is not running", append([]string{"-d", dir}, args...)...)
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Fatalf("job fetch created its destination without a daemon: %v", err)
	}
}

func TestMarketCLIArgErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		want string
		args []string
	}{
		{"missing job ID (usage: gpumesh job status ID)", []string{"job", "status"}},
		{`unexpected argument "b" (usage: gpumesh job status ID)`, []string{"job", "status", "a", "b"}},
		{"missing job ID (usage: gpumesh job cancel ID)", []string{"job", "cancel"}},
		{"missing job ID (usage: gpumesh job logs ID)", []string{"job", "logs", "--follow"}},
		{"missing job ID (usage: gpumesh job fetch ID DIR)", []string{"job", "fetch"}},
		{"missing DIR (usage: gpumesh job fetch ID DIR)", []string{"job", "fetch", "j1"}},
		{`unexpected argument "z"`, []string{"job", "fetch", "j1", "d", "z"}},
		{"missing job ID (usage: gpumesh bids ID)", []string{"bids"}},
		{"missing peer ID (usage: gpumesh reputation PEER)", []string{"reputation"}},
		{"missing ledger SEQ (usage: gpumesh ledger show SEQ)", []string{"ledger", "show"}},
		{`invalid ledger SEQ "abc": want a positive integer`, []string{"ledger", "show", "abc"}},
		{`invalid ledger SEQ "0"`, []string{"ledger", "show", "0"}},
		{"unexpected argument \"x\" (see `gpumesh job list --help`)", []string{"job", "list", "x"}},
		{`unexpected argument "x"`, []string{"ledger", "verify", "x"}},
		{`unexpected argument "x"`, []string{"provider", "stats", "x"}},
		{`unknown --kind "bogus" (receipt, payment_owed, payment_earned, preemption_credit)`, []string{"ledger", "list", "--kind", "bogus"}},
		{"--limit must be >= 0", []string{"ledger", "list", "--limit", "-1"}},
		{"choose exactly one of --json or --csv", []string{"ledger", "export"}},
		{"choose exactly one of --json or --csv", []string{"ledger", "export", "--json", "--csv"}},
		{"--max-price must be > 0", []string{"job", "post", "--max-price", "0", "--duration", "1h", "--", "x"}},
		{`unknown tier "platinum" (gold, silver, bronze)`, []string{"job", "post", "--tier", "platinum", "--max-price", "1", "--duration", "1h", "--", "x"}},
		{"no command: put it after --", []string{"job", "post", "--max-price", "1", "--duration", "1h"}},
		{"flag provided but not defined: -frob", []string{"job", "post", "--frob"}},
		{"invalid value", []string{"job", "post", "--count", "many"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			oneLineError(t, c.want, append([]string{"-d", dir}, c.args...)...)
		})
	}
}

func TestSimCommandMounted(t *testing.T) {
	code, out, errOut := runCLI(t, "sim", "--help")
	if code != 0 || !strings.Contains(out, "replay") {
		t.Fatalf("gpumesh sim --help: code %d, out %q, err %q", code, out, errOut)
	}
}

// ---- CLI against a fake daemon ----

// fakeDaemon serves mux on the control socket of a fresh data dir, as the
// daemon would, and returns the data dir.
func fakeDaemon(t *testing.T, mux *http.ServeMux) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("unix", node.Paths{Dir: dir}.Socket())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return dir
}

func replyJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func leasedView(id string, run auction.RunState) api.JobView {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	return api.JobView{
		JobStatus: auction.JobStatus{
			Job:    auction.Job{ID: id, Tier: auction.Silver, MaxPrice: 2, GPUCount: 2, Duration: time.Hour, Run: auction.RunSpec{Command: []string{"true"}}},
			State:  auction.JobLeased,
			Winner: "12D3KooWprov",
			Lease: &auction.Lease{ID: "lease-1", JobID: id, Provider: "12D3KooWprov", Price: 1.5, Start: start,
				End: start.Add(time.Hour), GPUCount: 2, Tier: auction.Silver, State: auction.RunRunning},
		},
		Run: run,
	}
}

func TestMarketCLIAgainstFakeDaemon(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = 5 * time.Millisecond

	var posted auction.Job
	var polls atomic.Int32
	var logQuery, ledgerQueryStr, exportQuery, statusID string
	exit3 := 3
	files := map[string]string{"out/metrics.json": `{"acc":0.9}`, "out/model.bin": strings.Repeat("m", 3000)}
	tampered := false

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req api.PostJobRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			replyJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		posted = req.Job
		switch req.Job.Workload {
		case "nowhere":
			v := leasedView("j-none", "")
			v.State, v.Lease, v.Winner = auction.JobUnplaceable, nil, ""
			v.Reasons = []string{"no bids", "2 providers out of region"}
			replyJSON(w, 200, v)
		case "quick":
			// A job so short it finished before its post returned.
			v := leasedView("quick", auction.RunSucceeded)
			v.State = auction.JobFinished
			replyJSON(w, 200, v)
		default:
			replyJSON(w, 200, leasedView(req.Job.Workload, auction.RunPending))
		}
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		statusID = id
		n := polls.Add(1)
		v := leasedView(id, auction.RunRunning)
		if n >= 3 {
			v.State = auction.JobFinished
			switch id {
			case "ok":
				v.Run = auction.RunSucceeded
				v.CostUSD = 3
			case "bad":
				v.Run, v.ExitCode, v.Detail = auction.RunFailed, &exit3, "oom"
			}
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		un := leasedView("j2", "")
		un.State, un.Lease, un.Winner = auction.JobUnplaceable, nil, ""
		replyJSON(w, 200, []api.JobView{leasedView("j1", auction.RunRunning), un})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		logQuery = r.URL.RawQuery
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "epoch 1\nepoch 2\n")
	})
	mux.HandleFunc("GET /v1/jobs/{id}/outputs", func(w http.ResponseWriter, r *http.Request) {
		var man []auction.OutputFile
		var entries []tarEntry
		for _, p := range []string{"out/metrics.json", "out/model.bin"} {
			man = append(man, outFile(p, files[p]))
			body := files[p]
			if tampered && p == "out/model.bin" {
				body = strings.Repeat("x", 3000)
			}
			entries = append(entries, reg(p, body))
		}
		b, _ := json.Marshal(man)
		w.Header().Set(manifestHeader, string(b))
		w.Header().Set("Content-Type", "application/x-tar")
		w.Write(makeTar(t, entries...))
	})
	mux.HandleFunc("GET /v1/jobs/{id}/bids", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.BidsView{JobID: r.PathValue("id"), Explain: "12D3KooWcheap won: lowest score", Bids: []auction.Ranked{
			{Candidate: auction.Candidate{Bid: auction.Bid{Provider: "12D3KooWcheap", Price: 1, Datasets: []string{"c4"}}, Reliability: 0.9}, Score: 1.111},
			{Candidate: auction.Candidate{Bid: auction.Bid{Provider: "12D3KooWdear", Price: 9}, Reliability: 0.5}, Rejected: "price above max"},
		}})
	})
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		ledgerQueryStr = r.URL.RawQuery
		replyJSON(w, 200, []ledger.Entry{{Seq: 1, Kind: ledger.KindPaymentOwed, Amount: 2.5, Counterparty: "12D3KooWprov", Direction: ledger.DirOwed}})
	})
	mux.HandleFunc("GET /v1/ledger/verify", func(w http.ResponseWriter, r *http.Request) {
		if tampered {
			replyJSON(w, 409, map[string]string{"error": "ledger: chain does not verify at seq 2: hash mismatch"})
			return
		}
		replyJSON(w, 200, ledger.VerifyReport{Entries: 3, HeadSeq: 3, HeadHash: "abc123"})
	})
	mux.HandleFunc("GET /v1/ledger/balances", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, map[string]ledger.Balance{
			"12D3KooWb": {Owed: 2, Net: -2},
			"12D3KooWa": {Earned: 5, Credits: 0.5, Net: 5.5},
		})
	})
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		v := leasedView(r.PathValue("id"), auction.RunRunning)
		if r.PathValue("id") == "done" {
			v.Run = auction.RunCancelled
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("GET /v1/ledger/export", func(w http.ResponseWriter, r *http.Request) {
		exportQuery = r.URL.RawQuery
		io.WriteString(w, "seq,kind\n1,receipt\n")
	})
	dir := fakeDaemon(t, mux)
	gm := func(args ...string) (int, string, string) { return runCLI(t, append([]string{"-d", dir}, args...)...) }

	t.Run("post leased", func(t *testing.T) {
		code, out, errOut := gm("job", "post", "--max-price", "2", "--duration", "1h", "--count", "2", "--workload", "j1", "--", "python", "x.py")
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
		first := strings.SplitN(out, "\n", 2)[0]
		if !strings.HasPrefix(first, "job j1 leased to 12D3KooWprov at $1.5/GPU-h (start ") {
			t.Fatalf("first line %q", first)
		}
		if !strings.Contains(out, "est. cost $3.0000") {
			t.Fatalf("summary lacks the estimated cost (1.5 * 2 GPUs * 1h):\n%s", out)
		}
		if posted.MaxPrice != 2 || posted.GPUCount != 2 || posted.CreatedAt.IsZero() || !reflect.DeepEqual(posted.Run.Command, []string{"python", "x.py"}) {
			t.Fatalf("daemon received %+v", posted)
		}
	})
	t.Run("post finished at once", func(t *testing.T) {
		code, out, errOut := gm("job", "post", "--max-price", "2", "--duration", "1h", "--workload", "quick", "--", "x")
		if code != 0 || !strings.HasPrefix(out, "job quick leased to 12D3KooWprov at $1.5/GPU-h (start ") {
			t.Fatalf("code %d, stderr %q, out:\n%s", code, errOut, out)
		}
	})
	t.Run("post unplaceable", func(t *testing.T) {
		oneLineError(t, "job j-none unplaceable: no bids; 2 providers out of region",
			"-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--workload", "nowhere", "--", "x")
	})
	t.Run("post wait succeeded", func(t *testing.T) {
		polls.Store(0)
		code, out, errOut := gm("job", "post", "--max-price", "2", "--duration", "1h", "--workload", "ok", "--wait", "--", "x")
		if code != 0 || !strings.Contains(out, "run:        succeeded") || !strings.Contains(out, "cost:       $3.0000") {
			t.Fatalf("code %d\nout %s\nerr %s", code, out, errOut)
		}
		if polls.Load() < 3 {
			t.Fatalf("returned after %d polls, before the run ended", polls.Load())
		}
	})
	t.Run("post wait failed", func(t *testing.T) {
		polls.Store(0)
		oneLineError(t, "job bad failed (exit code 3): oom",
			"-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--workload", "bad", "--wait", "--", "x")
	})
	t.Run("status escapes the id", func(t *testing.T) {
		code, out, _ := gm("job", "status", "a/b c")
		if code != 0 || statusID != "a/b c" || !strings.Contains(out, "winner:     12D3KooWprov") {
			t.Fatalf("code %d, daemon saw id %q, out:\n%s", code, statusID, out)
		}
	})
	t.Run("list", func(t *testing.T) {
		code, out, _ := gm("job", "list")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 4 || strings.Fields(lines[0])[0] != "ID" {
			t.Fatalf("code %d, out:\n%s", code, out)
		}
		if f := strings.Fields(lines[1]); !reflect.DeepEqual(f, []string{"j1", "silver", "leased", "running", "12D3KooWprov", "$1.5", "$0.0000"}) {
			t.Fatalf("row %q", f)
		}
		if f := strings.Fields(lines[2]); !reflect.DeepEqual(f, []string{"j2", "silver", "unplaceable", "-", "-", "-", "$0.0000"}) {
			t.Fatalf("row %q", f)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		if code, out, _ := gm("job", "cancel", "done"); code != 0 || out != "job done cancelled\n" {
			t.Fatalf("code %d, out %q", code, out)
		}
		if code, out, _ := gm("job", "cancel", "busy"); code != 0 || out != "job busy: cancellation requested (state leased, run running)\n" {
			t.Fatalf("code %d, out %q", code, out)
		}
	})
	t.Run("logs follow", func(t *testing.T) {
		code, out, _ := gm("job", "logs", "--follow", "j1")
		if code != 0 || out != "epoch 1\nepoch 2\n" || logQuery != "follow=1" {
			t.Fatalf("code %d, query %q, out %q", code, logQuery, out)
		}
	})
	t.Run("bids", func(t *testing.T) {
		code, out, _ := gm("bids", "j1")
		lines := strings.Split(out, "\n")
		if code != 0 || !strings.HasPrefix(lines[1], "1 ") || !strings.HasPrefix(lines[2], "- ") ||
			!strings.Contains(lines[1], "c4") || !strings.Contains(lines[2], "price above max") || !strings.Contains(out, "lowest score") {
			t.Fatalf("code %d, out:\n%s", code, out)
		}
	})
	t.Run("fetch", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "res")
		code, out, errOut := gm("job", "fetch", "j1", dest)
		if code != 0 || !strings.Contains(out, "2 file(s) verified") {
			t.Fatalf("code %d, out %q, err %q", code, out, errOut)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, "out", "model.bin")); string(b) != files["out/model.bin"] {
			t.Fatal("out/model.bin not extracted")
		}
		oneLineError(t, "already exists", "-d", dir, "job", "fetch", "j1", dest)
		tampered = true
		defer func() { tampered = false }()
		oneLineError(t, `checksum mismatch for "out/model.bin"`, "-d", dir, "job", "fetch", "--force", "j1", dest)
	})
	t.Run("ledger", func(t *testing.T) {
		code, out, _ := gm("ledger", "verify")
		if code != 0 || out != "ledger ok: 3 entries, head abc123\n" {
			t.Fatalf("verify: code %d, out %q", code, out)
		}
		code, out, _ = gm("ledger", "list", "--kind", "payment_owed", "--counterparty", "P", "--lease", "L", "--limit", "5")
		if code != 0 || ledgerQueryStr != "counterparty=P&kind=payment_owed&lease=L&limit=5" || !strings.Contains(out, "$2.5000") {
			t.Fatalf("list: code %d, query %q, out %q", code, ledgerQueryStr, out)
		}
		code, out, _ = gm("ledger", "export", "--csv", "--kind", "receipt")
		if code != 0 || out != "seq,kind\n1,receipt\n" || exportQuery != "format=csv&kind=receipt" {
			t.Fatalf("export: code %d, query %q, out %q", code, exportQuery, out)
		}
		code, out, _ = gm("ledger", "balances")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 4 ||
			!reflect.DeepEqual(strings.Fields(lines[1]), []string{"12D3KooWa", "$0.0000", "$5.0000", "$0.5000", "$5.5000"}) ||
			!reflect.DeepEqual(strings.Fields(lines[2]), []string{"12D3KooWb", "$2.0000", "$0.0000", "$0.0000", "-$2.0000"}) ||
			!reflect.DeepEqual(strings.Fields(lines[3]), []string{"TOTAL", "$2.0000", "$5.0000", "$0.5000", "$3.5000"}) {
			t.Fatalf("balances: code %d, out:\n%s", code, out)
		}
		tampered = true
		defer func() { tampered = false }()
		oneLineError(t, "chain does not verify at seq 2", "-d", dir, "ledger", "verify")
	})
}

// BenchmarkExtractOutputs measures verified extraction of a job's outputs
// (16 files of 1 MiB): tar parsing, SHA-256, staging and the final renames.
func BenchmarkExtractOutputs(b *testing.B) {
	const files, size = 16, 1 << 20
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	sum := sha256.Sum256(body)
	var manifest []auction.OutputFile
	for i := 0; i < files; i++ {
		name := "out/part-" + strconv.Itoa(i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			b.Fatal(err)
		}
		manifest = append(manifest, auction.OutputFile{Path: name, Size: size, SHA256: hex.EncodeToString(sum[:])})
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	archive := buf.Bytes()
	base := b.TempDir()
	b.SetBytes(files * size)
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(base, strconv.Itoa(i))
		if _, err := extractOutputs(bytes.NewReader(archive), manifest, dir, false); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
