package p2p

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestJitteredStaysWithinItsFraction: a round's interval is drawn within
// frac of its nominal length either side, and draws differ.
func TestJitteredStaysWithinItsFraction(t *testing.T) {
	const d = 20 * time.Second
	lo, hi := d, d
	for i := 0; i < 1000; i++ {
		j := Jittered(d, 0.1)
		if j < d-d/10 || j > d+d/10 {
			t.Fatalf("Jittered(%s, 0.1) = %s, outside ±10 %%", d, j)
		}
		lo, hi = min(lo, j), max(hi, j)
	}
	// 1000 uniform draws over ±2 s leave no gap of a second at either end
	// (chance 0.75^1000 each).
	if lo > d-time.Second || hi < d+time.Second {
		t.Fatalf("draws span only [%s, %s]", lo, hi)
	}
	if got := Jittered(d, 0); got != d {
		t.Fatalf("no jitter: %s", got)
	}
}

// fakeAdvertiser counts advertisements and fails them while fail is set.
type fakeAdvertiser struct {
	discovery.Discovery
	calls atomic.Int32
	fail  atomic.Bool
}

func (f *fakeAdvertiser) Advertise(context.Context, string, ...discovery.Option) (time.Duration, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return 0, errors.New("failed to find any peer in table")
	}
	return 3 * time.Hour, nil
}

func (f *fakeAdvertiser) FindPeers(context.Context, string, ...discovery.Option) (<-chan peer.AddrInfo, error) {
	return nil, errors.New("unused")
}

// TestTopicAdvertiserWaitsAndRenewsBeforeExpiry: a topic is advertised
// only once the routing table has a peer (not into an empty one, to fail
// and retry in step with every node started alongside), then renewed at
// about half the provider records' validity, not at drouting's 3 h; a
// failure is retried after about 2 min, jittered.
func TestTopicAdvertiserWaitsAndRenewsBeforeExpiry(t *testing.T) {
	fake := &fakeAdvertiser{}
	var rt atomic.Int32
	polled := make(chan struct{}, 100)
	a := topicAdvertiser{Discovery: fake, validity: 30 * time.Minute, poll: time.Millisecond,
		rt: func() int {
			select {
			case polled <- struct{}{}:
			default:
			}
			return int(rt.Load())
		}}
	done := make(chan time.Duration, 1)
	go func() {
		next, err := a.Advertise(context.Background(), "topic")
		if err != nil {
			t.Error(err)
		}
		done <- next
	}()
	for i := 0; i < 5; i++ {
		<-polled // it looked at the empty table, again and again
	}
	if n := fake.calls.Load(); n != 0 {
		t.Fatalf("advertised %d times into an empty routing table", n)
	}
	rt.Store(3)
	next := <-done
	if fake.calls.Load() != 1 || next < 13*time.Minute+30*time.Second || next > 16*time.Minute+30*time.Second {
		t.Fatalf("advertised %d times, next in %s: want once, next at about 15 min", fake.calls.Load(), next)
	}
	fake.fail.Store(true)
	next, err := a.Advertise(context.Background(), "topic")
	if err == nil || next < 90*time.Second || next > 150*time.Second {
		t.Fatalf("failed advertisement: next in %s, err %v: want about 2 min and the error", next, err)
	}
	// A wait for the table ends with its context.
	rt.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Advertise(ctx, "topic"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}
