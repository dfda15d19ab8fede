package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/runtime"
)

func TestProviderInit(t *testing.T) {
	t.Run("detected GPUs", func(t *testing.T) {
		withProbes(t, healthyProbes())
		dir := t.TempDir()
		code, out, errOut := runCLI(t, "-d", dir, "provider", "init", "--yes", "--region", "eu-west", "--bootstrap", bootPeer)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		cfg, err := config.LoadConfig(filepath.Join(dir, "config.yaml"), true)
		if err != nil {
			t.Fatal(err)
		}
		p := cfg.Provider
		if !p.Enabled || p.GPUSource != runtime.GPUSourceAuto || len(p.GPUs) != 0 || p.Policy.PriceFloor != suggestedFloor["a100"] ||
			cfg.Region != "eu-west" || len(cfg.Bootstrap) != 1 || cfg.MetricsAddr != "127.0.0.1:9464" || len(p.Policy.Availability) != 0 {
			t.Fatalf("config: %+v", cfg)
		}
		if !strings.Contains(out, "price floor: $0.90/GPU-h (suggested for a100)") {
			t.Errorf("summary:\n%s", out)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "config.yaml"))
		for _, want := range []string{"#   GPUs: NVML: 1x NVIDIA A100-SXM4-80GB, driver 550.54", "GPUs reach containers through nvidia", "# Minimum USD per GPU-hour"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("config lacks %q:\n%s", want, b)
			}
		}
		oneLineError(t, "exists; pass --force", "-d", dir, "provider", "init", "--yes")
		if code, out, errOut := runCLI(t, "-d", dir, "provider", "init", "--yes", "--force", "--price-floor", "2.5"); code != 0 {
			t.Fatalf("--force: exit %d %s%s", code, out, errOut)
		}
		if cfg, _ := config.LoadConfig(filepath.Join(dir, "config.yaml"), true); cfg.Provider.Policy.PriceFloor != 2.5 {
			t.Fatalf("--price-floor not written: %v", cfg.Provider.Policy.PriceFloor)
		}
	})
	noGPU := healthyProbes()
	noGPU.NVML = func() (runtime.Inventory, error) { return runtime.Inventory{}, errProbe }
	t.Run("declared GPUs and windows", func(t *testing.T) {
		withProbes(t, noGPU)
		path := filepath.Join(t.TempDir(), "sub", "gpumesh.yaml")
		code, out, errOut := runCLI(t, "provider", "init", "-y", "-c", path, "--gpu", "RTX 4090:24", "--gpu", "Tesla T4:16",
			"--window", "mon-fri 19:00-07:00", "--window", "sat,sun 00:00-24:00", "--timezone", "Europe/Berlin")
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		cfg, err := config.LoadConfig(path, true)
		if err != nil {
			t.Fatal(err)
		}
		p := cfg.Provider
		wantGPUs := []terms.GPU{{Model: "RTX 4090", VRAMGB: 24}, {Model: "Tesla T4", VRAMGB: 16}}
		if p.GPUSource != runtime.GPUSourceDeclared || len(p.GPUs) != 2 || p.GPUs[0] != wantGPUs[0] || p.GPUs[1] != wantGPUs[1] {
			t.Fatalf("gpus: %s %+v", p.GPUSource, p.GPUs)
		}
		// The floor applies to every GPU: the cheapest one's suggestion.
		if p.Policy.PriceFloor != suggestedFloor["t4"] {
			t.Errorf("floor %v, want t4's %v", p.Policy.PriceFloor, suggestedFloor["t4"])
		}
		av := p.Policy.Availability
		if len(av) != 2 || strings.Join(av[0].Days, ",") != "mon,tue,wed,thu,fri" || av[0].From != "19:00" || av[0].To != "07:00" ||
			strings.Join(av[1].Days, ",") != "sat,sun" || p.Policy.Timezone != "Europe/Berlin" {
			t.Fatalf("availability: %+v %q", av, p.Policy.Timezone)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("config mode: %v %v", fi, err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		withProbes(t, noGPU)
		dir := t.TempDir()
		oneLineError(t, "no GPU to sell", "-d", dir, "provider", "init", "--yes")
		oneLineError(t, "want MODEL:VRAM_GB", "-d", dir, "provider", "init", "--yes", "--gpu", "RTX 4090")
		oneLineError(t, "positive whole number", "-d", dir, "provider", "init", "--yes", "--gpu", "RTX 4090:lots")
		oneLineError(t, "unknown day \"funday\"", "-d", dir, "provider", "init", "--yes", "--gpu", "T4:16", "--window", "funday 10:00-12:00")
		oneLineError(t, "--window \"25:00-26:00\"", "-d", dir, "provider", "init", "--yes", "--gpu", "T4:16", "--window", "25:00-26:00")
		if _, err := os.Stat(filepath.Join(dir, "config.yaml")); !os.IsNotExist(err) {
			t.Fatalf("a failed init left a config: %v", err)
		}
	})
	t.Run("interactive", func(t *testing.T) {
		a := initAnswers{Region: "us-east"}
		var out strings.Builder
		if err := askInit(strings.NewReader("RTX 3090:24, A10:24\n\n"), &out, &a); err != nil {
			t.Fatal(err)
		}
		if len(a.GPUs) != 2 || a.GPUs[1].Model != "A10" || a.GPUSource != runtime.GPUSourceDeclared || a.Region != "us-east" {
			t.Fatalf("answers: %+v", a)
		}
		if !strings.Contains(out.String(), "Region (e.g. eu-west, us-east; empty for none) [us-east]: ") {
			t.Fatalf("prompts: %q", out.String())
		}
		if err := askInit(strings.NewReader(""), &out, &initAnswers{}); err == nil || !strings.Contains(err.Error(), "pass --yes") {
			t.Fatalf("closed stdin: %v", err)
		}
	})
}

func TestSuggestFloor(t *testing.T) {
	cases := []struct {
		name string
		gpus []terms.GPU
		want float64
		why  string
	}{
		{"nvml h100", []terms.GPU{{Model: "NVIDIA H100 80GB HBM3", VRAMGB: 80}}, 1.90, "h100"},
		{"human 4090", []terms.GPU{{Model: "GeForce RTX 4090", VRAMGB: 24}}, 0.35, "rtx-4090"},
		{"cheapest of a mix", []terms.GPU{{Model: "H200", VRAMGB: 141}, {Model: "L4", VRAMGB: 24}}, 0.25, "l4"},
		{"unknown by vram", []terms.GPU{{Model: "Acme Turbo 9000", VRAMGB: 32}}, 0.26, "not in the table"},
		{"none", nil, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := suggestFloor(tc.gpus)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("got %v (%s), want %v (%s)", got, why, tc.want, tc.why)
			}
		})
	}
}
