package gpumodel

import (
	"fmt"
	"testing"
)

// TestIdentifyNVMLNames maps device names exactly as NVML's
// nvmlDeviceGetName reports them (datacenter, workstation, consumer and
// Tesla-era boards) to their canonical model keys.
func TestIdentifyNVMLNames(t *testing.T) {
	cases := []struct{ nvml, key string }{
		{"NVIDIA H100 80GB HBM3", "h100-sxm-80g"},
		{"NVIDIA H100 PCIe", "h100-pcie-80g"},
		{"NVIDIA H100 NVL", "h100-nvl-94g"},
		{"NVIDIA H200", "h200-sxm-141g"},
		{"NVIDIA H200 NVL", "h200-nvl-141g"},
		{"NVIDIA H800", "h800-80g"},
		{"NVIDIA GH200 480GB", "gh200-480g"},
		{"NVIDIA B200", "b200-180g"},
		{"NVIDIA A100-SXM4-80GB", "a100-sxm-80g"},
		{"NVIDIA A100-SXM4-40GB", "a100-sxm-40g"},
		{"NVIDIA A100-PCIE-40GB", "a100-pcie-40g"},
		{"NVIDIA A100 80GB PCIe", "a100-pcie-80g"},
		{"NVIDIA A800-SXM4-80GB", "a800-sxm-80g"},
		{"NVIDIA A40", "a40-48g"},
		{"NVIDIA A30", "a30-24g"},
		{"NVIDIA A10", "a10-24g"},
		{"NVIDIA A10G", "a10g-24g"},
		{"NVIDIA A16", "a16-16g"},
		{"NVIDIA A2", "a2-16g"},
		{"NVIDIA L40S", "l40s-48g"},
		{"NVIDIA L40", "l40-48g"},
		{"NVIDIA L4", "l4-24g"},
		{"Tesla T4", "t4-16g"},
		{"Tesla V100-SXM2-16GB", "v100-sxm-16g"},
		{"Tesla V100-SXM2-32GB", "v100-sxm-32g"},
		{"Tesla V100-PCIE-32GB", "v100-pcie-32g"},
		{"Tesla V100S-PCIE-32GB", "v100s-32g"},
		{"Tesla P100-PCIE-16GB", "p100-16g"},
		{"Tesla P40", "p40-24g"},
		{"Tesla P4", "p4-8g"},
		{"Tesla K80", "k80-12g"},
		{"Tesla M60", "m60-8g"},
		{"NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada-48g"},
		{"NVIDIA RTX 4000 SFF Ada Generation", "rtx-4000-ada-20g"},
		{"NVIDIA RTX A6000", "rtx-a6000-48g"},
		{"NVIDIA RTX A4000", "rtx-a4000-16g"},
		{"Quadro RTX 8000", "quadro-rtx-8000-48g"},
		{"Quadro RTX 6000", "quadro-rtx-6000-24g"},
		{"NVIDIA TITAN RTX", "titan-rtx-24g"},
		{"NVIDIA GeForce RTX 5090", "rtx-5090-32g"},
		{"NVIDIA GeForce RTX 4090", "rtx-4090-24g"},
		{"NVIDIA GeForce RTX 4090 D", "rtx-4090-24g"},
		{"NVIDIA GeForce RTX 4080 SUPER", "rtx-4080-super-16g"},
		{"NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super-16g"},
		{"NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti-12g"},
		{"NVIDIA GeForce RTX 4060 Laptop GPU", "rtx-4060-8g"},
		{"NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti-24g"},
		{"NVIDIA GeForce RTX 3090", "rtx-3090-24g"},
		{"NVIDIA GeForce RTX 3080", "rtx-3080"},
		{"NVIDIA GeForce RTX 3060", "rtx-3060"},
		{"NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti-11g"},
		{"NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti-11g"},
		{"NVIDIA GeForce GTX 1660 SUPER", "gtx-1660-6g"},
	}
	if len(cases) < 25 {
		t.Fatalf("only %d names", len(cases))
	}
	for _, c := range cases {
		t.Run(c.nvml, func(t *testing.T) {
			m := Identify(c.nvml)
			if !m.Known || m.Key() != c.key {
				t.Fatalf("Identify(%q) = %+v (key %q), want key %q", c.nvml, m, m.Key(), c.key)
			}
			// The canonical key reads back as the same model.
			if back := Identify(m.Key()); back != m {
				t.Fatalf("Identify(%q) = %+v, want %+v", m.Key(), back, m)
			}
		})
	}
}

