package main

import (
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
)

// Config sizes a seed's world and sets its fault rates. Its hooks are
// where a test injects a bug on purpose (to prove an invariant can fail);
// left nil, each is the production rule.
type Config struct {
	Providers, Renters int
	JobsPerRenter      int
	Hostile            bool          // one hostile peer among the providers
	Horizon            time.Duration // simulated time a seed runs at most

	// Network faults, per message.
	Drop, Duplicate float64
	MinDelay        time.Duration
	MaxDelay        time.Duration // reordering comes from delays drawn per message
	// Partitions: how often one starts (per node pair, drawn at setup)
	// and how long it lasts before it heals.
	Partitions   int
	PartitionFor time.Duration
	// Crashes: how many daemon crashes a seed has (each at a random
	// instant, of a random node, restarted after a random pause).
	Crashes int
	MaxSkew time.Duration // each node's clock is off by up to this
	// Cancels: the odds that a posted job is cancelled by its poster, at
	// a random instant.
	Cancels  float64
	Executor ExecutorOdds

	// Injection points (nil: production).
	//
	// Rules are the protocol's rules the simulated nodes follow (nil:
	// production's).
	Rules Rules
	// Disk is the faults of the nodes' disks (nil: nothing is lost or
	// changed).
	Disk Disk
	// SettleTwice makes a provider settle a lease again after it is
	// settled (production: never).
	SettleTwice bool
	// NoLostWatch makes renters wait for ever for a lease's final report
	// (production: a lease silent lostGrace past its end is given up).
	NoLostWatch bool
	// ReissueReceipts makes a provider issue a new receipt (a new
	// IssuedAt) at each settlement attempt, as node/lease did before a
	// seed found that its renter then refuses the retry of a lease it
	// settled (production: one receipt, issued as of the run's end).
	ReissueReceipts bool
}

// ExecutorOdds are the weights of what a job's process does.
type ExecutorOdds struct {
	Succeed, Fail, Hang, Crash int
}

// Book is what a provider books leases with: auction.Calendar's methods.
type Book interface {
	Reserve(b auction.Booking) error
	Release(leaseID string) bool
	Truncate(leaseID string, end time.Time) bool
	HasRoom(from, to time.Time, pool []int, gpus int, fraction float64) bool
	Booking(leaseID string) (auction.Booking, bool)
	Bookings() []auction.Booking
}

// DefaultConfig is the world `make test` and a campaign run: small
// enough for hundreds of seeds a second, with every fault on.
func DefaultConfig() Config {
	return Config{
		Providers: 4, Renters: 2, JobsPerRenter: 8, Hostile: true,
		Horizon: 2 * time.Hour,
		Drop:    0.05, Duplicate: 0.05,
		MinDelay: time.Millisecond, MaxDelay: 800 * time.Millisecond,
		Partitions: 2, PartitionFor: 2 * time.Minute,
		Crashes: 2, MaxSkew: 3 * time.Second, // home machines' clocks differ by seconds
		Cancels:  0.1,
		Executor: ExecutorOdds{Succeed: 6, Fail: 2, Hang: 1, Crash: 1},
	}
}

func (c Config) withDefaults() Config {
	if c.Rules == nil {
		c.Rules = Production{}
	}
	if c.Disk == nil {
		c.Disk = soundDisk{}
	}
	return c
}

// Rules are the protocol's rules a simulated node follows: a test breaks
// one to see the simulator's invariants catch it.
type Rules interface {
	// NewBook makes a provider's lease book.
	NewBook(capacity int) Book
	// CheckBilled is the renter's bound on a receipt's bill.
	CheckBilled(r attest.Receipt, l terms.Lease, observedStart, observedEnd, now time.Time, off attest.ClockOffset, hs attest.HeartbeatSummary) error
	// Follows is the renter's rule for taking a lease's run state.
	Follows(next, prev terms.RunState) bool
	// StepJob is the renter's job machine: r.Step.
	StepJob(r jobmachine.Rules, st jobmachine.Record, ev jobmachine.Event, now time.Time) (jobmachine.Record, []jobmachine.Effect)
}

// Production is the rules production follows: auction.NewCalendar,
// attest.CheckBilled, terms.RunState.Follows and jobmachine.Rules.Step.
type Production struct{}

func (Production) NewBook(capacity int) Book { return auction.NewCalendar(capacity) }
func (Production) CheckBilled(r attest.Receipt, l terms.Lease, observedStart, observedEnd, now time.Time, off attest.ClockOffset, hs attest.HeartbeatSummary) error {
	return attest.CheckBilled(r, l, observedStart, observedEnd, now, off, hs)
}
func (Production) Follows(next, prev terms.RunState) bool { return next.Follows(prev) }
func (Production) StepJob(r jobmachine.Rules, st jobmachine.Record, ev jobmachine.Event, now time.Time) (jobmachine.Record, []jobmachine.Effect) {
	return r.Step(st, ev, now)
}

// Disk is the faults of a simulated node's disk.
type Disk interface {
	// DropPersist, when it returns true, loses a write to a node's disk
	// without telling the node.
	DropPersist(node, key string) bool
	// AlterStored changes the bytes a node's ledger stores for an entry.
	AlterStored(raw []byte) []byte
}

// soundDisk loses and changes nothing (production).
type soundDisk struct{}

func (soundDisk) DropPersist(string, string) bool { return false }
func (soundDisk) AlterStored(raw []byte) []byte   { return raw }
