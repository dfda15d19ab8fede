package auction

import (
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

func fuzzSeeds(f *testing.F) (call, bid, award []byte) {
	s := signtest.New(f)
	now := at(0, "10:00")
	j := validJob()
	j.ID, j.Owner, j.CreatedAt = "job-1", s.ID().String(), now
	var err error
	if call, err = EncodeCall(s, j, TopicPrefix+"eu/a100"); err != nil {
		f.Fatal(err)
	}
	if bid, err = EncodeBid(s, Bid{JobID: "job-1", Provider: s.ID().String(), Price: 1, Start: now, End: now.Add(time.Hour), Nonce: "n"}); err != nil {
		f.Fatal(err)
	}
	if award, err = EncodeAward(s, Award{LeaseID: "l", JobID: "job-1", Renter: j.Owner, Provider: "p", Job: j}); err != nil {
		f.Fatal(err)
	}
	for _, b := range [][]byte{call, bid, award, nil, []byte("{}"), []byte(`{"domain":"bid/v1","signer":"x","payload":"","sig":"AA=="}`),
		[]byte(`{"topic":"t","job":{"domain":"job/v1"}}`), []byte("null"), []byte(`[1,2`)} {
		f.Add(b)
	}
	return call, bid, award
}

func FuzzDecodeCall(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCall(data)
		if err != nil {
			return
		}
		// A decoded call is re-validatable without panicking, and its owner
		// is a real peer id (the signer).
		_ = c.Job.Validate()
		if c.Job.Owner == "" {
			t.Fatal("decoded call without owner")
		}
		_ = JobTopics(&c.Job)
	})
}

func FuzzDecodeBid(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBid(data)
		if err != nil {
			return
		}
		if b.Provider == "" {
			t.Fatal("decoded bid without provider")
		}
		j := &Job{ID: b.JobID, Attempt: b.Attempt, MaxPrice: 10, Duration: time.Hour}
		_ = RankAt(j, []Candidate{{Bid: b, Reliability: 0.5}}, at(0, "10:00"))
	})
}

func FuzzDecodeAward(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeAward(data)
		if err != nil {
			return
		}
		if a.Renter == "" || a.Renter != a.Job.Owner {
			t.Fatal("decoded award whose renter is not the job owner")
		}
	})
}

func TestDecodeRoundTrip(t *testing.T) {
	s, other := signtest.Pair(t)
	now := at(0, "10:00")
	j := validJob()
	j.ID, j.Owner = "job-1", s.ID().String()
	data, err := EncodeCall(s, j, "topic")
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeCall(data)
	if err != nil || c.Job.ID != "job-1" || c.Topic != "topic" || c.Job.Duration != time.Hour {
		t.Fatalf("call round trip: %+v %v", c, err)
	}
	if _, err := EncodeCall(other, j, "topic"); err == nil {
		t.Fatal("sealed a job for another owner")
	}
	b := Bid{JobID: "job-1", Provider: s.ID().String(), Price: 1.25, Start: now, End: now.Add(time.Hour), Nonce: "n"}
	data, _ = EncodeBid(s, b)
	got, err := DecodeBid(data)
	if err != nil || got.Price != 1.25 || !got.Start.Equal(now) {
		t.Fatalf("bid round trip: %+v %v", got, err)
	}
	if _, err := EncodeBid(other, b); err == nil {
		t.Fatal("sealed a bid for another provider")
	}
	data, _ = EncodeConfirm(other, Confirm{LeaseID: "l", Accepted: true})
	if cf, id, err := DecodeConfirm(data); err != nil || id != other.ID() || !cf.Accepted {
		t.Fatalf("confirm round trip: %+v %v %v", cf, id, err)
	}
}

func TestTopics(t *testing.T) {
	j := &Job{Region: "eu-west", GPUModels: []string{"A100", "h100", "a100"}}
	if got := JobTopics(j); len(got) != 2 || got[0] != TopicPrefix+"eu/a100" || got[1] != TopicPrefix+"eu/h100" {
		t.Fatalf("JobTopics = %v", got)
	}
	if got := JobTopics(&Job{}); len(got) != 1 || got[0] != TopicPrefix+"any/any" {
		t.Fatalf("JobTopics(any) = %v", got)
	}
	// Every provider hears every job it could be eligible for.
	caps := []Capability{
		{Region: "eu-west", GPUs: gpus("A100", 80, 1)}, {Region: "us-east", GPUs: append(gpus("RTX 4090", 24, 1), gpus("H100", 80, 1)...)},
		{Region: "eu", GPUs: gpus("h100", 80, 1)}, {Region: "", GPUs: gpus("A100", 40, 1)},
	}
	jobs := []Job{{}, {Region: "eu"}, {Region: "eu-west"}, {Region: "us", GPUModels: []string{"rtx 4090"}},
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
			if _, _, err := pickModel(ps.Cap.GPUs, &jj); err != nil {
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
