package auction

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// rawCall is a call's wire form as a hostile peer handles it: the topic
// and the owner's job envelope, which it may rewrite without signing it
// again.
type rawCall struct {
	Topic string         `json:"topic"`
	Job   *sign.Envelope `json:"job"`
}

// forgeInvite rewrites a signed call's job so that it invites provider by
// name and asks nobody else, without signing it again.
func forgeInvite(t *testing.T, call []byte, invite string) []byte {
	t.Helper()
	var w rawCall
	if err := json.Unmarshal(call, &w); err != nil {
		t.Fatal(err)
	}
	var job terms.Job
	if err := json.Unmarshal(w.Job.Payload, &job); err != nil {
		t.Fatal(err)
	}
	job.BidInvited, job.BidSample, job.BidSeed = []string{invite}, 1e-9, "forged"
	payload, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	w.Job = &sign.Envelope{Domain: w.Job.Domain, Signer: w.Job.Signer, Payload: payload, Sig: w.Job.Sig}
	out, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCallOutsideTheSampleIsDroppedUnverified: a provider that hears on
// gossip a sampled call that does not ask it drops it before checking its
// signature (counted not_sampled), so a large market's providers spend
// nothing on the calls of others' samples; a forged call that names the
// provider is still verified, and refused. A call sent to the provider
// directly is not pre-parsed: it is verified, and refused when forged.
// Bytes that do not parse are refused either way.
func TestCallOutsideTheSampleIsDroppedUnverified(t *testing.T) {
	t.Parallel()
	m := newMarket(t, eightProviders())
	p := m.provs[0]
	me := p.s.ID().String()
	renter := signtest.New(t)
	job := euJob(m.now())
	job.ID, job.Owner, job.CreatedAt = terms.NewID("job"), renter.ID().String(), m.now()
	other := signtest.New(t).ID().String()
	job.BidInvited, job.BidSample, job.BidSeed = []string{other}, 1e-9, "seed"
	if terms.SampledBidder(&job, me) {
		t.Fatal("the call asks the provider: pick another seed")
	}
	call, err := terms.EncodeCall(renter, job, "t")
	if err != nil {
		t.Fatal(err)
	}
	if terms.CallAsks(call, me) {
		t.Fatal("CallAsks: a call that asks another provider asks this one")
	}
	// Its signature broken: dropped all the same, unchecked.
	var w rawCall
	if err := json.Unmarshal(call, &w); err != nil {
		t.Fatal(err)
	}
	w.Job.Sig = append([]byte(nil), w.Job.Sig...)
	w.Job.Sig[0] ^= 0xff
	broken, _ := json.Marshal(w)
	before := p.p.Stats()
	if err := p.p.HandleGossipedCall(peer.ID(renter.ID()), broken); err != nil {
		t.Fatalf("a gossiped call outside the sample: %v, want it dropped", err)
	}
	after := p.p.Stats()
	if after.Ineligible["not_sampled"] != before.Ineligible["not_sampled"]+1 || after.Calls != before.Calls {
		t.Fatalf("not_sampled %d → %d, calls %d → %d: want one more not_sampled, no call taken",
			before.Ineligible["not_sampled"], after.Ineligible["not_sampled"], before.Calls, after.Calls)
	}
	var rej *Rejection
	// The same bytes sent directly: verified, and refused.
	if _, err := p.p.HandleCall(peer.ID(renter.ID()), broken); !errors.As(err, &rej) || !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("a broken call sent directly: %v, want a bad-signature rejection", err)
	}
	if p.p.Stats().Ineligible["not_sampled"] != after.Ineligible["not_sampled"] {
		t.Fatal("a call sent directly was dropped as not sampled before it was verified")
	}
	// Forged to name the provider: verified, and refused.
	forged := forgeInvite(t, call, me)
	if !terms.CallAsks(forged, me) {
		t.Fatal("CallAsks: the forged call names the provider")
	}
	err = p.p.HandleGossipedCall(peer.ID(renter.ID()), forged)
	if !errors.As(err, &rej) || !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("forged call naming the provider: %v, want a bad-signature rejection", err)
	}
	for _, junk := range [][]byte{nil, []byte("{"), []byte(`{"job":{"payload":"!!"}}`), []byte(`{"job":null}`)} {
		if !terms.CallAsks(junk, me) {
			t.Fatalf("terms.CallAsks(%q) = false: bytes that do not parse must reach DecodeCall", junk)
		}
		if err := p.p.HandleGossipedCall(peer.ID(renter.ID()), junk); err == nil {
			t.Fatalf("HandleGossipedCall(%q) took junk", junk)
		}
		if _, err := p.p.HandleCall(peer.ID(renter.ID()), junk); err == nil {
			t.Fatalf("HandleCall(%q) took junk", junk)
		}
	}
}

// TestRetriedCallAsksMore: each of a job's next two attempts (a re-offer
// after a sample found no free GPU) asks twice as many providers as the
// one before; later ones no more.
func TestRetriedCallAsksMore(t *testing.T) {
	t.Parallel()
	var all []string
	for range 40 {
		all = append(all, signtest.New(t).ID().String())
	}
	tap := &callTap{}
	r, err := NewRenter(RenterConfig{Signer: signtest.New(t), Transport: tap, MaxBidders: 4,
		Reputation: hooks{reliability: func(string) float64 { return terms.NeutralReliability }},
		Directory:  hooks{expected: func(*terms.Job) []string { return all }}})
	if err != nil {
		t.Fatal(err)
	}
	for attempt, want := range []float64{4, 8, 16, 16, 16} {
		ctx, cancel := context.WithCancel(context.Background())
		tap.armed(cancel)
		j := euJob(time.Now())
		j.Attempt = attempt
		if _, err := r.Post(ctx, j); !errors.Is(err, context.Canceled) {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		cancel()
		c, err := terms.DecodeCall(tap.last())
		if err != nil {
			t.Fatal(err)
		}
		got := c.Job.BidSample * float64(len(all))
		if got < want-0.01 || got > want+0.01 {
			t.Fatalf("attempt %d asks %.1f of %d providers, want %v", attempt, got, len(all), want)
		}
	}
}
