package terms

import "time"

// NeutralReliability is the prior for a provider without verified
// receipts (applied by the renter's reputation source, not by the
// ranking).
const NeutralReliability = 0.5

// JobState is where a posted job is in its auction.
type JobState string

// Job states.
const (
	JobBidding     JobState = "bidding"
	JobAwarding    JobState = "awarding"
	JobLeased      JobState = "leased"
	JobUnplaceable JobState = "unplaceable"
	// JobQueued: no bid could be turned into a lease yet; the job waits on
	// its renter's daemon to be offered again when capacity may have
	// changed, until its start deadline (its last reason says why). The
	// renter's job machine (node/lease/jobmachine) keeps it; an auction's
	// own status never is.
	JobQueued    JobState = "queued"
	JobCancelled JobState = "cancelled"
	JobFailed    JobState = "failed"
	// JobFinished: the job's last lease ended (its run state says how) and
	// the job is not going back to auction. The renter's lease tracking
	// sets it; the auction itself ends at JobLeased.
	JobFinished JobState = "finished"
)

// JobStates lists every JobState.
func JobStates() []JobState {
	return []JobState{JobBidding, JobAwarding, JobQueued, JobLeased, JobFinished, JobUnplaceable, JobCancelled, JobFailed}
}

// Live reports whether a job in this state may still run, so that its
// renter must keep what it needs (its input artifacts): in auction,
// queued, or leased (a lease that ends and requeues goes back to auction;
// the renter's lease tracking marks a job's end JobFinished).
func (s JobState) Live() bool {
	switch s {
	case JobBidding, JobAwarding, JobQueued, JobLeased:
		return true
	}
	return false
}

// AwardAttempt records one award sent to a provider and what came of it.
type AwardAttempt struct {
	Provider string `json:"provider"`
	LeaseID  string `json:"lease_id"`
	Result   string `json:"result"` // "confirmed", or why not
}

// JobStatus is a renter's view of one job's auction.
type JobStatus struct {
	Job      Job            `json:"job"`
	State    JobState       `json:"state"`
	Lease    *Lease         `json:"lease,omitempty"`
	Winner   string         `json:"winner,omitempty"`
	Bids     []Ranked       `json:"bids,omitempty"`
	Reasons  []string       `json:"reasons,omitempty"`
	Attempts []AwardAttempt `json:"attempts,omitempty"`
	PostedAt time.Time      `json:"posted_at"`
	// Offers counts the auctions this renter ran for the job (a queued job
	// is offered again).
	Offers int `json:"offers,omitempty"`
	// Declines counts, by auction.Ineligible.Kind, the providers that said why
	// they did not bid in the latest auction (Job.WantDeclines).
	Declines map[string]int `json:"declines,omitempty"`
	// Members are a gang job's member leases by rank (Job.Nodes > 1), once
	// the whole gang is committed; Lease is then rank 0's. The gang is
	// priced by its members: the sum of their prices.
	Members []Lease `json:"members,omitempty"`
}

// ProviderStats is a provider's market activity.
type ProviderStats struct {
	Calls      int `json:"calls"`
	Duplicates int `json:"duplicates"`
	Bids       int `json:"bids"`
	Won        int `json:"won"`
	Lost       int `json:"lost"`     // bids that expired without an award
	Declined   int `json:"declined"` // awards declined (e.g. capacity taken meanwhile)
	Moved      int `json:"moved"`    // leases moved earlier (GPUs freed before their start)
	Retimed    int `json:"retimed"`  // late awards booked from their confirm on (Lease.Retimed)
	Notices    int `json:"notices"`  // capacity notices sent to renters turned away
	// Undelivered counts bids, declines and notices whose send failed
	// (the renter could not be reached in time).
	Undelivered int            `json:"undelivered"`
	Rejected    map[string]int `json:"rejected"`
	Ineligible  map[string]int `json:"ineligible"` // by auction.Ineligible.Kind
	Occupancy   float64        `json:"occupancy"`
	// EarningsUSD sums price × GPUs × hours over confirmed leases (a
	// slice's fraction of a GPU: LeaseCost), as shortened by LeaseEnded. Leases lists live leases and the most recent
	// ended ones.
	EarningsUSD float64 `json:"earnings_usd"`
	Leases      []Lease `json:"leases"`
	// Draining is set while the provider drains (auction.Provider.SetDraining): it takes
	// no new work.
	Draining bool `json:"draining,omitempty"`
	// GangHeld is how many gang members are confirmed and booked, waiting
	// for their renter's commit; GangAborted counts those freed
	// uncommitted (aborted or expired).
	GangHeld    int `json:"gang_held,omitempty"`
	GangAborted int `json:"gang_aborted,omitempty"`
}

