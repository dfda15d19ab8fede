package p2p

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestRTTsMeasureOverLibp2pPing: a node measures its round trip to
// another over libp2p's ping protocol (which the host serves), keeps it,
// and answers from the table while it is fresh. A peer nobody can reach
// gives no sample.
func TestRTTsMeasureOverLibp2pPing(t *testing.T) {
	a, b := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, ok := b.RTTs().Measure(ctx, a.ID())
	if !ok || d <= 0 || d > time.Second {
		t.Fatalf("measured rtt %v (%v) to a loopback peer", d, ok)
	}
	if f, ok := b.RTTs().Fresh(a.ID()); !ok || f != d {
		t.Fatalf("fresh sample %v (%v), want the measurement %v", f, ok, d)
	}
	stranger := newNode(t).ID() // never connected, no address known
	if d, ok := b.RTTs().Measure(ctx, stranger); ok {
		t.Fatalf("measured %v to an unreachable peer", d)
	}
}

// fakePings answers pings from a table of round trips, counting them; a
// peer in hold blocks until it is released.
type fakePings struct {
	mu    sync.Mutex
	rtt   map[peer.ID]time.Duration
	calls map[peer.ID]int
	hold  chan struct{}
}

func (f *fakePings) ping(ctx context.Context, p peer.ID) (time.Duration, error) {
	f.mu.Lock()
	f.calls[p]++
	d, ok := f.rtt[p]
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if !ok {
		return 0, fmt.Errorf("no answer from %s", p)
	}
	return d, nil
}

func (f *fakePings) count(p peer.ID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[p]
}

