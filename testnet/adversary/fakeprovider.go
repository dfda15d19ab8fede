package adversary

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/node/wire/wirenet"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/frame"
	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// transport carries an adversary's auction messages over its libp2p node,
// bound as the daemon's are.
func (p *Peer) transport() auction.Transport { return wirenet.AuctionTransport(p2p.Direct{N: p.Node}) }

// BidderConfig is what a hostile bidder claims to sell.
type BidderConfig struct {
	Region string    // default "eu-west"
	GPU    terms.GPU // default one 80 GB H100
	Price  float64   // price floor per GPU-hour; default 0.01 (undercuts any honest provider)
	// Advertise puts the bidder's signed capability record in the DHT and
	// provides its discovery keys, as an honest provider does: renters that
	// discover it then expect it to answer their calls, and wait for it.
	Advertise bool
}

func (c BidderConfig) capability(id peer.ID) terms.Capability {
	if c.Region == "" {
		c.Region = "eu-west"
	}
	if c.GPU.Model == "" {
		c.GPU = terms.GPU{Model: "H100", VRAMGB: 80}
	}
	if c.Price <= 0 {
		c.Price = 0.01
	}
	now := time.Now()
	return terms.Capability{Peer: id.String(), Region: c.Region, GPUs: []terms.GPU{c.GPU},
		Policy: terms.Policy{PriceFloor: c.Price, AcceptPreemptible: true}, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// bidderSelf is a bidder's capability, issued afresh at each call.
type bidderSelf struct {
	cfg BidderConfig
	id  peer.ID
}

func (b bidderSelf) Capability() terms.Capability { return b.cfg.capability(b.id) }
func (bidderSelf) Reliability() float64           { return terms.NeutralReliability }

// bidderRuntime hands a bidder's confirmed leases to onLease (nil: to
// nobody); it runs nothing, so it neither vets awards nor moves leases.
type bidderRuntime struct{ onLease func(terms.Lease) }

func (r bidderRuntime) OnLease(l terms.Lease, _ terms.Job, _ []string) {
	if r.onLease != nil {
		r.onLease(l)
	}
}
func (bidderRuntime) OnMove(terms.Lease, terms.Job) bool { return false }
func (bidderRuntime) Admit(string, string, string) error { return nil }

// bidder runs the project's own auction.Provider on a hostile peer, so its
// bids are well formed and signed: it hears calls and bids on them at its
// (low) price. onLease receives each confirmed lease; nil means the peer
// never confirms an award (see NonConfirmingBidders).
func (p *Peer) bidder(ctx context.Context, cfg BidderConfig, onLease func(terms.Lease)) (*auction.Provider, error) {
	capab := cfg.capability(p.ID())
	prov, err := auction.NewProvider(auction.ProviderConfig{Signer: p.Signer, Transport: p.transport(),
		Calendar: auction.NewCalendar(len(capab.GPUs)), Log: p.Log,
		Self: bidderSelf{cfg, p.ID()}, Runtime: bidderRuntime{onLease}})
	if err != nil {
		return nil, err
	}
	if onLease != nil {
		p.Node.Handle(wire.ProtoAward, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
			return prov.HandleAward(from, req)
		})
	} else {
		// Never confirm: hold the award's stream until the renter gives up.
		p.Node.Handle(wire.ProtoAward, func(hctx context.Context, _ peer.ID, _ []byte) ([]byte, error) {
			select {
			case <-hctx.Done():
			case <-ctx.Done():
			}
			return nil, errors.New("no")
		})
	}
	if err := p.SubscribeCalls(ctx, &capab, func(from peer.ID, data []byte) []byte { answer, _ := prov.HandleCall(from, data); return answer },
		func(from peer.ID, data []byte) { _ = prov.HandleGossipedCall(from, data) }); err != nil {
		return nil, err
	}
	if cfg.Advertise {
		capab.Addrs = p.Node.Addrs()
		b, err := terms.SealCapability(p.Signer, capab)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := putRecord(actx, p, terms.CapabilityKey(sign.ID(p.ID())), b); err != nil {
			return nil, fmt.Errorf("adversary: advertise: %w", err)
		}
		// Announced concurrently, as the daemon does (provideKeys): one
		// slow lookup does not hold up the others' announcements.
		keys := terms.DiscoveryKeys(capab)
		errs := make(chan error, len(keys))
		for _, k := range keys {
			go func() {
				if err := p.Node.Provide(actx, k); err != nil {
					errs <- fmt.Errorf("adversary: provide %s: %w", k, err)
					return
				}
				errs <- nil
			}()
		}
		var first error
		for range keys {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return nil, first
		}
	}
	return prov, nil
}

// FakeProviderConfig configures the fake-provider attack.
type FakeProviderConfig struct {
	BidderConfig
	// Heartbeats is how many fake heartbeats (100% GPU) it sends once
	// leased; default 5.
	Heartbeats int
	// Receipts is how many times it sends each receipt claiming the whole
	// lease; default 3.
	Receipts int
	// FutureEnd is how far in the future its first "succeeded" report says
	// the run ended; default 3h.
	FutureEnd time.Duration
	// Idle is how long it sits on the lease doing nothing before faking
	// anything, the time its "since the lease start" receipts overclaim;
	// default 2s.
	Idle time.Duration
}

// Answer is what a target answered one hostile message with.
type Answer struct {
	What string `json:"what"`
	// Err is the target's refusal ("" when it accepted).
	Err string `json:"err,omitempty"`
}

func answer(what string, err error) Answer {
	a := Answer{What: what}
	if err != nil {
		a.Err = err.Error()
	}
	return a
}

// FakeProviderReport is what the fake provider did and what the renter
// answered.
type FakeProviderReport struct {
	Lease              terms.Lease `json:"lease"`
	HeartbeatsSent     int         `json:"heartbeats_sent"`
	HeartbeatsAccepted int         `json:"heartbeats_accepted"`
	// Answers lists every lease event and receipt sent, in order.
	Answers []Answer `json:"answers"`
	// ClaimedGPUSeconds is what the whole-lease receipts claimed.
	ClaimedGPUSeconds float64 `json:"claimed_gpu_seconds"`
	// Countersigned are the receipts the renter countersigned (its
	// answers), distinct by payload.
	Countersigned []attest.Receipt `json:"countersigned"`
	// Ran is how long the attack held the lease, from the award to its
	// last message; Observable is the part a renter could have observed,
	// from the first accepted heartbeat to the final report.
	Ran        time.Duration `json:"ran"`
	Observable time.Duration `json:"observable"`
}

// Refused counts the answers that were refusals.
func (r FakeProviderReport) Refused() int {
	n := 0
	for _, a := range r.Answers {
		if a.Err != "" {
			n++
		}
	}
	return n
}

// FakeProvider advertises itself on the call topics, bids lowest, wins a
// lease, runs nothing, and then tries to be paid for the whole lease: fake
// heartbeats, a made-up log served with its digest as the "evidence" of
// work (which only proves the provider committed to that log), a "succeeded" report that ends hours in the future, receipts
// claiming the whole lease (each sent cfg.Receipts times) before and after
// a plausible final report, then a receipt for what the renter could have
// observed, followed by more whole-lease receipts. It returns once it has
// tried everything on its first lease, or when ctx ends.
func FakeProvider(ctx context.Context, p *Peer, cfg FakeProviderConfig) (FakeProviderReport, error) {
	if cfg.Heartbeats <= 0 {
		cfg.Heartbeats = 5
	}
	if cfg.Receipts <= 0 {
		cfg.Receipts = 3
	}
	if cfg.FutureEnd <= 0 {
		cfg.FutureEnd = 3 * time.Hour
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 2 * time.Second
	}
	leases := make(chan terms.Lease, 4)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := p.bidder(bctx, cfg.BidderConfig, func(l terms.Lease) {
		select {
		case leases <- l:
		default:
		}
	}); err != nil {
		return FakeProviderReport{}, err
	}
	var rep FakeProviderReport
	select {
	case rep.Lease = <-leases:
	case <-ctx.Done():
		return rep, fmt.Errorf("adversary: fake provider won no lease: %w", ctx.Err())
	}
	l := rep.Lease
	t0 := time.Now()
	renter, err := peer.Decode(l.Renter)
	if err != nil {
		return rep, err
	}
	req := func(proto protocol.ID, data []byte) ([]byte, error) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return p.Node.Request(rctx, renter, nil, proto, data)
	}
	// The job's "log": made up, served on the logs stream, its digest in
	// the final report and the receipts, so the renter's evidence check
	// passes and its billing checks are what the receipts meet.
	fakeLog := []byte("epoch 1 loss 0.42\nepoch 2 loss 0.17\n")
	logSum := sha256.Sum256(fakeLog)
	logDigest := hex.EncodeToString(logSum[:])
	p.Node.Host.SetStreamHandler(wire.ProtoLogs, func(s lpnet.Stream) {
		defer s.Close()
		if _, err := frame.Read(bufio.NewReader(s)); err == nil {
			_, _ = s.Write(fakeLog)
		}
	})
	defer p.Node.Host.RemoveStreamHandler(wire.ProtoLogs)

	// Run nothing.
	select {
	case <-time.After(cfg.Idle):
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	// Fake heartbeats: full GPU, nothing behind them. The first claims
	// NVML telemetry of a made-up device with no fingerprint (refused:
	// nothing signed says the device is ours); the rest are the telemetry
	// a declared-GPU provider sends, which no renter can tell from real.
	var firstBeat time.Time
	for seq := 1; seq <= cfg.Heartbeats; seq++ {
		hb := attest.Heartbeat{LeaseID: l.ID, Seq: uint64(seq), Time: time.Now(),
			GPUUtil: 100, TempC: 70, PowerW: 650, CPUSeconds: float64(seq), RSSMB: 100, Source: attest.SourceProcess}
		if seq == 1 {
			hb.Source, hb.MemUsedMB, hb.RSSMB, hb.GPUUUIDs = attest.SourceNVML, 70000, 0, []string{"GPU-00000000-0000-4000-8000-00000000fake"}
		}
		env, err := attest.SignHeartbeat(p.Signer, hb)
		if err != nil {
			return rep, err
		}
		b, _ := env.Marshal()
		rep.HeartbeatsSent++
		if _, err := req((wire.ProtoHeartbeat), b); err == nil {
			rep.HeartbeatsAccepted++
			if firstBeat.IsZero() {
				firstBeat = time.Now()
			}
		}
	}

	event := func(what string, ev wire.LeaseEvent) (*attest.HeartbeatSummary, error) {
		ev.LeaseID, ev.JobID, ev.Provider, ev.Time = l.ID, l.JobID, p.ID().String(), time.Now()
		b, err := sealed(p, sign.DomainLeaseEvent, ev)
		if err != nil {
			return nil, err
		}
		resp, err := req((wire.ProtoLeaseEvent), b)
		rep.Answers = append(rep.Answers, answer(what, err))
		if err != nil || len(resp) == 0 {
			return nil, err
		}
		var sum attest.HeartbeatSummary
		if err := json.Unmarshal(resp, &sum); err != nil {
			return nil, err
		}
		return &sum, nil
	}
	seen := map[string]bool{}
	receipt := func(what string, rc attest.Receipt) {
		sr, err := attest.NewReceipt(p.Signer, rc)
		if err != nil {
			rep.Answers = append(rep.Answers, answer(what, err))
			return
		}
		b, _ := sr.Marshal()
		resp, err := req((wire.ProtoReceipt), b)
		if err == nil {
			var full *attest.SignedReceipt
			if full, err = attest.OpenReceipt(resp); err == nil && !seen[string(full.Payload)] {
				seen[string(full.Payload)] = true
				rep.Countersigned = append(rep.Countersigned, full.Receipt)
			}
		}
		rep.Answers = append(rep.Answers, answer(what, err))
	}
	whole := func(sum attest.HeartbeatSummary) attest.Receipt {
		secs := l.End.Sub(l.Start).Seconds() * float64(l.GPUCount)
		rep.ClaimedGPUSeconds = secs
		return attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: l.Provider,
			Start: l.Start, End: l.End, GPUCount: l.GPUCount, GPUSeconds: secs, Price: l.Price,
			Amount: attest.AmountFor(secs, l.Price), Outcome: terms.RunSucceeded, Heartbeats: sum, IssuedAt: time.Now(),
			LogDigest: logDigest}
	}
	fakeSum := attest.HeartbeatSummary{Count: cfg.Heartbeats, Expected: cfg.Heartbeats, Coverage: 1, MeanGPUUtil: 100}

	// A run that "succeeded" hours from now, and receipts for all of it.
	_, _ = event("succeeded event ending "+cfg.FutureEnd.String()+" in the future",
		wire.LeaseEvent{Run: terms.RunSucceeded, Started: l.Start, Ended: time.Now().Add(cfg.FutureEnd)})
	for i := 0; i < cfg.Receipts; i++ {
		receipt("whole-lease receipt before any final report", whole(fakeSum))
	}
	// A plausible final report, then receipts for the whole lease carrying
	// the renter's own heartbeat summary.
	end := time.Now()
	sum, err := event("succeeded event ending now", wire.LeaseEvent{Run: terms.RunSucceeded, Started: l.Start, Ended: end,
		LogDigest: logDigest, LogBytes: int64(len(fakeLog))})
	if sum == nil {
		rep.Ran = time.Since(t0)
		if err == nil {
			err = errors.New("renter answered the final report without a heartbeat summary")
		}
		return rep, fmt.Errorf("adversary: final report refused: %w", err)
	}
	for i := 0; i < cfg.Receipts; i++ {
		receipt("whole-lease receipt after the final report", whole(*sum))
	}
	// The lease so far, as if it had run from the lease's start.
	for i := 0; i < cfg.Receipts; i++ {
		rc := whole(*sum)
		secs := end.Sub(l.Start).Seconds() * float64(l.GPUCount)
		rc.End, rc.GPUSeconds, rc.Amount = end, secs, attest.AmountFor(secs, l.Price)
		receipt("receipt from the lease start to the final report", rc)
	}
	// What the renter could have seen: from the first accepted heartbeat
	// to the final report.
	if !firstBeat.IsZero() {
		rep.Observable = end.Sub(firstBeat)
		secs := attest.BillableSeconds(l, firstBeat, end, end, *sum) * float64(l.GPUCount)
		rc := whole(*sum)
		rc.Start, rc.End, rc.GPUSeconds, rc.Amount = firstBeat, end, secs, attest.AmountFor(secs, l.Price)
		receipt("receipt for the observed span", rc)
	}
	for i := 0; i < cfg.Receipts; i++ {
		receipt("whole-lease receipt after settlement", whole(*sum))
	}
	rep.Ran = time.Since(t0)
	return rep, nil
}

// sealed marshals a signed envelope of v.
func sealed(p *Peer, domain string, v any) ([]byte, error) {
	env, err := sign.Seal(p.Signer, domain, v)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}
