package adversary

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// CaptureReceipt waits for the first two-party receipt gossiped on
// wire.ReputationTopic (in a batch) and returns its wire bytes.
func CaptureReceipt(ctx context.Context, p *Peer) ([]byte, error) {
	got := make(chan []byte, 1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := p.Node.Subscribe(sctx, wire.ReputationTopic, func(_ peer.ID, data []byte) {
		receipts, err := wire.DecodeReceiptBatch(data)
		if err != nil {
			return
		}
		for _, b := range receipts {
			if _, err := attest.OpenReceipt(b); err != nil {
				continue
			}
			select {
			case got <- append([]byte(nil), b...):
			default:
			}
			return
		}
	}); err != nil {
		return nil, err
	}
	select {
	case b := <-got:
		return b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("adversary: no receipt gossiped: %w", ctx.Err())
	}
}

// ReplayReport is what a receipt replay did.
type ReplayReport struct {
	Receipt   attest.Receipt `json:"receipt"`
	Gossiped  int            `json:"gossiped"`
	DirectErr []string       `json:"direct_errors"` // the target's answers to the receipt sent as ours on wire.ProtoReceipt
}

// ReplayReceipts re-gossips a captured two-party receipt times times (a
// batch of one each time), and
// also offers it to target as if it were this peer's own
// (wire.ProtoReceipt) times times. GossipSub drops a byte-identical copy
// of a message it has seen (p2p.MessageID), so each replay pads the
// encoding with whitespace to reach the receivers' reputation books.
func ReplayReceipts(ctx context.Context, p *Peer, target peer.ID, data []byte, times int) (ReplayReport, error) {
	sr, err := attest.OpenReceipt(data)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("adversary: not a receipt: %w", err)
	}
	rep := ReplayReport{Receipt: sr.Receipt}
	for i := 0; i < times; i++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := wire.EncodeReceiptBatch([][]byte{data})
		if err == nil {
			err = p.Node.Publish(pctx, wire.ReputationTopic, padded(msg, i+1))
		}
		cancel()
		if err != nil {
			return rep, err
		}
		rep.Gossiped++
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = p.Node.Request(rctx, target, nil, wire.ProtoReceipt, data)
		cancel()
		rep.DirectErr = append(rep.DirectErr, errString(err))
	}
	return rep, nil
}

// padded is a copy of b, a JSON message, with n spaces after it: the same
// message in other bytes, which gossip does not drop as one it has seen
// (p2p.MessageID).
func padded(b []byte, n int) []byte {
	return append(bytes.Clone(b), bytes.Repeat([]byte(" "), n)...)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// SybilConfig configures the sybil-receipt attack.
type SybilConfig struct {
	Renters   int     // sybil renter identities; default 20
	PerRenter int     // receipts each signs; default 3
	Amount    float64 // USD each receipt claims paid; default 50
}

// SybilReport names the fake provider the sybils vouched for.
type SybilReport struct {
	Provider string `json:"provider"`
	Receipts int    `json:"receipts"`
	// Data are the receipts' wire bytes, for re-gossiping.
	Data [][]byte `json:"-"`
}

// SybilReceipts makes a fresh provider identity and cfg.Renters fresh
// renter identities that sign perfect two-party receipts (succeeded, full
// heartbeat coverage, large amounts) for leases that never happened, and
// gossips them on wire.ReputationTopic.
func SybilReceipts(ctx context.Context, p *Peer, cfg SybilConfig) (SybilReport, error) {
	if cfg.Renters <= 0 {
		cfg.Renters = 20
	}
	if cfg.PerRenter <= 0 {
		cfg.PerRenter = 3
	}
	if cfg.Amount <= 0 {
		cfg.Amount = 50
	}
	prov, err := NewSigner()
	if err != nil {
		return SybilReport{}, err
	}
	rep := SybilReport{Provider: prov.ID().String()}
	now := time.Now()
	for i := 0; i < cfg.Renters; i++ {
		renter, err := NewSigner()
		if err != nil {
			return rep, err
		}
		for j := 0; j < cfg.PerRenter; j++ {
			b, err := sybilReceipt(prov, renter, now.Add(-time.Duration(i*cfg.PerRenter+j+1)*time.Hour), cfg.Amount)
			if err != nil {
				return rep, err
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			msg, err := wire.EncodeReceiptBatch([][]byte{b})
			if err == nil {
				err = p.Node.Publish(pctx, wire.ReputationTopic, msg)
			}
			cancel()
			if err != nil {
				return rep, err
			}
			rep.Receipts++
			rep.Data = append(rep.Data, b)
		}
	}
	return rep, nil
}

// sybilReceipt is a complete, validly signed receipt for a one-hour lease
// ending at end that never happened.
func sybilReceipt(prov, renter *sign.Signer, end time.Time, amount float64) ([]byte, error) {
	start := end.Add(-time.Hour)
	secs := 3600.0
	rc := attest.Receipt{LeaseID: terms.NewID("lease"), JobID: terms.NewID("job"), Renter: renter.ID().String(),
		Provider: prov.ID().String(), Start: start, End: end, GPUCount: 1, GPUSeconds: secs, Price: amount,
		Amount: attest.AmountFor(secs, amount), Outcome: terms.RunSucceeded, IssuedAt: end,
		Heartbeats: attest.HeartbeatSummary{Count: 720, Expected: 720, Coverage: 1, MeanGPUUtil: 99}}
	sr, err := attest.NewReceipt(prov, rc)
	if err != nil {
		return nil, err
	}
	if err := sr.Countersign(renter); err != nil {
		return nil, err
	}
	return sr.Marshal()
}
