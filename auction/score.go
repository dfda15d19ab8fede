package auction

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// Scoring constants.
const (
	// MinScoreReliability floors reliability in the score so that a provider
	// with no track record cannot divide by zero.
	MinScoreReliability = 0.05
	// TieTolerance: scores within this fraction of each other are tied.
	TieTolerance = 0.01
)

// ChargedMissing is the missing input bytes the renter charges a bid for:
// its MissingBytes claim, or, when the renter checked the provider's
// advertised holdings, the larger of the claim and the bytes of the job's
// artifacts those holdings do not include. A bid claiming to hold an
// artifact its provider does not advertise is charged for fetching it.
func ChargedMissing(j *terms.Job, c *terms.Candidate) int64 {
	if !c.HeldChecked {
		return c.Bid.MissingBytes
	}
	return max(c.Bid.MissingBytes, MissingBytes(j, c.Held))
}

// Score is a bid's score: Price / max(reliability, MinScoreReliability).
// Lower is better: cheaper and more reliable first.
func Score(price, reliability float64) float64 {
	if math.IsNaN(reliability) || reliability < MinScoreReliability {
		reliability = MinScoreReliability
	}
	return price / reliability
}

// EvictionPenalty is the score surcharge per bronze lease a bid would
// preempt: a gold job prefers an idle provider up to 10% dearer per
// eviction over one that must stop someone else's work.
const EvictionPenalty = 0.10

func evictionFactor(n int) float64 {
	if n <= 0 {
		return 1
	}
	return 1 + EvictionPenalty*float64(n)
}

// TransferRate is the renter's estimate, in bytes per second, of how fast a
// provider fetches the input artifacts it lacks.
const TransferRate = 100e6

// TransferEstimate is the estimated time to fetch missing bytes of input.
func TransferEstimate(missing int64) time.Duration {
	if missing <= 0 {
		return 0
	}
	return time.Duration(float64(missing) / TransferRate * float64(time.Second))
}

// TransferFactor charges a bid for the time its provider spends fetching
// the job's inputs before the job can start, as a share of the job's
// duration: 1 + TransferEstimate(missing)/Duration. A provider that holds
// the data (warm) beats an equally priced one that must fetch it (cold); a
// cold one wins when it is cheaper by more than the fetch costs.
func TransferFactor(j *terms.Job, missing int64) float64 {
	if missing <= 0 || j.Duration <= 0 {
		return 1
	}
	return 1 + TransferEstimate(missing).Seconds()/j.Duration.Seconds()
}

// Latency terms of a latency-sensitive job's ranking (see RTTFactor).
const (
	// RTTWeight is what a round trip as long as the job's reference
	// costs, as a share of the bid's score: under MaxRTT 50ms a provider
	// 45 ms away scores 1.9 times its price term, one 5 ms away 1.1
	// times, so the near one wins unless the far one is over 40 %
	// cheaper.
	RTTWeight = 1.0
	// RTTReference is the reference round trip of a job that sets Near
	// but no MaxRTT.
	RTTReference = 100 * time.Millisecond
	// RTTChargeCap caps the round trip charged, in references: a Near
	// job's bid from a provider it could not measure is charged the cap
	// (it is as far as any).
	RTTChargeCap = 2.0
)

// RTTFactor charges a latency-sensitive job's bid (Job.LatencySensitive)
// for the round trip to its provider:
//
//	1 + RTTWeight × min(rtt / ref, RTTChargeCap)
//
// where ref is the job's MaxRTT, or RTTReference when it sets only Near,
// and an unmeasured rtt (0) is charged RTTChargeCap. The score is
// multiplied by it, so a near provider beats a cheaper far one unless the
// far one is cheaper by more than the latency costs. Other jobs: 1.
func RTTFactor(j *terms.Job, rtt time.Duration) float64 {
	if !j.LatencySensitive() {
		return 1
	}
	ref := j.MaxRTT
	if ref <= 0 {
		ref = RTTReference
	}
	charge := RTTChargeCap
	if rtt > 0 {
		charge = min(float64(rtt)/float64(ref), RTTChargeCap)
	}
	return 1 + RTTWeight*charge
}

