package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/runtime"
	"github.com/gpumesh/gpumesh/runtime/cuda"
)

// TestGPUScrubWithoutDriver: where no CUDA driver loads, the daemon's
// scrub child reports each device's error instead of claiming success.
func TestGPUScrubWithoutDriver(t *testing.T) {
	if cuda.Load() == nil {
		t.Skip("a CUDA driver is present: testnet/gpu-check.sh checks the scrub on the device")
	}
	var out bytes.Buffer
	var unknown bool
	app := newApp(&out, &out, &unknown)
	if err := app.Run([]string{"gpumesh", "gpu-scrub", "--device", "GPU-x", "--device", "GPU-y"}); err != nil {
		t.Fatal(err)
	}
	var rep []runtime.DeviceScrub
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("answer %q: %v", out.String(), err)
	}
	if len(rep) != 2 || rep[1].Device != "GPU-y" || !strings.Contains(rep[0].Err, "unavailable") {
		t.Fatalf("report %+v, want both devices with the driver's absence", rep)
	}
}
