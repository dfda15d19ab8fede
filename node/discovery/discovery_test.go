package discovery

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	record "github.com/libp2p/go-libp2p-record"
)

// testGap is the tests' Config.AvailabilityGap.
const testGap = time.Second

// testNode is a libp2p node that validates capability records, and its
// Discovery.
type testNode struct {
	net    *p2p.Node
	disc   *Discovery
	signer *sign.Signer
}

func start(t *testing.T, boot ...string) *testNode {
	t.Helper()
	key, err := p2p.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := p2p.Signer(key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(context.Background(), p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: boot,
		Validators:      map[string]record.Validator{terms.CapabilityNamespace: terms.CapabilityValidator{}},
		ProvideValidity: ProvideValidity(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := New(ctx, Config{Net: n, Signer: signer, Now: time.Now, Log: slog.New(slog.DiscardHandler), Bootstrap: len(boot) > 0,
		AvailabilityGap: testGap})
	t.Cleanup(func() {
		cancel()
		d.Wait()
		n.Close()
	})
	if len(boot) > 0 {
		if err := n.Bootstrap(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return &testNode{net: n, disc: d, signer: signer}
}

// waitFor checks cond at each change next announces (AdvertisedChanged,
// RecordsChanged) until it holds, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, next func() <-chan struct{}) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		changed := next()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestAdvertiseFindForget: a provider's record reaches a renter through
// the DHT; the renter keeps it (what it expects to bid, the provider's
// GPUs and fingerprint), re-advertised at once when the provider's free
// GPUs change (at the change its Availability signals, or at the instant
// it names), until it forgets it.
func TestAdvertiseFindForget(t *testing.T) {
	renter := start(t)
	prov := start(t, renter.net.Addrs()...)
	// The free GPUs: free until flipAt (when set), 0 from then on; a
	// change of free is signalled (changed), flipAt is named as an edge.
	var free, flipAt atomic.Int64
	var changed broadcast.Signal
	free.Store(2)
	freeAt := func(at time.Time) int {
		if f := flipAt.Load(); f != 0 && !at.Before(time.Unix(0, f)) {
			return 0
		}
		return int(free.Load())
	}
	avail := Availability{Free: freeAt, Changed: func(at time.Time) (<-chan struct{}, time.Time) {
		ch := changed.Wait()
		if f := time.Unix(0, flipAt.Load()); flipAt.Load() != 0 && f.After(at) {
			return ch, f
		}
		return ch, time.Time{}
	}}
	build := func(ttl time.Duration) terms.Capability {
		now := time.Now()
		f := freeAt(now)
		return terms.Capability{Peer: prov.net.ID().String(), Addrs: prov.net.Addrs(), Region: "eu-west",
			GPUs:   []terms.GPU{{Model: "H100", VRAMGB: 80}, {Model: "H100", VRAMGB: 80}},
			Policy: terms.Policy{PriceFloor: 1}, Fingerprint: "fp1", FreeGPUs: &f,
			Seq: uint64(now.UnixNano()), IssuedAt: now, ExpiresAt: now.Add(ttl)}
	}
	// Renewed every 200 s: every record below within seconds is one its
	// free GPUs' change made.
	go prov.disc.Advertise(10*time.Minute, build, avail)
	// Its record put and its provider records announced, to the renter
	// (the DHT's only other node): a lookup finds it.
	waitFor(t, 20*time.Second, "the provider's first record and provider records", prov.disc.Provided, prov.disc.AdvertisedChanged)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	caps, err := renter.disc.FindProviders(ctx, terms.Query{GPU: "H100"})
	if err != nil || len(caps) != 1 {
		t.Fatalf("the renter finding the provider: %+v, %v", caps, err)
	}
	id := prov.net.ID().String()
	if caps[0].Peer != id || len(caps[0].GPUs) != 2 {
		t.Fatalf("found %+v", caps)
	}
	if g, fp := renter.disc.GPUs(id), renter.disc.Fingerprint(id); g != 2 || fp != "fp1" {
		t.Fatalf("renter keeps %d GPUs, fingerprint %q; want 2, fp1", g, fp)
	}
	fits := &terms.Job{Tier: terms.Silver, MaxPrice: 3, GPUCount: 1, Duration: time.Hour}
	if got := renter.disc.ExpectedBidders(fits); len(got) != 1 || got[0] != id {
		t.Fatalf("expected bidders %v, want the provider", got)
	}
	tooBig := &terms.Job{Tier: terms.Silver, MaxPrice: 3, GPUCount: 4, Duration: time.Hour}
	if got := renter.disc.ExpectedBidders(tooBig); len(got) != 0 {
		t.Fatalf("expected bidders for a job no one fits: %v", got)
	}
	// The provider never keeps (nor expects bids from) itself.
	if _, err := prov.disc.Lookup(context.Background(), prov.net.ID()); err != nil {
		t.Fatalf("own record: %v", err)
	}
	if len(prov.disc.Records()) != 0 || len(prov.disc.Known()) != 0 {
		t.Fatalf("provider keeps itself: %v", prov.disc.Records())
	}

	free.Store(1)
	changed.Notify()
	waitFor(t, 6*time.Second, "a record with 1 free GPU, before its renewal", func() bool {
		c := prov.disc.Advertised()
		return c.FreeGPUs != nil && *c.FreeGPUs == 1
	}, prov.disc.AdvertisedChanged)
	// Changes within the availability gap of the last record go out together,
	// in one record no sooner than the gap (a busy provider's GPUs free
	// and fill many times a second).
	last := prov.disc.Advertised().IssuedAt
	for _, f := range []int64{2, 1, 2} {
		free.Store(f)
		changed.Notify()
	}
	waitFor(t, 6*time.Second, "one record for the burst of changes", func() bool {
		c := prov.disc.Advertised()
		if c.IssuedAt.Equal(last) {
			return false
		}
		if c.FreeGPUs == nil {
			t.Fatal("a record without its free GPUs")
		}
		if c.IssuedAt.Sub(last) < testGap || *c.FreeGPUs != 2 {
			t.Fatalf("after a record issued at %s, the next at %s with %d free GPUs; want the last change (2) no sooner than %s",
				last.Format(time.StampMilli), c.IssuedAt.Format(time.StampMilli), *c.FreeGPUs, testGap)
		}
		return true
	}, prov.disc.AdvertisedChanged)
	// A change at an instant named in advance (a booking's start) is
	// advertised when it comes, with no signal.
	flipAt.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
	changed.Notify() // the new edge, as a new booking would bring it
	waitFor(t, 6*time.Second, "a record with no free GPU once the edge passed", func() bool {
		c := prov.disc.Advertised()
		return c.FreeGPUs != nil && *c.FreeGPUs == 0
	}, prov.disc.AdvertisedChanged)

	renter.disc.Forget(prov.net.ID())
	if len(renter.disc.Known()) != 0 || renter.disc.GPUs(id) != 0 || len(renter.disc.ExpectedBidders(fits)) != 0 {
		t.Fatal("renter still knows the provider it forgot")
	}
	renter.disc.LearnBidder(prov.net.ID())
	waitFor(t, 10*time.Second, "the renter learning the bidder again", func() bool { return renter.disc.GPUs(id) == 2 }, renter.disc.RecordsChanged)
}

// TestHostileNames: names that are no peer ID, and queries that are no
// query, get nothing and an error, not a panic.
func TestHostileNames(t *testing.T) {
	n := start(t)
	for _, name := range []string{"", "garbage", "12D3KooW", string([]byte{0xff, 0x00})} {
		if g, fp := n.disc.GPUs(name), n.disc.Fingerprint(name); g != 0 || fp != "" {
			t.Fatalf("%q: %d GPUs, fingerprint %q", name, g, fp)
		}
		if _, ok := n.disc.RTT(name); ok {
			t.Fatalf("%q: a round trip", name)
		}
		if _, ok := n.disc.MeasureRTT(context.Background(), name); ok {
			t.Fatalf("%q: a round trip measured", name)
		}
		if _, ok := n.disc.Holdings(context.Background(), name); ok {
			t.Fatalf("%q: holdings", name)
		}
	}
	if _, err := n.disc.Lookup(context.Background(), n.net.ID()); err == nil {
		t.Fatal("own record found before it was advertised")
	}
	if _, err := n.disc.FindProviders(context.Background(), terms.Query{MinVRAM: -1}); err == nil {
		t.Fatal("a negative min VRAM query accepted")
	}
}

func TestProvideValidity(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{time.Second, 30 * time.Minute},
		{10 * time.Minute, 30 * time.Minute},
		{time.Hour, 3 * time.Hour},
	} {
		if got := ProvideValidity(c.ttl); got != c.want || reprovideEvery(c.ttl) != c.want/3 {
			t.Fatalf("ProvideValidity(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}
