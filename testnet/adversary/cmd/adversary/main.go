// Command adversary runs one of package adversary's hostile-peer attacks
// against a running gpumesh network and prints what the target answered as
// JSON:
//
//	go run ./testnet/adversary/cmd/adversary --target <multiaddr/p2p/ID> <attack>
//
// Attacks: fake-provider, non-confirmers, flood, replay, sybils,
// sybil-records, call-addrs, malformed. The target is the node attacked (a
// renter for fake-provider, replay, the bidders and sybil-records; a
// provider for flood, call-addrs and malformed); --peer adds more nodes to
// join through (e.g. the providers a flood should reach directly).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/testnet/adversary"
)

type addrs []string

func (a *addrs) String() string     { return strings.Join(*a, ",") }
func (a *addrs) Set(v string) error { *a = append(*a, v); return nil }

const usage = `usage: adversary --target <multiaddr with /p2p/ID> [flags] <attack>

attacks:
  fake-provider   bid lowest, win a lease, run nothing, fake heartbeats, a future end and whole-lease receipts
  non-confirmers  N identities that bid lowest on every call and never confirm an award (for --duration)
  flood           publish calls for bids from owners that never accept a bid (for --duration)
  replay          capture a gossiped two-party receipt and replay it (gossip and to the target)
  sybils          sybil renters sign receipts for a fake provider and gossip them
  sybil-records   capability records of --records fresh provider identities, kept discoverable (for --duration)
  call-addrs      calls from a stranger naming this command's loopback listener as their owner's address;
                  counts the connections it gets (for --duration)
  malformed       malformed frames on every protocol, and hostile gossip

flags:
`

func main() {
	var peers addrs
	target := flag.String("target", "", "multiaddr (with /p2p/ID) of the node to attack")
	flag.Var(&peers, "peer", "another node to join through (repeatable)")
	duration := flag.Duration("duration", 30*time.Second, "how long the attack runs (or waits for a lease or receipt)")
	n := flag.Int("n", 8, "non-confirmers: identities")
	rate := flag.Float64("rate", 200, "flood: calls per second")
	owners := flag.Int("owners", 4, "flood: owner identities")
	region := flag.String("region", "eu", "flood, call-addrs and malformed: region the calls are for")
	times := flag.Int("times", 5, "replay: how many times")
	renters := flag.Int("renters", 20, "sybils: renter identities")
	perRenter := flag.Int("per-renter", 3, "sybils: receipts per renter")
	records := flag.Int("records", 120, "sybil-records: provider identities")
	verbose := flag.Bool("v", false, "log the peers' protocol events to stderr")
	flag.Usage = func() { fmt.Fprint(os.Stderr, usage); flag.PrintDefaults() }
	flag.Parse()
	if *target == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out, err := run(ctx, flag.Arg(0), *target, peers, *duration, log, opts{n: *n, rate: *rate, owners: *owners,
		region: *region, times: *times, renters: *renters, perRenter: *perRenter, records: *records})
	if out != nil {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "adversary:", err)
		os.Exit(1)
	}
}

type opts struct {
	n, owners, times, renters, perRenter, records int
	rate                                          float64
	region                                        string
}

func run(ctx context.Context, attack, target string, peers []string, d time.Duration, log *slog.Logger, o opts) (any, error) {
	pc := adversary.PeerConfig{Bootstrap: append([]string{target}, peers...), Log: log}
	switch attack {
	case "fake-provider", "non-confirmers", "flood", "replay", "sybils", "sybil-records", "call-addrs", "malformed":
	default:
		return nil, fmt.Errorf("unknown attack %q (see --help)", attack)
	}
	if attack == "non-confirmers" {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		b, err := adversary.NonConfirmingBidders(ctx, o.n, pc, adversary.BidderConfig{})
		if err != nil {
			return nil, err
		}
		defer b.Close()
		<-ctx.Done()
		return map[string]int{"identities": len(b.Peers), "bids": b.Bids()}, nil
	}
	p, err := adversary.NewPeer(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	tid, err := p.Connect(ctx, target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	switch attack {
	case "fake-provider":
		return adversary.FakeProvider(ctx, p, adversary.FakeProviderConfig{})
	case "flood":
		return adversary.CallFlood(ctx, p, adversary.FloodConfig{Owners: o.owners, Rate: o.rate, Region: o.region})
	case "replay":
		b, err := adversary.CaptureReceipt(ctx, p)
		if err != nil {
			return nil, err
		}
		return adversary.ReplayReceipts(ctx, p, tid, b, o.times)
	case "sybils":
		return adversary.SybilReceipts(ctx, p, adversary.SybilConfig{Renters: o.renters, PerRenter: o.perRenter})
	case "sybil-records":
		// The records stay discoverable while the peer that answers for
		// them runs.
		rep, err := adversary.SybilRecords(ctx, p, o.records, adversary.BidderConfig{})
		if err == nil {
			<-ctx.Done()
		}
		return rep, err
	case "call-addrs":
		return callAddrs(ctx, p, o.region)
	default: // malformed
		outs, ferr := adversary.MalformedFrames(ctx, p, tid)
		sent, gerr := adversary.MalformedGossip(ctx, p, o.region)
		return map[string]any{"frames": outs, "hostile_gossip": sent}, errors.Join(ferr, gerr)
	}
}

// callAddrs publishes, every two seconds until ctx ends, a fresh call from
// a stranger naming a loopback listener of this command as its owner's
// address, and counts the connections the listener gets: an honest
// provider makes none.
func callAddrs(ctx context.Context, p *adversary.Peer, region string) (map[string]any, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	addr := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", l.Addr().(*net.TCPAddr).Port)
	job := terms.Job{Tier: terms.Silver, MaxPrice: 100, GPUCount: 1, Duration: time.Hour, Region: region,
		Run: terms.RunSpec{Command: []string{"true"}}}
	calls := 0
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		if _, err := adversary.CallNamingAddrs(ctx, p, job, []string{addr}); err != nil && ctx.Err() == nil {
			return nil, err
		}
		calls++
		select {
		case <-ctx.Done():
			return map[string]any{"named": addr, "calls": calls, "connections": conns.Load()}, nil
		case <-tick.C:
		}
	}
}
