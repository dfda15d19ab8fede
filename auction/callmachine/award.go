package callmachine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Results of an award (Try.Result, AwardDone.Result) the rules read: the
// driver's award says "confirmed" or why not.
const (
	Confirmed = "confirmed"
	// Timeout: no confirm came within the renter's ConfirmTimeout.
	Timeout = "timeout"
	// ErrorPrefix begins the result of an award whose sending failed.
	ErrorPrefix = "error: "
	// ConfirmRefused begins the result of an award its provider confirmed
	// on terms the renter refuses (a re-time that breaks
	// terms.Lease.Retimed's rule): the provider has booked it, so it is
	// released.
	ConfirmRefused = "confirm refused: "
	// SkippedClaimed is the result of an award not sent because its GPUs
	// are claimed by another of this renter's auctions (Claimed).
	SkippedClaimed = "skipped: its GPUs are awarded to another of this renter's jobs"
	// SkippedExpired is the result of an award not sent because its bid
	// expired by then.
	SkippedExpired = "skipped: bid expired"
	// DeclinedPrefix begins the result of an award its provider declined,
	// followed by the provider's reason (terms.Confirm.Reason).
	DeclinedPrefix = "declined: "
	// Pending is the result of an award sent and not answered yet.
	Pending = "pending"
)

// MayHaveBooked reports whether an award that ended with result (other
// than Confirmed) may still have been booked by its provider: it timed
// out or failed in transport after being sent, or its confirm was
// refused.
func MayHaveBooked(result string) bool {
	return result == Timeout || strings.HasPrefix(result, ErrorPrefix) || strings.HasPrefix(result, ConfirmRefused)
}

// LostRace reports whether an award that ended with result lost a race
// for its GPUs: skipped as claimed by another of this renter's auctions,
// or declined by its provider as taken by another award since its bid
// (terms.DeclinedTaken; the provider's word, so a renter acts on it only
// within bounds: the job machine offers a job again at once for one such
// loss in a row).
func LostRace(result string) bool {
	return result == SkippedClaimed || strings.HasPrefix(result, DeclinedPrefix+terms.DeclinedTaken)
}

// earlyCloseSlack is how soon a bid must start to count as starting at
// once.
const earlyCloseSlack = time.Second

// StartsNow reports whether a bid starts at once (within a second of
// now): only then may a window close early, and while one does, a later
// start is no fallback (Ranked).
func StartsNow(b terms.Bid, now time.Time) bool { return !b.Start.After(now.Add(earlyCloseSlack)) }

// Try is one award of the call (in the order they were tried).
type Try struct {
	Provider string
	Result   string // Pending while sent and not answered
}

// Gang is the Result of a gang member's Try: the driver's (GangAwarded).
const Gang = "gang"

// awardOrder lists the eligible ranked bids best first, those of
// providers late (recently did not confirm an award) after all others;
// while some bid can start at once, only those.
func awardOrder(ranked []terms.Ranked, late []string, now time.Time) []terms.Bid {
	var good, slow []terms.Bid
	for _, c := range ranked {
		switch {
		case c.Rejected != "":
		case slices.Contains(late, c.Bid.Provider):
			slow = append(slow, c.Bid)
		default:
			good = append(good, c.Bid)
		}
	}
	order := append(good, slow...)
	// While some bid can start at once, a later start is no fallback: its
	// provider was busy when it bid, and the bids that could start now
	// lost their GPUs to concurrent auctions a moment ago. The job is
	// better queued and offered again than booked behind a busy GPU.
	if slices.ContainsFunc(order, func(b terms.Bid) bool { return StartsNow(b, now) }) {
		order = slices.DeleteFunc(order, func(b terms.Bid) bool { return !StartsNow(b, now) })
	}
	return order
}

// ranked takes the window's bids as ranked: a gang's are the driver's to
// award (AwardGang); any other job's are awarded best first, one at a
// time, hedged (HedgeTick).
func (s *stepper) ranked(ev Ranked) {
	st := &s.st
	st.RankedN, st.Ranked = len(ev.Ranked), true
	if len(ev.Ranked) > 0 {
		st.FirstRejected = ev.Ranked[0].Rejected
	}
	st.Order = awardOrder(ev.Ranked, ev.Late, s.now)
	st.Eligible = len(st.Order)
	if st.Nodes > 1 {
		s.do(AwardGang{Order: st.Order})
		return
	}
	s.award()
	s.exhausted()
}

// award sends the next award in order, skipping expired bids.
func (s *stepper) award() {
	st := &s.st
	for st.Next < len(st.Order) {
		b := st.Order[st.Next]
		st.Next++
		try := len(st.Tries)
		if !b.ExpiresAt.IsZero() && !s.now.Before(b.ExpiresAt) {
			st.Tries = append(st.Tries, Try{Provider: b.Provider, Result: SkippedExpired})
			s.do(Award{Try: try, Bid: b, Skip: SkippedExpired})
			continue
		}
		st.Tries = append(st.Tries, Try{Provider: b.Provider, Result: Pending})
		st.Inflight++
		s.do(Award{Try: try, Bid: b})
		return
	}
}

// exhausted ends a call whose awards all failed, none outstanding.
func (s *stepper) exhausted() {
	if s.st.Phase == Awarding && s.st.Inflight == 0 && s.st.Next >= len(s.st.Order) {
		s.noLease("")
	}
}

// hedge doubles the awards outstanding, up to MaxParallelAwards: every
// award is late.
func (s *stepper) hedge() {
	st := &s.st
	for n := min(st.Inflight, s.r.MaxParallelAwards-st.Inflight); n > 0 && st.Phase == Awarding; n-- {
		s.award()
	}
}

