package adversary

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Traversal is the id the path-traversal cases put wherever an id goes.
const Traversal = "../../../../identity.key"

// Protocols are every request protocol a daemon serves, in the order the
// malformed-frame attack tries them.
var Protocols = []protocol.ID{wire.ProtoCall, wire.ProtoBid, wire.ProtoAward, wire.ProtoHeartbeat, wire.ProtoLeaseEvent,
	wire.ProtoReceipt, wire.ProtoCancel, wire.ProtoLogs, wire.ProtoOutputs}

// streamProtocols answer with a stream rather than a status and a frame.
func streamProtocol(proto protocol.ID) bool {
	return proto == wire.ProtoLogs || proto == wire.ProtoOutputs
}

// Outcome is how a target took one malformed frame.
type Outcome struct {
	Proto protocol.ID `json:"proto"`
	Case  string      `json:"case"`
	// Refused: the target answered with an error, reset the stream or
	// closed it without a byte of payload.
	Refused bool `json:"refused"`
	// Answer is the error, or what came back when the frame was accepted.
	Answer string `json:"answer"`
}

// Case is one malformed frame for one protocol.
type Case struct {
	Proto protocol.ID
	Name  string
	// raw is the bytes written on the stream (a length header and
	// payload, possibly lying).
	raw []byte
}

// framed is a well-framed payload.
func framed(b []byte) []byte {
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(b)))
	return append(hdr[:n:n], b...)
}

// wrongDomain is the signature domain a wrong-domain case uses for proto:
// a valid envelope, signed by the sender, for another message kind.
func wrongDomain(proto protocol.ID) string {
	if proto == wire.ProtoBid {
		return sign.DomainConfirm
	}
	return sign.DomainBid
}

// traversal is a well-formed, correctly signed message for proto whose
// ids are Traversal.
func traversal(p *Peer, target peer.ID, proto protocol.ID) ([]byte, error) {
	me := p.ID().String()
	now := time.Now()
	switch proto {
	case wire.ProtoBid:
		env, err := sign.Seal(p.Signer, sign.DomainBid, terms.Bid{JobID: Traversal, Provider: me, Region: "eu-west",
			Price: 1, Start: now, End: now.Add(time.Hour), GPUModel: "H100", VRAMGB: 80, Nonce: Traversal,
			IssuedAt: now, ExpiresAt: now.Add(time.Minute)})
		if err != nil {
			return nil, err
		}
		return env.Marshal()
	case wire.ProtoAward:
		job := terms.Job{ID: Traversal, Owner: me, Tier: terms.Silver, MaxPrice: 1, GPUCount: 1, Duration: time.Hour,
			BidWindow: time.Second, Run: terms.RunSpec{Command: []string{"true"}}}
		env, err := sign.Seal(p.Signer, sign.DomainAward, terms.Award{LeaseID: Traversal, JobID: Traversal, Renter: me,
			Provider: target.String(), BidNonce: Traversal, Price: 1, Job: job})
		if err != nil {
			return nil, err
		}
		return env.Marshal()
	case wire.ProtoHeartbeat:
		env, err := attest.SignHeartbeat(p.Signer, attest.Heartbeat{LeaseID: Traversal, Seq: 1, Time: now, Source: attest.SourceProcess})
		if err != nil {
			return nil, err
		}
		return env.Marshal()
	case wire.ProtoLeaseEvent:
		return sealed(p, sign.DomainLeaseEvent, wire.LeaseEvent{LeaseID: Traversal, JobID: Traversal, Provider: me,
			Run: terms.RunSucceeded, Time: now})
	case wire.ProtoReceipt:
		secs := 60.0
		sr, err := attest.NewReceipt(p.Signer, attest.Receipt{LeaseID: Traversal, JobID: Traversal, Renter: target.String(),
			Start: now.Add(-time.Minute), End: now, GPUCount: 1, GPUSeconds: secs, Price: 1, Amount: attest.AmountFor(secs, 1),
			Outcome: terms.RunSucceeded, IssuedAt: now})
		if err != nil {
			return nil, err
		}
		return sr.Marshal()
	case wire.ProtoCancel:
		return sealed(p, sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: Traversal, JobID: Traversal})
	default: // logs, outputs
		return json.Marshal(wire.StreamRequest{LeaseID: Traversal, Follow: true})
	}
}

// MalformedCases are the malformed frames for every protocol: garbage,
// an empty frame, a frame over the protocol's size bound, a length header
// beyond frame.Max, a truncated frame, a valid envelope of the wrong
// signature domain, and a correctly signed message whose ids try path
// traversal.
func MalformedCases(p *Peer, target peer.ID) ([]Case, error) {
	var out []Case
	garbage := make([]byte, 512)
	_, _ = rand.Read(garbage)
	big := make([]byte, 600<<10) // over every message bound, under frame.Max
	for i := range big {
		big[i] = 'A'
	}
	big[0], big[len(big)-1] = '"', '"'
	for _, proto := range Protocols {
		var hdr [binary.MaxVarintLen64]byte
		n := binary.PutUvarint(hdr[:], uint64(frame.Max)+1)
		tooLong := append(hdr[:n:n], garbage...)
		n = binary.PutUvarint(hdr[:], 1000)
		truncated := append(hdr[:n:n], garbage[:10]...)
		wd, err := sealed(p, wrongDomain(proto), map[string]string{"lease_id": "x", "job_id": "x"})
		if err != nil {
			return nil, err
		}
		tr, err := traversal(p, target, proto)
		if err != nil {
			return nil, err
		}
		out = append(out,
			Case{proto, "garbage", framed(garbage)},
			Case{proto, "empty", framed(nil)},
			Case{proto, "oversized", framed(big)},
			Case{proto, "header_over_max_frame", tooLong},
			Case{proto, "truncated", truncated},
			Case{proto, "wrong_domain", framed(wd)},
			Case{proto, "path_traversal_id", framed(tr)},
		)
	}
	return out, nil
}

