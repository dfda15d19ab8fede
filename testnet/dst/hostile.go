package main

import (
	"bytes"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
)

// hostile is the adversary: a peer that bids low to win leases and then
// lies about them, each lease in a way drawn from the seed. The honest
// nodes' production checks must refuse every lie; the invariants say
// whether they did.
type hostile struct {
	n     *node
	taken []byte // a receipt a renter countersigned for it, to replay
}

// Lies, one per lease won.
const (
	lieSilent      = iota // never runs it, never reports
	lieBadTimes           // reports times outside the lease, or in the future
	lieOverbill           // runs briefly, bills the whole booked span
	lieReplay             // replays a countersigned receipt of another lease
	lieForge              // a receipt for a lease that is not its own
	lieAlter              // alters a countersigned receipt and sends it back
	lieRunAfterEnd        // reports the run again after its final report
	lies
)

func (h *hostile) onCall(job terms.Job, from *node) {
	s, now := h.n.s, h.n.now()
	if !s.chance(0.5) {
		return
	}
	b := terms.Bid{JobID: job.ID, Attempt: job.Attempt, Provider: h.n.id, Price: 0.5, Start: now.Add(2 * time.Second),
		End: now.Add(2*time.Second + job.Duration), Nonce: "h/" + job.ID, IssuedAt: now, ExpiresAt: now.Add(bidTTL)}
	s.net.send(h.n, from, "bid "+job.ID, func() { from.onBid(b) })
}

func (h *hostile) onAward(l terms.Lease, from *node) {
	s, n := h.n.s, h.n
	l.Devices = nil
	s.net.send(n, from, "confirm "+l.ID, func() { from.onConfirm(l, n) })
	event := func(at time.Time, ev wire.LeaseEvent) {
		ev.LeaseID, ev.JobID, ev.Provider = l.ID, l.JobID, n.id
		n.atLocal(at, "lie "+l.ID+" "+string(ev.Run), func() {
			ev.Time = n.now()
			s.net.send(n, from, "event "+l.ID+" "+string(ev.Run), func() { from.onEvent(ev, n) })
		})
	}
	runFor := s.between(time.Second, l.End.Sub(l.Start)/2)
	honest := func() {
		event(l.Start, wire.LeaseEvent{Run: terms.RunRunning, Started: l.Start})
		n.atLocal(l.Start.Add(time.Second), "lie heartbeat "+l.ID, func() {
			s.net.send(n, from, "heartbeat "+l.ID, func() { from.onHeartbeat(l.ID, n) })
		})
		event(l.Start.Add(runFor), wire.LeaseEvent{Run: terms.RunSucceeded, Started: l.Start, Ended: l.Start.Add(runFor)})
	}
	receipt := func(at time.Time, start, end time.Time, billed float64, mod func(*attest.Receipt)) {
		n.atLocal(at, "lie receipt "+l.ID, func() {
			rc := attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: n.id, Start: start, End: end,
				GPUCount: l.GPUCount, GPUSeconds: billed, Price: l.Price, Amount: attest.AmountFor(billed, l.Price),
				Outcome: terms.RunSucceeded, IssuedAt: n.now()}
			if mod != nil {
				mod(&rc)
			}
			sr, err := attest.NewReceipt(n.signer, rc)
			if err != nil {
				return
			}
			b, _ := sr.Marshal()
			s.net.send(n, from, "receipt "+l.ID, func() { from.onReceipt(b, n) })
		})
	}
	span := l.End.Sub(l.Start)
	switch lie := s.rng.IntN(lies); lie {
	case lieSilent:
	case lieBadTimes:
		event(l.Start, wire.LeaseEvent{Run: terms.RunRunning, Started: l.Start.Add(-time.Hour)})
		event(l.Start.Add(time.Second), wire.LeaseEvent{Run: terms.RunSucceeded, Started: l.Start, Ended: l.End.Add(time.Hour)})
	case lieOverbill:
		honest()
		receipt(l.End, l.Start, l.End, span.Seconds()*l.BilledGPUs(), nil)
	case lieReplay:
		honest()
		n.atLocal(l.Start.Add(runFor+time.Second), "lie replay "+l.ID, func() {
			if h.taken != nil {
				b := h.taken
				s.net.send(n, from, "replayed receipt", func() { from.onReceipt(b, n) })
			}
		})
		h.settle(l, runFor, receipt)
	case lieForge:
		honest()
		receipt(l.Start.Add(runFor+time.Second), l.Start, l.Start.Add(runFor), runFor.Seconds()*l.BilledGPUs(), func(rc *attest.Receipt) {
			rc.LeaseID = l.JobID + "/a1" // likely another provider's lease of the job
		})
	case lieAlter:
		honest()
		h.settle(l, runFor, receipt)
		n.atLocal(l.Start.Add(runFor+time.Minute), "lie alter "+l.ID, func() {
			if h.taken == nil {
				return
			}
			b := bytes.Replace(h.taken, []byte(`gpu_seconds`), []byte(`gpu_secondz`), 1)
			s.net.send(n, from, "altered receipt", func() { from.onReceipt(b, n) })
		})
	case lieRunAfterEnd:
		honest()
		event(l.Start.Add(runFor+time.Second), wire.LeaseEvent{Run: terms.RunRunning, Started: l.Start})
		h.settle(l, runFor, receipt)
	}
}

// settle sends an honest receipt for the run it reported, so that it
// has countersigned receipts to replay and alter.
func (h *hostile) settle(l terms.Lease, runFor time.Duration, receipt func(at, start, end time.Time, billed float64, mod func(*attest.Receipt))) {
	receipt(l.Start.Add(runFor+2*time.Second), l.Start, l.Start.Add(runFor), 0, nil)
}

func (h *hostile) onReceiptAnswer(_ string, b []byte, refusal error, _ *node) {
	if refusal == nil && b != nil {
		h.taken = b
	}
}
