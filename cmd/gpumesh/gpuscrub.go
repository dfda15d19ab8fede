package main

import (
	"encoding/json"

	"github.com/gpumesh/gpumesh/runtime"
	"github.com/gpumesh/gpumesh/runtime/cuda"
	"github.com/urfave/cli/v2"
)

// gpuScrubCommand is the provider daemon's child for clearing GPU memory
// between leases (runtime.NewScrubber runs it): it zeroes the free memory
// of each named device through CUDA and prints one JSON report per
// device. Hidden: the daemon runs it, people need not.
func gpuScrubCommand() *cli.Command {
	return &cli.Command{
		Name:   "gpu-scrub",
		Usage:  "zero the free memory of GPUs (run by the provider daemon after each lease)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "device", Usage: "device UUID (repeatable)", Required: true},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			var out []runtime.DeviceScrub
			for _, d := range c.StringSlice("device") {
				zeroed, total, err := cuda.Scrub(d)
				r := runtime.DeviceScrub{Device: d, Zeroed: zeroed, Total: total}
				if err != nil {
					r.Err = err.Error()
				}
				out = append(out, r)
			}
			return json.NewEncoder(c.App.Writer).Encode(out)
		},
	}
}