// Send writes the case's bytes to target on a fresh stream and reports how
// the target took them.
func (c Case) Send(ctx context.Context, p *Peer, target peer.ID) Outcome {
	o := Outcome{Proto: c.Proto, Case: c.Name}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := p.Node.Host.NewStream(ctx, target, c.Proto)
	if err != nil {
		o.Refused, o.Answer = true, "stream refused: "+err.Error()
		return o
	}
	defer s.Close()
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	if _, err := s.Write(c.raw); err != nil {
		o.Refused, o.Answer = true, "write: "+err.Error()
		return o
	}
	_ = s.CloseWrite()
	br := bufio.NewReader(s)
	if streamProtocol(c.Proto) {
		b, err := io.ReadAll(io.LimitReader(br, 1<<10))
		switch {
		case len(b) > 0:
			o.Answer = fmt.Sprintf("served %d bytes: %q", len(b), b)
		case err != nil:
			o.Refused, o.Answer = true, "reset: "+err.Error()
		default:
			o.Refused, o.Answer = true, "closed without data"
		}
		return o
	}
	st, err := br.ReadByte()
	if err != nil {
		o.Refused, o.Answer = true, "reset: "+err.Error()
		return o
	}
	resp, err := frame.Read(br)
	if err != nil {
		o.Refused, o.Answer = true, "reset: "+err.Error()
		return o
	}
	if st != 0 {
		o.Refused, o.Answer = true, "error: "+string(resp)
		return o
	}
	o.Answer = fmt.Sprintf("accepted, answered %d bytes", len(resp))
	return o
}

// MalformedGossip publishes garbage and hostile calls on the call topics
// and the reputation topic: garbage, a call whose job id tries path
// traversal, a call signed by someone other than its owner, and a receipt
// with only the provider's signature. Gossip has no answer: a test checks
// the target's counters.
func MalformedGossip(ctx context.Context, p *Peer, region string) (int, error) {
	garbage := make([]byte, 512)
	_, _ = rand.Read(garbage)
	other, err := NewSigner()
	if err != nil {
		return 0, err
	}
	job := terms.Job{ID: Traversal, Owner: p.ID().String(), Tier: terms.Silver, MaxPrice: 100, GPUCount: 1,
		Duration: time.Hour, Region: region, BidWindow: time.Second, Run: terms.RunSpec{Command: []string{"true"}},
		OwnerAddrs: p.Node.Addrs(), CreatedAt: time.Now()}
	topic := auction.JobTopics(&job)[0]
	travCall, err := terms.EncodeCall(p.Signer, job, topic)
	if err != nil {
		return 0, err
	}
	job.ID, job.Owner = terms.NewID("job"), other.ID().String()
	env, err := sign.Seal(p.Signer, sign.DomainJob, job) // signed by p, owned by other
	if err != nil {
		return 0, err
	}
	forged, _ := json.Marshal(map[string]any{"topic": topic, "job": env})
	now := time.Now()
	half, err := attest.NewReceipt(p.Signer, attest.Receipt{LeaseID: terms.NewID("lease"), Renter: other.ID().String(),
		Start: now.Add(-time.Hour), End: now, GPUCount: 1, GPUSeconds: 3600, Price: 1, Amount: 1,
		Outcome: terms.RunSucceeded, IssuedAt: now})
	if err != nil {
		return 0, err
	}
	halfB, _ := half.Marshal()
	halfB, err = wire.EncodeReceiptBatch([][]byte{halfB})
	if err != nil {
		return 0, err
	}
	msgs := []struct {
		topic string
		data  []byte
	}{{topic, garbage}, {topic, travCall}, {topic, forged}, {wire.ReputationTopic, garbage}, {wire.ReputationTopic, halfB}}
	sent := 0
	for _, m := range msgs {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.Node.Publish(pctx, m.topic, m.data)
		cancel()
		if err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

var errNotRefused = errors.New("adversary: a malformed frame was accepted")

// MalformedFrames sends every MalformedCases case to target and returns
// the outcomes; the error is set if any was not refused.
func MalformedFrames(ctx context.Context, p *Peer, target peer.ID) ([]Outcome, error) {
	cases, err := MalformedCases(p, target)
	if err != nil {
		return nil, err
	}
	var out []Outcome
	var bad error
	for _, c := range cases {
		o := c.Send(ctx, p, target)
		if !o.Refused {
			bad = fmt.Errorf("%w: %s %s: %s", errNotRefused, o.Proto, o.Case, o.Answer)
		}
		out = append(out, o)
	}
	return out, bad
}
