package auction

import (
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Bounds of what a provider remembers of the calls it turned away, and of
// a notice.
const (
	maxTurnedAway  = 256
	turnedAwayTTL  = 10 * time.Minute
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

// turnAwayLocked remembers a call refused for busy GPUs, until the job's
// start deadline (at most turnedAwayTTL). Called with p.mu held.
func (p *Provider) turnAwayLocked(job terms.Job, owner peer.ID, now time.Time) {
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
	byOwner := map[peer.ID]*terms.CapacityNotice{}
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
			nt = &terms.CapacityNotice{Provider: p.cfg.Signer.ID().String(), FreeGPUs: free, FreeFraction: inSlices, IssuedAt: now}
			byOwner[a.owner] = nt
		}
		if len(nt.Jobs) < terms.MaxNoticeJobs {
			nt.Jobs = append(nt.Jobs, a.jobID)
			delete(p.away, key)
		}
	}
	p.stats.Notices += len(byOwner)
	p.mu.Unlock()
	for owner, nt := range byOwner {
		msg, err := terms.EncodeCapacityNotice(p.cfg.Signer, *nt)
		if err != nil {
			continue
		}
		p.sendToOwner(owner, "", msg, p.cfg.SendTimeout)
	}
}
