package node

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

var (
	h100  = terms.GPU{Model: "H100", VRAMGB: 80}
	a100  = terms.GPU{Model: "A100", VRAMGB: 40}
	a100b = terms.GPU{Model: "A100", VRAMGB: 80}
	r4090 = terms.GPU{Model: "RTX4090", VRAMGB: 24}
	l4    = terms.GPU{Model: "L4", VRAMGB: 24}
)

// TestDiscoveryThroughDHT: a renter finds, through the DHT only, exactly the
// providers matching each query.
func TestDiscoveryThroughDHT(t *testing.T) {
	boot, ns := startNet(t,
		providerConfig("eu-west", 2.0, h100, h100),
		providerConfig("us-east", 1.8, h100),
		providerConfig("eu-central", 1.1, a100),
		providerConfig("eu-west", 1.3, a100b),
		providerConfig("us-west", 0.4, r4090),
		providerConfig("ap-south", 0.5, l4, r4090),
	)
	euH100, usH100, euA100, euA100b, us4090, apMix := ns[0], ns[1], ns[2], ns[3], ns[4], ns[5]
	cases := []struct {
		q    terms.Query
		want []*testNode
	}{
		{terms.Query{GPU: "H100"}, []*testNode{euH100, usH100}},
		{terms.Query{GPU: "h100", Region: "eu"}, []*testNode{euH100}},
		{terms.Query{Region: "eu"}, []*testNode{euH100, euA100, euA100b}},
		{terms.Query{Region: "eu-west"}, []*testNode{euH100, euA100b}},
		{terms.Query{GPU: "A100", MinVRAM: 80}, []*testNode{euA100b}},
		{terms.Query{MinVRAM: 40}, []*testNode{euH100, usH100, euA100, euA100b}},
		{terms.Query{MinVRAM: 24, Region: "ap"}, []*testNode{apMix}},
		{terms.Query{GPU: "RTX 4090"}, []*testNode{us4090, apMix}},
		{terms.Query{GPU: "H100", GPUCount: 2}, []*testNode{euH100}},
		{terms.Query{GPU: "B200"}, nil},
		{terms.Query{Region: "europe"}, nil},
	}
	for _, c := range cases {
		// The renter (bootstrap node) and a provider both see the same answer.
		eventuallyProviders(t, boot.Daemon, c.q, idsOf(c.want...), 20*time.Second)
		eventuallyProviders(t, us4090.Daemon, c.q, idsOf(c.want...), 20*time.Second)
	}
}

// TestProviderExpiresAfterTTL: a provider that stops is gone from discovery
// once its record's TTL has passed, while live providers stay.
func TestProviderExpiresAfterTTL(t *testing.T) {
	t.Parallel()
	short := providerConfig("eu-west", 1, h100)
	short.Provider.AdvertiseTTL = 3 * time.Second
	stay := providerConfig("eu-west", 1, h100)
	stay.Provider.AdvertiseTTL = 3 * time.Second
	boot, ns := startNet(t, short, stay)
	q := terms.Query{GPU: "H100"}
	eventuallyProviders(t, boot.Daemon, q, idsOf(ns...), 20*time.Second)

	// Kill the first provider (no goodbye message: it simply stops renewing).
	stopped := time.Now()
	if err := ns[0].Close(); err != nil {
		t.Fatal(err)
	}
	eventuallyProviders(t, boot.Daemon, q, idsOf(ns[1]), 15*time.Second)
	if el := time.Since(stopped); el > 3*time.Second+12*time.Second {
		t.Fatalf("provider removed only after %s", el)
	}
	// And the live one keeps renewing: once it has put a record a whole
	// TTL younger than the one it holds now (its renewals, each
	// announced), the renter still lists it.
	held := ns[1].disc.Advertised().IssuedAt
	waitChange(t, 4*stay.Provider.AdvertiseTTL, "the live provider renews its record past a TTL", func() bool {
		a := ns[1].disc.Advertised()
		return a != nil && a.IssuedAt.After(held.Add(stay.Provider.AdvertiseTTL))
	}, ns[1].disc.AdvertisedChanged)
	eventuallyProviders(t, boot.Daemon, q, idsOf(ns[1]), 5*time.Second)
}

