package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// Round-trip measurement bounds.
const (
	// RTTMaxAge is how long a peer's RTT sample stays fresh: an older one
	// is not used (Fresh), is measured again when asked for (Measure), and
	// is replaced by the next sample rather than averaged with it (the
	// path may have changed).
	RTTMaxAge = 10 * time.Minute
	// RTTTimeout bounds one measurement: the dial, if the peer is not
	// connected, and its pings.
	RTTTimeout = 5 * time.Second
	// rttAlpha is the weight of a new sample in a peer's moving average.
	rttAlpha = 0.3
	// rttPings is how many pings one measurement sends over one stream:
	// its sample is the smallest round trip, since queueing only ever
	// adds to one.
	rttPings = 3
	// maxRTTPeers bounds the table; past it the stalest entry goes.
	maxRTTPeers = 4096
	// maxRTTInFlight bounds the measurements under way at once.
	maxRTTInFlight = 32
)

// RTTs is what this node measured of the round-trip time to its peers:
// an exponentially weighted moving average of each peer's samples, and
// when the last was taken. Samples come from libp2p's ping protocol
// (/ipfs/ping/1.0.0, which every libp2p host answers: New leaves it on),
// from this node's side: a peer cannot make its round trip look shorter
// than its network path, since it can only answer a ping once the ping
// has arrived. One measurement runs per peer at a time (callers asking
// meanwhile share it), at most maxRTTInFlight in all, and the table holds
// at most maxRTTPeers peers. Safe for concurrent use.
type RTTs struct {
	ping func(ctx context.Context, p peer.ID) (time.Duration, error)
	now  func() time.Time
	sem  chan struct{}

	mu      sync.Mutex
	peers   map[peer.ID]rttEntry
	running map[peer.ID]*rttRun
	// changed is notified at each sample taken and each caller that
	// joins a measurement.
	changed broadcast.Signal
}

// Changed returns a channel closed at the next sample the table takes or
// caller that joins a measurement: take it before reading the table, so
// that no change is missed.
func (t *RTTs) Changed() <-chan struct{} { return t.changed.Wait() }

type rttEntry struct {
	avg time.Duration // 0: the peer never answered
	at  time.Time     // the last sample's
	// tried is when the peer was last measured, whether it answered or
	// not: a refresh waits as long to try one that does not answer (a
	// host that serves no ping) as to measure one that does, so such
	// peers cannot crowd out the rest.
	tried time.Time
}

// rttRun is one measurement under way; rtt and err are set once done is
// closed.
type rttRun struct {
	done chan struct{}
	rtt  time.Duration
	err  error
	// callers counts the measure calls waiting on it (t.mu held).
	callers int
}

// NewRTTs returns an empty table whose samples come from ping (one
// measurement of the round trip to a peer, such as PingRTT's) on the
// clock now (nil: time.Now).
func NewRTTs(ping func(ctx context.Context, p peer.ID) (time.Duration, error), now func() time.Time) *RTTs {
	if now == nil {
		now = time.Now
	}
	return &RTTs{ping: ping, now: now, sem: make(chan struct{}, maxRTTInFlight),
		peers: map[peer.ID]rttEntry{}, running: map[peer.ID]*rttRun{}}
}

// PingRTT measures the round trip to p once, with libp2p's ping protocol
// over h (dialling p if it is not connected, through a relay if that is
// the only way): the smallest of rttPings pings on one stream.
func PingRTT(ctx context.Context, h host.Host, p peer.ID) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var best time.Duration
	var err error
	n := 0
	for res := range ping.Ping(ctx, h, p) {
		if res.Error != nil {
			err = res.Error
			break
		}
		if best == 0 || res.RTT < best {
			best = res.RTT
		}
		if n++; n == rttPings {
			break
		}
	}
	if best > 0 {
		return best, nil
	}
	if err == nil {
		err = errors.Join(ctx.Err(), errors.New("no answer"))
	}
	return 0, fmt.Errorf("p2p: ping %s: %w", p, err)
}

// Fresh is the average round trip to p, if its last sample is fresh
// (younger than RTTMaxAge).
func (t *RTTs) Fresh(p peer.ID) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.peers[p]
	if !ok || e.avg <= 0 || t.now().Sub(e.at) >= RTTMaxAge {
		return 0, false
	}
	return e.avg, true
}

