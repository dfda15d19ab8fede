package node

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
)

// TestSampledCallsGoOnlyToTheAsked: a renter that knows more fitting
// providers than a call asks (auction.DefaultMaxBidders) sends each call
// over ProtoCall to the providers it asks and gossips nothing: the others
// never hear of it (no call taken, none dropped as not sampled), and
// every job still runs.
func TestSampledCallsGoOnlyToTheAsked(t *testing.T) {
	var cfgs []config.Config
	for i := range 6 {
		cfgs = append(cfgs, providerConfig("eu-west", 0.5+0.1*float64(i), a100))
	}
	boot, ns := startNet(t, cfgs...)
	waitAdvertised(t, boot, ns...)
	job := shJob(terms.Silver, 2, "true")
	job.GPUCount = 1
	waitExpected(t, boot, &job, idsOf(ns...), 30*time.Second)
	asked := 0
	for range 3 {
		v := post(t, boot, job)
		if v.Job.BidSample <= 0 {
			t.Fatalf("call not sampled (BidSample %v) with %d providers expected", v.Job.BidSample, len(ns))
		}
		for _, n := range ns {
			if terms.SampledBidder(&v.Job, n.ID().String()) {
				asked++
			}
		}
		for _, b := range v.Bids {
			if !terms.SampledBidder(&v.Job, b.Bid.Provider) {
				t.Fatalf("provider %s bid without being asked", b.Bid.Provider)
			}
		}
		waitJob(t, boot, v.Job.ID, 30*time.Second, "finished", func(v api.JobView) bool { return v.Run.Terminal() })
	}
	took, dropped := 0, 0
	for _, n := range ns {
		st := n.market.provider.Stats()
		took += st.Calls
		dropped += st.Ineligible["not_sampled"]
	}
	if took != asked || dropped != 0 {
		t.Fatalf("providers took %d calls and dropped %d; the renter asked %d", took, dropped, asked)
	}
}
