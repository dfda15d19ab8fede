// Package auction is the market's rules and engines: the eligibility and
// pricing rules a provider applies to a call for bids, the
// reliability-weighted scoring a renter applies to bids, the lease
// calendar that keeps a provider from double booking, gang placement, and
// the renter and provider engines that run auctions over a Transport. Its
// nouns (jobs, bids, awards, leases, capability records, ...) and their
// signed encodings live in package terms.
//
// The rules here are pure functions of their inputs and an explicit clock, so
// the daemon (over libp2p) and the market replay (over a virtual clock) run
// exactly the same code.
package auction
