package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestPostJobNoProviderFits: a renter that knows providers refuses at once
// a job none of them could ever run, saying why, unless it is posted with
// queue; a job one of them fits is auctioned as before.
func TestPostJobNoProviderFits(t *testing.T) {
	t.Parallel()
	boot, ns := startNet(t, providerConfig("eu-west", 0.5, r4090), providerConfig("us-east", 1, h100))
	waitAdvertised(t, boot, ns...)
	cl := api.NewClient(boot.dir)
	ctx := context.Background()

	mars := shJob(terms.Silver, 2, "true")
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

	a900 := shJob(terms.Silver, 2, "true")
	a900.GPUModels = []string{"A900"}
	if _, err := cl.PostJob(ctx, a900); err == nil || !strings.Contains(err.Error(), "no known provider has GPU model 'A900' (known: H100, RTX4090)") {
		t.Fatalf("post for an A900: %v", err)
	}

	a900.Deadline = time.Now().Add(10 * time.Minute)
	if v := postQueued(t, boot, a900); v.State != terms.JobQueued {
		t.Fatalf("queued A900 job: %s %v", v.State, v.Reasons)
	}

	fits := shJob(terms.Silver, 2, "true")
	fits.GPUModels = []string{"H100"}
	if v := post(t, boot, fits); v.State != terms.JobLeased && v.State != terms.JobFinished {
		t.Fatalf("H100 job: %s %v", v.State, v.Reasons)
	}
}
