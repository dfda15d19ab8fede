package auction

import (
	"fmt"
	"math"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Capacity notices. A provider that turned a call away because its GPUs
// were busy (Ineligible kind "busy") remembers the job; when GPUs free up
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
	// that other slice leases share (Calendar.FreeFraction): room for
	// fractional jobs only, which FreeGPUs does not count.
	FreeFraction float64   `json:"free_fraction,omitempty"`
	Jobs         []string  `json:"jobs"`
	IssuedAt     time.Time `json:"issued_at"`
}

// Free is the GPUs a notice says are free: whole devices and the share
// free in slices. A renter wakes named jobs while their BilledGPUs fit
// in it.
func (n CapacityNotice) Free() float64 { return float64(n.FreeGPUs) + n.FreeFraction }

// Bounds of what a provider remembers of the calls it turned away, and of
// a notice.
const (
	maxTurnedAway  = 256
	turnedAwayTTL  = 10 * time.Minute
	maxNoticeJobs  = 16
	noticeMaxDelay = 5 * time.Second // a notice older than this is stale
)

// turnedAway is a call a provider refused for busy GPUs.
type turnedAway struct {
	owner    peer.ID
	jobID    string
	gpus     int
	fraction float64 // Job.GPUFraction
	until    time.Time
}

// EncodeCapacityNotice seals a notice; its Provider must be the signer.
func EncodeCapacityNotice(s *sign.Signer, n CapacityNotice) ([]byte, error) {
	return sealAs(s, sign.DomainCapacityNotice, "capacity notice", n.Provider, n)
}

// DecodeCapacityNotice verifies a notice envelope, that its signer is its
// Provider and that it names at most maxNoticeJobs valid job ids.
func DecodeCapacityNotice(data []byte) (CapacityNotice, error) {
	return decode(data, sign.DomainCapacityNotice, decodeCapacityNotice)
}

func decodeCapacityNotice(env *sign.Envelope) (CapacityNotice, error) {
	n, err := openAs(env, sign.DomainCapacityNotice, "capacity notice", func(n *CapacityNotice) string { return n.Provider })
	if err != nil {
		return CapacityNotice{}, err
	}
	if len(n.Jobs) > maxNoticeJobs || n.FreeGPUs < 0 || math.IsNaN(n.FreeFraction) || n.FreeFraction < 0 || n.Free() <= 0 {
		return CapacityNotice{}, fmt.Errorf("auction: capacity notice: %d jobs, %d free gpus and %v in slices", len(n.Jobs), n.FreeGPUs, n.FreeFraction)
	}
	for _, j := range n.Jobs {
		if err := ValidID(j); err != nil {
			return CapacityNotice{}, fmt.Errorf("auction: capacity notice: job id: %w", err)
		}
	}
	return n, nil
}

// turnAwayLocked remembers a call refused for busy GPUs, until the job's
// start deadline (at most turnedAwayTTL). Called with p.mu held.
func (p *Provider) turnAwayLocked(job Job, owner peer.ID, now time.Time) {
	key := owner.String() + "/" + job.ID
	if _, ok := p.away[key]; !ok && len(p.away) >= maxTurnedAway {
		return
	}
	until := now.Add(turnedAwayTTL)
	if !job.Deadline.IsZero() && job.Deadline.Before(until) {
		until = job.Deadline
	}
	p.away[key] = turnedAway{owner: owner, jobID: job.ID, gpus: job.GPUCount, fraction: job.GPUFraction, until: until}
}

// announceFreed tells the renters whose calls were turned away for busy
// GPUs which of their jobs fit in the GPUs free now (see CapacityNotice).
// Each job is named once: turned away again, it is remembered again.
func (p *Provider) announceFreed() {
	now := p.cfg.Now()
	p.mu.Lock()
	if len(p.away) == 0 {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	free := len(p.cfg.Calendar.FreeDevices(now, now, nil))
	inSlices := p.cfg.Calendar.FreeFraction(now)
	if (free < 1 && inSlices <= 0) || p.draining.Load() {
		return
	}
	byOwner := map[peer.ID]*CapacityNotice{}
	p.mu.Lock()
	for key, a := range p.away {
		if !now.Before(a.until) {
			delete(p.away, key)
			continue
		}
		if !p.cfg.Calendar.HasRoom(now, now, nil, a.gpus, a.fraction) {
			continue
		}
		nt := byOwner[a.owner]
		if nt == nil {
			nt = &CapacityNotice{Provider: p.cfg.Signer.ID().String(), FreeGPUs: free, FreeFraction: inSlices, IssuedAt: now}
			byOwner[a.owner] = nt
		}
		if len(nt.Jobs) < maxNoticeJobs {
			nt.Jobs = append(nt.Jobs, a.jobID)
			delete(p.away, key)
		}
	}
	p.stats.Notices += len(byOwner)
	p.mu.Unlock()
	for owner, nt := range byOwner {
		msg, err := EncodeCapacityNotice(p.cfg.Signer, *nt)
		if err != nil {
			continue
		}
		p.sendToOwner(owner, "", msg, p.cfg.SendTimeout)
	}
}