// Candidate is a bid as the renter sees it: with the provider's reliability
// as the renter verified it (from attested receipts, never the provider's
// own claim) and the round-trip time the renter measured to the provider.
type Candidate struct {
	Bid         Bid
	Reliability float64
	// RTT is the round-trip time from the renter's host to the provider's
	// (libp2p ping: an average of recent samples), 0 when the renter has
	// no fresh sample. A provider cannot make it smaller than its network
	// path: a ping is answered only once it arrived.
	RTT time.Duration `json:"rtt,omitempty"`
	// Held and HeldChecked are what the renter verified of the artifacts
	// the provider holds: with HeldChecked, Held is the ids its signed
	// capability record advertises (nil when the renter found no record),
	// and the bid's MissingBytes is not taken on its word (see
	// auction.ChargedMissing). Without HeldChecked the claim is used as is.
	Held        []string `json:"-"`
	HeldChecked bool     `json:"-"`
	// Verified is whether the renter's book holds the provider verified
	// for the model it bid with (a passed GPU challenge): verified bids
	// rank ahead of all others, and a Job.Verified job takes no other.
	Verified bool `json:"verified,omitempty"`
}

// Ranked is a scored candidate. Rejected is non-empty when the bid was
// excluded, and says why.
type Ranked struct {
	Candidate
	Score    float64
	Rejected string
	// Transfer is the estimated time the provider spends fetching the
	// job's inputs it lacks (charged in the score, see auction.TransferFactor).
	Transfer time.Duration `json:"transfer,omitempty"`
	// Missing is the input bytes the ranking charged the bid for
	// fetching (auction.ChargedMissing): more than Bid.MissingBytes when the
	// provider's advertised holdings do not back its claim.
	Missing int64 `json:"missing,omitempty"`
	// Nearness is how near the bid's region is to the region the job's
	// Near names (see auction.Nearness): bids rank by it before their score.
	Nearness int `json:"nearness,omitempty"`
}

// Explanation says where a job's ranked bids led: which bid holds the
// lease and by which rule it got it, or why none does. It names peers in
// full; how to show them is the reader's business.
type Explanation struct {
	// Winner is the provider whose bid holds the lease ("" while none
	// does); Rank is that bid's place in the ranking (1: the best score).
	Winner string `json:"winner,omitempty"`
	Rank   int    `json:"rank,omitempty"`
	// Score, Price and Reliability are the winning bid's, reliability as
	// scored (at least auction.MinScoreReliability).
	Score       float64 `json:"score,omitempty"`
	Price       float64 `json:"price,omitempty"`
	Reliability float64 `json:"reliability,omitempty"`
	// RTT is the round trip the renter measured to the winner (0: none).
	RTT time.Duration `json:"rtt,omitempty"`
	// RunnerUp is the best eligible bid ranked after the winner's, and its
	// score ("" when the winner's was the only one).
	RunnerUp      string  `json:"runner_up,omitempty"`
	RunnerUpScore float64 `json:"runner_up_score,omitempty"`
	// Rule is what decided (see the Rule constants); TieBreak names the
	// tie-break rule of RuleTieBreak.
	Rule     string `json:"rule"`
	TieBreak string `json:"tie_break,omitempty"`
	// Passed are the eligible bids ranked ahead of the winner's (with
	// RulePassedOver), or all of them while none holds the lease (with
	// RuleNotAwarded), and why each has not got it.
	Passed []PassedBid `json:"passed,omitempty"`
}

// PassedBid is an eligible bid that did not get the lease, and why.
type PassedBid struct {
	Provider string `json:"provider"`
	Reason   string `json:"reason"`
}

// Explanation rules.
const (
	RuleNoBids       = "no_bids"       // no bid came
	RuleNoneEligible = "none_eligible" // every bid was rejected (each Ranked says why)
	RuleNotAwarded   = "not_awarded"   // eligible bids, but none holds the lease (yet, or its awards failed)
	RuleOnlyEligible = "only_eligible" // the winner's was the only eligible bid
	RuleBestScore    = "best_score"    // the best score, by more than auction.TieTolerance
	RuleNearer       = "nearer"        // its region is nearer the job's Near region than the runner-up's (see auction.Nearness)
	RuleTieBreak     = "tie_break"     // tied within auction.TieTolerance, ahead on TieBreak
	RulePassedOver   = "passed_over"   // the bids ranked ahead were not awarded or did not confirm (Passed)
	RuleUnranked     = "unranked"      // the winner's bid is not in this ranking (an earlier auction's lease)
)