// TestHumanSpellingsReachOneFamily: what people type and what providers
// declare lands on one family key, so topics and DHT keys never split.
func TestHumanSpellingsReachOneFamily(t *testing.T) {
	cases := []struct {
		family string
		names  []string
	}{
		{"h100", []string{"h100", "H100", "H100-80G", "h100 sxm", "H100_PCIe", "NVIDIA H100 80GB HBM3"}},
		{"rtx-4090", []string{"RTX 4090", "RTX4090", "rtx 4090", "rtx_4090", "4090", "GeForce RTX 4090", "rtx-4090"}},
		{"a100", []string{"A100", "a100-80gb", "A100 40GB", "NVIDIA A100-SXM4-80GB"}},
		{"rtx-6000-ada", []string{"RTX 6000 Ada", "rtx6000 ada", "NVIDIA RTX 6000 Ada Generation"}},
		{"t4", []string{"T4", "t4", "Tesla T4"}},
	}
	for _, c := range cases {
		for _, n := range c.names {
			t.Run(n, func(t *testing.T) {
				if got := FamilyOf(n); got != c.family {
					t.Fatalf("FamilyOf(%q) = %q, want %q", n, got, c.family)
				}
			})
		}
	}
}

// TestRequestsMatchByFamilyOrVariant: "H100" matches every H100; naming a
// variant or a memory size narrows it.
func TestRequestsMatchByFamilyOrVariant(t *testing.T) {
	devices := []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-40GB",
		"NVIDIA A100 80GB PCIe", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060"}
	cases := []struct {
		want  string
		match []string
	}{
		{"H100", devices[0:3]},
		{"h100-sxm", devices[0:1]},
		{"H100 PCIe", devices[1:2]},
		{"h100 nvl", devices[2:3]},
		{"A100", devices[3:5]},
		{"a100 80gb", devices[4:5]},
		{"A100-40G", devices[3:4]},
		{"4090", devices[5:6]},
		{"RTX3060", devices[6:7]},
		{"L40S", nil},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			want := map[string]bool{}
			for _, d := range c.match {
				want[d] = true
			}
			for _, d := range devices {
				if got := Match(d, c.want); got != want[d] {
					t.Errorf("Match(%q, %q) = %v, want %v", d, c.want, got, want[d])
				}
			}
		})
	}
}

// TestUnknownModelsWorkByExactName: a model the catalogue lacks is shown as
// unknown and matched by its exact (normalised) name only.
func TestUnknownModelsWorkByExactName(t *testing.T) {
	m := Identify("AMD Instinct MI300X")
	if m.Known || m.Family != "amd-instinct-mi300x" || m.String() != "unknown (amd-instinct-mi300x)" {
		t.Fatalf("Identify = %+v (%s)", m, m)
	}
	if !Match("AMD Instinct MI300X", "amd instinct mi300x") || Match("AMD Instinct MI300X", "MI300X") ||
		Match("AMD Instinct MI300X", "H100") {
		t.Fatal("unknown models must match by exact normalised name only")
	}
	if got := Identify(""); got != (Model{}) {
		t.Fatalf("Identify(\"\") = %+v", got)
	}
}

func TestDisplay(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA H100 PCIe":        "H100 PCIe 80GB",
		"NVIDIA GeForce RTX 4090": "RTX 4090 24GB",
		"NVIDIA GeForce RTX 3060": "RTX 3060",
		"Tesla V100-SXM2-32GB":    "V100 SXM 32GB",
	} {
		t.Run(name, func(t *testing.T) {
			if got := Identify(name).String(); got != want {
				t.Fatalf("String() = %q, want %q", got, want)
			}
		})
	}
}