// Measure is the average round trip to p: the fresh one, or else after
// measuring p now (within ctx and RTTTimeout); false when p did not
// answer.
func (t *RTTs) Measure(ctx context.Context, p peer.ID) (time.Duration, bool) {
	if d, ok := t.Fresh(p); ok {
		return d, true
	}
	if err := t.measure(ctx, p); err != nil {
		return 0, false
	}
	return t.Fresh(p)
}

// Refresh measures again, in parallel, up to limit of peers whose sample
// is missing or older than half RTTMaxAge and that were not tried within
// it (a peer that did not answer waits as long), those never tried
// first, then the stalest, and returns how many it measured. A daemon calls it
// in the background for the providers it knows, so that their samples
// stay fresh at a bounded rate of pings.
func (t *RTTs) Refresh(ctx context.Context, peers []peer.ID, limit int) int {
	type due struct {
		p  peer.ID
		at time.Time
	}
	now := t.now()
	var todo []due
	t.mu.Lock()
	for _, p := range peers {
		e, ok := t.peers[p]
		if ok && now.Sub(e.tried) < RTTMaxAge/2 {
			continue
		}
		if !slices.ContainsFunc(todo, func(d due) bool { return d.p == p }) {
			todo = append(todo, due{p, e.tried}) // never tried: the zero time, first
		}
	}
	t.mu.Unlock()
	slices.SortStableFunc(todo, func(a, b due) int { return a.at.Compare(b.at) })
	todo = todo[:min(len(todo), max(limit, 0))]
	var wg sync.WaitGroup
	for _, d := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = t.measure(ctx, d.p)
		}()
	}
	wg.Wait()
	return len(todo)
}

// measure takes a sample of the round trip to p, joining the measurement
// under way if there is one.
func (t *RTTs) measure(ctx context.Context, p peer.ID) error {
	t.mu.Lock()
	run, joined := t.running[p]
	if !joined {
		run = &rttRun{done: make(chan struct{})}
		t.running[p] = run
	}
	run.callers++
	t.mu.Unlock()
	t.changed.Notify()
	if !joined {
		go t.run(p, run)
	}
	select {
	case <-run.done:
		return run.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is one measurement of p, on no caller's context: callers that gave
// up leave it to finish (within RTTTimeout) for those still waiting, and
// for the table.
func (t *RTTs) run(p peer.ID, run *rttRun) {
	ctx, cancel := context.WithTimeout(context.Background(), RTTTimeout)
	defer cancel()
	select {
	case t.sem <- struct{}{}:
		run.rtt, run.err = t.ping(ctx, p)
		<-t.sem
	case <-ctx.Done():
		run.err = fmt.Errorf("p2p: ping %s: too many measurements under way: %w", p, ctx.Err())
	}
	if run.err == nil && run.rtt <= 0 {
		run.err = fmt.Errorf("p2p: ping %s: no round trip", p)
	}
	t.mu.Lock()
	delete(t.running, p)
	if run.err == nil {
		t.addLocked(p, run.rtt)
	} else {
		t.triedLocked(p)
	}
	t.mu.Unlock()
	t.changed.Notify()
	close(run.done)
}

// addLocked folds a sample into p's average (t.mu held): the first
// sample, or one after a stale one, starts it afresh.
func (t *RTTs) addLocked(p peer.ID, rtt time.Duration) {
	now := t.now()
	e, ok := t.peers[p]
	if ok && now.Sub(e.at) < RTTMaxAge {
		e.avg = time.Duration(rttAlpha*float64(rtt) + (1-rttAlpha)*float64(e.avg))
	} else {
		e.avg = rtt
	}
	e.at, e.tried = now, now
	t.putLocked(p, e, ok)
}

// triedLocked notes a measurement of p that got no sample (t.mu held);
// p's last sample, if any, stays until it ages.
func (t *RTTs) triedLocked(p peer.ID) {
	e, ok := t.peers[p]
	e.tried = t.now()
	t.putLocked(p, e, ok)
}

// putLocked stores p's entry (t.mu held); a new peer past maxRTTPeers
// pushes out the one tried longest ago.
func (t *RTTs) putLocked(p peer.ID, e rttEntry, known bool) {
	if !known && len(t.peers) >= maxRTTPeers {
		var stalest peer.ID
		var at time.Time
		for q, o := range t.peers {
			if stalest == "" || o.tried.Before(at) {
				stalest, at = q, o.tried
			}
		}
		delete(t.peers, stalest)
	}
	t.peers[p] = e
}
