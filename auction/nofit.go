package auction

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpumesh/gpumesh/auction/gpumodel"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// misfitOrder is the order of StaticFit's rules, by kind.
var misfitOrder = []string{"excluded", "region", "workload", "preemptible", "sealed", "no_persist", "image", "gpu_model", "slices", "isolation", "vram", "gpu_count", "price"}

// NoneFits is a renter's verdict on whether any provider it knows could
// ever run job, given their capability records caps: nil when caps is
// empty or one of them fits job (a gang's member: Job.Nodes of them);
// else one line naming why. A rule every
// known provider fails (a GPU model none has, a region none is in) is
// named with what the providers offer instead; when no rule fails
// everywhere (each provider misses something else), the reasons of the
// closest providers (those failing the fewest rules) are named, with how
// many of them each rules out.
func NoneFits(caps []terms.Capability, job *terms.Job) error {
	if len(caps) == 0 {
		return nil
	}
	all := make([][]*Ineligible, len(caps))
	fewest, fit := -1, 0
	for i := range caps {
		all[i] = StaticMisfits(&caps[i], job)
		if len(all[i]) == 0 {
			if fit++; fit >= max(job.Nodes, 1) {
				return nil
			}
			continue
		}
		if fewest < 0 || len(all[i]) < fewest {
			fewest = len(all[i])
		}
	}
	if fit > 0 {
		// A gang whose members fit too few providers.
		return fmt.Errorf(
			"no known providers can run this job (%d known): a gang of %d needs %d providers, %d could run a member; post it with --queue to wait for providers that may appear",
			len(caps), job.Nodes, job.Nodes, fit)
	}
	everywhere := map[string]int{} // kind: providers failing it
	closest := map[string]int{}    // kind: closest providers failing it
	first := map[string]*Ineligible{}
	for _, ms := range all {
		for _, m := range ms {
			everywhere[m.Kind]++
			if len(ms) == fewest {
				closest[m.Kind]++
			}
			if first[m.Kind] == nil {
				first[m.Kind] = m
			}
		}
	}
	var reasons []string
	for _, k := range misfitKinds(everywhere) {
		if everywhere[k] == len(caps) {
			reasons = append(reasons, misfitReason(k, first[k], caps, job))
		}
	}
	if len(reasons) == 0 {
		for _, k := range misfitKinds(closest) {
			reasons = append(reasons, fmt.Sprintf("%s (%d provider(s))", firstOf(all, k, fewest).Reason, closest[k]))
		}
		reasons[0] = fmt.Sprintf("none meets all its constraints; the closest miss %d: %s", fewest, reasons[0])
	}
	return fmt.Errorf(
		"no known provider can run this job (%d known): %s; post it with --queue to wait for providers that may appear",
		len(caps), strings.Join(reasons, "; "))
}

// misfitKinds is the kinds counted in m, in StaticFit's order.
func misfitKinds(m map[string]int) []string {
	var out []string
	for _, k := range misfitOrder {
		if m[k] > 0 {
			out = append(out, k)
		}
	}
	var other []string
	for k := range m {
		if !slices.Contains(misfitOrder, k) {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	return append(out, other...)
}

// firstOf is the first misfit of kind among the providers failing n rules.
func firstOf(all [][]*Ineligible, kind string, n int) *Ineligible {
	for _, ms := range all {
		for _, m := range ms {
			if len(ms) == n && m.Kind == kind {
				return m
			}
		}
	}
	return nil
}

// misfitReason says what no known provider offers for rule kind, with what
// they offer instead.
func misfitReason(kind string, in *Ineligible, caps []terms.Capability, job *terms.Job) string {
	switch kind {
	case "region":
		return fmt.Sprintf("no provider in region '%s' (known: %s)", job.Region,
			known(caps, func(c *terms.Capability) []string { return []string{c.Region} }))
	case "gpu_model":
		// A name no catalogue lists is most likely a typo: say which
		// models it is closest to.
		var unknown []string
		for _, m := range job.GPUModels {
			if near := gpumodel.Nearest(m, 3); len(near) > 0 {
				unknown = append(unknown, fmt.Sprintf("'%s' is not a GPU model gpumesh knows; did you mean %s?", m, strings.Join(near, ", ")))
			}
		}
		why := fmt.Sprintf("no known provider has GPU model '%s' (known: %s)", strings.Join(job.GPUModels, "' or '"),
			known(caps, func(c *terms.Capability) []string {
				var ms []string
				for _, g := range c.GPUs {
					ms = append(ms, g.Model)
				}
				return ms
			}))
		return strings.Join(append(unknown, why), "; ")
	case "vram":
		most := 0
		for _, c := range caps {
			for _, g := range c.GPUs {
				if job.AcceptsGPU(g) && g.VRAMGB > most {
					most = g.VRAMGB
				}
			}
		}
		if job.GPUFraction > 0 {
			return fmt.Sprintf("no known provider has %s GPUs whose %v slice has %d GB of VRAM (most: %v GB)", modelsText(job),
				job.GPUFraction, job.MinVRAMGB, float64(most)*job.GPUFraction)
		}
		return fmt.Sprintf("no known provider has %s GPUs with %d GB of VRAM (most: %d GB)", modelsText(job), job.MinVRAMGB, most)
	case "gpu_count":
		most := 0
		for _, c := range caps {
			per := map[string]int{}
			for _, g := range c.GPUs {
				if job.AcceptsGPU(g) && g.VRAMGB >= job.MinVRAMGB {
					k := g.Identity().Key()
					per[k]++
					most = max(most, per[k])
				}
			}
		}
		why := fmt.Sprintf("no known provider has %d %s GPUs of one model (most: %d)", job.GPUCount, modelsText(job), most)
		if most > 0 && job.Nodes <= 1 {
			// Several providers' GPUs together can: a gang.
			k := (job.GPUCount + most - 1) / most
			why += fmt.Sprintf(": spread it over several providers with --nodes (e.g. --nodes %d --count %d)", k, (job.GPUCount+k-1)/k)
		}
		return why
	case "price":
		lowest := -1.0
		for _, c := range caps {
			if f := FloorFor(c.Policy, job); lowest < 0 || f < lowest {
				lowest = f
			}
		}
		return fmt.Sprintf("every known provider's price floor is above the max price $%.2f/GPU-h (lowest: $%.2f)", job.MaxPrice, lowest)
	case "workload":
		return fmt.Sprintf("no known provider accepts workload '%s' (accepted: %s)", job.Workload,
			known(caps, func(c *terms.Capability) []string { return c.Policy.AllowedWorkloads }))
	case "preemptible":
		return "no known provider accepts preemptible work"
	case "sealed":
		return "no known provider runs sealed jobs (a job reading a private artifact is sealed; its provider must run as root to keep the plaintext on a tmpfs)"
	case "no_persist":
		if job.NoPersist {
			return "no known provider offers no-persist jobs (provider policy no_persist)"
		}
		return "every known provider takes no-persist jobs only: post it with --no-persist"
	case "image":
		return "no known provider can run this container job: " + in.Reason
	case "excluded":
		return "every known provider lost an earlier attempt of this job"
	}
	return in.Reason
}

// known is the distinct non-empty values of field over caps, sorted, or
// "none".
func known(caps []terms.Capability, field func(*terms.Capability) []string) string {
	seen := map[string]bool{}
	var out []string
	for i := range caps {
		for _, v := range field(&caps[i]) {
			if v = strings.TrimSpace(v); v != "" && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func modelsText(job *terms.Job) string {
	if len(job.GPUModels) == 0 {
		return "matching"
	}
	return strings.Join(job.GPUModels, "/")
}
