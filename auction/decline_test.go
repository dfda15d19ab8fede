package auction

import (
	"context"
	"errors"
	"github.com/libp2p/go-libp2p/core/peer"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestDeclinesExplained: a job no provider will take reports, aggregated
// by kind, the reasons of the providers that heard its call; without
// WantDeclines nobody says anything.
func TestDeclinesExplained(t *testing.T) {
	t.Parallel()
	for _, want := range []bool{true, false} {
		name := "asked"
		if !want {
			name = "not asked"
		}
		t.Run(name, func(t *testing.T) {
			m := newMarket(t, eightProviders())
			r, _ := m.renter(t, RenterConfig{QuietClose: 100 * time.Millisecond})
			j := euJob(m.now())
			j.MaxPrice, j.BidWindow, j.WantDeclines = 0.1, 200*time.Millisecond, want
			// europe-trap also hears the EU call and must refuse it itself.
			m.provs[6].t.Subscribe(JobTopics(&j)...)
			job, err := r.Post(context.Background(), j)
			if !errors.Is(err, ErrUnplaceable) {
				t.Fatalf("post: %v", err)
			}
			st, _ := r.Status(job.ID)
			if !want {
				if len(st.Declines) != 0 {
					t.Fatalf("declines %v though the call did not ask", st.Declines)
				}
				return
			}
			// Heard by the 7 providers on EU topics (us-cheapest does not
			// hear it): the trap is out of region, the 24 GB card too
			// small, and all 5 others quote above the 0.1 maximum.
			wantDeclines := map[string]int{"price": 5, "region": 1, "vram": 1}
			if len(st.Declines) != len(wantDeclines) {
				t.Fatalf("declines %v, want %v", st.Declines, wantDeclines)
			}
			for k, n := range wantDeclines {
				if st.Declines[k] != n {
					t.Fatalf("declines %v, want %v", st.Declines, wantDeclines)
				}
			}
			if txt := st.Reasons[len(st.Reasons)-1]; !strings.Contains(txt, "no bids (5 declined: price; 1: region; 1: vram)") {
				t.Fatalf("reason %q", txt)
			}
		})
	}
}

// TestDeclineChecks: a decline relayed by another peer, a second decline
// from the same provider and a decline for an unknown job are refused.
func TestDeclineChecks(t *testing.T) {
	t.Parallel()
	m := newMarket(t, nil)
	r, _ := m.renter(t, RenterConfig{})
	prov, other := signtest.New(t), signtest.New(t)
	j := euJob(m.now())
	j.ID, j.BidWindow = "job-d", 2*time.Second
	heard := m.hearCall(t, j)
	go r.Post(context.Background(), j)
	waitCall(t, heard, 2*time.Second)
	d, err := terms.EncodeDecline(prov, terms.Decline{JobID: "job-d", Provider: prov.ID().String(), Kind: "price", IssuedAt: m.now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.HandleBid(peer.ID(other.ID()), d); !isRejection(err, "sender_mismatch") {
		t.Fatalf("relayed decline: %v", err)
	}
	if err := r.HandleBid(peer.ID(prov.ID()), d); err != nil {
		t.Fatal(err)
	}
	if err := r.HandleBid(peer.ID(prov.ID()), d); !isRejection(err, "duplicate_provider") {
		t.Fatalf("second decline: %v", err)
	}
	u, _ := terms.EncodeDecline(prov, terms.Decline{JobID: "job-unknown", Provider: prov.ID().String(), Kind: "price", IssuedAt: m.now()})
	if err := r.HandleBid(peer.ID(prov.ID()), u); !isRejection(err, "unknown_job") {
		t.Fatalf("decline for an unknown job: %v", err)
	}
	if st, _ := r.Status("job-d"); st.Declines["price"] != 1 {
		t.Fatalf("declines %v", st.Declines)
	}
	r.Cancel("job-d")
}
