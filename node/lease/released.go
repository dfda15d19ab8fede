package lease

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
)

// A renter remembers the leases it released or cancelled without running
// them (release: an award whose confirm came too late, a hedged award
// another beat, a gang's aborted member), so that their providers' final
// reports get a definitive answer, the renter's signed release
// (wire.LeaseEventAnswer.Released), instead of "no such lease", which a
// provider retries for its whole settlement window. They are kept for
// that window, at most maxReleased of them, and persisted with their
// job's record so that a restarted renter still answers.

// maxReleased bounds the released leases a renter remembers (the oldest
// go first): a provider whose report meets none retries, as before.
const maxReleased = 4096

// releasedLease is a lease the renter released, as remembered and
// persisted.
type releasedLease struct {
	Lease    string    `json:"lease"`
	Job      string    `json:"job"`
	Provider string    `json:"provider"`
	End      time.Time `json:"end"`
}

// rememberReleasedLocked notes that the renter released lease l, and drops what
// is past its settlement window or over maxReleased. t.mu is held.
func (t *Tracker) rememberReleasedLocked(l terms.Lease) {
	now := t.now()
	t.released[l.ID] = releasedLease{Lease: l.ID, Job: l.JobID, Provider: l.Provider, End: l.End}
	for id, r := range t.released {
		if now.After(r.End.Add(DefaultSettleWindow)) {
			delete(t.released, id)
		}
	}
	if over := len(t.released) - maxReleased; over > 0 {
		all := make([]releasedLease, 0, len(t.released))
		for _, r := range t.released {
			all = append(all, r)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].End.Before(all[j].End) })
		for _, r := range all[:over] {
			delete(t.released, r.Lease)
		}
	}
}

// releasedOfLocked is job jobID's released leases, as persisted. t.mu is
// held.
func (t *Tracker) releasedOfLocked(jobID string) []releasedLease {
	var out []releasedLease
	for _, r := range t.released {
		if r.Job == jobID {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Lease < out[j].Lease })
	return out
}

// reloadReleased takes back, at a restart, a job's released leases still
// in their settlement window.
func (t *Tracker) reloadReleased(rs []releasedLease) {
	now := t.now()
	for _, r := range rs {
		if r.Lease != "" && !now.After(r.End.Add(DefaultSettleWindow)) {
			t.released[r.Lease] = r
		}
	}
}

// releasedAnswer is the answer to provider's report on lease leaseID if
// the renter released that lease (ok false if it did not): its signed
// release.
func (t *Tracker) releasedAnswer(provider, leaseID string) (_ []byte, ok bool, _ error) {
	t.mu.Lock()
	r, ok := t.released[leaseID]
	t.mu.Unlock()
	if !ok || r.Provider != provider {
		return nil, false, nil
	}
	t.cfg.Counters.Add("renter.event_released_lease")
	b, err := ReleasedAnswer(t.cfg.Signer, r.Lease, r.Job)
	return b, true, err
}

// ReleasedAnswer is a renter's answer to the final report of lease
// leaseID of job jobID that it released: its signed CancelRequest for it.
func ReleasedAnswer(s *sign.Signer, leaseID, jobID string) ([]byte, error) {
	env, err := sign.Seal(s, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: leaseID, JobID: jobID})
	if err != nil {
		return nil, err
	}
	return json.Marshal(wire.LeaseEventAnswer{Released: env})
}
