package main

import "time"

// network carries messages between nodes: each one is delayed by a
// random amount (so messages overtake each other), dropped or
// duplicated at the seed's rates, and lost while its two ends are
// partitioned.
type network struct {
	s    *sim
	cuts map[[2]*node]time.Time // a pair, either order -> when it heals
}

func newNetwork(s *sim) *network { return &network{s: s, cuts: map[[2]*node]time.Time{}} }

func (nw *network) cut(a, b *node, until time.Time) {
	nw.cuts[[2]*node{a, b}] = until
	nw.cuts[[2]*node{b, a}] = until
}

func (nw *network) partitioned(a, b *node) bool {
	until, ok := nw.cuts[[2]*node{a, b}]
	return ok && nw.s.now.Before(until)
}

// send delivers a message from one node to another: deliver runs on
// arrival if the recipient is up then. Only a node that is up sends.
func (nw *network) send(from, to *node, what string, deliver func()) {
	s := nw.s
	if !from.up || to == nil {
		return
	}
	if nw.partitioned(from, to) {
		s.logf("net %s -> %s %s: partitioned", from.name, to.name, what)
		s.stats.Dropped++
		return
	}
	if s.chance(s.cfg.Drop) {
		s.logf("net %s -> %s %s: dropped", from.name, to.name, what)
		s.stats.Dropped++
		return
	}
	copies := 1
	if s.chance(s.cfg.Duplicate) {
		copies = 2
		s.stats.Duplicated++
	}
	for i := 0; i < copies; i++ {
		d := s.between(s.cfg.MinDelay, s.cfg.MaxDelay)
		s.after(d, nil, "deliver "+from.name+" -> "+to.name+" "+what, func() {
			if !to.up {
				s.logf("net %s: %s is down", what, to.name)
				return
			}
			deliver()
		})
	}
}
