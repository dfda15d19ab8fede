package auction

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// callTap is a renter's transport that keeps the calls it publishes and
// then ends the auction (stop cancels the Post's context): whom a call
// asks is in the call itself.
type callTap struct {
	mu    sync.Mutex
	calls [][]byte
	stop  context.CancelFunc
}

func (c *callTap) Publish(_ context.Context, _ string, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, data)
	c.stop()
	return nil
}

// armed makes the next call delivered stop the auction (stop), and
// forgets the calls before.
func (c *callTap) armed(stop context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls, c.stop = nil, stop
}

// last is the last call delivered since armed.
func (c *callTap) last() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) == 0 {
		return nil
	}
	return c.calls[len(c.calls)-1]
}

func (c *callTap) SendCall(_ context.Context, _ peer.ID, data []byte) ([]byte, error) {
	return nil, c.Publish(context.Background(), "", data)
}

func (c *callTap) SendBid(context.Context, peer.ID, []byte) error {
	return errors.New("callTap: no bids")
}

func (c *callTap) SendAward(context.Context, peer.ID, []byte) ([]byte, error) {
	return nil, errors.New("callTap: no awards")
}

// TestEstablishedProvidersAskedAmongSybilRecords: five providers the
// renter's book scores above the prior are expected to answer a job
// alongside a thousand fresh identities' capability records. Every one of
// 100 calls asks all five (by name, Job.BidInvited), and the call still
// asks about MaxBidders providers in all: the sybils dilute only the draw
// for the remaining places.
func TestEstablishedProvidersAskedAmongSybilRecords(t *testing.T) {
	t.Parallel()
	established := map[string]float64{}
	var all []string
	for i := range 1005 {
		id := signtest.New(t).ID().String()
		if i%200 == 7 {
			established[id] = 0.55 + 0.05*float64(len(established))
		}
		all = append(all, id)
	}
	tap := &callTap{}
	const maxBidders = 16 // room to invite all five by name (up to half)
	r, err := NewRenter(RenterConfig{Signer: signtest.New(t), Transport: tap, MaxBidders: maxBidders,
		Reputation: hooks{reliability: func(p string) float64 {
			if s, ok := established[p]; ok {
				return s
			}
			return terms.NeutralReliability
		}},
		Directory: hooks{expected: func(*terms.Job) []string { return all }}})
	if err != nil {
		t.Fatal(err)
	}
	const calls = 100
	missed, asked, most := 0, 0, 0
	for i := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		tap.armed(cancel)
		if _, err := r.Post(ctx, euJob(time.Now())); !errors.Is(err, context.Canceled) {
			t.Fatalf("call %d: auction ended with %v, want it stopped once the call was out", i, err)
		}
		cancel()
		c, err := terms.DecodeCall(tap.last())
		if err != nil {
			t.Fatal(err)
		}
		job := c.Job
		if err := job.Validate(); err != nil {
			t.Fatalf("call %d is invalid to its providers: %v", i, err)
		}
		for p := range established {
			if !terms.SampledBidder(&job, p) {
				missed++
				break
			}
		}
		n := 0
		for _, p := range all {
			if terms.SampledBidder(&job, p) {
				n++
			}
		}
		asked += n
		most = max(most, n)
		if len(job.BidInvited) > maxBidders/2 || n > 3*maxBidders {
			t.Fatalf("call %d asks %d of %d providers, %d by name (MaxBidders %d)", i, n, len(all), len(job.BidInvited), maxBidders)
		}
	}
	t.Logf("%d calls: %d left out an established provider; %.1f providers asked on average, at most %d",
		calls, missed, float64(asked)/calls, most)
	if missed > 0 {
		t.Fatalf("%d of %d calls did not ask all %d established providers", missed, calls, len(established))
	}
	if avg := float64(asked) / calls; avg > 1.25*maxBidders {
		t.Fatalf("calls ask %.1f providers on average, want about MaxBidders (%d)", avg, maxBidders)
	}
}

// TestInvitedBidderIsAsked: a provider a sampled call invites by name is
// asked, and its bid taken, whatever the draw says of it.
func TestInvitedBidderIsAsked(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &terms.Job{ID: "j", MaxPrice: 2, Duration: time.Hour, BidSample: 0.5, BidSeed: "seed"}
	var out string
	for i := 0; out == ""; i++ {
		if p := signtest.New(t).ID().String(); !terms.SampledBidder(j, p) {
			out = p
		}
	}
	j.BidInvited = []string{out}
	if !terms.SampledBidder(j, out) {
		t.Fatal("an invited provider outside the draw is not asked")
	}
	bid := terms.Candidate{Bid: terms.Bid{JobID: j.ID, Provider: out, Price: 1, Start: now, End: now.Add(j.Duration),
		ExpiresAt: now.Add(time.Minute)}, Reliability: 0.5}
	if got := RankAt(j, []terms.Candidate{bid}, now); got[0].Rejected != "" {
		t.Fatalf("the invited provider's bid was rejected: %s", got[0].Rejected)
	}
}

// TestBidInvitedValidated: a call inviting too many providers, a name that
// is not a peer id, or one provider twice is invalid, each with its field.
func TestBidInvitedValidated(t *testing.T) {
	t.Parallel()
	valid := func() terms.Job {
		return terms.Job{Tier: terms.Silver, MaxPrice: 2, GPUCount: 1, Duration: time.Hour, Run: terms.RunSpec{Command: []string{"true"}},
			BidSample: 0.5, BidSeed: "seed"}
	}
	a, b := signtest.New(t).ID().String(), signtest.New(t).ID().String()
	j := valid()
	j.BidInvited = []string{a, b}
	if err := j.Validate(); err != nil {
		t.Fatalf("two invited providers: %v", err)
	}
	var many []string
	for range terms.MaxBidInvited + 1 {
		many = append(many, signtest.New(t).ID().String())
	}
	for _, c := range []struct {
		name    string
		invited []string
		field   string
	}{
		{"too many", many, "bid_invited"},
		{"not a peer id", []string{a, "provider-1"}, "bid_invited[1]"},
		{"empty", []string{""}, "bid_invited[0]"},
		{"overlong", []string{strings.Repeat("1", 10_000)}, "bid_invited[0]"},
		{"twice", []string{a, b, a}, "bid_invited[2]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := valid()
			j.BidInvited = c.invited
			err := j.Validate()
			fe := terms.FieldErrors(err)
			if len(fe) != 1 || fe[0].Field != c.field || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Validate = %v, want one error on %s", err, c.field)
			}
			t.Log(fmt.Sprint(err))
		})
	}
}