// WaitFactor charges a bid that starts after soonest (the soonest start
// any eligible bid offers, or now if that is sooner: soonestStart) for
// the wait it adds, measured in the job's own length:
//
//	1 + max(0, start − soonest) / Duration
//
// so that a bid queued behind a provider's bookings loses to one that
// starts sooner unless it is cheaper (or more reliable) by more than the
// wait is long against the job: a two-second job does not wait thirty
// seconds for a provider scored a little better while another is free
// in three, and an hours-long job barely notices a minute. The wait is
// counted from the soonest start on offer, not from now: the wait every
// bid shares is no reason to choose one, and counted from now it diluted
// the difference (a 3 s job that every provider could start only 14 s
// out took a bid starting 17 s out from a provider with a slightly
// better record, so a burst queued deeper and deeper on the providers
// that had run a few jobs first while freed ones waited). (Bids that
// start within the same instant are still ordered by earlier start among
// ties.)
func WaitFactor(j *terms.Job, start, soonest time.Time) float64 {
	wait := start.Sub(soonest)
	if wait <= 0 || j.Duration <= 0 {
		return 1
	}
	return 1 + float64(wait)/float64(j.Duration)
}

// soonestStart is the soonest start the eligible bids offer, or now when
// one starts by then (or there is none): what WaitFactor counts waits
// from.
func soonestStart(items []rankItem, now time.Time) time.Time {
	soonest := time.Time{}
	for i := range items {
		if s := items[i].Bid.Start; soonest.IsZero() || s.Before(soonest) {
			soonest = s
		}
	}
	if soonest.IsZero() || soonest.Before(now) {
		return now
	}
	return soonest
}

// Nearness is how near a provider in region have is to the region the
// job's Near names: 2 in it (have satisfies it as Region would: "eu" is
// near "eu-west"), 1 on the same continent (the regions' first parts
// agree: "eu-west" and "eu-central"), else 0; 0 for every bid of a job
// whose Near names no region.
func Nearness(j *terms.Job, have string) int {
	want := j.NearRegion()
	switch {
	case want == "" || strings.TrimSpace(have) == "":
		return 0
	case regionSatisfies(want, have):
		return 2
	case strings.EqualFold(firstPart(want), firstPart(have)):
		return 1
	}
	return 0
}

// firstPart is a region's first dash-separated part ("eu" of "eu-west").
func firstPart(region string) string {
	p, _, _ := strings.Cut(strings.TrimSpace(region), "-")
	return p
}

// FormatRTT is a round-trip time as bids and reasons show it: to 0.1 ms.
func FormatRTT(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }

// Rank orders the bids for j at the current time; see RankAt.
func Rank(j *terms.Job, cands []terms.Candidate) []terms.Ranked {
	return RankAt(j, cands, time.Now())
}

