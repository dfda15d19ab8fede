package terms

import (
	"fmt"
	"math"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
)

// Capacity notices. A provider that turned a call away because its GPUs
// were busy (auction.Ineligible kind "busy") remembers the job; when GPUs free up
// before their booked end (a lease ended early) and room is left once the
// leases booked behind it moved earlier, it tells each renter it turned
// away which of those jobs it now has room for. The renter offers them
// again at once instead of waiting out its queue backoff. Notices go
// directly to those renters, on the bid stream: they cost nothing while
// capacity is plentiful, reach nobody who did not ask, and each job is
// named once per refusal.
type CapacityNotice struct {
	Provider string `json:"provider"`
	FreeGPUs int    `json:"free_gpus"`
	// FreeFraction is the GPU share free now in the slices of devices
	// that other slice leases share (auction.Calendar.FreeFraction): room for
	// fractional jobs only, which FreeGPUs does not count.
	FreeFraction float64   `json:"free_fraction,omitempty"`
	Jobs         []string  `json:"jobs"`
	IssuedAt     time.Time `json:"issued_at"`
}

// Free is the GPUs a notice says are free: whole devices and the share
// free in slices. A renter wakes named jobs while their BilledGPUs fit
// in it.
func (n CapacityNotice) Free() float64 { return float64(n.FreeGPUs) + n.FreeFraction }

// MaxNoticeJobs bounds the jobs one capacity notice names.
const MaxNoticeJobs = 16

// EncodeCapacityNotice seals a notice; its Provider must be the signer.
func EncodeCapacityNotice(s *sign.Signer, n CapacityNotice) ([]byte, error) {
	return sealAs(s, sign.DomainCapacityNotice, "capacity notice", n.Provider, n)
}

// DecodeCapacityNotice verifies a notice envelope, that its signer is its
// Provider and that it names at most MaxNoticeJobs valid job ids.
func DecodeCapacityNotice(data []byte) (CapacityNotice, error) {
	return decode(data, sign.DomainCapacityNotice, decodeCapacityNotice)
}

func decodeCapacityNotice(env *sign.Envelope) (CapacityNotice, error) {
	n, err := openAs(env, sign.DomainCapacityNotice, "capacity notice", func(n *CapacityNotice) string { return n.Provider })
	if err != nil {
		return CapacityNotice{}, err
	}
	if len(n.Jobs) > MaxNoticeJobs || n.FreeGPUs < 0 || math.IsNaN(n.FreeFraction) || n.FreeFraction < 0 || n.Free() <= 0 {
		return CapacityNotice{}, fmt.Errorf("auction: capacity notice: %d jobs, %d free gpus and %v in slices", len(n.Jobs), n.FreeGPUs, n.FreeFraction)
	}
	for _, j := range n.Jobs {
		if err := ValidID(j); err != nil {
			return CapacityNotice{}, fmt.Errorf("auction: capacity notice: job id: %w", err)
		}
	}
	return n, nil
}
