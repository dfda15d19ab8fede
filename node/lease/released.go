package lease

import (
	"encoding/json"
	"slices"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
)

// A renter remembers the leases it released or cancelled without running
// them (release: an award whose confirm came too late, a hedged award
// another beat, a gang's aborted member), so that their providers' final
// reports get a definitive answer, the renter's signed release
// (wire.LeaseEventAnswer.Released), instead of "no such lease", which a
// provider retries for its whole settlement window. They are kept for
// that window, at most maxReleased of them a job, in the job's record,
// which its machine keeps (jobmachine.Record.Released: the machine's
// Release remembers it), so that a restarted renter still answers.

// maxReleased bounds the released leases one job's record remembers
// (jobmachine.Rules.MaxReleased; the oldest go first): a provider whose
// report meets none retries, as before.
const maxReleased = 4096

// indexReleasedLocked brings the index of released leases in line with
// job key's record (its released leases were was and are now): the record,
// which the machine keeps, is their one owner. Entries past their
// settlement window go too, whoever's they were. t.mu is held.
func (t *Tracker) indexReleasedLocked(key string, was, now []jobmachine.Released) {
	for _, r := range now {
		t.released[r.Lease] = key
	}
	for _, r := range was {
		if !slices.ContainsFunc(now, func(n jobmachine.Released) bool { return n.Lease == r.Lease }) && t.released[r.Lease] == key {
			delete(t.released, r.Lease)
		}
	}
	if len(t.released) > maxReleased {
		for id, k := range t.released {
			if _, ok := t.releasedLocked(id); !ok || t.jobs[k] == nil {
				delete(t.released, id)
			}
		}
	}
}

// releasedLocked is lease id as the record that released it remembers it,
// within its settlement window. t.mu is held.
func (t *Tracker) releasedLocked(id string) (jobmachine.Released, bool) {
	v := t.jobs[t.released[id]]
	if v == nil {
		return jobmachine.Released{}, false
	}
	for _, r := range v.Released {
		if r.Lease == id && !t.now().After(r.End.Add(DefaultSettleWindow)) {
			return r, true
		}
	}
	return jobmachine.Released{}, false
}

// releasedAnswer is the answer to provider's report on lease leaseID if
// the renter released that lease (ok false if it did not): its signed
// release.
func (t *Tracker) releasedAnswer(provider, leaseID string) (_ []byte, ok bool, _ error) {
	t.mu.Lock()
	r, ok := t.releasedLocked(leaseID)
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