// TestRestartKeepsIdentityAndDB: a daemon restarted on the same data dir has
// the same peer ID and its DB contents.
func TestRestartKeepsIdentityAndDB(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, renterConfig(), nil)
	id := n.ID()
	e, err := n.db.Append(record.Entry{Kind: record.KindPaymentOwed, Direction: record.DirOwed, Counterparty: "peer-x", LeaseID: "l1", Amount: 1.25})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(config.Paths{Dir: dir}.Key())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	n2 := startNode(t, dir, renterConfig(), nil)
	defer n2.Close()
	if n2.ID() != id {
		t.Fatalf("peer id changed across restart: %s -> %s", id, n2.ID())
	}
	got, err := n2.db.Get(e.Seq)
	if err != nil {
		t.Fatalf("entry lost across restart: %v", err)
	}
	if got.Hash != e.Hash || got.Amount != 1.25 {
		t.Fatalf("entry changed across restart: %+v vs %+v", got, e)
	}
	if _, err := n2.db.Verify(); err != nil {
		t.Fatalf("verify after restart: %v", err)
	}
}

// TestSecondDaemonSameDataDir: a second daemon on a data dir in use fails
// with ErrAlreadyRunning and does not disturb the first.
func TestSecondDaemonSameDataDir(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, renterConfig(), nil)
	defer n.Close()
	_, err := Start(context.Background(), Options{DataDir: dir, Config: renterConfig()})
	if err == nil {
		t.Fatal("second daemon on the same data dir started")
	}
	if !errorsIs(err, config.ErrAlreadyRunning) {
		t.Fatalf("err = %v, want ErrAlreadyRunning", err)
	}
	// First daemon still answers.
	c := api.NewClient(dir)
	if err := c.WaitReady(context.Background(), 2*time.Second); err != nil {
		t.Fatalf("first daemon stopped answering: %v", err)
	}
}

// TestRedialsBootstrapWhenAlone: a provider that started before its
// bootstrap peer (or lost every connection) re-dials it and becomes
// discoverable without a restart.
func TestRedialsBootstrapWhenAlone(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	bootDir := root + "/boot"
	key, err := p2p.LoadOrCreateKey(config.Paths{Dir: bootDir}.Key())
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	_, port, _ := net.SplitHostPort(freeLoopback(t))
	bootAddr := "/ip4/127.0.0.1/tcp/" + port

	pc := providerConfig("eu-west", 1, a100)
	pc.Bootstrap = []string{bootAddr + "/p2p/" + id.String()}
	prov := startNode(t, root+"/prov", pc, nil) // bootstrap peer not up yet
	defer prov.Close()

	bc := renterConfig()
	bc.Listen = []string{bootAddr}
	boot := startNode(t, bootDir, bc, nil)
	defer boot.Close()
	eventuallyProviders(t, boot.Daemon, terms.Query{GPU: "A100"}, idsOf(prov), 30*time.Second)
}

