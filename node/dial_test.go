package node

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestProviderDialsNoAddressACallNames: a stranger's call for bids names
// a third party's host (here a loopback listener) as its owner's address.
// The provider bids, but never dials that host: it reaches a renter only
// through a connection it has, addresses its peerstore learned from the
// renter itself, or the DHT, so a call cannot turn providers into a
// scanner or flood of some other machine.
func TestProviderDialsNoAddressACallNames(t *testing.T) {
	victim, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	port := victim.Addr().(*net.TCPAddr).Port

	prov := startNode(t, t.TempDir(), providerConfig("eu-west", 1.0, a100), nil)
	defer prov.Close()
	stranger := signtest.New(t)
	job := shJob(terms.Silver, 2, "true")
	job.ID, job.Owner, job.CreatedAt, job.BidWindow = terms.NewID("job"), stranger.ID().String(), time.Now(), time.Second
	job.OwnerAddrs = []string{
		"/ip4/127.0.0.1/tcp/" + strconv.Itoa(port),
		"/ip4/127.0.0.1/tcp/" + strconv.Itoa(port) + "/p2p/" + stranger.ID().String(),
	}
	call, err := terms.EncodeCall(stranger, job, auction.JobTopics(&job)[0])
	if err != nil {
		t.Fatal(err)
	}
	sentBefore := prov.market.provider.Stats().Undelivered
	if _, err := prov.market.provider.HandleCall(randomPeer(t), call); err != nil {
		t.Fatalf("the provider did not bid: %v", err)
	}
	// The provider logs the bid it gives up, once it counted it.
	waitChange(t, 10*time.Second, "the bid to an unreachable owner given up", func() bool {
		return prov.market.provider.Stats().Undelivered != sentBefore
	}, loggedNext)
	// Any connection the provider made is in the listener's queue by now.
	_ = victim.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
	if c, err := victim.Accept(); err == nil {
		c.Close()
		t.Fatal("the provider dialled the address the call named")
	} else if ne := (net.Error)(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatal(err)
	}
}
