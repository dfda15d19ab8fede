package main

import (
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"time"
)

// epoch is the simulated clock's start: every seed begins at the same
// instant, so that times in a trace compare across seeds.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// event is one thing the simulation does at a simulated instant. Events
// run in (at, seq) order: seq breaks ties in the order they were
// scheduled, so that nothing depends on the heap's internal order.
type event struct {
	at    time.Time
	seq   uint64
	what  string
	node  *node // nil: the simulator's own event
	epoch int   // the node's incarnation that scheduled it (timers die with a crash)
	run   func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Violation is a broken invariant: which one, and what broke it.
type Violation struct {
	Seed      uint64
	Invariant string
	Detail    string
	Step      int
	Tail      []string // the last lines of the trace
}

func (v *Violation) Error() string {
	return fmt.Sprintf("seed %d: %s: %s", v.Seed, v.Invariant, v.Detail)
}

// Result is one seed's run.
type Result struct {
	Seed      uint64
	Steps     int
	TraceHash string
	Violation *Violation
	Stats     Stats
}

// Stats count what a seed's run did, for the campaign's summary.
type Stats struct {
	// Jobs posted, and how many went unplaceable, were cancelled by their
	// posters, went back to auction (Requeued, per requeue); Finished and
	// Failed count lease runs that succeeded or did not.
	Jobs, Unplaceable, Cancelled, Requeued int
	// Rebooks counts rebook auctions (late binding), Rebooked the
	// pending leases they replaced.
	Rebooks, Rebooked            int
	Finished, Failed             int
	Settled, Disputed, Abandoned int
	Crashes, Partitions          int
	Dropped, Duplicated, Refused int
}

// sim is one seed's world: its clock, its event queue, its network and
// its nodes, all driven from one goroutine by one random source.
type sim struct {
	cfg   Config
	seed  uint64
	rng   *rand.Rand
	now   time.Time
	seq   uint64
	q     queue
	steps int
	nodes []*node // in creation order: providers, renters, the hostile peer
	net   *network
	chk   *checker
	stats Stats

	trace   hash.Hash
	tail    []string // ring of the last tailLines trace lines
	tailAt  int
	verbose io.Writer
}

const tailLines = 40

func newSim(cfg Config, seed uint64, verbose io.Writer) *sim {
	s := &sim{
		cfg:     cfg.withDefaults(),
		seed:    seed,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:     epoch,
		trace:   sha256.New(),
		verbose: verbose,
	}
	s.net = newNetwork(s)
	s.chk = newChecker(s)
	return s
}

// at schedules run at t (not before now) for node n (nil: the simulator).
func (s *sim) at(t time.Time, n *node, what string, run func()) {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	e := &event{at: t, seq: s.seq, what: what, node: n, run: run}
	if n != nil {
		e.epoch = n.epoch
	}
	heap.Push(&s.q, e)
}

func (s *sim) after(d time.Duration, n *node, what string, run func()) {
	s.at(s.now.Add(d), n, what, run)
}

// logf adds one line to the trace: the step, the simulated time since
// the epoch and what happened.
func (s *sim) logf(format string, a ...any) {
	line := fmt.Sprintf("%d %s ", s.steps, s.now.Sub(epoch)) + fmt.Sprintf(format, a...)
	s.trace.Write([]byte(line))
	s.trace.Write([]byte{'\n'})
	if len(s.tail) < tailLines {
		s.tail = append(s.tail, line)
	} else {
		s.tail[s.tailAt] = line
		s.tailAt = (s.tailAt + 1) % tailLines
	}
	if s.verbose != nil {
		fmt.Fprintln(s.verbose, line)
	}
}

func (s *sim) traceTail() []string {
	out := append([]string(nil), s.tail[s.tailAt:]...)
	return append(out, s.tail[:s.tailAt]...)
}

// chance is true with probability p.
func (s *sim) chance(p float64) bool { return p > 0 && s.rng.Float64() < p }

// between is a duration drawn uniformly from [lo, hi].
func (s *sim) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// run plays the seed to its end (the queue drains or the horizon passes)
// or to its first violation. A panic in production code is a violation.
func (s *sim) run() (res Result) {
	res.Seed = s.seed
	defer func() {
		if p := recover(); p != nil {
			s.logf("panic: %v", p)
			res.Violation = s.violation("no-panic", fmt.Sprint(p))
		}
		res.Steps = s.steps
		res.TraceHash = hex.EncodeToString(s.trace.Sum(nil))
		res.Stats = s.stats
	}()
	s.setup()
	horizon := epoch.Add(s.cfg.Horizon)
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		if e.at.After(horizon) {
			break
		}
		s.now = e.at
		if e.node != nil && (!e.node.up || e.node.epoch != e.epoch) {
			continue // the node crashed (or is down) since: its timers and messages died with it
		}
		s.steps++
		s.logf("%s", e.what)
		e.run()
		if v := s.chk.check(); v != nil {
			res.Violation = v
			return res
		}
	}
	if v := s.chk.final(); v != nil {
		res.Violation = v
	}
	return res
}

func (s *sim) violation(inv, detail string) *Violation {
	return &Violation{Seed: s.seed, Invariant: inv, Detail: detail, Step: s.steps, Tail: s.traceTail()}
}
