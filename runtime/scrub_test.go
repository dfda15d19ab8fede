package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDeclaredGPUsHaveNothingToScrub(t *testing.T) {
	rep := NewScrubber(Inventory{Source: SourceDeclared}).Scrub(context.Background(), []string{"0"})
	if rep.Method != "none" || !rep.OK() || len(rep.Devices) != 0 {
		t.Fatalf("declared GPUs: %+v, want method none, nothing scrubbed", rep)
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
