package runtime

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// SliceRules is the slicing a provider with devices gpus sells: the
// owner's rules (configured, provider.policy.slices) for devices not in
// MIG mode, and for each device in MIG mode its MIG instances, one slice
// each, whatever the rules say of it: they are the partition the owner
// made with nvidia-smi, which the runtime neither creates nor changes. A
// device in MIG mode with one instance is sold whole (as that instance);
// with none, or with a count the calendar cannot cut a device into
// (terms.SliceCounts: 2, 4 or 8), it is not sold, and log says why.
func SliceRules(gpus []terms.GPU, configured []terms.SliceRule, log *slog.Logger) []terms.SliceRule {
	if !slices.ContainsFunc(gpus, func(g terms.GPU) bool { return g.MIG.Partitioned() }) {
		return configured
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	counts := terms.Policy{Slices: configured}.SliceMap()
	for i, g := range gpus {
		if !g.MIG.Partitioned() {
			continue
		}
		n, was := len(g.MIG.Instances), counts[i]
		delete(counts, i)
		switch {
		case slices.Contains(terms.SliceCounts, n):
			counts[i] = n
			if was != n {
				log.Info("GPU in MIG mode: sold in slices of one MIG instance each", "gpu", i, "instances", n, "configured_slices", was)
			}
		case n == 1:
			log.Info("GPU in MIG mode with one instance: sold whole, as that instance", "gpu", i)
		default:
			log.Warn("GPU in MIG mode not sold: slices need 2, 4 or 8 MIG instances (a whole GPU one); repartition with nvidia-smi mig",
				"gpu", i, "instances", n)
		}
	}
	byCount := map[int][]int{}
	for d, n := range counts {
		byCount[n] = append(byCount[n], d)
	}
	var out []terms.SliceRule
	for _, n := range terms.SliceCounts {
		if ds := byCount[n]; len(ds) > 0 {
			sort.Ints(ds)
			out = append(out, terms.SliceRule{Devices: ds, Count: n})
			delete(byCount, n)
		}
	}
	// Counts the calendar refuses stay, for it to say so (SetSlices).
	for n, ds := range byCount {
		sort.Ints(ds)
		out = append(out, terms.SliceRule{Devices: ds, Count: n})
	}
	return out
}

// LeaseUUIDs names the devices of a lease on devices gpus for its job: one
// UUID per leased device (nil when some device has none: declared GPUs,
// which jobs then see by index). A device in MIG mode is named by the MIG
// instance the lease holds, never the device itself: a slice lease's one
// booked slice (slices, the calendar's: slice k is instance k), a whole
// lease's device's only instance. It is an error when that instance
// cannot be named, for the job must then not start.
func LeaseUUIDs(gpus []terms.GPU, devices []int, fraction float64, slices []int) ([]string, error) {
	out := make([]string, 0, len(devices))
	for _, d := range devices {
		if d < 0 || d >= len(gpus) {
			return nil, nil
		}
		g := gpus[d]
		if !g.MIG.Partitioned() {
			if g.UUID == "" {
				return nil, nil
			}
			out = append(out, g.UUID)
			continue
		}
		k := 0
		switch {
		case fraction > 0 && len(slices) != 1:
			return nil, fmt.Errorf("runtime: gpu %d is in MIG mode: a slice lease must hold one slice (one instance), it holds %v", d, slices)
		case fraction > 0:
			k = slices[0]
		case len(g.MIG.Instances) != 1:
			return nil, fmt.Errorf("runtime: gpu %d is in MIG mode with %d instances: a whole-GPU lease needs exactly one", d, len(g.MIG.Instances))
		}
		if k < 0 || k >= len(g.MIG.Instances) {
			return nil, fmt.Errorf("runtime: gpu %d is in MIG mode: slice %d has no MIG instance (%d instances)", d, k, len(g.MIG.Instances))
		}
		out = append(out, g.MIG.Instances[k].UUID)
	}
	return out, nil
}