// RankAt orders the bids for j as of now: eligible bids first, best first,
// then the rejected ones in input order, each with its reason. A bid is
// rejected when it is for another job or attempt, is a later duplicate from
// a provider that already bid (the first is kept), has expired, has a
// price that is not a positive number or above MaxPrice, comes from a
// provider whose verified reliability is below MinReliability, is for a
// region that does not satisfy the job's, comes from a provider whose
// measured RTT exceeds the job's MaxRTT (or that the renter could not
// measure, when MaxRTT is set), has an empty span, starts after the job's
// deadline, or (for a non-preemptible job) is shorter than the job's
// duration.
//
// Eligible bids are ordered verified providers first (Candidate.Verified),
// then by Nearness to the job's Near region, then by Score, times (1 +
// EvictionPenalty) for each bronze lease the bid would preempt, times the
// TransferFactor of the input bytes the provider lacks (ChargedMissing),
// times the RTTFactor of a latency-sensitive job, times the WaitFactor of
// a bid that starts later than the soonest eligible one. Scores within
// TieTolerance (1%) of the best score of their group are tied, and ties
// are broken by more of the job's datasets cached (data-aware placement),
// then earlier start, then lower RTT (a measured one before none), then
// provider id, so the order is deterministic.
func RankAt(j *terms.Job, cands []terms.Candidate, now time.Time) []terms.Ranked {
	if j == nil {
		return nil
	}
	seen := make(map[string]bool, len(cands))
	jobDS := make(map[string]bool, len(j.Datasets))
	for _, d := range j.Datasets {
		jobDS[d] = true
	}
	items := make([]rankItem, 0, len(cands))
	var rejected []terms.Ranked
	for _, c := range cands {
		r := terms.Ranked{Candidate: c, Score: Score(c.Bid.Price, c.Reliability) * evictionFactor(c.Bid.Evicts)}
		missing := ChargedMissing(j, &c)
		r.Score *= TransferFactor(j, missing)
		r.Transfer, r.Missing = TransferEstimate(missing), missing
		r.Score *= RTTFactor(j, c.RTT)
		r.Nearness = Nearness(j, c.Bid.Region)
		r.Rejected = rejectReason(j, c, now, seen)
		seen[c.Bid.Provider] = true
		if r.Rejected != "" {
			rejected = append(rejected, r)
			continue
		}
		items = append(items, rankItem{Ranked: r, cached: countIn(jobDS, c.Bid.Datasets), idx: len(items)})
	}
	soonest := soonestStart(items, now)
	for i := range items {
		items[i].Score *= WaitFactor(j, items[i].Bid.Start, soonest)
	}
	// Sort pointers: the items are large.
	ok := make([]*rankItem, len(items))
	for i := range items {
		ok[i] = &items[i]
	}
	slices.SortFunc(ok, func(x, y *rankItem) int {
		if x.Verified != y.Verified {
			if x.Verified {
				return -1
			}
			return 1
		}
		if x.Nearness != y.Nearness {
			return cmp.Compare(y.Nearness, x.Nearness)
		}
		if c := cmp.Compare(x.Score, y.Score); c != 0 {
			return c
		}
		return cmp.Compare(x.idx, y.idx)
	})
	for lo := 0; lo < len(ok); {
		hi := lo + 1
		for hi < len(ok) && ok[hi].Verified == ok[lo].Verified && ok[hi].Nearness == ok[lo].Nearness &&
			ok[hi].Score <= ok[lo].Score*(1+TieTolerance) {
			hi++
		}
		group := ok[lo:hi]
		if len(group) > 1 {
			slices.SortFunc(group, func(x, y *rankItem) int {
				if x.less(y) {
					return -1
				}
				if y.less(x) {
					return 1
				}
				return cmp.Compare(x.idx, y.idx)
			})
		}
		lo = hi
	}
	out := make([]terms.Ranked, 0, len(cands))
	for i := range ok {
		out = append(out, ok[i].Ranked)
	}
	return append(out, rejected...)
}

// rankItem caches a candidate's count of the job's datasets.
type rankItem struct {
	terms.Ranked
	cached int
	idx    int // input order, for a stable sort
}

// countIn counts the distinct elements of list that are in set.
func countIn(set map[string]bool, list []string) int {
	n := 0
	for i, d := range list {
		if set[d] && !slices.Contains(list[:i], d) {
			n++
		}
	}
	return n
}

func (x *rankItem) less(y *rankItem) bool {
	if x.cached != y.cached {
		return x.cached > y.cached
	}
	if !x.Bid.Start.Equal(y.Bid.Start) {
		return x.Bid.Start.Before(y.Bid.Start)
	}
	if c := compareRTT(x.RTT, y.RTT); c != 0 {
		return c < 0
	}
	return x.Bid.Provider < y.Bid.Provider
}

