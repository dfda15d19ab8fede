package node

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
)

func TestNoneFits(t *testing.T) {
	gs := func(model string, vram, n int) []auction.GPU {
		out := make([]auction.GPU, n)
		for i := range out {
			out[i] = auction.GPU{Model: model, VRAMGB: vram}
		}
		return out
	}
	caps := []auction.Capability{
		{Peer: "p1", Region: "eu-west", GPUs: gs("RTX 4090", 24, 2), Policy: auction.Policy{PriceFloor: 0.5, AcceptPreemptible: true}},
		{Peer: "p2", Region: "us-east", GPUs: gs("H100", 80, 8), Policy: auction.Policy{PriceFloor: 2}},
		{Peer: "p3", Region: "eu-central", GPUs: gs("A100", 40, 4), Policy: auction.Policy{PriceFloor: 1}},
	}
	job := func(mut func(*auction.Job)) *auction.Job {
		j := &auction.Job{Tier: auction.Silver, MaxPrice: 3, GPUCount: 1, Duration: time.Hour}
		mut(j)
		return j
	}
	cases := []struct {
		name string
		job  *auction.Job
		want []string // nil: it fits
	}{
		{"fits", job(func(j *auction.Job) { j.GPUModels = []string{"H100"} }), nil},
		{"no providers known", nil, nil},
		{"region", job(func(j *auction.Job) { j.Region = "mars" }),
			[]string{"no known provider can run this job (3 known): no provider in region 'mars' (known: eu-central, eu-west, us-east); post it with --queue"}},
		{"model", job(func(j *auction.Job) { j.GPUModels = []string{"A900"} }),
			[]string{"no known provider has GPU model 'A900' (known: A100, H100, RTX 4090)"}},
		{"misspelt model", job(func(j *auction.Job) { j.GPUModels = []string{"H1000"} }),
			[]string{"'H1000' is not a GPU model gpumesh knows; did you mean H100", "; no known provider has GPU model 'H1000'"}},
		{"known model no one has", job(func(j *auction.Job) { j.GPUModels = []string{"L4"} }),
			[]string{"(3 known): no known provider has GPU model 'L4'"}},
		{"region and model", job(func(j *auction.Job) { j.Region, j.GPUModels = "mars", []string{"A900"} }),
			[]string{"no provider in region 'mars'", "; no known provider has GPU model 'A900'"}},
		{"vram", job(func(j *auction.Job) { j.MinVRAMGB = 100 }),
			[]string{"no known provider has matching GPUs with 100 GB of VRAM (most: 80 GB)"}},
		{"count", job(func(j *auction.Job) { j.GPUCount = 16 }),
			[]string{"no known provider has 16 matching GPUs of one model (most: 8): spread it over several providers with --nodes (e.g. --nodes 2 --count 8)"}},
		{"gang fits", job(func(j *auction.Job) { j.Nodes, j.GPUCount = 3, 2 }), nil},
		{"gang too large", job(func(j *auction.Job) { j.Nodes, j.GPUCount = 3, 4 }),
			[]string{"a gang of 3 needs 3 providers, 2 could run a member"}},
		{"gang member too large", job(func(j *auction.Job) { j.Nodes, j.GPUCount = 2, 16 }),
			[]string{"no known provider has 16 matching GPUs of one model (most: 8); post it"}},
		{"price", job(func(j *auction.Job) { j.MaxPrice = 0.2 }),
			[]string{"every known provider's price floor is above the max price $0.20/GPU-h (lowest: $0.50)"}},
		{"preemptible", job(func(j *auction.Job) { j.Tier, j.Preemptible, j.GPUModels = auction.Bronze, true, []string{"H100"} }),
			// p2 refuses preemptible work, p1 has no H100, p3 neither.
			[]string{"the closest miss 1: preemptible work not accepted (1 provider(s)); gpu model RTX 4090 not in H100 (1 provider(s))"}},
		{"sealed", job(func(j *auction.Job) { j.Sealed = true }),
			[]string{"no known provider runs sealed jobs (a job reading a private artifact is sealed; its provider must run as root"}},
		{"no-persist", job(func(j *auction.Job) { j.NoPersist = true }),
			[]string{"no known provider offers no-persist jobs (provider policy no_persist)"}},
		{"closest", job(func(j *auction.Job) { j.Region, j.GPUModels = "eu", []string{"H100"} }),
			[]string{"none meets all its constraints; the closest miss 1: region us-east does not satisfy eu (1 provider(s)); gpu model"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := caps
			if c.job == nil {
				cs, c.job = nil, job(func(j *auction.Job) { j.Region = "mars" })
			}
			err := noneFits(cs, c.job)
			if c.want == nil {
				if err != nil {
					t.Fatalf("noneFits = %v, want nil", err)
				}
				return
			}
			var he *httpError
			if !errors.As(err, &he) || he.code != http.StatusUnprocessableEntity || strings.Contains(err.Error(), "\n") {
				t.Fatalf("noneFits = %#v, want one 422 line", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("noneFits = %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestPostJobNoProviderFits: a renter that knows providers refuses at once
// a job none of them could ever run, saying why, unless it is posted with
// queue; a job one of them fits is auctioned as before.
func TestPostJobNoProviderFits(t *testing.T) {
	boot, ns := startNet(t, providerConfig("eu-west", 0.5, r4090), providerConfig("us-east", 1, h100))
	waitAdvertised(t, boot, ns...)
	cl := api.NewClient(boot.dir)
	ctx := context.Background()

	mars := shJob(auction.Silver, 2, "true")
	mars.Region = "mars"
	t0 := time.Now()
	_, err := cl.PostJob(ctx, mars)
	if err == nil || !strings.Contains(err.Error(), "no provider in region 'mars' (known: eu-west, us-east)") {
		t.Fatalf("post to mars: %v", err)
	}
	if took := time.Since(t0); took >= mars.BidWindow {
		t.Fatalf("refusal took %v, not at once (bid window %v)", took, mars.BidWindow)
	}
	if vs, err := cl.Jobs(ctx); err != nil || len(vs) != 0 {
		t.Fatalf("refused job recorded: %v, %v", vs, err)
	}

	a900 := shJob(auction.Silver, 2, "true")
	a900.GPUModels = []string{"A900"}
	if _, err := cl.PostJob(ctx, a900); err == nil || !strings.Contains(err.Error(), "no known provider has GPU model 'A900' (known: H100, RTX4090)") {
		t.Fatalf("post for an A900: %v", err)
	}

	a900.Deadline = time.Now().Add(10 * time.Minute)
	if v := postQueued(t, boot, a900); v.State != auction.JobQueued {
		t.Fatalf("queued A900 job: %s %v", v.State, v.Reasons)
	}

	fits := shJob(auction.Silver, 2, "true")
	fits.GPUModels = []string{"H100"}
	if v := post(t, boot, fits); v.State != auction.JobLeased && v.State != auction.JobFinished {
		t.Fatalf("H100 job: %s %v", v.State, v.Reasons)
	}
}
