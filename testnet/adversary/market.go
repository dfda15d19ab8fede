package adversary

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// UnsolicitedNotice sends the renter a capacity notice, signed by the
// hostile peer, naming jobs it never declined (job ids are public: every
// call for bids carries its job's). An honest renter wakes a queued job
// only on the notice of a provider that turned that job away as busy, and
// refuses this one (renter.unsolicited_notice). It returns the renter's
// answer.
func UnsolicitedNotice(ctx context.Context, p *Peer, renter peer.ID, jobs []string) Answer {
	data, err := terms.EncodeCapacityNotice(p.Signer, terms.CapacityNotice{Provider: p.ID().String(), FreeGPUs: 8,
		Jobs: jobs, IssuedAt: time.Now()})
	if err != nil {
		return answer("capacity notice", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = p.Node.Request(rctx, renter, nil, wire.ProtoBid, data)
	return answer(fmt.Sprintf("capacity notice naming %d job(s) never declined", len(jobs)), err)
}

// MoveReport is what a provider's lease moves got from its renter.
type MoveReport struct {
	Lease terms.Lease `json:"lease"`
	// Past is the answer to the move into the past; Control to the move
	// by one second earlier, within the rule (terms.Lease.Moved).
	Past    Answer `json:"past"`
	Control Answer `json:"control"`
}

// MoveIntoPast bids lowest, wins a lease and, before any heartbeat (the
// lease is pending), tells the renter it moved the lease back to start
// back ago (default one hour): a provider that did so would be paid for
// GPU time before the lease existed. The renter must refuse it
// (renter.move_refused). As a control it then moves the lease one second
// earlier, which the rule allows: the renter takes that one, so the
// refusal was the move's, not the message's. It returns once both were
// answered, or when ctx ends.
func MoveIntoPast(ctx context.Context, p *Peer, cfg BidderConfig, back time.Duration) (MoveReport, error) {
	if back <= 0 {
		back = time.Hour
	}
	leases := make(chan terms.Lease, 1)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := p.bidder(bctx, cfg, func(l terms.Lease) {
		select {
		case leases <- l:
		default:
		}
	}); err != nil {
		return MoveReport{}, err
	}
	var rep MoveReport
	select {
	case rep.Lease = <-leases:
	case <-ctx.Done():
		return rep, fmt.Errorf("adversary: won no lease to move: %w", ctx.Err())
	}
	l := rep.Lease
	renter, err := peer.Decode(l.Renter)
	if err != nil {
		return rep, err
	}
	move := func(start time.Time) Answer {
		ev := wire.LeaseEvent{LeaseID: l.ID, JobID: l.JobID, Provider: p.ID().String(), Time: time.Now(),
			Run: terms.RunPending, Moved: &wire.LeaseMove{Start: start, Devices: l.Devices}}
		b, err := sealed(p, sign.DomainLeaseEvent, ev)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = p.Node.Request(rctx, renter, nil, wire.ProtoLeaseEvent, b)
			cancel()
		}
		return answer("lease moved to start "+time.Until(start).Round(time.Second).String()+" from now", err)
	}
	rep.Past = move(time.Now().Add(-back))
	rep.Control = move(l.Start.Add(-time.Second))
	return rep, nil
}

// ReuseReport is what an award reusing another renter's lease id got.
type ReuseReport struct {
	Job terms.JobStatus `json:"job"`
	// Awards counts the awards sent, each carrying the victim's lease id.
	Awards int `json:"awards"`
	// Err is how the auction ended ("": leased, which it must not be).
	Err string `json:"err,omitempty"`
}

// ReuseLeaseID runs an auction as a renter of its own (the project's
// auction.Renter on the hostile peer) for job and rewrites every award it
// sends to carry leaseID, another renter's lease id (receipts are gossiped,
// so lease ids are public). A provider that took it would bind the id to
// the attacker, who could then read the earlier renter's log and outputs;
// an honest provider refuses any lease id it ever held
// (provider.lease_id_reused). The auction's job must be one the target
// provider bids on.
func ReuseLeaseID(ctx context.Context, p *Peer, leaseID string, job terms.Job) (ReuseReport, error) {
	var awards atomic.Int64
	tr := rewriteAwards{Transport: p.transport(), signer: p.Signer, rewrite: func(a *terms.Award) {
		if leaseID != "" {
			a.LeaseID = leaseID
		}
		awards.Add(1)
	}}
	r, err := auction.NewRenter(auction.RenterConfig{Signer: p.Signer, Transport: tr, Log: p.Log})
	if err != nil {
		return ReuseReport{}, err
	}
	p.Node.Handle(wire.ProtoBid, func(_ context.Context, from peer.ID, req []byte) ([]byte, error) {
		return nil, r.HandleBid(from, req)
	})
	defer p.Node.Host.RemoveStreamHandler(wire.ProtoBid)
	job.OwnerAddrs = p.Node.Addrs()
	j, err := r.Post(ctx, job)
	var rep ReuseReport
	rep.Job, _ = r.Status(j.ID)
	rep.Awards = int(awards.Load())
	if err != nil {
		rep.Err = err.Error()
	}
	if rep.Awards == 0 && err == nil {
		return rep, errors.New("adversary: the auction sent no award")
	}
	return rep, nil
}

// rewriteAwards re-signs each award the hostile renter sends after
// rewrite changed it (bid releases, on the same stream, pass unchanged).
type rewriteAwards struct {
	auction.Transport
	signer  *sign.Signer
	rewrite func(*terms.Award)
}

func (t rewriteAwards) SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	msg, err := terms.DecodeAwardMessage(data)
	if err != nil {
		return nil, err
	}
	if msg.Award == nil { // a bid release travels as it is
		return t.Transport.SendAward(ctx, to, data)
	}
	t.rewrite(msg.Award)
	b, err := terms.EncodeAward(t.signer, *msg.Award)
	if err != nil {
		return nil, err
	}
	return t.Transport.SendAward(ctx, to, b)
}

// CallNamingAddrs publishes a call for bids for job from a fresh owner
// identity that never joins the network, naming addrs (and each with the
// owner's /p2p/ id) as the owner's addresses (Job.OwnerAddrs): a third
// party's host, say. Anyone can fill them, so a provider that dialled
// them could be aimed at any machine, by every caller, as a scanner or a
// flood. An honest provider bids, but reaches a renter only through what
// it learned itself: here nothing, so its bid goes undelivered
// (terms.ProviderStats.Undelivered) and nothing connects to addrs. It
// returns the call's job.
func CallNamingAddrs(ctx context.Context, p *Peer, job terms.Job, addrs []string) (terms.Job, error) {
	owner, err := NewSigner()
	if err != nil {
		return job, err
	}
	job.ID, job.Owner, job.CreatedAt, job.OwnerAddrs = terms.NewID("job"), owner.ID().String(), time.Now(), nil
	for _, a := range addrs {
		job.OwnerAddrs = append(job.OwnerAddrs, a, a+"/p2p/"+job.Owner)
	}
	if err := job.Validate(); err != nil {
		return job, fmt.Errorf("adversary: call: %w", err)
	}
	for _, topic := range auction.JobTopics(&job) {
		data, err := terms.EncodeCall(owner, job, topic)
		if err != nil {
			return job, err
		}
		if err := p.Node.Publish(ctx, topic, data); err != nil {
			return job, fmt.Errorf("adversary: publish %s: %w", topic, err)
		}
	}
	return job, nil
}