// compareRTT orders round-trip times lowest first, an unmeasured one (0)
// after every measured one.
func compareRTT(x, y time.Duration) int {
	switch {
	case x == y:
		return 0
	case x == 0:
		return 1
	case y == 0:
		return -1
	}
	return cmp.Compare(x, y)
}

func rejectReason(j *terms.Job, c terms.Candidate, now time.Time, seen map[string]bool) string {
	b := &c.Bid
	switch {
	case b.JobID != j.ID || b.Attempt != j.Attempt:
		return fmt.Sprintf("bid for job %s attempt %d, not %s attempt %d", b.JobID, b.Attempt, j.ID, j.Attempt)
	case b.Provider == "":
		return "bid without provider"
	case seen[b.Provider]:
		return "duplicate bid from provider"
	case j.Excludes(b.Provider):
		return "provider excluded: it lost an earlier attempt of the job"
	case !terms.SampledBidder(j, b.Provider):
		// An honest provider outside the call's sample does not bid: a bid
		// from one is a peer pushing in where the renter did not ask.
		return "provider not asked: outside the call's bid sample"
	case !b.ExpiresAt.IsZero() && !now.Before(b.ExpiresAt):
		return fmt.Sprintf("bid expired at %s", b.ExpiresAt.UTC().Format(time.RFC3339))
	case math.IsNaN(b.Price) || math.IsInf(b.Price, 0) || b.Price <= 0:
		return fmt.Sprintf("invalid price %v", b.Price)
	case b.Price > j.MaxPrice:
		return fmt.Sprintf("price %.2f > max %.2f", b.Price, j.MaxPrice)
	case math.IsNaN(c.Reliability) || c.Reliability < j.MinReliability:
		return fmt.Sprintf("reliability %.2f < min %.2f", c.Reliability, j.MinReliability)
	case j.Verified && !c.Verified:
		return fmt.Sprintf("provider not verified for %s (gpumesh verify)", orNone(b.GPUModel))
	case !regionSatisfies(j.Region, b.Region):
		return fmt.Sprintf("region %s does not satisfy %s", orNone(b.Region), j.Region)
	case j.MaxRTT > 0 && c.RTT <= 0:
		return fmt.Sprintf("rtt unknown: no ping answered within the bid window (max %s)", FormatRTT(j.MaxRTT))
	case j.MaxRTT > 0 && c.RTT > j.MaxRTT:
		return fmt.Sprintf("rtt %s > max %s", FormatRTT(c.RTT), FormatRTT(j.MaxRTT))
	case !b.End.After(b.Start):
		return "empty lease span"
	case !j.Deadline.IsZero() && b.Start.After(j.Deadline):
		return fmt.Sprintf("start %s after deadline", b.Start.UTC().Format(time.RFC3339))
	case !j.Preemptible && b.End.Sub(b.Start) < j.Duration:
		return fmt.Sprintf("lease %v shorter than job %v", b.End.Sub(b.Start), j.Duration)
	}
	return ""
}

func cachedCount(j *terms.Job, b *terms.Bid) int { return len(intersect(j.Datasets, b.Datasets)) }

// tieBreak names the rule that put x ahead of a tied y.
func tieBreak(j *terms.Job, x, y *terms.Ranked) string {
	if cx, cy := cachedCount(j, &x.Bid), cachedCount(j, &y.Bid); cx != cy {
		return fmt.Sprintf("more of the job's datasets cached (%d vs %d)", cx, cy)
	}
	if !x.Bid.Start.Equal(y.Bid.Start) {
		return fmt.Sprintf("earlier start (%s vs %s)", x.Bid.Start.UTC().Format(time.RFC3339), y.Bid.Start.UTC().Format(time.RFC3339))
	}
	if compareRTT(x.RTT, y.RTT) != 0 {
		return fmt.Sprintf("lower rtt (%s vs %s)", rttText(x.RTT), rttText(y.RTT))
	}
	return "provider id order"
}