// claimed takes an award the driver did not send: its GPUs are claimed
// by another of this renter's auctions.
func (s *stepper) claimed(ev Claimed) {
	st := &s.st
	if ev.Try < 0 || ev.Try >= len(st.Tries) || st.Tries[ev.Try].Result != Pending {
		return
	}
	st.Tries[ev.Try].Result = SkippedClaimed
	st.Inflight--
	if st.Phase == Awarding {
		s.award()
		s.exhausted()
	}
}

// done takes an award's result: the first confirm while the call awards
// is its lease; a later one (or one after the call ended) is released
// when the renter can, and a failed award's provider ranks last for a
// while, its lease released if it may have been booked.
func (s *stepper) done(ev AwardDone) {
	st := &s.st
	if ev.Try < 0 || ev.Try >= len(st.Tries) || st.Tries[ev.Try].Result != Pending {
		return
	}
	st.Inflight--
	result := ev.Result
	keep := result == Confirmed && st.Phase == Awarding
	settle := Settle{Try: ev.Try, Provider: st.Tries[ev.Try].Provider}
	if keep {
		l := ev.Lease
		settle.Lease = &l
	}
	s.do(settle)
	switch {
	case result != Confirmed:
		s.do(NoConfirm{Provider: st.Tries[ev.Try].Provider, Result: result})
		if s.r.Release && MayHaveBooked(result) {
			// The provider may have booked the lease and confirmed too
			// late: released, or its GPUs stay held for a lease nobody
			// will use.
			s.do(Release{Lease: ev.Lease})
		}
	case keep:
	case s.r.Release:
		result = "confirmed, released (not needed)"
		s.do(Release{Lease: ev.Lease})
	default:
		// Only after a cancellation: nothing to release it with, the
		// provider expires the unclaimed reservation.
		result = "confirmed after the auction was cancelled"
	}
	st.Tries[ev.Try].Result = result
	s.do(Result{Try: ev.Try, Result: result})
	if keep {
		s.leased(ev.Lease)
		return
	}
	if st.Phase == Awarding {
		s.award() // fail over at once
		s.exhausted()
	}
}

// gangAwarded notes a gang round's awards: their bids are not released.
func (s *stepper) gangAwarded(ev GangAwarded) {
	for _, p := range ev.Providers {
		s.st.Tries = append(s.st.Tries, Try{Provider: p, Result: Gang})
	}
}

// releaseBids releases, once the call ended, the bids that hold GPUs and
// were not awarded, in the order they came. A bid without a hold needs
// no release: it expires by itself, and sparing one signed message per
// losing bidder halves what a job costs a large market.
func (s *stepper) releaseBids() {
	var rels []terms.Bid
	for _, c := range s.st.Bids {
		if c.Bid.Held && !slices.ContainsFunc(s.st.Tries, func(t Try) bool { return t.Provider == c.Bid.Provider }) {
			rels = append(rels, c.Bid)
		}
	}
	if len(rels) > 0 {
		s.do(ReleaseBids{Bids: rels})
	}
}

// gangEnded takes the end of a gang's awards without a gang placed.
func (s *stepper) gangEnded(ev GangEnded) {
	s.st.Eligible = ev.Eligible
	s.noLease(ev.Reason)
}

// noLease ends the call without a lease, saying why: no bid, none
// eligible, every award failed (Raced: each only skipped as claimed by
// another of this renter's auctions; Lost: each lost a race, LostRace,
// one at least declined as taken), or the gang's reason.
func (s *stepper) noLease(gang string) {
	st := &s.st
	var reason string
	raced, lost := false, false
	switch {
	case gang != "" && st.Eligible > 0:
		reason = gang
	case st.RankedN == 0:
		reason = "no bids"
		if len(st.Declines) > 0 {
			reason += " (" + DeclinesText(st.Declines) + ")"
		}
	case st.Eligible == 0:
		reason = fmt.Sprintf("no eligible bids (%d rejected: %s)", st.RankedN, st.FirstRejected)
	default:
		reason = fmt.Sprintf("all %d awards failed (%s)", st.Eligible, s.results())
		raced = len(st.Tries) > 0 && !slices.ContainsFunc(st.Tries, func(t Try) bool { return t.Result != SkippedClaimed })
		lost = !raced && len(st.Tries) > 0 && !slices.ContainsFunc(st.Tries, func(t Try) bool { return !LostRace(t.Result) })
	}
	st.Phase, st.End, st.Reason = Done, terms.JobUnplaceable, reason
	s.do(Finish{As: terms.JobUnplaceable, Reason: reason, Raced: raced, Lost: lost})
	s.releaseBids()
}

// results summarises the call's awards' results, most frequent first
// ("2 × timeout; declined: capacity: ...").
func (s *stepper) results() string {
	counts := map[string]int{}
	for _, t := range s.st.Tries {
		counts[t.Result]++
	}
	keys := byCount(counts)
	for i, k := range keys {
		if counts[k] > 1 {
			keys[i] = fmt.Sprintf("%d × %s", counts[k], k)
		}
	}
	return strings.Join(keys, "; ")
}

// byCount is counts' keys, most frequent first, then in order.
func byCount(counts map[string]int) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// DeclinesText is a call's declines in one line, most frequent first:
// "12 declined: price; 3: vram".
func DeclinesText(declines map[string]int) string {
	kinds := byCount(declines)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		if i == 0 {
			parts[i] = fmt.Sprintf("%d declined: %s", declines[k], k)
		} else {
			parts[i] = fmt.Sprintf("%d: %s", declines[k], k)
		}
	}
	return strings.Join(parts, "; ")
}
