package replay

import "sort"

// fluidBound is the most GPU-seconds any schedule could lease by the
// horizon, in a relaxation that lets work run on any idle GPU anywhere, split
// across any number of GPUs, and be paused and resumed at no cost, but never
// before the job arrives. Only jobs that fit some provider (placeable) count.
// At every instant a real schedule leases at most the idle GPUs on offer,
// C(t), and only work that has arrived; serving the arrived backlog as fast
// as C(t) allows maximises the work done by every time t, so the result is a
// valid upper bound on the fill of every policy. It also returns the bound's
// GPU-seconds per chart bucket.
func fluidBound(w *world, offeredAt []capStep) (total float64, perBucket []float64) {
	type arrival struct {
		at   int64
		work float64
	}
	var arr []arrival
	for i, j := range w.jobs {
		if !w.placeable[i] {
			continue
		}
		at := int64(j.CreatedAt.Sub(Epoch).Seconds())
		arr = append(arr, arrival{at, float64(j.GPUCount) * j.Duration.Seconds()})
	}
	sort.Slice(arr, func(a, b int) bool { return arr[a].at < arr[b].at })
	nb := (w.horizon + w.bucket - 1) / w.bucket
	perBucket = make([]float64, nb)
	backlog := 0.0
	ai := 0
	// Walk the capacity steps; within a step capacity is constant, so serve
	// the backlog between consecutive arrivals.
	for k, st := range offeredAt {
		end := w.horizon
		if k+1 < len(offeredAt) {
			end = offeredAt[k+1].at
		}
		t := st.at
		for t < end {
			for ai < len(arr) && arr[ai].at <= t {
				backlog += arr[ai].work
				ai++
			}
			next := end
			if ai < len(arr) && arr[ai].at < next {
				next = arr[ai].at
			}
			if st.gpus > 0 && backlog > 0 {
				served := min(backlog, float64(st.gpus)*float64(next-t))
				backlog -= served
				total += served
				// The backlog drains at full rate from t, so the served
				// seconds are [t, t+served/gpus).
				addSpan(perBucket, w.bucket, t, t+int64(served/float64(st.gpus)+0.5), float64(st.gpus))
			}
			t = next
		}
	}
	return total, perBucket
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
	type delta struct {
		at int64
		d  int
	}
	var ds []delta
	for i, sp := range w.spans {
		g := len(w.provs[i].Capability.GPUs)
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