// rttText is a measured round trip, or "unmeasured".
func rttText(d time.Duration) string {
	if d <= 0 {
		return "unmeasured"
	}
	return FormatRTT(d)
}

// Explain says where ranking r (RankAt's) led, given the provider that
// holds the job's lease (winner, "" for none) and the job's award
// attempts: the lease goes to the best bid that confirms its award, and
// while a bid can start at once, none that starts later is awarded, so
// the winner is not always the first ranked.
func Explain(r []terms.Ranked, winner string, attempts []terms.AwardAttempt) terms.Explanation {
	if len(r) == 0 {
		return terms.Explanation{Winner: winner, Rule: terms.RuleNoBids}
	}
	if r[0].Rejected != "" {
		return terms.Explanation{Winner: winner, Rule: terms.RuleNoneEligible}
	}
	eligible := 0
	for eligible < len(r) && r[eligible].Rejected == "" {
		eligible++
	}
	r = r[:eligible]
	at := slices.IndexFunc(r, func(x terms.Ranked) bool { return x.Bid.Provider == winner })
	if winner == "" || at < 0 {
		e := terms.Explanation{Winner: winner, Rule: terms.RuleUnranked}
		if winner == "" {
			e.Rule = terms.RuleNotAwarded
			e.Passed = passedBids(r, nil, attempts)
		}
		return e
	}
	w := &r[at]
	e := terms.Explanation{Winner: winner, Rank: at + 1, Score: w.Score, Price: w.Bid.Price,
		Reliability: math.Max(w.Reliability, MinScoreReliability), RTT: w.RTT}
	if at+1 < len(r) {
		e.RunnerUp, e.RunnerUpScore = r[at+1].Bid.Provider, r[at+1].Score
	}
	switch {
	case at > 0:
		e.Rule, e.Passed = terms.RulePassedOver, passedBids(r[:at], w, attempts)
	case len(r) == 1:
		e.Rule = terms.RuleOnlyEligible
	case w.Verified == r[1].Verified && w.Nearness > r[1].Nearness:
		e.Rule = terms.RuleNearer
	case r[1].Score > w.Score*(1+TieTolerance):
		e.Rule = terms.RuleBestScore
	default:
		// The bids' dataset lists are already restricted to the job's.
		j := &terms.Job{Datasets: append(slices.Clone(w.Bid.Datasets), r[1].Bid.Datasets...)}
		e.Rule, e.TieBreak = terms.RuleTieBreak, tieBreak(j, w, &r[1])
	}
	return e
}

// passedBids says why each of bids has not got the lease: its award's
// result when it was awarded, else why the renter did not award it (see
// callmachine's award order): it starts after the winner's bid, which could start
// at once, or its provider recently did not confirm an award.
func passedBids(bids []terms.Ranked, winner *terms.Ranked, attempts []terms.AwardAttempt) []terms.PassedBid {
	out := make([]terms.PassedBid, 0, len(bids))
	for _, b := range bids {
		p := terms.PassedBid{Provider: b.Bid.Provider}
		for _, a := range attempts {
			if a.Provider == b.Bid.Provider {
				p.Reason = "award " + a.Result // the latest
			}
		}
		switch {
		case p.Reason != "":
		case winner == nil:
			p.Reason = "not awarded yet"
		case b.Bid.Start.After(winner.Bid.Start):
			p.Reason = fmt.Sprintf("starts later (%s), while the winner's bid could start at once (%s)",
				b.Bid.Start.UTC().Format(time.RFC3339), winner.Bid.Start.UTC().Format(time.RFC3339))
		default:
			p.Reason = "awarded last: its provider recently did not confirm an award"
		}
		out = append(out, p)
	}
	return out
}
