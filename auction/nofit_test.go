package auction

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

func TestNoneFits(t *testing.T) {
	t.Parallel()
	gs := func(model string, vram, n int) []terms.GPU {
		out := make([]terms.GPU, n)
		for i := range out {
			out[i] = terms.GPU{Model: model, VRAMGB: vram}
		}
		return out
	}
	caps := []terms.Capability{
		{Peer: "p1", Region: "eu-west", GPUs: gs("RTX 4090", 24, 2), Policy: terms.Policy{PriceFloor: 0.5, AcceptPreemptible: true}},
		{Peer: "p2", Region: "us-east", GPUs: gs("H100", 80, 8), Policy: terms.Policy{PriceFloor: 2}},
		{Peer: "p3", Region: "eu-central", GPUs: gs("A100", 40, 4), Policy: terms.Policy{PriceFloor: 1}},
	}
	job := func(mut func(*terms.Job)) *terms.Job {
		j := &terms.Job{Tier: terms.Silver, MaxPrice: 3, GPUCount: 1, Duration: time.Hour}
		mut(j)
		return j
	}
	cases := []struct {
		name string
		job  *terms.Job
		want []string // nil: it fits
	}{
		{"fits", job(func(j *terms.Job) { j.GPUModels = []string{"H100"} }), nil},
		{"no providers known", nil, nil},
		{"region", job(func(j *terms.Job) { j.Region = "mars" }),
			[]string{"no known provider can run this job (3 known): no provider in region 'mars' (known: eu-central, eu-west, us-east); post it with --queue"}},
		{"model", job(func(j *terms.Job) { j.GPUModels = []string{"A900"} }),
			[]string{"no known provider has GPU model 'A900' (known: A100, H100, RTX 4090)"}},
		{"misspelt model", job(func(j *terms.Job) { j.GPUModels = []string{"H1000"} }),
			[]string{"'H1000' is not a GPU model gpumesh knows; did you mean H100", "; no known provider has GPU model 'H1000'"}},
		{"known model no one has", job(func(j *terms.Job) { j.GPUModels = []string{"L4"} }),
			[]string{"(3 known): no known provider has GPU model 'L4'"}},
		{"region and model", job(func(j *terms.Job) { j.Region, j.GPUModels = "mars", []string{"A900"} }),
			[]string{"no provider in region 'mars'", "; no known provider has GPU model 'A900'"}},
		{"vram", job(func(j *terms.Job) { j.MinVRAMGB = 100 }),
			[]string{"no known provider has matching GPUs with 100 GB of VRAM (most: 80 GB)"}},
		{"count", job(func(j *terms.Job) { j.GPUCount = 16 }),
			[]string{"no known provider has 16 matching GPUs of one model (most: 8): spread it over several providers with --nodes (e.g. --nodes 2 --count 8)"}},
		{"gang fits", job(func(j *terms.Job) { j.Nodes, j.GPUCount = 3, 2 }), nil},
		{"gang too large", job(func(j *terms.Job) { j.Nodes, j.GPUCount = 3, 4 }),
			[]string{"a gang of 3 needs 3 providers, 2 could run a member"}},
		{"gang member too large", job(func(j *terms.Job) { j.Nodes, j.GPUCount = 2, 16 }),
			[]string{"no known provider has 16 matching GPUs of one model (most: 8); post it"}},
		{"price", job(func(j *terms.Job) { j.MaxPrice = 0.2 }),
			[]string{"every known provider's price floor is above the max price $0.20/GPU-h (lowest: $0.50)"}},
		{"preemptible", job(func(j *terms.Job) { j.Tier, j.Preemptible, j.GPUModels = terms.Bronze, true, []string{"H100"} }),
			// p2 refuses preemptible work, p1 has no H100, p3 neither.
			[]string{"the closest miss 1: preemptible work not accepted (1 provider(s)); gpu model RTX 4090 not in H100 (1 provider(s))"}},
		{"sealed", job(func(j *terms.Job) { j.Sealed = true }),
			[]string{"no known provider runs sealed jobs (a job reading a private artifact is sealed; its provider must run as root"}},
		{"no-persist", job(func(j *terms.Job) { j.NoPersist = true }),
			[]string{"no known provider offers no-persist jobs (provider policy no_persist)"}},
		{"closest", job(func(j *terms.Job) { j.Region, j.GPUModels = "eu", []string{"H100"} }),
			[]string{"none meets all its constraints; the closest miss 1: region us-east does not satisfy eu (1 provider(s)); gpu model"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := caps
			if c.job == nil {
				cs, c.job = nil, job(func(j *terms.Job) { j.Region = "mars" })
			}
			err := NoneFits(cs, c.job)
			if c.want == nil {
				if err != nil {
					t.Fatalf("NoneFits = %v, want nil", err)
				}
				return
			}
			if err == nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("NoneFits = %#v, want one line", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("NoneFits = %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}
