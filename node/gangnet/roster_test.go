package gangnet

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction"
)

// TestLeaseRoster: a gang member's lease carries its roster in its signed
// terms (auction.Lease.Gang); LeaseRoster reads it, a lease of no gang has
// none, and a gang job's lease without terms, or with terms that do not
// name it at its rank, fails.
func TestLeaseRoster(t *testing.T) {
	renter, p0, p1 := signtest.New(t).ID(), signtest.New(t).ID(), signtest.New(t).ID()
	g := auction.Gang{ID: "gang-1", Rank: 1, Size: 2, Members: []auction.GangMember{
		{Rank: 0, Provider: p0.String(), LeaseID: "lease-0"}, {Rank: 1, Provider: p1.String(), LeaseID: "lease-1"}}}
	job := auction.Job{ID: "job-1", Nodes: 2}
	l := auction.Lease{ID: "lease-1", JobID: "job-1", Renter: renter.String(), Provider: p1.String(), Gang: &g}
	r, rank, err := LeaseRoster(l, job)
	if err != nil || rank != 1 || r.ID != "gang-1" || r.Renter != renter || len(r.Members) != 2 ||
		r.Members[0].Provider != p0 || r.Members[1].LeaseID != "lease-1" || r.Validate() != nil {
		t.Fatalf("roster %+v rank %d: %v", r, rank, err)
	}
	if r, _, err := LeaseRoster(auction.Lease{ID: "lease-x"}, auction.Job{ID: "job-2"}); r != nil || err != nil {
		t.Fatalf("a lease of no gang: %+v %v", r, err)
	}
	if _, _, err := LeaseRoster(auction.Lease{ID: "lease-x"}, job); err == nil || !strings.Contains(err.Error(), "carries no gang terms") {
		t.Fatalf("a gang job's lease without terms: %v", err)
	}
	other := l
	other.ID = "lease-0" // rank 1's terms on another lease
	if _, _, err := LeaseRoster(other, job); err == nil {
		t.Fatal("terms naming another lease at its rank accepted")
	}
}
