package replay

import (
	"math"
	"sort"
)

// fluidBound is the most GPU-seconds any schedule could lease by the
// horizon, in a relaxation that lets work run on any idle GPU anywhere, split
// across any number of GPUs, and be paused and resumed at no cost, but never
// before the job arrives. Only jobs that fit some provider (placeable) count,
// each for the GPUs it leases: a slice its fraction of one, a gang all its
// members'. At every instant a real schedule leases at most the idle GPUs on
// offer, C(t), and only work that has arrived; serving the arrived backlog
// as fast as C(t) allows maximises the work done by every time t, so the
// result is a valid upper bound on the fill of every policy.
//
// A gang's members run at once on distinct providers, so its work can only
// run while enough providers are for sale together: the bound lets gang
// work run only while at least gangProviders (the fewest members of any
// gang) providers each offer at least the fewest GPUs any gang member asks
// for, a superset of the times any gang could run. Gang work is served
// first in those times (ordinary work can run at any other time too), which
// keeps the greedy serving optimal, so the bound stays valid. It also
// returns the bound's GPU-seconds per chart bucket.
func fluidBound(w *world, offeredAt []capStep) (total float64, perBucket []float64) {
	type arrival struct {
		at   int64
		work float64
		gang bool
	}
	var arr []arrival
	minNodes, minGPUs := 0, 0
	for i, j := range w.jobs {
		if !w.placeable[i] {
			continue
		}
		at := int64(j.CreatedAt.Sub(Epoch).Seconds())
		gang := w.shapes[i].nodes > 1
		arr = append(arr, arrival{at, w.jobGPUs(i) * j.Duration.Seconds(), gang})
		if gang {
			if minNodes == 0 || w.shapes[i].nodes < minNodes {
				minNodes = w.shapes[i].nodes
			}
			if minGPUs == 0 || j.GPUCount < minGPUs {
				minGPUs = j.GPUCount
			}
		}
	}
	sort.Slice(arr, func(a, b int) bool { return arr[a].at < arr[b].at })
	var gangOK []capStep // gpus > 0: gang work may run
	if minNodes > 0 {
		gangOK = providersCurve(w, minGPUs)
		for k := range gangOK {
			gangOK[k].gpus = btoi(gangOK[k].gpus >= minNodes)
		}
	}
	steps := mergeSteps(offeredAt, gangOK)
	nb := (w.horizon + w.bucket - 1) / w.bucket
	perBucket = make([]float64, nb)
	var backlog, gangBacklog float64
	ai := 0
	// Walk the steps; within a step capacity and gang feasibility are
	// constant, so serve the backlogs between consecutive arrivals.
	for k, st := range steps {
		end := w.horizon
		if k+1 < len(steps) {
			end = steps[k+1].at
		}
		t := st.at
		for t < end {
			for ai < len(arr) && arr[ai].at <= t {
				if arr[ai].gang {
					gangBacklog += arr[ai].work
				} else {
					backlog += arr[ai].work
				}
				ai++
			}
			next := end
			if ai < len(arr) && arr[ai].at < next {
				next = arr[ai].at
			}
			if st.gpus > 0 {
				room := float64(st.gpus) * float64(next-t)
				served := 0.0
				if st.gang {
					g := min(gangBacklog, room)
					gangBacklog -= g
					served += g
				}
				n := min(backlog, room-served)
				backlog -= n
				served += n
				total += served
				// The backlogs drain at full rate from t, so the served
				// seconds are [t, t+served/gpus).
				addSpan(perBucket, w.bucket, t, t+int64(served/float64(st.gpus)+0.5), float64(st.gpus))
			}
			t = next
		}
	}
	return total, perBucket
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// boundStep is a step of the bound's inputs: from at on, gpus are for sale
// and gang work may run or not (until the next step).
type boundStep struct {
	at   int64
	gpus int
	gang bool
}

// mergeSteps merges the offered-capacity curve with the gang feasibility
// curve (nil: gangs never run) into one step function.
func mergeSteps(capacity, gang []capStep) []boundStep {
	var out []boundStep
	i, k := 0, 0
	cur := boundStep{}
	for i < len(capacity) || k < len(gang) {
		at := int64(math.MaxInt64)
		if i < len(capacity) {
			at = capacity[i].at
		}
		if k < len(gang) && gang[k].at < at {
			at = gang[k].at
		}
		for i < len(capacity) && capacity[i].at == at {
			cur.gpus = capacity[i].gpus
			i++
		}
		for k < len(gang) && gang[k].at == at {
			cur.gang = gang[k].gpus > 0
			k++
		}
		cur.at = at
		if n := len(out); n > 0 && out[n-1].at == at {
			out[n-1] = cur
		} else {
			out = append(out, cur)
		}
	}
	return out
}

// providersCurve counts, as a step function over [0, horizon), the
// providers with at least gpus GPUs in a sellable span.
func providersCurve(w *world, gpus int) []capStep {
	return stepCurve(w, func(i int) int { return btoi(len(w.provs[i].Capability.GPUs) >= gpus) })
}

// capStep is a step of the offered idle-GPU curve: from at on, gpus are for
// sale (until the next step).
type capStep struct {
	at   int64
	gpus int
}

// capacityCurve sums all providers' sellable spans into a step function
// over [0, horizon).
func capacityCurve(w *world) []capStep {
	return stepCurve(w, func(i int) int { return len(w.provs[i].Capability.GPUs) })
}

// stepCurve sums weight(provider) over the providers' sellable spans into
// a step function over [0, horizon).
func stepCurve(w *world, weight func(i int) int) []capStep {
	type delta struct {
		at int64
		d  int
	}
	var ds []delta
	for i, sp := range w.spans {
		g := weight(i)
		if g == 0 {
			continue
		}
		for _, s := range sp {
			lo, hi := max(s.start, 0), min(s.end, w.horizon)
			if hi <= lo {
				continue
			}
			ds = append(ds, delta{lo, g}, delta{hi, -g})
		}
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a].at < ds[b].at })
	out := []capStep{{0, 0}}
	cur := 0
	for _, d := range ds {
		cur += d.d
		if out[len(out)-1].at == d.at {
			out[len(out)-1].gpus = cur
		} else {
			out = append(out, capStep{d.at, cur})
		}
	}
	return out
}

// addSpan adds rate×overlap of [from, to) to each bucket.
func addSpan(buckets []float64, width, from, to int64, rate float64) {
	for b := from / width; b*width < to && int(b) < len(buckets); b++ {
		lo, hi := max(from, b*width), min(to, (b+1)*width)
		if hi > lo {
			buckets[b] += rate * float64(hi-lo)
		}
	}
}
