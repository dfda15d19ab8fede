package lease

import (
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestCapacityNoticeOnlyFromBusyDecliner: a queued job is woken by the
// capacity notice of the provider that turned it away as busy, and by
// nobody else's: a peer that never declined it (it never even heard the
// call) naming it in a signed notice is refused, and the job keeps its
// queue backoff.
func TestCapacityNoticeOnlyFromBusyDecliner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.queueBackoff, h.queueBackoffMax = time.Minute, time.Minute
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	stranger := h.provider(provSpec{model: "H100", price: 1}) // hears no A100 call
	fj := job(terms.Silver, 5, time.Minute, "gate", "first", "0")
	fj.GPUModels = []string{"A100"}
	first := r.post(fj)
	r.waitJob(first.Job.ID, "running", func(v api.JobView) bool { return v.Run == terms.RunRunning })
	bj := busyJob(10)
	bj.GPUModels = []string{"A100"}
	v, err := r.tracker.Post(bj)
	if err != nil || v.State != terms.JobQueued {
		t.Fatalf("second job %s %v (%v): want queued", v.State, v.Reasons, err)
	}
	data, err := terms.EncodeCapacityNotice(stranger.signer, terms.CapacityNotice{Provider: stranger.id(), FreeGPUs: 8,
		Jobs: []string{v.Job.ID}, IssuedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var rej *auction.Rejection
	if err := r.tracker.Auction().HandleBid(peer.ID(stranger.signer.ID()), data); !errors.As(err, &rej) || rej.Reason != "unsolicited_notice" {
		t.Fatalf("stranger's notice: %v, want unsolicited_notice", err)
	}
	c := r.counters.Snapshot()
	if c["renter.capacity_notice"] != 0 || c["renter.queued_woken"] != 0 {
		t.Fatalf("after the stranger's notice: notices %d, woken %d", c["renter.capacity_notice"], c["renter.queued_woken"])
	}
	if got, _ := r.tracker.View(v.Job.ID); got.State != terms.JobQueued || got.Offers != v.Offers {
		t.Fatalf("job after the stranger's notice: %s, offered %d times (was %d)", got.State, got.Offers, v.Offers)
	}
	// The provider that declined it as busy still wakes it.
	p.exec.open("first")
	r.waitJobWithin(v.Job.ID, 15*time.Second, "queued job woken by its busy decliner and run", func(v api.JobView) bool {
		return v.Run == terms.RunSucceeded
	})
	if c := r.counters.Snapshot(); c["renter.queued_woken"] != 1 {
		t.Fatalf("woken %d", c["renter.queued_woken"])
	}
}