// TestFingerprintChangeVisible: a provider that comes back with different
// hardware under the same identity shows a new fingerprint hash, and the
// renter notices the change.
func TestFingerprintChangeVisible(t *testing.T) {
	boot, ns := startNet(t, providerConfig("eu-west", 1, a100))
	p := ns[0]
	q := terms.Query{}
	eventuallyProviders(t, boot.Daemon, q, idsOf(p), 20*time.Second)
	caps, _ := boot.disc.FindProviders(context.Background(), q)
	before := caps[0].Fingerprint
	if before == "" || before != p.fpHash {
		t.Fatalf("record fingerprint %q, provider's %q", before, p.fpHash)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := providerConfig("eu-west", 1, h100) // new hardware, same data dir and key
	cfg.Bootstrap = boot.Addrs()
	p2 := startNode(t, p.dir, cfg, nil)
	defer p2.Close()
	if p2.ID() != p.ID() {
		t.Fatal("identity changed")
	}
	// Its new record put and its provider records announced (to boot,
	// the DHT's only other node): a lookup finds them.
	waitChange(t, 20*time.Second, "the restarted provider's new record", p2.disc.Provided, p2.disc.AdvertisedChanged)
	if caps, _ := boot.disc.FindProviders(context.Background(), terms.Query{GPU: "H100"}); len(caps) != 1 || caps[0].Fingerprint == before {
		t.Fatalf("new hardware did not show up with a new fingerprint: %+v", caps)
	}
	if boot.disc.FingerprintChanges() != 1 || boot.market.allCounters()["discovery.fingerprint_changed"] != 1 {
		t.Fatalf("fingerprint change not counted: %d", boot.disc.FingerprintChanges())
	}
}

// startSimulated starts a provider whose GPUs come from a simulated NVML
// host (gpu_source nvml), bootstrapped from boot.
func startSimulated(t *testing.T, dir string, region string, boot *Daemon, gpus ...runtime.SimulatedGPU) *testNode {
	t.Helper()
	cfg := providerConfig(region, 1.0)
	cfg.Provider.GPUSource = "nvml"
	cfg.Bootstrap = append([]string(nil), boot.Addrs()...)
	d, err := Start(context.Background(), Options{DataDir: dir, Config: cfg, Log: testLogger(t),
		GPUDriver: runtime.NewSimulatedGPUs("550.54.15", gpus...)})
	if err != nil {
		t.Fatalf("start simulated provider: %v", err)
	}
	n := &testNode{Daemon: d, dir: dir, cfg: cfg}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestNVMLModelNamesOverDHT: a provider whose (simulated) NVML names its
// GPU "NVIDIA H100 80GB HBM3" is found by --gpu H100 through the DHT, and
// jobs asking for "RTX 4090" and "RTX4090" both reach the provider whose
// NVML says "NVIDIA GeForce RTX 4090".
func TestNVMLModelNamesOverDHT(t *testing.T) {
	root := t.TempDir()
	boot := startNode(t, root+"/boot", renterConfig(), nil)
	t.Cleanup(func() { boot.Close() })
	h100n := startSimulated(t, root+"/h100", "eu-west", boot.Daemon,
		runtime.SimulatedGPU{Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-11111111-0000-4000-8000-000000000001", MemTotalMB: 81559, TempC: 40, PowerW: 90})
	r4090n := startSimulated(t, root+"/4090", "eu-west", boot.Daemon,
		runtime.SimulatedGPU{Name: "NVIDIA GeForce RTX 4090", UUID: "GPU-22222222-0000-4000-8000-000000000002", MemTotalMB: 24564, TempC: 40, PowerW: 60})
	eventuallyProviders(t, boot.Daemon, terms.Query{GPU: "H100"}, idsOf(h100n), 30*time.Second)
	if c := h100n.Advertised(); c == nil || len(c.GPUs) != 1 || !c.GPUs[0].Detected || c.GPUs[0].Model != "NVIDIA H100 80GB HBM3" {
		t.Fatalf("H100 provider advertises %+v, want its NVML device", c)
	}
	waitAdvertised(t, boot, h100n, r4090n)
	for _, model := range []string{"RTX 4090", "RTX4090"} {
		t.Run(model, func(t *testing.T) {
			j := shJob(terms.Silver, 5, "echo dev=$CUDA_VISIBLE_DEVICES")
			j.GPUModels = []string{model}
			v := post(t, boot, j)
			if !leased(v) || v.Lease.Provider != r4090n.ID().String() {
				t.Fatalf("job for %q: %s, lease %+v; want the RTX 4090 provider %s", model, v.State, v.Lease, r4090n.ID())
			}
			// It runs on the NVML device, and the receipt names it.
			v = waitJob(t, boot, v.Job.ID, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
			if v.Run != terms.RunSucceeded || len(v.Receipt.Devices) != 1 || v.Receipt.Devices[0] != "GPU-22222222-0000-4000-8000-000000000002" {
				t.Fatalf("job for %q: run %s, receipt devices %v", model, v.Run, v.Receipt.Devices)
			}
		})
	}
	// The NVML heartbeats carried the provider's signed fingerprint, whose
	// hash matched its capability, and none contradicted it.
	if c := boot.market.counters.Snapshot(); c["renter.heartbeat_rejected"] != 0 || c["renter.fingerprint_mismatch"] != 0 || c["renter.heartbeat_fraud"] != 0 {
		t.Fatalf("renter counters %v", c)
	}
}

// TestProvidersShowFreeGPUsAndPriceNow: GET /v1/providers gives each
// provider's free GPUs, its price for an hour starting now at that
// occupancy and its reliability as the renter's book scores it; a lease
// taking one of two GPUs shows sooner than the record's renewal (the
// provider renews it when its free GPUs change, at most once per
// AvailabilityGap: a second here), and so does the lease's end.
func TestProvidersShowFreeGPUsAndPriceNow(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(withPolicy(providerConfig("eu-west", 1, h100, h100), func(p *terms.Policy) { p.OccupancySurcharge = 1 }))
	root := t.TempDir()
	boot := startWith(t, filepath.Join(root, "boot"), renterConfig(), nil, Options{})
	prov := startWith(t, filepath.Join(root, "prov"), cfg, boot.Daemon, Options{AvailabilityGap: time.Second})
	waitAdvertised(t, boot, prov)
	cl := api.NewClient(boot.dir)
	ctx := context.Background()
	// provider waits until the renter lists the provider with free GPUs
	// free, and checks its price and reliability.
	provider := func(free int, price float64) {
		t.Helper()
		// Sooner than the record's renewal (a third of its 30 s TTL), the
		// provider puts a record with free GPUs free (to boot, the DHT's
		// only other node).
		waitChange(t, 8*time.Second, fmt.Sprintf("the provider's record with %d free", free), func() bool {
			c := prov.disc.Advertised()
			return c != nil && c.FreeGPUs != nil && *c.FreeGPUs == free
		}, prov.disc.AdvertisedChanged)
		{
			vs, err := cl.Providers(ctx, terms.Query{})
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) == 1 && vs[0].FreeGPUs != nil && *vs[0].FreeGPUs == free {
				v := vs[0]
				// The book's score moves with time: near is the same.
				if book := boot.market.book.Score(prov.ID().String()); v.PriceNow != price || math.Abs(v.Reliability-book) > 1e-3 || v.Reliability <= 0 {
					t.Fatalf("%d free: price now %v (want %v), reliability %v (the book says %v)", free, v.PriceNow, price,
						v.Reliability, book)
				}
				return
			}
			var listed []string
			for _, v := range vs {
				n := -1
				if v.FreeGPUs != nil {
					n = *v.FreeGPUs
				}
				listed = append(listed, fmt.Sprintf("%s with %d free", v.Peer, n))
			}
			t.Fatalf("the renter does not list the provider with %d of 2 GPUs free: %v", free, listed)
		}
	}
	provider(2, 1)
	// A drain advertises no free GPUs, and its end the GPUs free again,
	// sooner than the record's renewal (the drain asks for a new record).
	pcl := api.NewClient(prov.dir)
	for _, c := range []struct {
		do   func(context.Context) (api.DrainView, error)
		free int
	}{{func(ctx context.Context) (api.DrainView, error) { return pcl.Drain(ctx, time.Second) }, 0}, {pcl.Undrain, 2}} {
		if _, err := c.do(ctx); err != nil {
			t.Fatal(err)
		}
		waitChange(t, 8*time.Second, fmt.Sprintf("the provider's record with %d free after a drain's start or end", c.free), func() bool {
			c2 := prov.disc.Advertised()
			return c2 != nil && c2.FreeGPUs != nil && *c2.FreeGPUs == c.free
		}, prov.disc.AdvertisedChanged)
	}
	provider(2, 1)
	v := post(t, boot, shJob(terms.Silver, 5, "sleep 60"))
	if !leased(v) {
		t.Fatalf("job not leased: %s %v", v.State, v.Reasons)
	}
	provider(1, 1.5)
	if _, err := cl.CancelJob(ctx, v.Job.ID); err != nil {
		t.Fatal(err)
	}
	provider(2, 1)
}