func testPeer(t *testing.T) peer.ID {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRTTsAverageAndAge: samples of a peer are averaged (EWMA, a new
// sample weighing 0.3); a sample older than RTTMaxAge is no longer
// fresh, is measured again on demand, and the new sample replaces it.
func TestRTTsAverageAndAge(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	p := testPeer(t)
	f := &fakePings{rtt: map[peer.ID]time.Duration{p: 10 * time.Millisecond}, calls: map[peer.ID]int{}}
	tbl := NewRTTs(f.ping, func() time.Time { return now })
	ctx := context.Background()
	if d, ok := tbl.Measure(ctx, p); !ok || d != 10*time.Millisecond {
		t.Fatalf("first sample %v %v", d, ok)
	}
	if d, _ := tbl.Measure(ctx, p); d != 10*time.Millisecond || f.count(p) != 1 {
		t.Fatalf("a fresh sample was measured again (%d pings, %v)", f.count(p), d)
	}
	f.rtt[p] = 20 * time.Millisecond
	now = now.Add(RTTMaxAge / 2)
	if n := tbl.Refresh(ctx, []peer.ID{p}, 10); n != 1 {
		t.Fatalf("refresh of a half-aged sample measured %d peers, want 1", n)
	}
	if d, ok := tbl.Fresh(p); !ok || d != 13*time.Millisecond {
		t.Fatalf("average after 10ms then 20ms: %v, want 13ms", d)
	}
	now = now.Add(RTTMaxAge)
	if d, ok := tbl.Fresh(p); ok {
		t.Fatalf("a sample %v old is fresh: %v", RTTMaxAge, d)
	}
	f.rtt[p] = 80 * time.Millisecond
	if d, ok := tbl.Measure(ctx, p); !ok || d != 80*time.Millisecond || f.count(p) != 3 {
		t.Fatalf("after a stale sample: %v (%d pings), want a new 80ms sample replacing it", d, f.count(p))
	}
}

// TestRTTsRefreshIsBounded: a refresh measures at most its limit of the
// peers due, those never measured first, then the stalest; peers measured
// within half RTTMaxAge are not due.
func TestRTTsRefreshIsBounded(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	var ps []peer.ID
	f := &fakePings{rtt: map[peer.ID]time.Duration{}, calls: map[peer.ID]int{}}
	for i := range 6 {
		p := testPeer(t)
		ps = append(ps, p)
		f.rtt[p] = time.Duration(i+1) * time.Millisecond
	}
	tbl := NewRTTs(f.ping, func() time.Time { return now })
	ctx := context.Background()
	// ps[0] measured long ago, ps[1] less long ago, ps[2] just now.
	for i, age := range []time.Duration{RTTMaxAge - time.Minute, RTTMaxAge - 2*time.Minute, 0} {
		now = now.Add(-age)
		tbl.Measure(ctx, ps[i])
		now = now.Add(age)
	}
	for _, p := range ps {
		f.calls[p] = 0
	}
	if n := tbl.Refresh(ctx, ps, 4); n != 4 {
		t.Fatalf("refreshed %d, want the limit 4", n)
	}
	var got []int
	for i, p := range ps {
		if f.count(p) > 0 {
			got = append(got, i)
		}
	}
	// ps[3..5] never measured, then the stalest ps[0]; not ps[1], nor
	// ps[2] (fresh).
	if want := []int{0, 3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("refreshed peers %v, want %v", got, want)
	}
}

// TestRTTsRefreshPassesOverPeersThatDoNotAnswer: a peer that did not
// answer its measurement (a host serving no ping) is tried again only
// after as long as an answering one is measured again, so that peers that
// never answer cannot take every refresh's slots from the rest.
func TestRTTsRefreshPassesOverPeersThatDoNotAnswer(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	f := &fakePings{rtt: map[peer.ID]time.Duration{}, calls: map[peer.ID]int{}}
	mute := []peer.ID{testPeer(t), testPeer(t), testPeer(t)}
	answers := testPeer(t)
	f.rtt[answers] = 7 * time.Millisecond
	tbl := NewRTTs(f.ping, func() time.Time { return now })
	ctx := context.Background()
	all := append(slices.Clone(mute), answers)
	if n := tbl.Refresh(ctx, all, len(mute)); n != len(mute) || f.count(answers) != 0 {
		t.Fatalf("first refresh measured %d (the answering peer %d times), want the %d mute ones", n, f.count(answers), len(mute))
	}
	now = now.Add(10 * time.Second)
	if n := tbl.Refresh(ctx, all, len(mute)); n != 1 || f.count(answers) != 1 || f.count(mute[0]) != 1 {
		t.Fatalf("second refresh measured %d (the answering peer %d times, a mute one %d), want only the answering one", n, f.count(answers), f.count(mute[0]))
	}
	if d, ok := tbl.Fresh(answers); !ok || d != 7*time.Millisecond {
		t.Fatalf("answering peer: %v %v", d, ok)
	}
	if _, ok := tbl.Fresh(mute[0]); ok {
		t.Fatal("a peer that never answered has a fresh round trip")
	}
	now = now.Add(RTTMaxAge / 2)
	if n := tbl.Refresh(ctx, all, 10); n != len(all) || f.count(mute[0]) != 2 {
		t.Fatalf("after half RTTMaxAge: refreshed %d, want all %d again", n, len(all))
	}
}

// TestRTTsShareOneMeasurement: callers asking for a peer's RTT while it
// is measured share that measurement: one ping, however many ask.
func TestRTTsShareOneMeasurement(t *testing.T) {
	p := testPeer(t)
	f := &fakePings{rtt: map[peer.ID]time.Duration{p: 7 * time.Millisecond}, calls: map[peer.ID]int{}, hold: make(chan struct{})}
	tbl := NewRTTs(f.ping, nil)
	const callers = 8
	results := make(chan time.Duration, callers)
	for range callers {
		go func() {
			d, _ := tbl.Measure(context.Background(), p)
			results <- d
		}()
	}
	deadline := time.After(5 * time.Second)
	for {
		changed := tbl.Changed()
		tbl.mu.Lock()
		run := tbl.running[p]
		joined := run != nil && run.callers == callers
		tbl.mu.Unlock()
		if joined {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the callers never all joined one measurement")
		case <-changed:
		}
	}
	close(f.hold)
	for range callers {
		if d := <-results; d != 7*time.Millisecond {
			t.Fatalf("a caller got %v", d)
		}
	}
	if n := f.count(p); n != 1 {
		t.Fatalf("%d pings for %d concurrent callers, want 1", n, callers)
	}
}

// TestRTTsTableIsBounded: the table keeps at most maxRTTPeers peers,
// dropping the stalest.
func TestRTTsTableIsBounded(t *testing.T) {
	now := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	tbl := NewRTTs(nil, func() time.Time { return now })
	first := testPeer(t)
	tbl.mu.Lock()
	tbl.addLocked(first, time.Millisecond)
	for i := 1; i <= maxRTTPeers; i++ {
		now = now.Add(time.Millisecond)
		tbl.addLocked(peer.ID(fmt.Sprintf("peer-%d", i)), time.Millisecond)
	}
	n := len(tbl.peers)
	tbl.mu.Unlock()
	if n != maxRTTPeers {
		t.Fatalf("table holds %d peers, want at most %d", n, maxRTTPeers)
	}
	if _, ok := tbl.Fresh(first); ok {
		t.Fatal("the stalest peer was kept")
	}
}
