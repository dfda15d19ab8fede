package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/attest"
)

// GPU memory scrubbing between tenants: after a lease, the provider zeroes
// the free memory of the devices it used before they are offered again,
// so the next tenant cannot read what the last one left in device memory.

// ScrubReport is what scrubbing a lease's devices did.
type ScrubReport struct {
	// Method is "cuda" (zeroed through the driver) or "none" (declared
	// GPUs: no device memory to clear).
	Method  string        `json:"method"`
	Devices []DeviceScrub `json:"devices,omitempty"`
	Took    time.Duration `json:"took,omitempty"`
	Err     string        `json:"error,omitempty"`
}

// DeviceScrub is one device's scrub.
type DeviceScrub struct {
	Device string `json:"device"`
	Zeroed uint64 `json:"zeroed"` // bytes
	Total  uint64 `json:"total"`
	Err    string `json:"error,omitempty"`
}

// OK reports whether every device was scrubbed (or there was nothing to).
func (r ScrubReport) OK() bool {
	if r.Err != "" {
		return false
	}
	for _, d := range r.Devices {
		if d.Err != "" {
			return false
		}
	}
	return true
}

// Statement is what a lease's receipt says of this scrub
// (attest.Receipt.Scrub): zeroed, none-declared (no device memory to
// clear), or failed and why.
func (r ScrubReport) Statement() string {
	switch {
	case !r.OK():
		why := r.Err
		for _, d := range r.Devices {
			if d.Err != "" {
				why = strings.TrimPrefix(why+"; ", "; ") + d.Device + ": " + d.Err
			}
		}
		return attest.ScrubFailure(why)
	case r.Method == "none":
		return attest.ScrubNoneDeclared
	}
	return attest.ScrubZeroed
}

// Scrubber clears devices' memory between leases. devices are the
// inventory's device names (ChallengeDevice: UUIDs on NVML hosts).
type Scrubber interface {
	Scrub(ctx context.Context, devices []string) ScrubReport
}

// NewScrubber is the inventory's scrubber: on NVML-detected GPUs a child
// process (this binary's hidden `gpu-scrub` command) zeroes each device
// through CUDA, so a driver fault cannot take the daemon down and the
// daemon never holds a device context; declared GPUs have nothing to
// scrub.
func NewScrubber(inv Inventory) Scrubber {
	if _, real := inv.lib.(realNVML); inv.Source != SourceNVML || !real {
		// Declared GPUs, or a simulated NVML host (tests): no device
		// memory to clear, and no CUDA device to clear it on.
		return noScrub{}
	}
	bin, err := os.Executable()
	if err != nil {
		return failedScrub{err: fmt.Sprintf("cannot find the gpumesh binary to scrub with: %v", err)}
	}
	return childScrub{bin: bin}
}

type noScrub struct{}

func (noScrub) Scrub(context.Context, []string) ScrubReport { return ScrubReport{Method: "none"} }

type failedScrub struct{ err string }

func (f failedScrub) Scrub(context.Context, []string) ScrubReport {
	return ScrubReport{Method: "cuda", Err: f.err}
}

// ScrubTimeout bounds one lease's scrub (the lease's final report waits
// for it).
const ScrubTimeout = time.Minute

type childScrub struct{ bin string }

func (c childScrub) Scrub(ctx context.Context, devices []string) ScrubReport {
	rep := ScrubReport{Method: "cuda"}
	if len(devices) == 0 {
		return rep
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, ScrubTimeout)
	defer cancel()
	args := []string{"gpu-scrub"}
	for _, d := range devices {
		args = append(args, "--device", d)
	}
	out, err := exec.CommandContext(ctx, c.bin, args...).Output()
	rep.Took = time.Since(start)
	if err != nil {
		rep.Err = fmt.Sprintf("gpu-scrub: %v", err)
		return rep
	}
	if err := json.Unmarshal(out, &rep.Devices); err != nil {
		rep.Err = fmt.Sprintf("gpu-scrub: bad answer: %v", err)
	}
	return rep
}