// TestParseMemoIsBounded: names from the network cannot grow the memo past
// its bound, and a memoised answer is the parse's own.
func TestParseMemoIsBounded(t *testing.T) {
	for i := 0; i < 2*maxParsed+10; i++ {
		Identify(fmt.Sprintf("made-up gpu %d", i))
	}
	parsed.Lock()
	n := len(parsed.m)
	parsed.Unlock()
	if n > maxParsed {
		t.Fatalf("memo holds %d names, bound %d", n, maxParsed)
	}
	for _, name := range []string{"NVIDIA H100 80GB HBM3", "rtx4090", "Tesla T4"} {
		if a, b := Identify(name), parseName(name, true); a != b {
			t.Fatalf("Identify(%q) = %+v, parse gives %+v", name, a, b)
		}
		if a, b := Request(name), parseName(name, false); a != b {
			t.Fatalf("Request(%q) = %+v, parse gives %+v", name, a, b)
		}
	}
}

func TestPeakInt32TOPS(t *testing.T) {
	h200, ok := PeakInt32TOPS(Identify("NVIDIA H200"))
	t4, ok2 := PeakInt32TOPS(Identify("Tesla T4"))
	if !ok || !ok2 || h200 <= t4 || t4 <= 0 {
		t.Fatalf("H200 %v (%v), T4 %v (%v): want both known, H200 faster", h200, ok, t4, ok2)
	}
	if _, ok := PeakInt32TOPS(Identify("Some Future GPU 9000")); ok {
		t.Fatal("an unknown model has a rate")
	}
	if _, ok := PeakInt32TOPS(Identify("B200")); ok {
		t.Fatal("a family without a figure has a rate")
	}
}

// TestDeviceMemoryFillsTheSize: a device's memory sizes a model its name
// leaves open (a declared "A100" of 80 GB is what "A100 80GB" asks for,
// and no 40 GB request matches it), while a size the name gives, or the
// catalogue's within rounding of the memory, stands.
func TestDeviceMemoryFillsTheSize(t *testing.T) {
	cases := []struct {
		name string
		mem  int
		key  string
	}{
		{"A100", 80, "a100-80g"},
		{"A100", 40, "a100-40g"},
		{"A100", 0, "a100"},
		{"A100 PCIe", 80, "a100-pcie-80g"},            // the catalogue says 40: the device says otherwise
		{"NVIDIA A100-SXM4-40GB", 80, "a100-sxm-40g"}, // the name says
		{"Tesla T4", 15, "t4-16g"},                    // NVML's 15 GiB of a 16 GB card
		{"NVIDIA H100 80GB HBM3", 79, "h100-sxm-80g"},
		{"RTX 3080", 12, "rtx-3080-12g"},
		{"AMD Instinct MI300X", 192, "amd-instinct-mi300x-192g"},
	}
	for _, c := range cases {
		if got := Device(c.name, c.mem).Key(); got != c.key {
			t.Errorf("Device(%q, %d).Key() = %q, want %q", c.name, c.mem, got, c.key)
		}
	}
	a100 := Device("A100", 80)
	if !a100.Matches(Request("A100 80GB")) || !a100.Matches(Request("A100")) || a100.Matches(Request("A100 40GB")) {
		t.Fatalf("a declared 80 GB A100 (%+v) must match A100 and A100 80GB, not A100 40GB", a100)
	}
}

// TestNearest: an unknown name is answered with the catalogue's closest
// names, a known one with none, and nonsense with none.
func TestNearest(t *testing.T) {
	for _, c := range []struct {
		name string
		want string // the first suggestion; "" for none
	}{
		{"H1000", "H100"},
		{"RTX 4900", "RTX 4090"},
		{"a10O", "A100"},
		{"H100", ""},
		{"rtx-4090", ""},
		{"zzzzzzzzzz", ""},
		{"", ""},
	} {
		got := Nearest(c.name, 3)
		if (c.want == "") != (len(got) == 0) || (len(got) > 0 && got[0] != c.want) || len(got) > 3 {
			t.Errorf("Nearest(%q) = %q, want first %q", c.name, got, c.want)
		}
	}
}
