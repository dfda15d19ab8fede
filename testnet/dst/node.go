package main

import (
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
)

// A message is delivered to whatever role its recipient plays; a role
// that does not take it ignores it, as a daemon ignores a protocol it
// does not serve.

func (n *node) onCall(job terms.Job, from *node) {
	switch {
	case n.prov != nil:
		n.prov.onCall(job, from)
	case n.hostile != nil:
		n.hostile.onCall(job, from)
	}
}

func (n *node) onAward(l terms.Lease, job terms.Job, from *node) {
	switch {
	case n.prov != nil:
		n.prov.onAward(l, job, from)
	case n.hostile != nil:
		n.hostile.onAward(l, from)
	}
}

func (n *node) onCancel(id string, from *node) {
	if n.prov != nil {
		n.prov.onCancel(id, from)
	}
}

func (n *node) onFinalAck(id string, from *node) {
	if n.prov != nil {
		n.prov.onFinalAck(id, from)
	}
}

func (n *node) onReleased(id string, answer []byte, from *node) {
	if n.prov != nil {
		n.prov.onReleased(id, answer, from)
	}
}

func (n *node) onReceiptAnswer(id string, b []byte, refusal error, from *node) {
	switch {
	case n.prov != nil:
		n.prov.onReceiptAnswer(id, b, refusal, from)
	case n.hostile != nil:
		n.hostile.onReceiptAnswer(id, b, refusal, from)
	}
}

func (n *node) onBid(b terms.Bid) {
	if n.rent != nil {
		n.rent.onBid(b)
	}
}

func (n *node) onConfirm(l terms.Lease, from *node) {
	if n.rent != nil {
		n.rent.onConfirm(l, from)
	}
}

func (n *node) onDecline(l terms.Lease, from *node) {
	if n.rent != nil {
		n.rent.onDecline(l, from)
	}
}

func (n *node) onEvent(ev wire.LeaseEvent, from *node) {
	if n.rent != nil {
		n.rent.onEvent(ev, from)
	}
}

func (n *node) onHeartbeat(id string, from *node) {
	if n.rent != nil {
		n.rent.onHeartbeat(id, from)
	}
}

func (n *node) onReceipt(raw []byte, from *node) {
	if n.rent != nil {
		n.rent.onReceipt(raw, from)
	}
}

// byID is the node with peer id id (nil for none: a hostile peer may name
// anyone).
func (s *sim) byID(id string) *node {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}
