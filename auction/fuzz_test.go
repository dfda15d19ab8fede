package auction

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

func TestTopics(t *testing.T) {
	t.Parallel()
	j := &terms.Job{Region: "eu-west", GPUModels: []string{"A100", "h100", "a100"}}
	if got := JobTopics(j); len(got) != 2 || got[0] != TopicPrefix+"eu/a100" || got[1] != TopicPrefix+"eu/h100" {
		t.Fatalf("JobTopics = %v", got)
	}
	if got := JobTopics(&terms.Job{}); len(got) != 1 || got[0] != TopicPrefix+"any/any" {
		t.Fatalf("JobTopics(any) = %v", got)
	}
	// Every provider hears every job it could be eligible for.
	caps := []terms.Capability{
		{Region: "eu-west", GPUs: gpus("A100", 80, 1)}, {Region: "us-east", GPUs: append(gpus("RTX 4090", 24, 1), gpus("H100", 80, 1)...)},
		{Region: "eu", GPUs: gpus("h100", 80, 1)}, {Region: "", GPUs: gpus("A100", 40, 1)},
	}
	jobs := []terms.Job{{}, {Region: "eu"}, {Region: "eu-west"}, {Region: "us", GPUModels: []string{"rtx 4090"}},
		{GPUModels: []string{"H100", "A100"}}, {Region: "eu", GPUModels: []string{"h100"}}}
	for ci := range caps {
		subs := map[string]bool{}
		for _, topic := range ProviderTopics(&caps[ci]) {
			subs[topic] = true
		}
		for ji := range jobs {
			ps := ProviderState{Cap: &caps[ci]}
			eligible := regionSatisfies(jobs[ji].Region, caps[ci].Region)
			jj := jobs[ji]
			jj.GPUCount = 1
			if _, _, err := pickModel(ps.Cap, &jj); err != nil {
				eligible = false
			}
			heard := false
			for _, topic := range JobTopics(&jobs[ji]) {
				heard = heard || subs[topic]
			}
			if eligible && !heard {
				t.Errorf("provider %d (%s) misses job %d (%+v): subs %v", ci, caps[ci].Region, ji, jobs[ji], ProviderTopics(&caps[ci]))
			}
		}
	}
}

// FuzzRankDecodedBid: whatever bid a hostile provider signs, once
// terms.DecodeBid accepts it the ranking takes it without panicking.
func FuzzRankDecodedBid(f *testing.F) {
	s := signtest.Seeded(f, "auction")
	now := at(0, "10:00")
	seed, err := json.Marshal(terms.Bid{JobID: "job-1", Provider: s.ID().String(), Price: 1, Start: now, End: now.Add(time.Hour), Nonce: "n"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"job_id":"job-1","provider":"` + s.ID().String() + `","price":-1e308,"nonce":"n","start":"0001-01-01T00:00:00Z","end":"9999-12-31T23:59:59Z"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := terms.DecodeBid(signtest.RawBytes(t, s, sign.DomainBid, payload))
		if err != nil {
			return
		}
		j := &terms.Job{ID: b.JobID, Attempt: b.Attempt, MaxPrice: 10, Duration: time.Hour}
		_ = RankAt(j, []terms.Candidate{{Bid: b, Reliability: 0.5}}, now)
	})
}

// FuzzStaticFitOpenedCapability: capability records come from the DHT,
// put there by anyone; whatever record terms.OpenCapability accepts,
// eligibility reads its devices (MIG state included) without panicking
// and refuses in one line.
func FuzzStaticFitOpenedCapability(f *testing.F) {
	s := signtest.Seeded(f, "auction")
	now := at(0, "10:00")
	c := terms.Capability{Peer: s.ID().String(), Region: "eu-west", GPUs: gpus("A100", 80, 2), IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
	c.GPUs[1].Isolation = terms.IsolationMIG
	c.GPUs[1].MIG = &terms.MIG{Enabled: true, Instances: []terms.MIGInstance{{UUID: "MIG-a", Profile: "3g.40gb", MemoryMB: 40192}, {UUID: "MIG-b", MemoryMB: 40192}}}
	c.Policy.Slices = []terms.SliceRule{{Devices: []int{1}, Count: 2}}
	seed, err := json.Marshal(c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, payload []byte) {
		c, err := terms.OpenCapability(signtest.RawBytes(t, s, sign.DomainCapability, payload), now)
		if err != nil {
			return
		}
		for _, fr := range []float64{0, 0.25, 0.5} {
			j := &terms.Job{ID: "j", Tier: terms.Silver, MaxPrice: 10, GPUCount: 1, GPUFraction: fr, Duration: time.Hour, MinVRAMGB: 20, Run: terms.RunSpec{Command: []string{"x"}}}
			if err := StaticFit(&c, j); err != nil && strings.Contains(err.Error(), "\n") {
				t.Fatalf("StaticFit refused in more than one line: %q", err)
			}
		}
	})
}
