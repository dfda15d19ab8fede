package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/attest"
)

// TestOnlyRealNVMLIsScrubbed: declared GPUs and a simulated NVML host have
// nothing to scrub; only the real driver's devices get the CUDA child
// (which, in a test, would run the test binary itself).
func TestOnlyRealNVMLIsScrubbed(t *testing.T) {
	sim, err := DetectGPUsFrom(NewSimulatedGPUs("550.54.15", SimulatedGPU{Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-1", MemTotalMB: 81559}),
		GPUSourceNVML, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, inv := range map[string]Inventory{"declared": {Source: SourceDeclared}, "simulated NVML": sim} {
		rep := NewScrubber(inv).Scrub(context.Background(), []string{"0"})
		if rep.Method != "none" || !rep.OK() || len(rep.Devices) != 0 {
			t.Fatalf("%s GPUs: %+v, want method none, nothing scrubbed", name, rep)
		}
	}
	if _, ok := NewScrubber(Inventory{Source: SourceNVML, lib: realNVML{}}).(childScrub); !ok {
		t.Fatal("the real driver's devices are not scrubbed through the CUDA child")
	}
}

// TestChildScrub: the NVML scrubber runs its binary's gpu-scrub with each
// device and reads its JSON answer; a failing or garbled child is a failed
// scrub, never a silent success.
func TestChildScrub(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The stand-in echoes its arguments into the report, so the test sees
	// what it was asked.
	good := script("good", `echo "[{\"device\":\"$3\",\"zeroed\":1024,\"total\":2048},{\"device\":\"$5\",\"zeroed\":1,\"total\":2,\"error\":\"$1\"}]"`)
	rep := childScrub{bin: good}.Scrub(context.Background(), []string{"GPU-a", "GPU-b"})
	if rep.Err != "" || len(rep.Devices) != 2 || rep.Devices[0].Device != "GPU-a" || rep.Devices[0].Zeroed != 1024 {
		t.Fatalf("report %+v", rep)
	}
	if rep.OK() || rep.Devices[1].Err != "gpu-scrub" || rep.Devices[1].Device != "GPU-b" {
		t.Fatalf("a device error must fail the scrub: %+v", rep)
	}
	for name, body := range map[string]string{"exits": "exit 3", "garbled": "echo not json"} {
		rep := childScrub{bin: script(name, body)}.Scrub(context.Background(), []string{"GPU-a"})
		if rep.OK() || !strings.Contains(rep.Err, "gpu-scrub") {
			t.Fatalf("%s child: %+v, want a failed scrub", name, rep)
		}
	}
}

// TestScrubStatement: what a receipt says of a scrub follows the report:
// zeroed when every device was, none-declared for declared GPUs, failed
// with the reason (the whole report's, then each failed device's)
// otherwise, never zeroed for a failure.
func TestScrubStatement(t *testing.T) {
	cases := []struct {
		rep  ScrubReport
		want string
	}{
		{ScrubReport{Method: "cuda", Devices: []DeviceScrub{{Device: "GPU-a", Zeroed: 1, Total: 1}}}, attest.ScrubZeroed},
		{ScrubReport{Method: "none"}, attest.ScrubNoneDeclared},
		{ScrubReport{Method: "cuda", Err: "gpu-scrub: exit status 3"}, "failed: gpu-scrub: exit status 3"},
		{ScrubReport{Method: "cuda", Devices: []DeviceScrub{{Device: "GPU-a"}, {Device: "GPU-b", Err: "out of memory"}}},
			"failed: GPU-b: out of memory"},
		{ScrubReport{Method: "none", Err: "timeout", Devices: []DeviceScrub{{Device: "0", Err: "busy"}}}, "failed: timeout; 0: busy"},
	}
	for _, c := range cases {
		if got := c.rep.Statement(); got != c.want {
			t.Errorf("%+v: statement %q, want %q", c.rep, got, c.want)
		}
	}
}
