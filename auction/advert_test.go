package auction

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

func testCap(s *sign.Signer, now time.Time, ttl time.Duration) terms.Capability {
	return terms.Capability{Peer: s.ID().String(), Region: "eu-west", GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}},
		Policy: terms.Policy{PriceFloor: 2}, Seq: 1, IssuedAt: now, ExpiresAt: now.Add(ttl)}
}

func TestCapabilityValidator(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := terms.CapabilityValidator{Now: func() time.Time { return now }}
	prov, other := signtest.Pair(t)
	key := terms.CapabilityKey(prov.ID())

	good, err := terms.SealCapability(prov, testCap(prov, now, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(key, good); err != nil {
		t.Fatalf("valid record rejected: %v", err)
	}

	// Forged: a record claiming to be prov's, signed by another key.
	forged := func() []byte {
		c := testCap(prov, now, time.Minute)
		env, err := sign.Seal(other, sign.DomainCapability, c)
		if err != nil {
			t.Fatal(err)
		}
		env.Signer = prov.ID().String() // lie about the signer
		b, _ := env.Marshal()
		return b
	}()
	// Tampered: a valid record whose payload was changed after signing.
	tampered := func() []byte {
		env, _ := sign.UnmarshalEnvelope(good)
		env.Payload = []byte(strings.Replace(string(env.Payload), `"price_floor":2`, `"price_floor":0.01`, 1))
		b, _ := env.Marshal()
		return b
	}()
	// Unsigned: no signature at all.
	unsigned := func() []byte {
		p, _ := json.Marshal(testCap(prov, now, time.Minute))
		b, _ := json.Marshal(sign.Envelope{Domain: sign.DomainCapability, Signer: prov.ID().String(), Payload: p})
		return b
	}()
	// Someone else's valid record stored under prov's key.
	misfiled, _ := terms.SealCapability(other, testCap(other, now, time.Minute))
	// Expired and issued-in-the-future records.
	expired, _ := terms.SealCapability(prov, testCap(prov, now.Add(-2*time.Minute), time.Minute))
	future, _ := terms.SealCapability(prov, testCap(prov, now.Add(10*time.Minute), time.Hour))
	// Right signature, wrong domain (a signature made for another message kind).
	wrongDomain := func() []byte {
		env, _ := sign.Seal(prov, sign.DomainBid, testCap(prov, now, time.Minute))
		env.Domain = sign.DomainCapability
		b, _ := env.Marshal()
		return b
	}()

	for name, rec := range map[string][]byte{
		"forged": forged, "tampered": tampered, "unsigned": unsigned, "misfiled": misfiled,
		"expired": expired, "future": future, "wrong-domain": wrongDomain, "garbage": []byte("{not json"),
	} {
		t.Run(name, func(t *testing.T) {
			if err := v.Validate(key, rec); err == nil {
				t.Errorf("%s record accepted", name)
			}
		})
	}
	if err := v.Validate("/other-ns/"+prov.ID().String(), good); err == nil {
		t.Error("record under a foreign namespace accepted")
	}

	// Select: newest sequence wins; invalid ones are never selected.
	c2 := testCap(prov, now, time.Minute)
	c2.Seq = 2
	newer, _ := terms.SealCapability(prov, c2)
	i, err := v.Select(key, [][]byte{good, forged, newer, expired})
	if err != nil || i != 2 {
		t.Fatalf("Select = %d, %v; want 2", i, err)
	}
	if _, err := v.Select(key, [][]byte{forged, expired}); err == nil {
		t.Fatal("Select chose among only invalid records")
	}
}

func TestDiscoveryKeysAndMatches(t *testing.T) {
	t.Parallel()
	c := terms.Capability{Region: "eu-west-1", GPUs: []terms.GPU{{Model: "NVIDIA H100", VRAMGB: 80}, {Model: "RTX 4090", VRAMGB: 24}}}
	keys := strings.Join(terms.DiscoveryKeys(c), " ")
	for _, k := range []string{"all", "region/eu", "region/eu-west", "region/eu-west-1", "gpu/h100", "gpu/rtx-4090", "vram/80", "vram/24", "vram/8"} {
		if !strings.Contains(" "+keys+" ", " "+k+" ") {
			t.Errorf("missing discovery key %s in %s", k, keys)
		}
	}
	if strings.Contains(keys, "vram/96") {
		t.Errorf("advertises a VRAM class it does not reach: %s", keys)
	}
	// Every query's lookup key is one the matching provider announced.
	for _, q := range []terms.Query{{GPU: "h100"}, {Region: "eu"}, {MinVRAM: 50}, {MinVRAM: 80}, {}} {
		if !c.Matches(q) {
			t.Errorf("%+v should match", q)
		}
		if !strings.Contains(" "+keys+" ", " "+terms.QueryKey(q)+" ") {
			t.Errorf("QueryKey(%+v) = %s not announced by a match", q, terms.QueryKey(q))
		}
	}
	for _, q := range []terms.Query{{GPU: "a100"}, {Region: "us"}, {Region: "europe"}, {MinVRAM: 81}, {GPU: "rtx4090", MinVRAM: 48}, {GPU: "h100", GPUCount: 2}} {
		if c.Matches(q) {
			t.Errorf("%+v should not match", q)
		}
	}
}

// TestCapabilityMIG: a record's MIG state survives sealing and opening,
// and every reader refuses one claiming more MIG instances than a GPU can
// hold or an instance without memory.
func TestCapabilityMIG(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	v := terms.CapabilityValidator{Now: func() time.Time { return now }}
	prov := signtest.New(t)
	rec := func(n, memoryMB int) terms.Capability {
		c := testCap(prov, now, time.Minute)
		c.GPUs[0].MIG = &terms.MIG{Enabled: true}
		for i := 0; i < n; i++ {
			c.GPUs[0].MIG.Instances = append(c.GPUs[0].MIG.Instances, terms.MIGInstance{UUID: fmt.Sprintf("MIG-%d", i), Profile: "1g.10gb", MemoryMB: memoryMB})
		}
		return c
	}
	b, err := terms.SealCapability(prov, rec(2, 9984))
	if err != nil {
		t.Fatal(err)
	}
	got, err := terms.OpenCapability(b, now)
	if err != nil || !got.GPUs[0].MIG.Partitioned() || len(got.GPUs[0].MIG.Instances) != 2 || got.GPUs[0].MIG.Instances[1] != (terms.MIGInstance{UUID: "MIG-1", Profile: "1g.10gb", MemoryMB: 9984}) {
		t.Fatalf("a record of two MIG instances opened as %+v, %v", got.GPUs, err)
	}
	for want, c := range map[string]terms.Capability{
		"9 MIG instances, more than 8": rec(9, 9984),
		"a MIG instance of 0 MB":       rec(1, 0),
		"a MIG instance of -5 MB":      rec(1, -5),
	} {
		b, err := terms.SealCapability(prov, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := terms.OpenCapability(b, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("open: %v, want %q", err, want)
		}
		if err := v.Validate(terms.CapabilityKey(prov.ID()), b); err == nil {
			t.Errorf("the DHT's validator took a record with %s", want)
		}
	}
}

// TestCapabilityFreeGPUs: a record says how many of its GPUs are free,
// and a renter's PriceNow quotes an hour at that occupancy; a provider
// that signs a record claiming more free GPUs than it has, or fewer than
// none, has it refused by the DHT's validator and by every reader.
func TestCapabilityFreeGPUs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC) // a Monday, no peak windows
	v := terms.CapabilityValidator{Now: func() time.Time { return now }}
	prov := signtest.New(t)
	key := terms.CapabilityKey(prov.ID())
	rec := func(free *int) terms.Capability {
		c := testCap(prov, now, time.Minute)
		c.GPUs = append(c.GPUs, c.GPUs[0], c.GPUs[0], c.GPUs[0])
		c.Policy.OccupancySurcharge = 1
		c.FreeGPUs = free
		return c
	}
	n := func(i int) *int { return &i }
	for _, c := range []struct {
		free  *int
		price float64
	}{{nil, 2}, {n(4), 2}, {n(1), 3.5}, {n(0), 4}} {
		b, err := terms.SealCapability(prov, rec(c.free))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Validate(key, b); err != nil {
			t.Fatalf("free %v of 4 rejected: %v", c.free, err)
		}
		got, err := terms.OpenCapability(b, now)
		if err != nil || (c.free != nil && (got.FreeGPUs == nil || *got.FreeGPUs != *c.free)) {
			t.Fatalf("free %v of 4: opened %v, %v", c.free, got.FreeGPUs, err)
		}
		if p := PriceNow(got, now); p != c.price {
			t.Errorf("free %v of 4: price now %v, want %v", c.free, p, c.price)
		}
	}
	for _, free := range []int{5, -1} {
		b, err := terms.SealCapability(prov, rec(n(free)))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Validate(key, b); err == nil || !strings.Contains(err.Error(), "GPUs free") {
			t.Errorf("a record with %d of its 4 GPUs free passed the validator: %v", free, err)
		}
		if _, err := terms.OpenCapability(b, now); err == nil {
			t.Errorf("a record with %d of its 4 GPUs free opened", free)
		}
	}
}
