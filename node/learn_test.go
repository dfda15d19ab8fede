package node

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// waitExpected waits until the renter expects exactly want to answer job,
// looking again at each record its discovery keeps or forgets.
func waitExpected(t *testing.T, n *testNode, job *terms.Job, want []string, within time.Duration) {
	t.Helper()
	waitChange(t, within, "the renter expects "+strings.Join(want, ", ")+" to answer", func() bool {
		got := n.disc.ExpectedBidders(job)
		slices.Sort(got)
		return slices.Equal(got, want)
	}, n.disc.RecordsChanged)
}

// TestRenterLearnsProvidersWithoutListing: a renter that never ran
// `gpumesh providers` learns who will answer its calls in the background,
// from discovery and from the bids it receives, so its first jobs take
// the fast path (early close, sampling) too.
func TestRenterLearnsProvidersWithoutListing(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{LearnEvery: 200 * time.Millisecond})
	p1 := startWith(t, filepath.Join(root, "p1"), fastConfig(providerConfig("eu-west", 0.5, terms.GPU{Model: "A100", VRAMGB: 80})), renter.Daemon, Options{})
	p2 := startWith(t, filepath.Join(root, "p2"), fastConfig(providerConfig("eu-west", 0.6, terms.GPU{Model: "A100", VRAMGB: 80})), renter.Daemon, Options{})
	job := shJob(terms.Silver, 2, "true")
	waitExpected(t, renter, &job, idsOf(p1, p2), 30*time.Second)

	// A provider the renter lost track of (joined since its last
	// discovery, or its record expired) is learned from its first bid.
	slow := startWith(t, filepath.Join(root, "renter2"), renterConfig(), renter.Daemon, Options{LearnEvery: time.Hour})
	waitAdvertised(t, slow, p1, p2) // discovery fills the cache; then forget p2
	slow.disc.Forget(p2.ID())
	waitExpected(t, slow, &job, idsOf(p1), time.Second)
	v := post(t, slow, job)
	waitJob(t, slow, v.Job.ID, 30*time.Second, "ended", func(v api.JobView) bool { return v.Run.Terminal() })
	waitExpected(t, slow, &job, idsOf(p1, p2), 15*time.Second)
}
