package terms

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
)

// Gang is a gang job's placement terms as one member's award and lease
// carry them (Job.Nodes > 1): the gang's id, this member's rank, the
// gang's size and every member (rank → provider, lease). The renter signs
// it inside the award (DomainAward), so a provider that verified its award
// knows who its gang peers are, and may admit exactly those: members of
// the same gang, signed by the same renter. A gang is placed all or
// nothing: each provider holds its member's booking until the renter
// commits the whole gang (GangDecision), and it runs and bills nothing
// before.
type Gang struct {
	ID   string `json:"id"`
	Rank int    `json:"rank"`
	// Size is the gang's world size K: Job.Nodes, len(Members).
	Size int `json:"size"`
	// Members lists every member by rank (Members[i].Rank == i).
	Members []GangMember `json:"members"`
}

// GangMember is one member of a gang: its rank, the provider that runs it
// and its lease there.
type GangMember struct {
	Rank     int    `json:"rank"`
	Provider string `json:"provider"`
	LeaseID  string `json:"lease_id"`
}

// Check reports whether g is a well-formed gang in which the member of
// g.Rank is lease leaseID on provider: a valid id, 2 to MaxNodes members,
// ranked 0..Size-1 in order, on distinct providers, with distinct valid
// lease ids.
func (g *Gang) Check(leaseID, provider string) error {
	switch {
	case g == nil:
		return errors.New("auction: no gang")
	case ValidID(g.ID) != nil:
		return fmt.Errorf("auction: gang id: %w", ValidID(g.ID))
	case g.Size < 2 || g.Size > MaxNodes || len(g.Members) != g.Size:
		return fmt.Errorf("auction: gang of %d with %d members (2 to %d)", g.Size, len(g.Members), MaxNodes)
	case g.Rank < 0 || g.Rank >= g.Size:
		return fmt.Errorf("auction: gang rank %d of %d", g.Rank, g.Size)
	}
	providers, leases := map[string]bool{}, map[string]bool{}
	for i, m := range g.Members {
		if m.Rank != i {
			return fmt.Errorf("auction: gang member %d has rank %d", i, m.Rank)
		}
		if err := ValidID(m.LeaseID); err != nil {
			return fmt.Errorf("auction: gang member %d: lease id: %w", i, err)
		}
		if err := ValidPeerID(m.Provider); err != nil {
			return fmt.Errorf("auction: gang member %d: provider: %w", i, err)
		}
		if providers[m.Provider] || leases[m.LeaseID] {
			return fmt.Errorf("auction: gang member %d repeats a provider or lease", i)
		}
		providers[m.Provider], leases[m.LeaseID] = true, true
	}
	if me := g.Members[g.Rank]; me.LeaseID != leaseID || me.Provider != provider {
		return fmt.Errorf("auction: gang rank %d is lease %s on %s, not this award", g.Rank, me.LeaseID, me.Provider)
	}
	return nil
}

// WithRank returns a copy of g for the member of rank.
func (g Gang) WithRank(rank int) *Gang {
	g.Rank = rank
	g.Members = slices.Clone(g.Members)
	return &g
}

// GangDecision is the renter's signed word on a gang member its provider
// holds (an award with a Gang, confirmed): Commit runs it (every member
// confirmed), else it is aborted and its booking freed. Sent on the award
// stream; a commit is answered with a signed Confirm.
type GangDecision struct {
	GangID   string    `json:"gang_id"`
	JobID    string    `json:"job_id"`
	Attempt  int       `json:"attempt"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	LeaseID  string    `json:"lease_id"`
	Commit   bool      `json:"commit"`
	IssuedAt time.Time `json:"issued_at"`
}

// EncodeGangDecision seals a gang decision; its Renter must be the signer.
func EncodeGangDecision(s *sign.Signer, d GangDecision) ([]byte, error) {
	return sealAs(s, sign.DomainGangDecision, "gang decision", d.Renter, d)
}

// DecodeGangDecision verifies a gang decision envelope, that its signer is
// its Renter and that its ids satisfy ValidID.
func DecodeGangDecision(data []byte) (GangDecision, error) {
	return decode(data, sign.DomainGangDecision, decodeGangDecision)
}

func decodeGangDecision(env *sign.Envelope) (GangDecision, error) {
	d, err := openAs(env, sign.DomainGangDecision, "gang decision", func(d *GangDecision) string { return d.Renter })
	if err != nil {
		return GangDecision{}, err
	}
	if err := validIDs("gang decision", "gang id", d.GangID, "job id", d.JobID, "lease id", d.LeaseID); err != nil {
		return GangDecision{}, err
	}
	return d, nil
}
